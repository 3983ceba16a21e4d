"""BrokerActor: one Kafka broker, as a detached async Ray actor pinned to a node.

It owns ``<data_dir>/broker-<id>/`` and its directory-level checkpoint files, starts its
replica hosts (``ReplicaHostActor``, ``num.replica.hosts`` of them, each holding many of its
partition replicas: ``actors.broker.replica_manager``) and its ``TimerActor`` on its own
node (owned by it, so they die with it), says which host holds each of its replicas
(``replica_host``), registers with the controller and heartbeats
(``actors.broker.lifecycle``: if there is no controller, or the one there has stopped, it
races to become it), applies the controller's LeaderAndIsr / StopReplica / UpdateMetadata
(refusing an older controller epoch), serves Kafka clients (``actors.broker.listener``),
and runs controlled shutdown. When its process dies Ray restarts it on the same node
(``max_restarts``); the new incarnation reopens the logs from disk and registers again, and
the controller treats it as a broker that failed and came back.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
import uuid
from pathlib import Path
from typing import NoReturn

import ray

from actors import hop_trace
from actors.broker.client_quota_manager import QUOTA_WINDOW_SIZE_SECONDS, BrokerQuotas
from actors.broker.config import ClusterConfig
from actors.broker.lifecycle import BrokerLifecycle
from actors.broker.replica_manager import ReplicaManager
from actors.broker.state import BrokerState, ControlledShutdown, ControllerWork
from actors.group_coordinator.actor import GroupCoordinatorActor
from protocols.java_hash import coordinator_partition_for
from actors.gcs import create_named, gcs_backlog
from actors.broker.metrics_report import BrokerMetricsReport
from actors.metrics.exporter import MetricsExporter, report_interval_ms
from actors.names import broker_name, coordinator_name, namespace_for, txn_coordinator_name
from actors.process import (keep_freed_memory, niceness_warning, process_niceness,
                             raise_open_files_limit)
from actors.timer.actor import keep_scheduled, node_timer
from protocols.errors import (BrokerNotAvailableError, CoordinatorNotAvailableError,
                              InvalidRequestError, KafkaError, StaleControllerEpochError,
                              TopicAlreadyExistsError)
from protocols.messages import LeaderAndIsr, StopReplica
from protocols.topics import (GROUP_KEY_TYPE, OFFSETS_TOPIC, TRANSACTION_KEY_TYPE,
                              TRANSACTION_STATE_TOPIC)
from protocols.wire import decode, encode
from storage.log_dir_failure import probe
from storage.log_manager import CLEAN_SHUTDOWN_FILE

log = logging.getLogger(__name__)

BOOT_RETRY_BACKOFF_S = 2.0   # a broker whose start failed waits this long before exiting
# A controller batch whose replica work failed (a host died under it) is tried again after
# this long: the host's replacement is started meanwhile.
REPLICA_WORK_RETRY_BACKOFF_S = 0.5


@ray.remote(num_cpus=0, max_restarts=-1, max_concurrency=10_000)
class BrokerActor:
    def __init__(self, cluster_name: str, broker_id: int, data_dir: str, config: dict,
                 rack: str | None = None, brokers_on_node: int = 1):
        self.namespace = namespace_for(cluster_name)
        self.broker_id = broker_id
        self.data_dir = str(Path(data_dir).resolve())
        self.cfg = ClusterConfig.parse(config)
        self.dir = Path(self.data_dir) / f"broker-{broker_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        raise_open_files_limit()   # one per client connection, and its replica hosts' files
        keep_freed_memory()   # a listener's Produce requests move megabytes, as a host's do
        self.niceness = process_niceness()   # its replica hosts are workers of the same Ray
        warning = niceness_warning(self.niceness)
        if warning is not None:
            log.warning("broker %d: %s", broker_id, warning)
        self.incarnation = uuid.uuid4().hex
        marker = self.dir / CLEAN_SHUTDOWN_FILE
        # The broker's decisions on what the controller sends (actors.broker.state).
        self.state = BrokerState(broker_id, clean_shutdown=marker.exists())
        marker.unlink(missing_ok=True)  # while we run, a crash must look unclean
        # Controller batches received, and per request kind (LeaderAndIsr, StopReplica,
        # UpdateMetadata) the batches carrying one: what Kafka would count as requests.
        self.controller_batches = 0
        self.controller_requests: collections.Counter[str] = collections.Counter()
        self._stopping = False
        self.endpoints: list = []   # [[name, host, port]] as advertised, once bound
        self.lifecycle = BrokerLifecycle(
            broker_id, self.incarnation, rack, lambda: self.endpoints, cluster_name,
            self.namespace, self.data_dir, self.cfg, self.state, lambda: self._stopping)
        self.replica_manager = ReplicaManager(
            broker_id, self.namespace, self.cfg, self.dir, self.state, brokers_on_node,
            lambda: self._stopping, self.lifecycle.report_replicas_failed,
            self._halt_for_log_dir, self._exit_process)
        self.ready = asyncio.Event()
        self._caught_up = asyncio.Event()   # the image names this broker (see _boot)
        # The controller's batches whose replica work is still to do, and the task doing it.
        self._replica_work: collections.deque[tuple[ControllerWork, asyncio.Future | None]] = \
            collections.deque()
        self._replica_worker: asyncio.Task | None = None
        self.boot_step = "starting"   # where _boot is: describe() shows a broker stuck there
        self.timer = None
        self._coordinator = None
        self._txn = None
        self._heartbeat_task: asyncio.Task | None = None
        self._timer_tasks: asyncio.Task | None = None  # keeps our work on the node's timer
        # Imported here, not at the top: every process holding a broker's handle (each
        # producer and consumer, to find replica hosts) imports this module, and Kafka's
        # schemas (kio) in a client's heap made its full garbage collections long enough
        # to show in end-to-end latency (a 107 ms pause in a consumer, p99.9 14 -> 74 ms).
        from actors.broker.listener.admin_apis import AdminApis
        from actors.broker.listener.auth_helper import AuthHelper
        from actors.broker.listener.api_versions import SUPPORTED
        from actors.broker.listener.group_apis import GroupApis
        from actors.broker.listener.kafka_apis import KafkaApis
        from actors.broker.listener.metadata_apis import endpoint_of
        from actors.broker.listener.socket_server import SocketServer
        from actors.broker.listener.txn_apis import TxnApis
        from actors.replica.fetch_session import FetchSessionCache
        from actors.replica.hosted_replica import wall_ms
        from actors.broker.listener.sasl_authenticator import listener_sasl
        from actors.broker.listener.tls import listener_tls
        from protocols.kafka.listeners import (advertised, exposed, parse_listeners,
                                               parse_protocol_map)
        self._advertised = advertised
        b = self.cfg.broker
        protocols = parse_protocol_map(b["listener.security.protocol.map"])
        self.listeners = parse_listeners(b["listeners"], protocol_map=protocols)
        self._exposed = exposed(self.listeners)
        # security.inter.broker.protocol=SSL: the hosts' channel's keystore, checked now so
        # that a bad one stops the broker here rather than each host as it starts.
        from actors.replica.channel import channel_tls
        channel_tls(b)
        self._advertised_config = parse_listeners(b["advertised.listeners"],
                                                  "advertised.listeners", protocols)
        # Who may do what on the Kafka listeners: authorizer.class.name, super.users.
        auth = AuthHelper(lambda: self.state.image, bool(b["authorizer.class.name"]),
                          b["super.users"], b["allow.everyone.if.no.acl.found"])
        # Client quotas (KIP-13, KIP-55, KIP-124), from the image's.
        quotas = BrokerQuotas(lambda: self.state.image, wall_ms)
        admin = AdminApis(broker_id, lambda: self.state.image, self.lifecycle.ensure_controller,
                          self._group_coordinator, broker_log=self.cfg.log,
                          log_dir=str(self.dir), auth=auth, broker_config=self.cfg.broker)
        self.kafka_apis = KafkaApis(
            broker_id, lambda: self.state.image, self._auto_create_topic,
            b["auto.create.topics.enable"],
            host_of=self.replica_manager.host_of,
            groups=GroupApis(broker_id, self._group_coordinator, self.find_coordinator,
                             lambda broker, listener: endpoint_of(self.state.image,
                                                                  broker, listener),
                             auth),
            admin=admin,
            txn=TxnApis(lambda: self.state.image, self._txn_coordinator,
                        admin.controller_call, self.replica_manager.host_of, auth),
            # Wire consumers' fetch sessions (KIP-227), one cache per broker as in Kafka.
            fetch_sessions=FetchSessionCache(b["max.incremental.fetch.session.cache.slots"],
                                             wall_ms),
            # Its hosts share this node's files: fetch answers go from them by sendfile.
            node_id=ray.get_runtime_context().get_node_id(),
            auth=auth, quotas=quotas)
        sasl = listener_sasl(b, self.listeners, self._scram)
        self.socket_server = SocketServer(broker_id, self.listeners, self.kafka_apis.handle,
                                          SUPPORTED, b["socket.request.max.bytes"],
                                          b["connections.max.idle.ms"],
                                          listener_tls(b, self.listeners), sasl,
                                          b["connection.failed.authentication.delay.ms"],
                                          quotas)
        self.metrics_report = BrokerMetricsReport(
            broker_id, self.namespace, MetricsExporter(cluster_name, broker_id),
            self.replica_manager, lambda: self.state.image, self.socket_server,
            self.kafka_apis.topic_stats, lambda: self._coordinator,
            int(self.cfg.log.get("min.insync.replicas", 1)))
        # rafka's own clients: signed in and checked here (actors/broker/ray_door.py).
        from actors.broker.ray_door import door_sasl_config
        from actors.broker.ray_door_apis import RayDoorApis
        self.ray_door = RayDoorApis(broker_id, door_sasl_config(b, sasl, self._scram), auth,
                                    admin.controller_call,
                                    b["connections.max.idle.ms"],
                                    b["connection.failed.authentication.delay.ms"],
                                    namespace=self.namespace,
                                    find_coordinator=self.find_coordinator)
        asyncio.get_running_loop().create_task(self._boot())

    def _scram(self, user: str, mechanism: str):
        """A user's SCRAM credential, from the metadata as it is now."""
        from actors.controller.scram_credentials import lookup
        return lookup(self.state.image.get("scram_credentials"), user, mechanism)

    # ---- start -----------------------------------------------------------------------------
    async def _boot(self) -> None:
        try:
            self.boot_step = "the node's timer"
            self.timer = await node_timer(self.namespace)
            self.boot_step = "listeners"
            bound = await self.socket_server.start()
            for endpoint in self._exposed:
                log.warning("broker %d: listener %s is bound to %s without TLS or SASL: "
                            "anyone who reaches it can read, write and delete every topic "
                            "(listeners, listener.security.protocol.map)", self.broker_id,
                            endpoint.name, endpoint.host or "every interface")
            self.endpoints = [[e.name, e.host, e.port] for e in
                              self._advertised(self.listeners, bound,
                                               self._advertised_config,
                                               ray.util.get_node_ip_address())]
            # The controller (found, or started by the first broker to look) and the replica
            # hosts are new processes each: started together, one start's wait, not two.
            controller = asyncio.get_running_loop().create_task(
                self.lifecycle.ensure_controller())
            try:
                self.boot_step = "a writable log directory"
                await self._await_writable_log_dir()
                self.boot_step = "replica hosts"
                await self.replica_manager.start_hosts()
                self.boot_step = "finding the controller"
                await controller
            finally:
                controller.cancel()   # done, or the start failed: nothing left running
            me = ray.get_runtime_context().current_actor
            b = self.cfg.broker
            key = broker_name(self.broker_id)
            self._timer_tasks = asyncio.get_running_loop().create_task(keep_scheduled(
                self.namespace,
                [(f"{key}:checkpoint", b["replica.high.watermark.checkpoint.interval.ms"], me,
                  "checkpoint"),
                 (f"{key}:log_maintenance", b["log.retention.check.interval.ms"], me,
                  "log_maintenance", b["log.initial.task.delay.ms"]),
                 (f"{key}:isr_expiry", max(1, b["replica.lag.time.max.ms"] // 2), me,
                  "isr_expiry"),
                 (f"{key}:report_metrics", report_interval_ms(), me, "report_metrics"),
                 (f"{key}:share_quota_usage", QUOTA_WINDOW_SIZE_SECONDS * 1000, me,
                  "share_quota_usage")]
                + ([(f"{key}:log_cleaning", max(1, b["log.cleaner.backoff.ms"]), me,
                     "log_cleaning")] if b["log.cleaner.enable"] else []),
                lambda: not self._stopping))
            self.boot_step = "registering with the controller"
            await self.lifecycle.join()
            self._heartbeat_task = asyncio.get_running_loop().create_task(
                self.lifecycle.heartbeats())
            self.boot_step = "catching up with the cluster's metadata"
            await self._caught_up.wait()
            self.socket_server.enable_request_processing()
            self.boot_step = "serving"
            self.ready.set()
        except Exception as e:
            # As Kafka's broker exits when its startup fails ("Fatal error during
            # KafkaServer startup. Prepare to shutdown"), and its service manager starts it
            # again: Ray does (max_restarts). Left waiting, it would stay down for good.
            failed_at, self.boot_step = self.boot_step, f"failed at {self.boot_step}: {e!r}"
            log.exception("broker %d: Fatal error during broker startup at %s. Prepare to "
                          "shutdown", self.broker_id, failed_at)
            if not self._stopping:
                await asyncio.sleep(BOOT_RETRY_BACKOFF_S)   # a lasting cause: no spinning
                self._exit_process()

    async def replica_host(self, topic: str, partition: int):
        """The actor handle of the host holding this broker's replica of topic-partition,
        or None when it holds none (``actors.replica.locate``)."""
        return self.replica_manager.host_of(topic, partition)

    async def replica_hosts(self, tps: list[tuple[str, int]]) -> list:
        """``replica_host`` for many partitions in one call (a client locating many
        leaders at once): a host handle or None each, in order."""
        return [self.replica_manager.host_of(t, p) for t, p in tps]

    async def wait_ready(self) -> int:
        await self.ready.wait()
        return self.broker_id

    # ---- controller requests ---------------------------------------------------------------
    async def apply_controller_messages(self, batch: bytes, broker_epoch: int = -1) -> bytes:
        """LeaderAndIsr / StopReplica / UpdateMetadata from the controller, in order; a batch
        from an older controller epoch is refused whole with STALE_CONTROLLER_EPOCH.
        ``broker_epoch``: this broker's registration, as the controller knows it."""
        messages = decode(batch)
        self.controller_batches += 1
        self.controller_requests.update({type(m).__name__ for m in messages})
        replicas = self.replica_manager
        try:
            work = self.state.on_controller_batch(
                messages, lambda: {tp.topic for tp in replicas.replicas}, broker_epoch)
        except StaleControllerEpochError as e:
            return encode(e)
        if self.state.caught_up:
            self._caught_up.set()
        # Answered once the metadata holds the batch, as a KRaft broker's metadata image does
        # before its replicas act on it: the controller answers CreateTopics when every
        # broker knows the topic, not when ten thousand replicas have opened. The replicas'
        # work follows in the controller's order (``_do_replica_work``). A batch that stops
        # replicas is answered once they have stopped (and their directories, deleting, are
        # gone): a broker that went away before then is sent it again, as before.
        done = asyncio.get_running_loop().create_future() if work.stops else None
        self._replica_work.append((work, done))
        if self._replica_worker is None:
            self._replica_worker = asyncio.get_running_loop().create_task(
                self._do_replica_work())
        if done is not None:
            await done
        return encode([])

    async def _do_replica_work(self) -> None:
        """The replicas' side of the controller's batches, one batch at a time in order. A
        batch that fails is tried again once, after a pause (the controller resent it,
        before); failing again, the broker registers again, which sends it the whole state
        of its replicas (as a batch the controller could not deliver does). Batches left
        when the broker stops are the next start's to learn from the controller."""
        try:
            while self._replica_work:
                work, done = self._replica_work.popleft()
                failure: BaseException | None = None
                for attempt in range(2):
                    if self._stopping:
                        failure = BrokerNotAvailableError(
                            f"Broker {self.broker_id} is shutting down")
                        break
                    try:
                        await self._apply_to_replicas(work)
                        failure = None
                        break
                    except Exception as e:  # noqa: BLE001 - a host died under it, say
                        failure = e
                        log.warning("broker %d: the replicas' part of a controller batch "
                                    "failed (%r)%s", self.broker_id, e,
                                    "; registering again" if attempt else "; trying again")
                        if attempt:
                            self.lifecycle.resync_wanted = True
                        else:
                            await asyncio.sleep(REPLICA_WORK_RETRY_BACKOFF_S)
                if done is not None and not done.done():
                    if failure is None:
                        done.set_result(None)
                    else:
                        done.set_exception(failure)
        finally:
            self._replica_worker = None

    async def _apply_to_replicas(self, work: ControllerWork) -> None:
        replicas = self.replica_manager
        async with replicas.lock:
            if self._stopping:   # shutdown closed the replicas while this waited
                raise BrokerNotAvailableError(f"Broker {self.broker_id} is shutting down")
            if work.changed_configs:
                await replicas.alter_topic_configs(work.changed_configs)
            await replicas.send_guards()
            if work.leader_and_isr:
                await self._become(work.leader_and_isr)
            if work.stops:
                await self._resign_coordinators(work.stops)
                await replicas.stop_replicas(work.stops)

    async def _become(self, messages: list[LeaderAndIsr]) -> list[KafkaError]:
        """LeaderAndIsr applied by the replica hosts; this broker's group and transaction
        coordinators then take up or give up the ``__consumer_offsets`` and
        ``__transaction_state`` partitions whose leadership moved."""
        errors, applied = await self.replica_manager.become(messages)
        for topic, partition, epoch in self.state.coordinator_changes(applied):
            coordinator = await (self._group_coordinator() if topic == OFFSETS_TOPIC
                                 else self._txn_coordinator())
            if epoch is not None:
                await coordinator.on_election.remote(partition, epoch)
            else:
                await coordinator.on_resignation.remote(partition)
        return errors

    async def _resign_coordinators(self, stops: list[StopReplica]) -> None:
        """The coordinators give up the internal partitions whose replicas stop here."""
        for m in stops:
            coordinator = self._coordinator if m.topic == OFFSETS_TOPIC \
                else self._txn if m.topic == TRANSACTION_STATE_TOPIC else None
            if coordinator is not None:
                await coordinator.on_resignation.remote(m.partition)

    async def _group_coordinator(self):
        """This broker's group coordinator, started the first time it is needed (a broker
        that never leads a __consumer_offsets partition never runs one)."""
        if self._coordinator is None:
            self._coordinator = await create_named(
                GroupCoordinatorActor, coordinator_name(self.broker_id), self.namespace,
                self.namespace, self.broker_id, self.cfg.broker, self.timer)
        return self._coordinator

    async def _txn_coordinator(self):
        """This broker's transaction coordinator, started the first time it leads a
        ``__transaction_state`` partition or is asked for it."""
        if self._txn is None:
            from actors.txn.actor import TransactionCoordinatorActor
            self._txn = await create_named(
                TransactionCoordinatorActor, txn_coordinator_name(self.broker_id),
                self.namespace, self.namespace, self.broker_id, self.cfg.broker)
        return self._txn

    async def txn_coordinator(self):
        """The handle of this broker's transaction coordinator (the listener's and
        rafka's clients' way to it)."""
        return await self._txn_coordinator()

    async def find_coordinator(self, key: str, key_type: int = GROUP_KEY_TYPE) -> bytes:
        """FindCoordinator: the broker id hosting the coordinator of a group (key type 0)
        or a transactional id (key type 1), creating the internal topic on first use
        (COORDINATOR_NOT_AVAILABLE until it has a leader, as in Kafka)."""
        b = self.cfg.broker
        if key_type == GROUP_KEY_TYPE:
            topic, spec = OFFSETS_TOPIC, (
                b["offsets.topic.num.partitions"], b["offsets.topic.replication.factor"],
                {"cleanup.policy": "compact",
                 "segment.bytes": b["offsets.topic.segment.bytes"]})
        elif key_type == TRANSACTION_KEY_TYPE:
            topic, spec = TRANSACTION_STATE_TOPIC, (
                b["transaction.state.log.num.partitions"],
                b["transaction.state.log.replication.factor"],
                {"cleanup.policy": "compact",
                 "segment.bytes": b["transaction.state.log.segment.bytes"],
                 "min.insync.replicas": b["transaction.state.log.min.isr"],
                 "unclean.leader.election.enable": False, "compression.type": "uncompressed"})
        else:
            return encode(InvalidRequestError(f"Unknown coordinator key type {key_type}"))
        partitions = self.state.image.get("topics", {}).get(topic)
        if not partitions:
            try:
                controller = await self.lifecycle.ensure_controller()
                answer = decode(await controller.create_topic.remote(topic, *spec, None))
            except Exception as e:
                answer = e
            if isinstance(answer, BaseException) and \
                    not isinstance(answer, TopicAlreadyExistsError):
                return encode(CoordinatorNotAvailableError(
                    f"Could not create {topic}: {answer}"))
            return encode(CoordinatorNotAvailableError(f"{topic} is being created"))
        partition = coordinator_partition_for(key, len(partitions))
        leader = partitions[partition]["leader"]
        if leader < 0:
            return encode(CoordinatorNotAvailableError(f"{topic}-{partition} has no leader"))
        return encode(leader)

    async def partition_leaders(self, tps: list[tuple[str, int]]) -> list:
        """Each partition's leader by this broker's metadata: its broker id, -1 with none,
        None when the topic (or partition) does not exist."""
        topics = self.state.image.get("topics", {})
        out = []
        for topic, partition in tps:
            entry = topics.get(topic, {}).get(partition)
            out.append(None if entry is None else entry["leader"])
        return out

    async def allocate_producer_ids(self, count: int) -> bytes:
        """A block of producer ids for this broker's transaction coordinator (Kafka's
        AllocateProducerIds): the first of them, or the error."""
        try:
            controller = await self.lifecycle.ensure_controller()
            return encode(await controller.allocate_producer_ids.remote(count))
        except Exception as e:
            return encode(CoordinatorNotAvailableError(
                f"The controller did not allocate producer ids: {e!r}"))

    # ---- a failed log directory ------------------------------------------------------------
    async def log_dir_failed(self, log_dir: str, message: str) -> None:
        """A replica host's write failed, and the log directory is offline
        (``storage.log_dir_failure``)."""
        self._halt_for_log_dir(log_dir, message)

    def _halt_for_log_dir(self, log_dir: str, message: str) -> NoReturn:
        """Kafka stops serving an offline log directory and, with none left online (a rafka
        broker has one), halts (ReplicaManager.handleLogDirFailure). Nothing is flushed or
        marked clean: the replicas recover from their files when Ray starts the broker
        again, and it serves once the directory takes writes (``_await_writable_log_dir``).
        Its partitions' leadership moves when its session expires, as for any crash."""
        log.critical("broker %d: Shutdown broker because all log dirs in %s have failed: %s",
                     self.broker_id, log_dir, message)
        self._exit_process()

    @staticmethod
    def _exit_process() -> NoReturn:
        """Exit at once, for Ray to start the broker again (``max_restarts``); the replica
        hosts it owns die with it."""
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)

    async def _await_writable_log_dir(self) -> None:
        """Before serving: the log directory must take a page (a full disk that failed the
        last run must have room again), checked every second, as Kafka refuses to start on
        a log directory it cannot write."""
        waited = None
        while (error := await asyncio.to_thread(probe, self.dir)) is not None:
            if waited is None or time.monotonic() - waited >= 60:
                log.error("broker %d: log directory %s is not writable (%s); waiting for it "
                          "before registering", self.broker_id, self.dir, error)
                waited = time.monotonic()
            await asyncio.sleep(1.0)

    async def checkpoint(self) -> None:
        """replica.high.watermark.checkpoint.interval.ms: HWs, recovery points and log start
        offsets of every replica to the directory's checkpoint files. Not before the broker
        serves: the node's timer keeps calling a broker started again, and one waiting for
        room on a full disk would halt again on writing them."""
        if not self.ready.is_set():
            return
        await self.replica_manager.save_checkpoints(
            lambda host: host.checkpoint_states.remote())

    async def log_maintenance(self) -> None:
        """log.retention.check.interval.ms: retention, delayed deletions, flush."""
        await self.replica_manager.on_every_host(lambda host: host.log_maintenance.remote())

    async def log_cleaning(self) -> None:
        """log.cleaner.backoff.ms: the cleaner compacts the logs that are due."""
        await self.replica_manager.on_every_host(lambda host: host.log_cleaning.remote())

    async def isr_expiry(self) -> None:
        await self.replica_manager.on_every_host(lambda host: host.isr_expiry.remote())

    async def report_metrics(self) -> None:
        """Kafka's broker metrics and its groups' consumer lag, to Ray's metrics."""
        await self.metrics_report.report()

    async def hop_trace(self, directory: str | None) -> None:
        """Per-hop timestamps (``actors.hop_trace``, a benchmark mode) into ``directory``
        from this broker's listener and every replica host of it; None: off."""
        hop_trace.start(directory)
        await asyncio.gather(*[h.hop_trace.remote(directory)
                               for h in self.replica_manager.all_hosts()],
                             return_exceptions=True)   # a host down is not traced

    async def share_quota_usage(self) -> None:
        """Each replica host told what the others measured of the client quotas' rates."""
        await self.replica_manager.share_quota_usage()

    async def _auto_create_topic(self, name: str) -> KafkaError | None:
        """Kafka's auto.create.topics.enable: a Metadata request naming a topic that does not
        exist creates it with the cluster's num.partitions and default.replication.factor."""
        try:
            controller = await self.lifecycle.ensure_controller()
            answer = decode(await controller.create_topic.remote(name, None, None, None, None))
        except KafkaError as e:
            return e
        except Exception as e:   # the controller moved: the client asks again and is
            # answered LEADER_NOT_AVAILABLE until the topic exists
            log.info("broker %d: auto-creating %r: %r", self.broker_id, name, e)
            return None
        if isinstance(answer, TopicAlreadyExistsError):
            return None
        return answer if isinstance(answer, KafkaError) else None

    # ---- the Ray door: rafka's own clients (actors/broker/ray_door.py) ---------------------
    async def ray_door_authenticate(self, exchange: str | None, mechanism: str,
                                    token: bytes) -> bytes:
        return encode(list(await self.ray_door.authenticate(exchange, mechanism, token)))

    async def ray_door_close(self, session: str) -> None:
        self.ray_door.close(session)

    async def ray_door_admin(self, session: str | None, host: str, method: str,
                             args: list) -> bytes:
        return encode(await self.ray_door.admin(session, host, method, args))

    async def ray_door_read(self, session: str | None, host: str, what: str,
                            args: list) -> bytes:
        return encode(await self.ray_door.read(session, host, what, args))

    async def ray_door_find_coordinator(self, session: str | None, host: str, key: str,
                                        key_type: int) -> bytes:
        return encode(await self.ray_door.find_coordinator(session, host, key, key_type))

    async def ray_door_coordinator(self, session: str | None, host: str, kind: str,
                                   coordinator_id: int, method: str, args: list) -> bytes:
        return encode(await self.ray_door.coordinator(session, host, kind, coordinator_id,
                                                      method, args))

    async def ray_door_host(self, session: str | None, host: str, replica_host, method: str,
                            args: list) -> bytes:
        return encode(await self.ray_door.host_call(session, host, replica_host, method, args))

    async def ray_door_admit(self, session: str | None, host: str, replica_host) -> bytes:
        return encode(await self.ray_door.admit(session, host, replica_host))

    async def ray_door_list_offsets(self, session: str | None, host: str, replica_host,
                                    requests: list) -> bytes:
        return encode(await self.ray_door.list_offsets(session, host, replica_host, requests))

    # ---- queries ---------------------------------------------------------------------------
    async def metadata(self) -> bytes:
        return encode(self.state.image)

    async def describe(self) -> dict:
        return {"broker_id": self.broker_id, "incarnation": self.incarnation,
                "controller_epoch": self.state.controller_epoch, "pid": os.getpid(),
                "boot_step": self.boot_step, "niceness": self.niceness,
                "controller_channel": self.lifecycle.channel.snapshot(),
                "gcs_calls": gcs_backlog(),
                "node_id": ray.get_runtime_context().get_node_id(),
                "replica_hosts": len(self.replica_manager.hosts),
                "dedicated_hosts": len(self.replica_manager.dedicated),
                "host_restarts": self.replica_manager.host_restarts,
                "controller_batches": self.controller_batches,
                "controller_requests": dict(self.controller_requests),
                "endpoints": self.endpoints,
                "kafka_connections": self.socket_server.connection_count,
                # Open connections per principal (User:ANONYMOUS without authentication).
                "kafka_connections_by_principal": dict(self.socket_server.principals),
                "kafka_requests_processed": self.socket_server.processing,
                "kafka_connections_closed": dict(self.socket_server.closed_for),
                "kafka_fetch_bytes_sent_from_files": self.socket_server.bytes_sent_from_files,
                "replicas": sorted(f"{tp.topic}-{tp.partition}"
                                   for tp in self.replica_manager.replicas)}

    async def pid(self) -> int:
        return os.getpid()

    # ---- stop ------------------------------------------------------------------------------
    async def shutdown(self, controlled: bool = True) -> None:
        """Stop cleanly: with ``controlled``, first ask the controller to move leadership
        away (controlled.shutdown.max.retries attempts); then close every log, write the
        checkpoints and the clean-shutdown marker."""
        b = self.cfg.broker
        if controlled and b["controlled.shutdown.enable"]:
            attempts = ControlledShutdown(b["controlled.shutdown.max.retries"],
                                          b["controlled.shutdown.retry.backoff.ms"])
            while True:
                try:
                    controller = await asyncio.wait_for(self.lifecycle.ensure_controller(),
                                                        self.lifecycle.session_s())
                    still_leading = await controller.controlled_shutdown.remote(self.broker_id)
                except Exception as e:
                    log.warning("broker %d: controlled shutdown attempt failed: %r",
                                self.broker_id, e)
                    still_leading = None
                backoff_ms = attempts.on_answer(still_leading)
                if backoff_ms is None:
                    break
                await asyncio.sleep(backoff_ms / 1000)
        self._stopping = True
        await self.socket_server.stop()
        self.kafka_apis.channels.close()
        for task in (self._heartbeat_task, self._timer_tasks):
            if task is not None:
                task.cancel()
        replicas = self.replica_manager
        async with replicas.lock:
            await replicas.save_checkpoints(lambda host: host.stop_all.remote())
            (self.dir / CLEAN_SHUTDOWN_FILE).touch()
            controller = self.lifecycle.controller
            if controlled and controller is not None:
                try:
                    await asyncio.wait_for(controller.broker_failed.remote(self.broker_id), 5)
                except Exception:
                    pass
            replicas.kill_hosts()
            if self._coordinator is not None:
                ray.kill(self._coordinator, no_restart=True)
                self._coordinator = None
            if self._txn is not None:
                ray.kill(self._txn, no_restart=True)
                self._txn = None
