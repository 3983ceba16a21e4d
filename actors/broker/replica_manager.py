"""The broker's replicas (Kafka's ReplicaManager role): the replica hosts it runs on its node
(``ReplicaHostActor``, ``num.replica.hosts`` shared ones plus one per partition of a topic
with ``replica.placement=dedicated``), which host holds each replica, the controller's
LeaderAndIsr and StopReplica routed to them (each host its share in one call), a host that
dies started again, and the log directory's checkpoint files written from what the hosts
answer.

The broker actor owns one, and runs the controller's batches, a host's death and its own
shutdown one at a time under ``lock``.
"""
from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Any, Awaitable, Callable, NoReturn

import ray

from actors.broker.client_quota_manager import usage_elsewhere
from actors.broker.config import ClusterConfig
from actors.broker.state import BrokerState
from actors.gcs import create_named
from actors.names import dedicated_host_name, replica_host_name
from actors.replica.replica_host import ReplicaHostActor
from actors.replica.placement import default_num_replica_hosts, host_index
from protocols.errors import KafkaError
from protocols.messages import LeaderAndIsr, StopReplica
from protocols.topics import TopicPartition, partition_dir_name
from protocols.wire import decode, encode
from storage.checkpoint import OffsetCheckpointFile
from storage.log_manager import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                                 REPLICATION_OFFSET_CHECKPOINT)

log = logging.getLogger(__name__)

# A replica host not answering this long after it was created is given up (Ray's own
# worker_register_timeout_seconds is 60 s too): the broker exits to be started again.
HOST_START_TIMEOUT_S = 60.0
# A host's answer about its quotas' rates, or to hearing the others': a live host's is
# immediate; a late one is skipped for this window.
QUOTA_USAGE_CALL_S = 1.0


class ReplicaManager:
    def __init__(self, broker_id: int, namespace: str, cfg: ClusterConfig, log_dir: Path,
                 state: BrokerState, brokers_on_node: int, stopping: Callable[[], bool],
                 replicas_failed: Callable[[list[TopicPartition]], Awaitable[None]],
                 halt_for_log_dir: Callable[[str, str], NoReturn],
                 exit_process: Callable[[], NoReturn]):
        self.broker_id = broker_id
        self.namespace = namespace
        self.cfg = cfg
        self.dir = log_dir
        self.state = state     # the broker's decisions (which replicas to open, roles)
        self.brokers_on_node = brokers_on_node
        self.stopping = stopping
        self.replicas_failed = replicas_failed   # tells the controller (BrokerLifecycle)
        self.halt_for_log_dir = halt_for_log_dir
        self.exit_process = exit_process
        self._files = {
            "hw": OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT),
            "recovery": OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT),
            "start": OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT),
        }
        self.checkpoints: dict[str, dict[TopicPartition, int]] = {
            k: f.read() for k, f in self._files.items()}
        self.hosts: list[Any] = []       # the shared hosts, by placement index
        self.dedicated: dict[TopicPartition, Any] = {}  # replica.placement=dedicated
        self._watchers: dict[Any, asyncio.Task] = {}  # strong refs: the loop keeps weak ones
        self.host_restarts = 0
        self._host_starts: dict[str, int] = {}  # by base name: how many times started
        self._host_generation: dict[Any, int] = {}  # each host's start of its base name
        # Which host holds each replica open on this broker.
        self.replicas: dict[TopicPartition, Any] = {}
        self.lock = asyncio.Lock()
        self._sent_acls: list | None = None   # what send_guards last sent every host
        self._sent_quotas: list | None = None   # and the client quotas

    def host_of(self, topic: str, partition: int):
        """The host holding this broker's replica of topic-partition, None if none."""
        return self.replicas.get(TopicPartition(topic, partition))

    def replica_epoch(self, host) -> int:
        """What ``host``'s fetches name as their replica epoch: larger for every later
        registration of this broker and, within one, for every later start of the host
        (a host started again keeps its broker's registration). -1 before the controller
        named the registration."""
        epoch = self.state.broker_epoch
        return -1 if epoch < 0 else (epoch << 16) | self._host_generation.get(host, 0)

    def all_hosts(self) -> list[Any]:
        return self.hosts + list(self.dedicated.values())

    # ---- hosts -----------------------------------------------------------------------------
    def _num_hosts(self) -> int:
        configured = self.cfg.broker["num.replica.hosts"]
        if configured > 0:
            return configured
        node_id = ray.get_runtime_context().get_node_id()
        cpus = next((n["Resources"].get("CPU", 1) for n in ray.nodes()
                     if n["NodeID"] == node_id), 1)
        return default_num_replica_hosts(cpus, self.brokers_on_node)

    async def start_hosts(self) -> None:
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
        self._host_generation[host] = restarts
        try:
            await asyncio.wait_for(host.num_replicas.remote(), HOST_START_TIMEOUT_S)
            # What the host checks Ray door clients against, until the next change.
            await host.set_acls.remote(self._acls())
            await host.set_client_quotas.remote(self._client_quotas())
        except asyncio.TimeoutError:
            ray.kill(host, no_restart=True)
            raise TimeoutError(
                f"broker {self.broker_id}: replica host {name} did not start within "
                f"{HOST_START_TIMEOUT_S:.0f} s") from None
        self._watchers[host] = asyncio.get_running_loop().create_task(self._watch_host(host))
        return host

    async def _watch_host(self, host) -> None:
        try:
            await host.watch.remote()
        except asyncio.CancelledError:
            raise
        except Exception:  # its process died (or we killed it)
            pass
        self._watchers.pop(host, None)
        self._host_generation.pop(host, None)
        if not self.stopping() and any(h == host for h in self.all_hosts()):
            await self._host_died(host)

    async def _host_died(self, host) -> None:
        """A replica host died on its own: only its replicas are down. Start it again and
        tell the controller, whose LeaderAndIsr reopens them from their files as after a
        crash, with leadership moved off them and a place outside the ISR until they catch
        up (``ControllerState.replicas_failed``)."""
        async with self.lock:
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
                    self.exit_process()
            for tp in [tp for tp, h in self.dedicated.items() if h == host]:
                del self.dedicated[tp]  # started again when its replica reopens
            self.host_restarts += 1
        log.warning("broker %d: a replica host died holding %d replicas; started it again",
                    self.broker_id, len(lost))
        if lost:
            await self.replicas_failed(lost)

    def kill_hosts(self) -> None:
        """Every host killed (the broker is stopping), and no replica held any more."""
        for h in self.all_hosts():
            ray.kill(h, no_restart=True)
        self.hosts, self.dedicated = [], {}
        self.replicas.clear()

    # ---- the controller's requests ---------------------------------------------------------
    def _by_host(self, tps) -> dict[Any, list]:
        """Topic-partitions (or messages naming them) grouped by the host holding each."""
        groups: dict[Any, list] = {}
        for item in tps:
            host = self.replicas.get(TopicPartition(item.topic, item.partition))
            if host is not None:
                groups.setdefault(host, []).append(item)
        return groups

    async def alter_topic_configs(self, changed: list[tuple[str, dict]]) -> None:
        # One call per host: it applies the topic's new config to every replica it holds.
        await asyncio.gather(*[host.alter_topic_config.remote(topic, config)
                               for topic, config in changed for host in self.all_hosts()])

    async def become(self, messages: list[LeaderAndIsr]
                     ) -> tuple[list[KafkaError], list[LeaderAndIsr]]:
        """LeaderAndIsr for many partitions: the replicas not open here yet are opened, and
        each host gets its share in one call, in the controller's order. Returns the errors
        and the messages applied."""
        await self._open_replicas({TopicPartition(m.topic, m.partition) for m in messages})
        by_host = self._by_host(messages)
        answers = await asyncio.gather(*[host.become_many.remote(encode(share),
                                                                 self.replica_epoch(host))
                                         for host, share in by_host.items()])
        errors: list[KafkaError] = []
        applied: list[LeaderAndIsr] = []
        for share, answer in zip(by_host.values(), answers):
            for m, error in zip(share, decode(answer)):
                if error is not None:
                    errors.append(error)
                else:
                    applied.append(m)
        return errors, applied

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

    async def stop_replicas(self, stops: list[StopReplica]) -> None:
        by_host = self._by_host(stops)
        for m in stops:
            self.replicas.pop(TopicPartition(m.topic, m.partition), None)
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

    # ---- checkpoints and the hosts' scheduled work -----------------------------------------
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
            self.halt_for_log_dir(str(self.dir), f"Error while writing checkpoints: {e}")

    async def save_checkpoints(self, call) -> None:
        """Write the checkpoint files from what every host answers ``call(host)`` with:
        (topic, partition, checkpoint triple) lists."""
        answers = await asyncio.gather(*[call(h) for h in self.all_hosts()],
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

    def _acls(self) -> list:
        return list(self.state.image.get("acls") or [])

    def _client_quotas(self) -> list:
        return list(self.state.image.get("client_quotas") or [])

    async def share_quota_usage(self) -> None:
        """Tell each host what the others measured of the client quotas' rates, so that a
        client sending to several is held to the broker's quota (``actors.replica.
        host_quotas``); every quota window, with quotas set and more than one host."""
        hosts = self.all_hosts()
        if len(hosts) < 2 or not self.state.image.get("client_quotas"):
            return
        usages = await asyncio.gather(*[asyncio.wait_for(
            h.take_quota_usage.remote(), QUOTA_USAGE_CALL_S) for h in hosts],
            return_exceptions=True)
        answered = [(h, u) for h, u in zip(hosts, usages) if not isinstance(u, BaseException)]
        elsewhere = usage_elsewhere([u for _, u in answered])
        await asyncio.gather(*[asyncio.wait_for(
            h.set_quota_usage_elsewhere.remote(e), QUOTA_USAGE_CALL_S)
            for (h, _), e in zip(answered, elsewhere)], return_exceptions=True)

    async def send_guards(self) -> None:
        """The image's ACLs and client quotas to every host, when they differ from what was
        last sent (the hosts check Ray door clients against the ACLs, and hold rafka's
        clients to the quotas): the image's, not a batch's, so that a batch applied again
        after a failure, or a host started meanwhile, misses none."""
        acls = self._acls()
        if acls != self._sent_acls:
            await self.on_every_host(lambda host: host.set_acls.remote(acls))
            self._sent_acls = acls
        quotas = self._client_quotas()
        if quotas != self._sent_quotas:
            await self.on_every_host(lambda host: host.set_client_quotas.remote(quotas))
            self._sent_quotas = quotas

    async def on_every_host(self, call) -> None:
        """``call(host)`` on every host at once; a host that fails is left to its watcher."""
        await asyncio.gather(*[call(h) for h in self.all_hosts()], return_exceptions=True)
