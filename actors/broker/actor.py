"""BrokerActor: one Kafka broker, as a detached async Ray actor pinned to a node.

It owns ``<data_dir>/broker-<id>/`` and its directory-level checkpoint files, starts its
replica hosts (``ReplicaHostActor``, ``num.replica.hosts`` of them, each holding many of its
partition replicas) and its ``TimerActor`` on its own node (owned by it, so they die with
it), says which host holds each of its replicas (``replica_host``), registers with the
controller and heartbeats (``actors.broker.lifecycle``: if there is no controller, or the
one there has stopped, it races to become it), applies the controller's LeaderAndIsr /
StopReplica / UpdateMetadata (refusing an older controller epoch), and runs controlled
shutdown. When its process
dies Ray restarts it on the same node (``max_restarts``); the new incarnation reopens the
logs from disk and registers again, and the controller treats it as a broker that failed and
came back.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, NoReturn

import ray

from actors.broker.config import ClusterConfig
from actors.broker.lifecycle import BrokerLifecycle, ControllerChannel
from actors.broker.state import BrokerState, ControlledShutdown
from actors.coordinator.actor import GroupCoordinatorActor
from actors.coordinator.group import offsets_partition_for
from actors.named import create_named, gcs_backlog
from actors.names import (broker_name, coordinator_name, dedicated_host_name, namespace_for,
                          replica_host_name)
from actors.replica.host import ReplicaHostActor
from actors.replica.placement import default_num_replica_hosts, host_index
from actors.timer.actor import keep_scheduled, node_timer
from protocols.errors import (CoordinatorNotAvailableError, KafkaError,
                              StaleControllerEpochError, TopicAlreadyExistsError)
from protocols.messages import LeaderAndIsr, StopReplica
from protocols.topics import OFFSETS_TOPIC, TopicPartition, partition_dir_name
from protocols.wire import decode, encode
from storage.checkpoint import OffsetCheckpointFile
from storage.log_dir_failure import probe
from storage.log_manager import (CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT,
                                 RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)

log = logging.getLogger(__name__)

# A replica host not answering this long after it was created is given up (Ray's own
# worker_register_timeout_seconds is 60 s too): the broker exits to be started again.
HOST_START_TIMEOUT_S = 60.0
BOOT_RETRY_BACKOFF_S = 2.0   # a broker whose start failed waits this long before exiting


@ray.remote(num_cpus=0, max_restarts=-1, max_concurrency=10_000)
class BrokerActor(BrokerLifecycle):
    def __init__(self, cluster_name: str, broker_id: int, data_dir: str, config: dict,
                 rack: str | None = None, brokers_on_node: int = 1):
        self.cluster_name = cluster_name
        self.namespace = namespace_for(cluster_name)
        self.broker_id = broker_id
        self.rack = rack
        self.data_dir = str(Path(data_dir).resolve())
        self.cfg = ClusterConfig.parse(config)
        self.dir = Path(self.data_dir) / f"broker-{broker_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.incarnation = uuid.uuid4().hex
        marker = self.dir / CLEAN_SHUTDOWN_FILE
        # The broker's decisions on what the controller sends (actors.broker.state).
        self.state = BrokerState(broker_id, clean_shutdown=marker.exists())
        marker.unlink(missing_ok=True)  # while we run, a crash must look unclean
        self._files = {
            "hw": OffsetCheckpointFile(self.dir / REPLICATION_OFFSET_CHECKPOINT),
            "recovery": OffsetCheckpointFile(self.dir / RECOVERY_POINT_CHECKPOINT),
            "start": OffsetCheckpointFile(self.dir / LOG_START_OFFSET_CHECKPOINT),
        }
        self.checkpoints: dict[str, dict[TopicPartition, int]] = {
            k: f.read() for k, f in self._files.items()}
        self.brokers_on_node = brokers_on_node
        # Controller batches received, and per request kind (LeaderAndIsr, StopReplica,
        # UpdateMetadata) the batches carrying one: what Kafka would count as requests.
        self.controller_batches = 0
        self.controller_requests: collections.Counter[str] = collections.Counter()
        self.hosts: list[Any] = []       # the shared hosts, by placement index
        self.dedicated: dict[TopicPartition, Any] = {}  # replica.placement=dedicated
        self._watchers: dict[Any, asyncio.Task] = {}  # strong refs: the loop keeps weak ones
        self.host_restarts = 0
        self._host_starts: dict[str, int] = {}  # by base name: how many times started
        # Which host holds each replica open on this broker.
        self.replicas: dict[TopicPartition, Any] = {}
        self._controller = None
        self.channel = ControllerChannel()
        self._lock = asyncio.Lock()
        self._stopping = False
        self.ready = asyncio.Event()
        self._caught_up = asyncio.Event()   # the image names this broker (see _boot)
        self.boot_step = "starting"   # where _boot is: describe() shows a broker stuck there
        self.timer = None
        self._coordinator = None
        self._heartbeat_task: asyncio.Task | None = None
        self._timer_tasks: asyncio.Task | None = None  # keeps our work on the node's timer
        # Imported here, not at the top: every process holding a broker's handle (each
        # producer and consumer, to find replica hosts) imports this module, and Kafka's
        # schemas (kio) in a client's heap made its full garbage collections long enough
        # to show in end-to-end latency (a 107 ms pause in a consumer, p99.9 14 -> 74 ms).
        from actors.broker.listener.admin_apis import AdminApis
        from actors.broker.listener.api_versions import SUPPORTED
        from actors.broker.listener.group_apis import GroupApis
        from actors.broker.listener.kafka_apis import KafkaApis
        from actors.broker.listener.metadata_apis import endpoint_of
        from actors.broker.listener.socket_server import SocketServer
        from actors.replica.fetch_session import FetchSessionCache
        from actors.replica.hosted import wall_ms
        from protocols.kafka.listeners import advertised, parse_listeners
        self._advertised = advertised
        b = self.cfg.broker
        self.listeners = parse_listeners(b["listeners"])
        self._advertised_config = parse_listeners(b["advertised.listeners"],
                                                  "advertised.listeners")
        self.endpoints: list = []   # [[name, host, port]] as advertised, once bound
        self.kafka_apis = KafkaApis(
            broker_id, lambda: self.state.image, self._auto_create_topic,
            b["auto.create.topics.enable"],
            host_of=lambda topic, partition: self.replicas.get(TopicPartition(topic,
                                                                              partition)),
            groups=GroupApis(broker_id, self._group_coordinator, self.find_coordinator,
                             lambda b: endpoint_of(self.state.image, b)),
            admin=AdminApis(broker_id, lambda: self.state.image, self._ensure_controller,
                            self._group_coordinator, broker_log=self.cfg.log,
                            log_dir=str(self.dir)),
            # Wire consumers' fetch sessions (KIP-227), one cache per broker as in Kafka.
            fetch_sessions=FetchSessionCache(b["max.incremental.fetch.session.cache.slots"],
                                             wall_ms))
        self.socket_server = SocketServer(broker_id, self.listeners, self.kafka_apis.handle,
                                          SUPPORTED, b["socket.request.max.bytes"],
                                          b["connections.max.idle.ms"])
        asyncio.get_running_loop().create_task(self._boot())

    # ---- start -----------------------------------------------------------------------------
    async def _boot(self) -> None:
        try:
            self.boot_step = "the node's timer"
            self.timer = await node_timer(self.namespace)
            self.boot_step = "listeners"
            bound = await self.socket_server.start()
            self.endpoints = [[e.name, e.host, e.port] for e in
                              self._advertised(self.listeners, bound,
                                               self._advertised_config,
                                               ray.util.get_node_ip_address())]
            self.boot_step = "a writable log directory"
            await self._await_writable_log_dir()
            self.boot_step = "replica hosts"
            await self._start_hosts()
            me = ray.get_runtime_context().current_actor
            b = self.cfg.broker
            key = broker_name(self.broker_id)
            self._timer_tasks = asyncio.get_running_loop().create_task(keep_scheduled(
                self.namespace,
                [(f"{key}:checkpoint", b["replica.high.watermark.checkpoint.interval.ms"], me,
                  "checkpoint"),
                 (f"{key}:log_maintenance", b["log.retention.check.interval.ms"], me,
                  "log_maintenance"),
                 (f"{key}:isr_expiry", max(1, b["replica.lag.time.max.ms"] // 2), me,
                  "isr_expiry")],
                lambda: not self._stopping))
            self.boot_step = "registering with the controller"
            await self._join()
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeats())
            self.boot_step = "catching up with the cluster's metadata"
            await self._caught_up.wait()
            self.socket_server.enable_request_processing()
            self.boot_step = "serving"
            self.ready.set()
        except Exception as e:
            # As Kafka's broker exits when its startup fails ("Fatal error during
            # KafkaServer startup. Prepare to shutdown"), and its service manager starts it
            # again: Ray does (max_restarts). Left waiting, it stayed down for good (long
            # fault run, seed 166: a broker stuck at "replica hosts").
            failed_at, self.boot_step = self.boot_step, f"failed at {self.boot_step}: {e!r}"
            log.exception("broker %d: Fatal error during broker startup at %s. Prepare to "
                          "shutdown", self.broker_id, failed_at)
            if not self._stopping:
                await asyncio.sleep(BOOT_RETRY_BACKOFF_S)   # a lasting cause: no spinning
                self._exit_process()

    def _num_hosts(self) -> int:
        configured = self.cfg.broker["num.replica.hosts"]
        if configured > 0:
            return configured
        node_id = ray.get_runtime_context().get_node_id()
        cpus = next((n["Resources"].get("CPU", 1) for n in ray.nodes()
                     if n["NodeID"] == node_id), 1)
        return default_num_replica_hosts(cpus, self.brokers_on_node)

    async def _start_hosts(self) -> None:
        self.hosts = list(await asyncio.gather(*[
            self._start_host(replica_host_name(self.broker_id, i))
            for i in range(self._num_hosts())]))

    async def _start_host(self, base_name: str):
        """Start one replica host on this node (owned by this broker, so it dies with it)
        and watch it. A host started again after dying is named ``<name>-r<n>``: Ray keeps a
        dead actor's name while anything (a client's cached handle) still refers to it."""
        restarts = self._host_starts.get(base_name, 0)
        self._host_starts[base_name] = restarts + 1
        name = base_name if not restarts else f"{base_name}-r{restarts}"
        host = await create_named(ReplicaHostActor, name, self.namespace, self.namespace,
                                  self.broker_id, name, self.cfg.log, self.cfg.broker)
        try:
            await asyncio.wait_for(host.num_replicas.remote(), HOST_START_TIMEOUT_S)
        except asyncio.TimeoutError:
            ray.kill(host, no_restart=True)
            raise TimeoutError(
                f"broker {self.broker_id}: replica host {name} did not start within "
                f"{HOST_START_TIMEOUT_S:.0f} s") from None
        self._watchers[host] = asyncio.get_running_loop().create_task(self._watch_host(host))
        return host

    def _all_hosts(self) -> list[Any]:
        return self.hosts + list(self.dedicated.values())

    async def _watch_host(self, host) -> None:
        try:
            await host.watch.remote()
        except asyncio.CancelledError:
            raise
        except Exception:  # its process died (or we killed it)
            pass
        self._watchers.pop(host, None)
        if not self._stopping and any(h == host for h in self._all_hosts()):
            await self._host_died(host)

    async def _host_died(self, host) -> None:
        """A replica host died on its own: only its replicas are down. Start it again and
        tell the controller, whose LeaderAndIsr reopens them from their files as after a
        crash, with leadership moved off them and a place outside the ISR until they catch
        up (``ControllerState.replicas_failed``)."""
        async with self._lock:
            lost = sorted(tp for tp, h in self.replicas.items() if h == host)
            for tp in lost:
                del self.replicas[tp]
            self.state.host_died(lost)
            index = next((i for i, h in enumerate(self.hosts) if h == host), None)
            if index is not None:
                try:
                    self.hosts[index] = await self._start_host(
                        replica_host_name(self.broker_id, index))
                except Exception as e:   # its replicas would stay down: start all again
                    log.critical("broker %d: could not start a replica host again (%r); "
                                 "exiting to be started again", self.broker_id, e)
                    self._exit_process()
            for tp in [tp for tp, h in self.dedicated.items() if h == host]:
                del self.dedicated[tp]  # started again when its replica reopens
            self.host_restarts += 1
        log.warning("broker %d: a replica host died holding %d replicas; started it again",
                    self.broker_id, len(lost))
        backoff_s = self.cfg.broker["replica.fetch.backoff.ms"] / 1000
        while lost and not self._stopping:
            try:
                controller = await self._ensure_controller()
                await asyncio.wait_for(controller.replicas_failed.remote(
                    self.broker_id, [list(tp) for tp in lost]), self._session_s())
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("broker %d: could not report failed replicas yet: %r",
                         self.broker_id, e)
                await asyncio.sleep(backoff_s)

    async def replica_host(self, topic: str, partition: int):
        """The actor handle of the host holding this broker's replica of topic-partition,
        or None when it holds none (``actors.replica.locate``)."""
        return self.replicas.get(TopicPartition(topic, partition))

    async def replica_hosts(self, tps: list[tuple[str, int]]) -> list:
        """``replica_host`` for many partitions in one call (a client locating many
        leaders at once): a host handle or None each, in order."""
        return [self.replicas.get(TopicPartition(t, p)) for t, p in tps]

    async def wait_ready(self) -> int:
        await self.ready.wait()
        return self.broker_id

    # ---- controller requests ---------------------------------------------------------------
    async def apply_controller_messages(self, batch: bytes) -> bytes:
        """LeaderAndIsr / StopReplica / UpdateMetadata from the controller, in order; a batch
        from an older controller epoch is refused whole with STALE_CONTROLLER_EPOCH."""
        messages = decode(batch)
        self.controller_batches += 1
        self.controller_requests.update({type(m).__name__ for m in messages})
        async with self._lock:
            try:
                work = self.state.on_controller_batch(
                    messages, lambda: {tp.topic for tp in self.replicas})
            except StaleControllerEpochError as e:
                return encode(e)
            if self.state.caught_up:
                self._caught_up.set()
            if work.changed_configs:
                await self._alter_topic_configs(work.changed_configs)
            errors = await self._become(work.leader_and_isr) if work.leader_and_isr else []
            if work.stops:
                await self._stop_replicas(work.stops)
            return encode(errors)

    def _by_host(self, tps) -> dict[Any, list]:
        """Topic-partitions (or messages naming them) grouped by the host holding each."""
        groups: dict[Any, list] = {}
        for item in tps:
            host = self.replicas.get(TopicPartition(item.topic, item.partition))
            if host is not None:
                groups.setdefault(host, []).append(item)
        return groups

    async def _alter_topic_configs(self, changed: list[tuple[str, dict]]) -> None:
        # One call per host: it applies the topic's new config to every replica it holds.
        await asyncio.gather(*[host.alter_topic_config.remote(topic, config)
                               for topic, config in changed for host in self._all_hosts()])

    async def _become(self, messages: list[LeaderAndIsr]) -> list[KafkaError]:
        """LeaderAndIsr for many partitions: the replicas not open here yet are opened, and
        each host gets its share in one call, in the controller's order."""
        await self._open_replicas({TopicPartition(m.topic, m.partition) for m in messages})
        by_host = self._by_host(messages)
        answers = await asyncio.gather(*[host.become_many.remote(encode(share))
                                         for host, share in by_host.items()])
        errors: list[KafkaError] = []
        applied: list[LeaderAndIsr] = []
        for share, answer in zip(by_host.values(), answers):
            for m, error in zip(share, decode(answer)):
                if error is not None:
                    errors.append(error)
                else:
                    applied.append(m)
        for partition, epoch in self.state.coordinator_changes(applied):
            coordinator = await self._group_coordinator()
            if epoch is not None:
                await coordinator.on_election.remote(partition, epoch)
            else:
                await coordinator.on_resignation.remote(partition)
        return errors

    async def _group_coordinator(self):
        """This broker's group coordinator, started the first time it is needed (a broker
        that never leads a __consumer_offsets partition never runs one)."""
        if self._coordinator is None:
            self._coordinator = await create_named(
                GroupCoordinatorActor, coordinator_name(self.broker_id), self.namespace,
                self.namespace, self.broker_id, self.cfg.broker, self.timer)
        return self._coordinator

    async def find_coordinator(self, group_id: str) -> bytes:
        """FindCoordinator: the broker id hosting the group's coordinator, creating
        ``__consumer_offsets`` on first use (COORDINATOR_NOT_AVAILABLE until it has a
        leader, as in Kafka)."""
        b = self.cfg.broker
        partitions = self.state.image.get("topics", {}).get(OFFSETS_TOPIC)
        if not partitions:
            try:
                controller = await self._ensure_controller()
                answer = decode(await controller.create_topic.remote(
                    OFFSETS_TOPIC, b["offsets.topic.num.partitions"],
                    b["offsets.topic.replication.factor"],
                    {"cleanup.policy": "compact",
                     "segment.bytes": b["offsets.topic.segment.bytes"]}, None))
            except Exception as e:
                answer = e
            if isinstance(answer, BaseException) and \
                    not isinstance(answer, TopicAlreadyExistsError):
                return encode(CoordinatorNotAvailableError(
                    f"Could not create {OFFSETS_TOPIC}: {answer}"))
            return encode(CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} is being created"))
        partition = offsets_partition_for(group_id, len(partitions))
        leader = partitions[partition]["leader"]
        if leader < 0:
            return encode(CoordinatorNotAvailableError(
                f"{OFFSETS_TOPIC}-{partition} has no leader"))
        return encode(leader)

    def _config(self, topic: str) -> dict:
        return dict(self.state.image.get("configs", {}).get(topic, {}))

    async def _open_replicas(self, tps: set[TopicPartition]) -> None:
        """Open this broker's replicas of ``tps`` that are not open yet, one call per host:
        a shared host by the placement rule, or a host of its own for a topic with
        ``replica.placement=dedicated``."""
        todo = self.state.replicas_to_open(tps, self.replicas)
        dedicated = [tp for tp, _ in todo if tp not in self.dedicated
                     and self._config(tp.topic).get("replica.placement") == "dedicated"]
        started = await asyncio.gather(*[
            self._start_host(dedicated_host_name(tp.topic, tp.partition, self.broker_id))
            for tp in dedicated])
        self.dedicated.update(zip(dedicated, started))
        by_host: dict[Any, list] = {}
        for tp, clean in todo:
            host = self.dedicated.get(tp) or self.hosts[host_index(tp.topic, tp.partition,
                                                                   len(self.hosts))]
            by_host.setdefault(host, []).append((
                tp.topic, tp.partition, str(self.dir / partition_dir_name(tp.topic, tp.partition)),
                self._config(tp.topic), self.checkpoints["recovery"].get(tp, 0),
                self.checkpoints["start"].get(tp, 0), self.checkpoints["hw"].get(tp), clean,
                self.state.image.get("topic_ids", {}).get(tp.topic)))
        await asyncio.gather(*[host.open_many.remote(specs) for host, specs in by_host.items()])
        for host, specs in by_host.items():
            for topic, partition, *_ in specs:
                self.replicas[TopicPartition(topic, partition)] = host
        self.state.opened(tp for tp, _ in todo)

    async def _stop_replicas(self, stops: list[StopReplica]) -> None:
        by_host = self._by_host(stops)
        for m in stops:
            tp = TopicPartition(m.topic, m.partition)
            self.replicas.pop(tp, None)
            if tp.topic == OFFSETS_TOPIC and self._coordinator is not None:
                await self._coordinator.on_resignation.remote(tp.partition)
        answers = await asyncio.gather(*[
            host.stop_many.remote([(m.topic, m.partition, m.delete_partition) for m in share])
            for host, share in by_host.items()])
        for m in stops:  # a dedicated host goes with its replica
            host = self.dedicated.pop(TopicPartition(m.topic, m.partition), None)
            if host is not None:
                ray.kill(host, no_restart=True)
        self._remember_all(answers)
        deleted = [TopicPartition(m.topic, m.partition) for m in stops if m.delete_partition]
        for tp in deleted:
            for offsets in self.checkpoints.values():
                offsets.pop(tp, None)
        if deleted:
            self._write_checkpoints()
            # A replica that was never opened here still may have left a directory.
            await asyncio.to_thread(self._remove_dirs, deleted)

    def _remove_dirs(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            shutil.rmtree(self.dir / partition_dir_name(tp.topic, tp.partition),
                          ignore_errors=True)

    # ---- scheduled work (called by the timer actor) ----------------------------------------
    def _remember(self, tp: TopicPartition, state) -> None:
        hw, recovery, start = state
        self.checkpoints["hw"][tp] = hw
        self.checkpoints["recovery"][tp] = recovery
        self.checkpoints["start"][tp] = start

    def _write_checkpoints(self) -> None:
        try:
            for key, f in self._files.items():
                f.write(self.checkpoints[key])
        except OSError as e:
            self._halt_for_log_dir(str(self.dir), f"Error while writing checkpoints: {e}")

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
        await self._save_checkpoints(lambda host: host.checkpoint_states.remote())

    async def _save_checkpoints(self, call) -> None:
        """Write the checkpoint files from what every host answers ``call(host)`` with:
        (topic, partition, checkpoint triple) lists."""
        answers = await asyncio.gather(*[call(h) for h in self._all_hosts()],
                                       return_exceptions=True)
        self._remember_all(answers)
        self._write_checkpoints()

    def _remember_all(self, answers: list) -> None:
        """Hosts' answers of (topic, partition, checkpoint triple or None) lists; a host
        that failed to answer (an exception) leaves its last checkpoints in place."""
        for answer in answers:
            if not isinstance(answer, BaseException):
                for topic, partition, state in answer:
                    if state is not None:
                        self._remember(TopicPartition(topic, partition), state)

    async def log_maintenance(self) -> None:
        """log.retention.check.interval.ms: retention, delayed deletions, flush, cleaning."""
        await asyncio.gather(*[h.background.remote() for h in self._all_hosts()],
                             return_exceptions=True)

    async def isr_expiry(self) -> None:
        await asyncio.gather(*[h.isr_expiry.remote() for h in self._all_hosts()],
                             return_exceptions=True)

    async def _auto_create_topic(self, name: str) -> KafkaError | None:
        """Kafka's auto.create.topics.enable: a Metadata request naming a topic that does not
        exist creates it with the cluster's num.partitions and default.replication.factor."""
        try:
            controller = await self._ensure_controller()
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

    # ---- queries ---------------------------------------------------------------------------
    async def metadata(self) -> bytes:
        return encode(self.state.image)

    async def describe(self) -> dict:
        return {"broker_id": self.broker_id, "incarnation": self.incarnation,
                "controller_epoch": self.state.controller_epoch, "pid": os.getpid(),
                "boot_step": self.boot_step, "controller_channel": self.channel.snapshot(),
                "gcs_calls": gcs_backlog(),
                "node_id": ray.get_runtime_context().get_node_id(),
                "replica_hosts": len(self.hosts), "dedicated_hosts": len(self.dedicated),
                "host_restarts": self.host_restarts,
                "controller_batches": self.controller_batches,
                "controller_requests": dict(self.controller_requests),
                "endpoints": self.endpoints,
                "kafka_connections": self.socket_server.connection_count,
                "kafka_requests_processed": self.socket_server.processing,
                "kafka_connections_closed": dict(self.socket_server.closed_for),
                "replicas": sorted(f"{tp.topic}-{tp.partition}" for tp in self.replicas)}

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
                    controller = await asyncio.wait_for(self._ensure_controller(),
                                                        self._session_s())
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
        for task in (self._heartbeat_task, self._timer_tasks):
            if task is not None:
                task.cancel()
        async with self._lock:
            hosts = self._all_hosts()
            await self._save_checkpoints(lambda host: host.stop_all.remote())
            (self.dir / CLEAN_SHUTDOWN_FILE).touch()
            if controlled and self._controller is not None:
                try:
                    await asyncio.wait_for(
                        self._controller.broker_failed.remote(self.broker_id), 5)
                except Exception:
                    pass
            for h in hosts:
                ray.kill(h, no_restart=True)
            self.hosts, self.dedicated = [], {}
            self.replicas.clear()
            if self._coordinator is not None:
                ray.kill(self._coordinator, no_restart=True)
                self._coordinator = None
