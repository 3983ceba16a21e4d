"""ReplicaHostActor: many partition replicas of one broker in one Ray actor.

Kafka serves thousands of partition replicas per broker from one process; a Ray actor per
replica (a process each, ~64 MB and ~0.3 s to start) cannot. A broker runs
``num.replica.hosts`` hosts on its node (``actors.replica.placement``) and opens each of
its replicas in one of them. A host is an async actor (``num_cpus=0``) whose event loop
serves all its replicas; each replica keeps its own state and its own order of calls
(``HostedReplica``), and none waits on another: acks=all produces and long polls are
futures completed by the host's one timing wheel, opening a log (recovery) and the
scheduled log work (retention, flush, compaction) run in worker threads.

A host that dies takes only its replicas down: the broker starts it again and they recover
from their files as after a crash (``ReplicaManager._host_died``).

Per-replica methods take the topic-partition first (``actors.replica.locate`` binds it for
callers); batch methods (``checkpoint_states``, ``log_maintenance``, ``log_cleaning``,
``isr_expiry``, ``stop_all``) cover every replica of the host in one call.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from pathlib import Path
from typing import Callable

import ray

from actors import hop_trace
from actors.gcs import lookup
from actors.metrics.broker_topic_stats import BrokerTopicStats
from actors.names import broker_name, coordinator_name
from actors.process import (freeze_startup_objects, keep_freed_memory,
                             raise_open_files_limit)
from actors.replica.channel import (API_FETCH, API_LIST_OFFSETS, API_LISTENER_FETCH,
                                    API_OFFSETS_FOR_LEADER_EPOCH, API_PRODUCE,
                                    ReplicationListener, Throttled, channel_tls,
                                    unthrottled)
from actors.replica.fetch_many import fetch_many, offsets_for_leader_epochs
from actors.replica.fetch_session import FetchSessionCache
from actors.replica.fetcher_manager import ReplicaFetcherManager
from actors.replica.host_quotas import HostQuotas, Subject
from actors.replica.hosted_replica import HostedReplica, answer_future, wall_ms
from actors.replica.partition import PartitionReplica, Purgatories, ReplicaConfig
from actors.timer.system_timer import AsyncioTimer
from actors.txn.verifier import TxnVerifier
from protocols.errors import (CoordinatorNotAvailableError, KafkaError, KafkaStorageError,
                              NotLeaderOrFollowerError)
from protocols.messages import (DeleteRecordsResult, FetchManyRequest, FetchManyResponse,
                                FetchResult, ProduceManyRequest, ProduceResult,
                                decode_fetch_many_request, decode_produce_many_request,
                                encode_produce_many_response, fetch_many_response_pieces)
from protocols.topics import OFFSETS_TOPIC, TopicPartition
from protocols.wire import decode, encode
from storage.log_dir_failure import LogDirFailureChannel

log = logging.getLogger(__name__)

FREEZE_DELAY_S = 1.0
# Worker threads opening a broker's replicas (Kafka's num.recovery.threads.per.data.dir,
# 2 since Kafka 4.0).
RECOVERY_THREADS = 2


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=10_000)
class ReplicaHostActor:
    def __init__(self, namespace: str, broker_id: int, name: str, broker_log_config: dict,
                 broker_config: dict):
        self.namespace = namespace
        self.broker_id = broker_id
        self.name = name
        self.broker_log_config = dict(broker_log_config)
        self.timer = AsyncioTimer(name=name)
        # One purgatory per kind for every replica here, keyed by topic-partition: a fetch
        # for many partitions waits once, watched under each of their keys.
        self.purgatories = Purgatories.create(self.timer, broker_id)
        self.config = ReplicaConfig.from_broker_config(broker_config)
        self.fetchers = ReplicaFetcherManager(namespace, broker_id, self.config)
        # The fetch sessions of the fetchers that fetch from this host (KIP-227).
        self.fetch_sessions = FetchSessionCache(
            broker_config["max.incremental.fetch.session.cache.slots"], wall_ms)
        # Ray door clients' sessions, apart: a door request names only those.
        self.door_fetch_sessions = FetchSessionCache(
            broker_config["max.incremental.fetch.session.cache.slots"], wall_ms)
        # A broker on this node is answered with FileRegions for its clients' fetches.
        self.node_id = ray.get_runtime_context().get_node_id()
        self.replicas: dict[TopicPartition, HostedReplica] = {}
        self.cores: dict[TopicPartition, PartitionReplica] = {}
        self._opening: dict[TopicPartition, asyncio.Future] = {}
        # Requests served for many partitions, by Kafka's request name (RequestsPerSec).
        self.requests: collections.Counter[str] = collections.Counter()
        # Bytes and messages in and out by topic, ISR changes: the broker's report takes them.
        self.topic_stats = BrokerTopicStats()
        self._freeze_pending = False
        # Files to write soon, off the event loop (``_flush_soon``), and the task writing them.
        self._to_flush: list[Callable[[], None]] = []
        self._flusher: asyncio.Task | None = None
        self.verifier = TxnVerifier(namespace, broker_id)
        self._group_coordinator = None   # this broker's, for markers on __consumer_offsets
        # Where follower hosts fetch from, and producers and consumers send their requests
        # (actors.replica.channel): started on first ask.
        self.listener = ReplicationListener({
            API_FETCH: self._serve_fetch,
            API_LISTENER_FETCH: self._listener_fetch,
            API_OFFSETS_FOR_LEADER_EPOCH: self.offsets_for_leader_epoch_many,
            API_PRODUCE: self._serve_produce,
            API_LIST_OFFSETS: self._list_offsets_frame}, *channel_tls(broker_config),
            door_handlers={API_FETCH: self._door_fetch, API_PRODUCE: self._door_produce})
        # What Ray door clients may do here (actors.broker.ray_door): the broker's authorizer
        # settings and the cluster's ACLs, which the broker sends as they change.
        from actors.broker.listener.auth_helper import AuthHelper
        self._acls: list | None = None   # None: not told yet, and every door request refused
        self.auth = AuthHelper(lambda: {"acls": self._acls or []},
                               bool(broker_config.get("authorizer.class.name")),
                               broker_config.get("super.users"),
                               bool(broker_config.get("allow.everyone.if.no.acl.found")))
        # rafka's own clients held to the client quotas (the broker sends them with the ACLs).
        self.client_quotas = HostQuotas(wall_ms)
        self._listening: asyncio.Task | None = None
        # The first I/O error in the broker's log directory takes it offline (writes to it
        # refused from then on) and halts the broker (``storage.log_dir_failure``).
        self._loop = asyncio.get_running_loop()
        self.log_dir_failures = LogDirFailureChannel(self._log_dir_offline)
        self._reporting: asyncio.Task | None = None
        keep_freed_memory()
        raise_open_files_limit()
        freeze_startup_objects()

    # ---- the broker's calls ----------------------------------------------------------------
    def _open_replica(self, topic: str, partition: int, log_dir: str, topic_config: dict,
                      recovery_point: int, log_start_offset: int, high_watermark: int | None,
                      clean_shutdown: bool, topic_id: str | None) -> HostedReplica:
        """In a worker thread: a failed write while opening (partition.metadata, recovery)
        takes the log directory offline like any other."""
        parent = Path(log_dir).parent
        self.log_dir_failures.check(parent)
        try:
            return HostedReplica(self.namespace, self.broker_id, topic, partition, log_dir,
                                 topic_config, self.broker_log_config, self.config,
                                 self.purgatories, self.fetchers, recovery_point,
                                 log_start_offset, high_watermark, clean_shutdown, topic_id,
                                 failure_channel=self.log_dir_failures,
                                 flush_soon=lambda write: self._loop.call_soon_threadsafe(
                                     self._flush_soon, write))
        except OSError as e:
            message = f"Error while opening {topic}-{partition} in dir {parent}: {e}"
            self.log_dir_failures.mark_offline(parent, message)
            raise KafkaStorageError(message) from e

    def _log_dir_offline(self, log_dir: str, message: str) -> None:
        """From any thread: the directory went offline; tell the broker from the loop."""
        def report() -> None:
            if self._reporting is None:
                self._reporting = self._loop.create_task(self._report_offline(log_dir, message))
        self._loop.call_soon_threadsafe(report)

    async def _report_offline(self, log_dir: str, message: str) -> None:
        log.error("replica host %s: log directory %s is offline: %s", self.name, log_dir,
                  message)
        while True:
            try:
                broker = await lookup(broker_name(self.broker_id), self.namespace)
                if broker is not None:
                    await broker.log_dir_failed.remote(log_dir, message)
            except Exception as e:  # the broker halts: its call never answers
                log.info("replica host %s: log dir failure reported (%r)", self.name, e)
            await asyncio.sleep(1.0)

    def _flush_soon(self, write: Callable[[], None]) -> None:
        """Run ``write`` in a worker thread soon, with the others asked for meanwhile:
        new replicas' partition.metadata and new leaders' epoch checkpoints, thousands at
        once when a topic is created (Kafka's scheduled "flush-metadata-file"; see
        ``storage.epoch`` for the checkpoints). Each ``write`` handles its own I/O errors."""
        self._to_flush.append(write)
        if self._flusher is None:
            self._flusher = self._loop.create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._to_flush:
                batch, self._to_flush = self._to_flush, []
                await asyncio.to_thread(self._run_writes, batch)
        finally:
            self._flusher = None

    @staticmethod
    def _run_writes(writes: list[Callable[[], None]]) -> None:
        for write in writes:
            try:
                write()
            except Exception:   # noqa: BLE001 - the others are still written
                log.exception("replica host: a background write failed")

    def _freeze_soon(self) -> None:
        """Freeze the logs' indexes out of the GC's reach once a burst of opens is over (one
        collection per burst, not one per replica)."""
        if not self._freeze_pending:
            self._freeze_pending = True

            def freeze() -> None:
                self._freeze_pending = False
                freeze_startup_objects()
            asyncio.get_running_loop().call_later(FREEZE_DELAY_S, freeze)

    async def open_many(self, specs: list[tuple]) -> None:
        """Open (or recover) replicas' logs and start serving them (a broker's share of one
        controller message): (topic, partition, log_dir, topic_config, recovery_point,
        log_start_offset, high_watermark, clean_shutdown, topic_id) each. One already open
        is left as it is; ``topic_id`` goes in the partition's partition.metadata (a
        directory naming another id is a stray log, deleted first). The first failure is
        raised once every other replica is open.

        The logs open in ``RECOVERY_THREADS`` worker threads, many each (Kafka's
        num.recovery.threads.per.data.dir): a thread hop per replica cost more than opening
        a new replica's empty log when a topic brings thousands."""
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future] = []
        todo: list[tuple] = []
        for spec in specs:
            tp = TopicPartition(spec[0], spec[1])
            if tp in self.replicas:
                continue
            opening = self._opening.get(tp)
            if opening is not None:
                waits.append(opening)
                continue
            self._opening[tp] = loop.create_future()
            todo.append(spec)
        chunks = [todo[i::RECOVERY_THREADS] for i in range(RECOVERY_THREADS)]
        try:
            outcomes = await asyncio.gather(*[asyncio.to_thread(self._open_replicas, chunk)
                                              for chunk in chunks if chunk])
        except BaseException:   # cancelled: none of them is served
            for spec in todo:
                self._opening.pop(TopicPartition(spec[0], spec[1])).cancel()
            raise
        failures: list[BaseException] = []
        for chunk, opened in zip([c for c in chunks if c], outcomes):
            for spec, outcome in zip(chunk, opened):
                tp = TopicPartition(spec[0], spec[1])
                opening = self._opening.pop(tp)
                if isinstance(outcome, BaseException):
                    opening.set_exception(outcome)
                    opening.exception()  # retrieved: a failed open is its caller's error
                    failures.append(outcome)
                    continue
                self.replicas[tp] = outcome
                self.cores[tp] = outcome.replica
                outcome.on_isr_change = self.topic_stats.isr_changed
                if hop_trace.ON:
                    self._trace_high_watermark(outcome)
                opening.set_result(None)
                if outcome.metadata_file.dirty:
                    self._flush_soon(outcome.flush_metadata)
        if todo:
            self._freeze_soon()
        if waits:   # opened by another call meanwhile: its failures are this one's too
            await asyncio.wait(waits)
            failures += [RuntimeError("opening the replica was cancelled") if w.cancelled()
                         else w.exception() for w in waits
                         if w.cancelled() or w.exception() is not None]
        if failures:
            raise failures[0]

    def _open_replicas(self, specs: list[tuple]) -> list:
        """In a worker thread: each replica opened, or the exception opening it raised."""
        out: list = []
        for spec in specs:
            try:
                out.append(self._open_replica(*spec))
            except Exception as e:  # noqa: BLE001 - handed back: the others still open
                out.append(e)
        return out

    async def become_many(self, messages: bytes, replica_epoch: int = -1) -> bytes:
        """LeaderAndIsr for many replicas here, applied in order; one answer each (None, or
        the KafkaError refusing it). ``replica_epoch``: what this host's fetches name
        (``ReplicaManager.replica_epoch``)."""
        self.fetchers.set_replica_epoch(replica_epoch)
        answers = []
        for m in decode(messages):
            replica = self._replica(m.topic, m.partition)
            answers.append(self._absent(m.topic, m.partition) if replica is None
                           else replica.become(m))
        return encode(answers)

    async def stop_many(self, stops: list[tuple[str, int, bool]]
                        ) -> list[tuple[str, int, tuple[int, int, int] | None]]:
        """StopReplica for many replicas: (topic, partition, delete) each; answers
        (topic, partition, checkpoint triple, or None when it was not open here)."""
        async def stop(topic: str, partition: int, delete: bool):
            tp = TopicPartition(topic, partition)
            self.cores.pop(tp, None)
            replica = self.replicas.pop(tp, None)
            return (topic, partition, None if replica is None else await replica.stop(delete))
        return list(await asyncio.gather(*[stop(*s) for s in stops]))

    async def alter_topic_config(self, topic: str, topic_config: dict) -> None:
        """A topic's config changed: every replica of it here takes the new one."""
        for tp, replica in self.replicas.items():
            if tp.topic == topic:
                replica.alter_config(topic_config)

    async def stop_all(self) -> list[tuple[str, int, tuple[int, int, int]]]:
        """Close every replica (a broker's shutdown): (topic, partition, checkpoint triple)."""
        replicas, self.replicas, self.cores = self.replicas, {}, {}
        self.fetchers.shutdown()
        self.listener.close()
        states = await asyncio.gather(*[r.stop(False) for r in replicas.values()],
                                      return_exceptions=True)
        self.timer.shutdown()
        return [(tp.topic, tp.partition, state) for tp, state in zip(replicas, states)
                if not isinstance(state, BaseException)]

    async def checkpoint_states(self) -> list[tuple[str, int, tuple[int, int, int]]]:
        return [(tp.topic, tp.partition, r.checkpoint_state())
                for tp, r in self.replicas.items()]

    async def log_maintenance(self) -> int:
        """log.retention.check.interval.ms for every replica here, in a worker thread (the
        segments deleted). Back on the event loop, a replica whose log start moved is looked
        at again: as a leader, by the fetch sessions that parked it; as a follower, by its
        fetcher."""
        replicas = list(self.replicas.values())
        starts = [r.log.log_start_offset for r in replicas]
        deleted = await self._log_pass(replicas, HostedReplica.log_maintenance,
                                       "log maintenance")
        for r, start in zip(replicas, starts):
            if r.log.log_start_offset != start:
                r.replica.wake_fetchers()
                self.fetchers.partition_changed(r.replica.topic, r.replica.partition)
        return deleted

    async def log_cleaning(self) -> int:
        """The cleaner's pass over every replica here (log.cleaner.backoff.ms), in a worker
        thread: the logs compacted."""
        return await self._log_pass(list(self.replicas.values()), HostedReplica.log_cleaning,
                                    "cleaning")

    async def _log_pass(self, replicas: list[HostedReplica], work, what: str) -> int:
        """``work(replica)`` for each, in a worker thread (retention and the cleaner take
        turns on a log: ``HostedReplica._log_work``)."""
        def run() -> int:
            total = 0
            for r in replicas:
                try:
                    total += work(r)
                except OSError as e:   # the log's own files: the directory failed
                    r.log_dir_failed(f"Error in {what} of {r.replica.name}: {e}")
                except Exception:  # a replica stopped meanwhile, or a bad segment: go on
                    log.exception("%s of %s failed", what, r.replica.name)
            return total
        return await asyncio.to_thread(run)

    async def isr_expiry(self) -> None:
        for r in list(self.replicas.values()):
            await r.maybe_shrink_isr()

    async def watch(self) -> None:
        """Never answers: the broker keeps one call pending so that it hears at once when
        this host's process dies (the call fails then)."""
        await asyncio.Event().wait()

    # ---- Ray door clients (actors.broker.ray_door; actors.replica.door_guard) --------------
    async def set_acls(self, acls: list) -> None:
        self._acls = acls

    async def set_client_quotas(self, client_quotas: list) -> None:
        """The cluster's client quotas (``actors.replica.host_quotas``)."""
        self.client_quotas.update(client_quotas)

    async def take_quota_usage(self) -> list[tuple]:
        """The client quotas' rates measured here lately, for the broker to tell the other
        hosts (``BrokerQuotas.usage``)."""
        return self.client_quotas.quotas.usage()

    async def set_quota_usage_elsewhere(self, usage: list[tuple]) -> None:
        self.client_quotas.quotas.set_elsewhere(usage)

    async def admit(self, caller) -> tuple[str, int, bytes, str | None]:
        """``replication_address`` for one connection of a Ray door client, ``caller`` (its
        principal and address, as its broker signed it in): a ticket in place of the token."""
        address, port, _, certificate = await self.replication_address()
        return address, port, self.listener.admit(caller), certificate

    def _door_authorize(self, caller):
        def authorize(operation, resource_type, name) -> bool:
            return self._acls is not None and self.auth.authorize(caller, operation,
                                                                  resource_type, name)
        return authorize

    async def _door_produce(self, request: bytes, caller) -> bytes | Throttled:
        from actors.replica.door_guard import guard_produce
        began = time.perf_counter_ns()
        req = decode_produce_many_request(request)
        allowed, merge = guard_produce(req, self._door_authorize(caller))
        return await self._produce_answer(
            allowed, req.acks, merge, len(request), began,
            self.client_quotas.subject(req.client_id, caller))

    async def _door_fetch(self, request: bytes, caller) -> list | Throttled:
        from actors.replica.door_guard import guard_fetch
        began = time.perf_counter_ns()
        req = decode_fetch_many_request(request)
        subject = self.client_quotas.subject(req.client_id, caller, req.replica_id)
        allowed, check = guard_fetch(self.client_quotas.cap_fetch(req, subject),
                                     self._door_authorize(caller))
        spent = [time.perf_counter_ns() - began]
        response = check(None if allowed is None else await self._fetch(
            allowed, self.door_fetch_sessions, counted=subject is None, spent=spent))
        return self._fetch_answer(response, subject, spent[0], allowed is not None)

    async def _produce_answer(self, request: ProduceManyRequest | None, acks: int, merge,
                              size: int, began: int, subject: Subject | None
                              ) -> bytes | Throttled:
        """A produce's answer, ``merge`` putting refused partitions' errors among the
        results; a client over its quota throttled (``actors.replica.host_quotas``)."""
        spent = [time.perf_counter_ns() - began]
        results = merge([] if request is None else await self._produce(request, spent))
        throttle_ms = self.client_quotas.produced(subject, size, spent[0], acks)
        answer = encode_produce_many_response(results, throttle_ms)
        return Throttled(answer, throttle_ms) if throttle_ms else answer

    def _fetch_answer(self, response: FetchManyResponse, subject: Subject | None,
                      spent_ns: int, count: bool = True) -> list | Throttled:
        """A consumer's fetch answer: held to its quotas (a throttled one has no records),
        what it sends counted in BytesOut then."""
        response = self.client_quotas.fetched(subject, response, spent_ns)
        if subject is not None and count:
            self._count_read(response, follower=False)
        answer = fetch_many_response_pieces(response)
        return Throttled(answer, response.throttle_time_ms) if response.throttle_time_ms \
            else answer

    async def replication_address(self) -> tuple[str, int, bytes, str | None]:
        """(address, port, token, certificate or None) of this host's listener, for a
        follower host's fetcher, a producer or a consumer (``actors.replica.channel``); it
        starts on the first ask."""
        if self._listening is None:
            self._listening = asyncio.ensure_future(
                self.listener.start(ray.util.get_node_ip_address()))
        try:
            address, port = await asyncio.shield(self._listening)
        except OSError:
            self._listening = None  # ask again next time
            raise
        return address, port, self.listener.token, self.listener.certificate

    async def num_replicas(self) -> int:
        return len(self.replicas)

    async def describe_fetchers(self) -> list[dict]:
        """This host's replica fetchers (``ReplicaFetcherManager.describe``)."""
        return self.fetchers.describe()

    async def describe_fetch_sessions(self) -> dict:
        """The fetch sessions of the fetchers fetching from this host (Kafka's
        NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached, and the evictions
        counted by IncrementalFetchSessionEvictionsPerSec)."""
        cache = self.fetch_sessions
        return {"sessions": len(cache), "partitions_cached": cache.partitions_cached,
                "evictions": cache.evictions, "slots": cache.max_entries}

    async def take_metrics(self) -> tuple[tuple, list[tuple]]:
        """For the broker's report: the counts since the last take (``TopicDeltas``), and
        (topic, partition, log size, log end offset) of each replica here."""
        logs = [(tp.topic, tp.partition, replica.log.size, replica.log.log_end_offset)
                for tp, replica in self.replicas.items()]
        return self.topic_stats.take().as_tuple(), logs

    async def describe_requests(self) -> dict[str, int]:
        """How many multi-partition requests this host has served, by kind."""
        return dict(self.requests)

    async def hop_trace(self, directory: str | None) -> None:
        """Per-hop timestamps into ``directory`` (``actors.hop_trace``); None: off."""
        hop_trace.start(directory)
        for replica in self.replicas.values():
            self._trace_high_watermark(replica)

    @staticmethod
    def _trace_high_watermark(replica: HostedReplica) -> None:
        core = replica.replica
        core.on_high_watermark = None if not hop_trace.ON else (
            lambda hw, t=core.topic, p=core.partition: hop_trace.mark("hw", t, p, hw, hw))

    async def host_pid(self) -> int:
        return os.getpid()

    # ---- per-replica calls -----------------------------------------------------------------
    def _replica(self, topic: str, partition: int) -> HostedReplica | None:
        return self.replicas.get(TopicPartition(topic, partition))

    def _absent(self, topic: str, partition: int) -> KafkaError:
        # The caller found this host through the broker, so the replica was here: it has
        # moved or is being deleted. Retriable; the client refreshes its metadata.
        return NotLeaderOrFollowerError(f"Broker {self.broker_id} does not host "
                                        f"{topic}-{partition}")

    def _require(self, topic: str, partition: int) -> HostedReplica:
        replica = self._replica(topic, partition)
        if replica is None:
            raise self._absent(topic, partition)
        return replica

    # ---- many partitions in one request (between hosts) -----------------------------------
    async def fetch_many(self, request: bytes) -> bytes:
        """A follower host's or a consumer's fetch for all the partitions it reads here:
        answered when ``min_bytes`` are there over the request, or after ``max_wait_ms``."""
        return unthrottled(await self._serve_fetch(request))

    async def _serve_fetch(self, request: bytes) -> list | Throttled:
        """``fetch_many`` on the channel: a client over its quota throttled there."""
        began = time.perf_counter_ns()
        req = decode_fetch_many_request(request)
        subject = self.client_quotas.subject(req.client_id, None, req.replica_id)
        if subject is None:
            return fetch_many_response_pieces(await self._fetch(req))
        req = self.client_quotas.cap_fetch(req, subject)
        spent = [time.perf_counter_ns() - began]
        response = await self._fetch(req, counted=False, spent=spent)
        return self._fetch_answer(response, subject, spent[0])

    async def _listener_fetch(self, request: bytes) -> list:
        """``fetch_many`` for a broker's Kafka listener, which counts the bytes it sends
        itself: of a fetch spread over several hosts it may drop a late answer."""
        return fetch_many_response_pieces(await self._fetch(
            decode_fetch_many_request(request), counted=False))

    async def _fetch(self, req: FetchManyRequest, sessions: FetchSessionCache | None = None,
                     counted: bool = True, spent: list[int] | None = None
                     ) -> FetchManyResponse:
        """``fetch_many``'s answer; ``sessions``: the cache its session is in (Ray door
        clients have their own: no door request reaches a follower's session);
        ``counted``: its bytes go in BytesOut / ReplicationBytesOut here; ``spent[0]``:
        the ns reading the logs took when the request came is added there (a quota's
        request time)."""
        self.requests["Fetch"] += 1
        future, done = answer_future()
        reading = time.perf_counter_ns()
        moved = fetch_many(self.cores, req, self.purgatories.fetch, self.broker_id, done,
                           self.fetch_sessions if sessions is None else sessions,
                           self.node_id)
        if spent is not None:
            spent[0] += time.perf_counter_ns() - reading
        # The followers' positions may have moved an ISR: tell the controller.
        replicas = self.replicas
        for key in moved:
            replica = replicas.get(key)  # a TopicPartition's equal
            if replica is not None:
                replica.maybe_alter_partition()
        answer = await future
        if counted:
            self._count_read(answer, req.replica_id >= 0)
        if hop_trace.ON and req.replica_id < 0:
            now = time.monotonic_ns()
            for topic, partition, result in answer.results:
                found = hop_trace.span(result.records) if result.error is None else None
                if found:
                    hop_trace.mark("fetch", topic, partition, *found, now)
        return answer

    def _count_read(self, answer: FetchManyResponse, follower: bool) -> None:
        read = self.topic_stats.read
        for topic, _, result in answer.results:
            if result.records:
                read(topic, len(result.records), follower)

    async def offsets_for_leader_epoch_many(self, request: bytes) -> bytes:
        return encode(offsets_for_leader_epochs(self.cores, decode(request), self.broker_id))

    async def produce_many(self, request: bytes) -> bytes:
        """A producer's batches for many partitions of this host (Kafka's ProduceRequest):
        each appended by its replica in the request's order, before any waits; one result
        per partition, in order, once every acks=all append has reached its ISR. A
        transaction's first batches here wait for its coordinator's verification."""
        return unthrottled(await self._serve_produce(request))

    async def _serve_produce(self, request: bytes) -> bytes | Throttled:
        """``produce_many`` on the channel: a client over its quota throttled there."""
        began = time.perf_counter_ns()
        req = decode_produce_many_request(request)
        subject = self.client_quotas.subject(req.client_id)
        if subject is None:
            return encode_produce_many_response(await self._produce(req))
        return await self._produce_answer(req, req.acks, list, len(request), began, subject)

    async def _produce(self, req: ProduceManyRequest, spent: list[int] | None = None
                       ) -> list[tuple]:
        """``produce_many``'s answer: ``(topic, partition, ProduceResult)`` per partition;
        ``spent[0]``: the ns the appends took is added there (a quota's request time)."""
        self.requests["Produce"] += 1
        verified = await self.verifier.verify(req, self.cores)
        appending = time.perf_counter_ns()
        results = []
        appended = self.topic_stats.appended
        for (topic, partition, records), guards in zip(req.partitions, verified):
            replica = self._replica(topic, partition)
            end = replica.log.log_end_offset if hop_trace.ON and replica is not None else None
            began = time.monotonic_ns() if end is not None else 0
            result = (ProduceResult(error=self._absent(topic, partition)) if replica is None
                      else ProduceResult(error=guards) if isinstance(guards, KafkaError)
                      else replica.produce_result(records, req.acks, req.timeout_ms, guards))
            if end is not None and replica.log.log_end_offset > end:
                hop_trace.mark("append", topic, partition, end, replica.log.log_end_offset - 1,
                               began)
            # Counted once appended, as Kafka marks BytesIn / MessagesIn: whatever the ISR
            # then answers (a future: appended, waiting for acks=all).
            if isinstance(result, asyncio.Future) or result.error is None:
                appended(topic, records)
            results.append(result)
        if spent is not None:
            spent[0] += time.perf_counter_ns() - appending
        waiting = [r for r in results if isinstance(r, asyncio.Future)]
        if waiting:
            await asyncio.gather(*waiting)
        return [(topic, partition, r.result() if isinstance(r, asyncio.Future) else r)
                for (topic, partition, _), r in zip(req.partitions, results)]

    async def write_txn_markers_many(self, markers: list[tuple], timeout_ms: int) -> bytes:
        """Kafka's WriteTxnMarkers for partitions led here: ``(topic, partition, producer
        id, producer epoch, coordinator epoch, commit)`` each, all appended before any
        waits; the answer, once each is in its ISR, is per marker in order None or the
        error."""
        self.requests["WriteTxnMarkers"] += 1
        results = []
        for topic, partition, producer_id, epoch, coordinator_epoch, commit in markers:
            replica = self._replica(topic, partition)
            results.append(ProduceResult(error=self._absent(topic, partition))
                           if replica is None
                           else replica.write_txn_marker(producer_id, epoch,
                                                         coordinator_epoch, commit,
                                                         timeout_ms))
        waiting = [r for r in results if isinstance(r, asyncio.Future)]
        if waiting:
            await asyncio.gather(*waiting)
        errors = [(r.result() if isinstance(r, asyncio.Future) else r).error for r in results]
        # Offsets committed in the transaction are settled by the group coordinator that
        # leads the partition, on this broker, before the coordinator hears the marker is
        # written (Kafka's onTransactionCompleted).
        # A marker whose offsets could not be settled is answered as not written: the
        # transaction coordinator sends it again (a second marker changes nothing).
        settled = [i for i, ((topic, *_), error) in enumerate(zip(markers, errors))
                   if topic == OFFSETS_TOPIC and error is None]
        if settled:
            try:
                if self._group_coordinator is None:
                    self._group_coordinator = await lookup(coordinator_name(self.broker_id),
                                                           self.namespace)
                if self._group_coordinator is None:
                    raise CoordinatorNotAvailableError(
                        f"Broker {self.broker_id} runs no group coordinator")
                await asyncio.gather(*[self._group_coordinator.complete_txn.remote(
                    markers[i][1], markers[i][2], markers[i][5]) for i in settled])
            except Exception as e:
                self._group_coordinator = None
                for i in settled:
                    errors[i] = CoordinatorNotAvailableError(
                        f"The group coordinator did not take the marker's offsets: {e!r}")
        return encode(errors)

    async def produce(self, topic: str, partition: int, records: bytes, acks: int = -1,
                      timeout_ms: int = 30_000, transactional_id: str | None = None) -> bytes:
        """One partition's ``produce_many`` (a coordinator's appends, tests')."""
        [(_, _, result)] = await self._produce(ProduceManyRequest(
            acks, timeout_ms, ((topic, partition, records),), transactional_id))
        return encode(result)

    async def fetch(self, topic: str, partition: int, request: bytes) -> bytes:
        replica = self._replica(topic, partition)
        if replica is None:
            return encode(FetchResult(error=self._absent(topic, partition), leader_epoch=-1,
                                      fetch_offset=decode(request).fetch_offset))
        return await replica.fetch(request)

    async def offsets_for_leader_epoch(self, topic: str, partition: int, epoch: int,
                                       current_leader_epoch: int = -1) -> bytes:
        replica = self._replica(topic, partition)
        if replica is None:
            return encode(self._absent(topic, partition))
        return await replica.offsets_for_leader_epoch(epoch, current_leader_epoch)

    async def list_offsets(self, topic: str, partition: int, timestamp: int,
                           current_leader_epoch: int = -1, isolation_level: int = 0) -> bytes:
        replica = self._replica(topic, partition)
        if replica is None:
            return encode(self._absent(topic, partition))
        return await replica.list_offsets(timestamp, current_leader_epoch, isolation_level)

    async def list_offsets_many(self, requests: list[tuple]) -> list[bytes]:
        """ListOffsets for many partitions of this host (Kafka's ListOffsetsRequest, one
        per broker): ``(topic, partition, timestamp[, current leader epoch[, isolation
        level]])`` each,
        answered in order, each answer as ``list_offsets``'."""
        return [await self.list_offsets(*request) for request in requests]

    async def _list_offsets_frame(self, request: bytes) -> bytes:
        # ``list_offsets_many`` for the channel (the listener's ListOffsets).
        return encode(await self.list_offsets_many(decode(request)))

    async def describe_producers_many(self, partitions: list[tuple[str, int]]) -> bytes:
        """DescribeProducers for partitions of this host: per partition, in order, its
        active producers (``PartitionReplica.active_producers``) or the error."""
        out = []
        for topic, partition in partitions:
            replica = self._replica(topic, partition)
            out.append(self._absent(topic, partition) if replica is None
                       else replica.active_producers())
        return encode(out)

    async def delete_records(self, topic: str, partition: int, offset: int,
                             timeout_ms: int = 30_000) -> bytes:
        replica = self._replica(topic, partition)
        if replica is None:
            return encode(DeleteRecordsResult(error=self._absent(topic, partition)))
        return await replica.delete_records(offset, timeout_ms)

    async def describe(self, topic: str, partition: int) -> dict:
        return await self._require(topic, partition).describe()

    async def read_local(self, topic: str, partition: int, offset: int, max_bytes: int,
                         max_offset: int | None = None) -> bytes:
        return await self._require(topic, partition).read_local(offset, max_bytes, max_offset)

    async def checkpoint_state(self, topic: str, partition: int) -> tuple[int, int, int]:
        return self._require(topic, partition).checkpoint_state()

    async def pid(self, topic: str, partition: int) -> int:
        """The process serving the replica (its host's)."""
        self._require(topic, partition)
        return os.getpid()
