"""ControllerActor: the cluster's one controller, around the pure ``ControllerState``.

A broker becomes controller by creating the actor named ``controller`` in the cluster's
namespace; Ray's named-actor uniqueness plays ZooKeeper's ephemeral ``/controller`` node
(the actor is owned by that broker and dies with it, which frees the name). The state is
checkpointed, with its controller epoch, before any change's messages go out or its caller
is answered (group commits, written off the event loop), to Ray's GCS key-value store and
to ``<data_dir>/__cluster_metadata/`` (so a cluster restarted on a new Ray instance still
finds its topics); a new controller loads it and bumps the epoch. A controller that finds a
newer epoch in the store is a zombie: it stops deciding and exits.

Messages to a broker go through one queue and one sender per broker, in order (Kafka's
ControllerChannelManager); a dead broker's queue is dropped, since it gets the whole state
again when it registers.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterable

import msgpack
import ray

from actors.controller.lease import LEASE_KEY, lease_value, renew_interval_ms, superseded
from actors.controller.messages import queue_batch
from actors.controller.state import ControllerState
from actors.gcs import gcs_backlog, gcs_call, kv_del, kv_get, kv_put, lookup
from actors.names import broker_name
from actors.metrics.exporter import MetricsExporter, report_interval_ms
from actors.metrics.gauges import controller_gauges
from actors.timer.actor import keep_scheduled
from actors.timer.system_timer import AsyncioTimer
from actors.timer.wheel import TimerTask
from protocols.errors import InvalidRequestError, KafkaError
from protocols.messages import AlterPartition
from protocols.wire import decode, encode
from storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_KEY = "rafka/{name}/controller-snapshot"
METADATA_DIR = "__cluster_metadata"


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def load_snapshot(name: str, data_dir: str) -> tuple[dict | None, bool]:
    """The newest checkpoint, and whether it is only on disk (the cluster is starting cold,
    on a Ray instance that never ran it)."""
    raw = kv_get(SNAPSHOT_KEY.format(name=name))
    if raw:
        return msgpack.unpackb(raw, strict_map_key=False), False
    path = Path(data_dir) / METADATA_DIR / "snapshot.msgpack"
    if path.exists():
        return msgpack.unpackb(path.read_bytes(), strict_map_key=False), True
    return None, False


def forget_snapshot(name: str) -> None:
    """After a clean shutdown the next start is cold, from the files."""
    kv_del(SNAPSHOT_KEY.format(name=name))


# How long an admin answer waits for the brokers to be told of its change: a broker that is
# slow or unreachable delays it this much at most (it gets the change when it answers).
ADMIN_PROPAGATION_WAIT_S = 5.0


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=10_000)
class ControllerActor:
    def __init__(self, cluster_name: str, namespace: str, data_dir: str, config: dict,
                 host_broker_id: int):
        self.name = cluster_name
        self.namespace = namespace
        self.data_dir = Path(data_dir)
        self.host_broker_id = host_broker_id
        self.metrics = MetricsExporter(cluster_name, host_broker_id)
        snapshot, cold = load_snapshot(cluster_name, data_dir)
        if snapshot is None:
            self.state = ControllerState(wall_ms, config)
        else:
            snapshot = dict(snapshot)
            snapshot["config"] = {**snapshot["config"], **config}
            self.state = ControllerState.from_snapshot(snapshot, wall_ms)
            if cold:
                self.state.cold_start()
        self.incarnations: dict[int, str] = {
            b: info.incarnation for b, info in self.state.brokers.items() if info.incarnation}
        # Per broker: batches not yet sent, in order; what wakes its sender; the sender.
        self._waiting: dict[int, deque[list]] = {}
        self._wakeups: dict[int, asyncio.Event] = {}
        self._senders: dict[int, asyncio.Task] = {}
        # Per broker: batches queued so far, and handled so far (sent, or given up on a
        # broker that is gone): an admin answer waits until the brokers know the change.
        self._queued: dict[int, int] = {}
        self._handled: dict[int, int] = {}
        self._progress = asyncio.Condition()
        # Group commit (``_apply``): changes made, changes a stored checkpoint holds, the
        # messages of changes not yet stored, the checkpoint being written.
        self._changed = 0
        self._durable = 0
        self._outbox: list[tuple[int, list]] = []
        self._writer: asyncio.Task | None = None
        self._checkpoint()
        log.info("controller %s: epoch %d on broker %d", cluster_name,
                 self.state.controller_epoch, host_broker_id)
        if snapshot is not None and not cold:
            self._dispatch(self.state.full_state())
        # Session expiry: a check due when the earliest broker session runs out, on this
        # actor's own timing wheel (no message, however many brokers heartbeat meanwhile).
        self._session_timer = AsyncioTimer(name="controller-sessions")
        self._session_check: TimerTask | None = None
        self._session_check_due = 0
        self._arm_session_check()
        # Strong references: the event loop keeps only weak ones to its tasks.
        self._background = asyncio.get_running_loop().create_task(self._schedule_background())
        self._lag_watch = asyncio.get_running_loop().create_task(self._watch_loop_lag())
        self._lease = asyncio.get_running_loop().create_task(self._renew_lease())

    # ---- checkpoints and fencing -----------------------------------------------------------
    def _checkpoint(self) -> None:
        """Store the state now (at start, before anything else runs)."""
        if not self._store(self._snapshot_bytes()):
            self._fenced()

    def _snapshot_bytes(self) -> bytes:
        return msgpack.packb(self.state.to_snapshot(), use_bin_type=True)

    def _store(self, data: bytes) -> bool:
        """Write a checkpoint to the GCS and the disk (on the GCS thread once running):
        False, and nothing written, when a newer controller's checkpoint is there."""
        stored = kv_get(SNAPSHOT_KEY.format(name=self.name))
        if stored and msgpack.unpackb(stored, strict_map_key=False)["controller_epoch"] > \
                self.state.controller_epoch:
            return False
        kv_put(SNAPSHOT_KEY.format(name=self.name), data)
        directory = self.data_dir / METADATA_DIR
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(directory / "snapshot.msgpack", data)
        return True

    def _fenced(self) -> None:
        # A successor exists: everything we would decide now is void.
        log.error("controller epoch %d fenced by a newer controller; exiting",
                  self.state.controller_epoch)
        ray.actor.exit_actor()

    async def _write_checkpoint(self) -> None:
        """One group commit: the state as it is now, covering every change made so far, is
        stored off the event loop (heartbeats and metadata are answered meanwhile); then the
        messages of the changes it covers are sent, in the order the changes were made."""
        try:
            covered = self._changed
            data = self._snapshot_bytes()
            while True:
                try:
                    stored = await gcs_call(self._store, data)
                    break
                except Exception as e:  # noqa: BLE001
                    if isinstance(e, OSError) and not isinstance(e, TimeoutError):
                        raise   # the disk: the changes fail, as before
                    # No answer from the GCS in time: the changes are not durable until it
                    # answers, so they wait (a controller cut off from the head commits
                    # nothing, and its lease stands still).
                    log.warning("controller epoch %d: writing the checkpoint failed (%r); "
                                "trying again", self.state.controller_epoch, e)
                    await asyncio.sleep(0.5)
            if not stored:
                self._fenced()
            self._durable = covered
            ready = [msgs for n, msgs in self._outbox if n <= covered]
            self._outbox = [(n, msgs) for n, msgs in self._outbox if n > covered]
            for msgs in ready:
                self._dispatch(msgs)
        finally:
            self._writer = None

    async def _renew_lease(self) -> None:
        """Renew this controller's lease in the GCS (``actors.controller.lease``): brokers
        fence a controller only once its lease stands still. Each write waits for the GCS
        on the process's GCS thread, so a controller cut off from the head renews nothing."""
        key = LEASE_KEY.format(name=self.name)
        interval = renew_interval_ms(self.state.config["broker.session.timeout.ms"]) / 1000
        epoch = self.state.controller_epoch

        def renew(value: bytes) -> bool:
            if superseded(kv_get(key), epoch):
                return False
            kv_put(key, value)
            return True
        renewal = 0
        while True:
            renewal += 1
            try:
                renewed = await gcs_call(renew, lease_value(epoch, renewal))
            except Exception as e:  # noqa: BLE001 - the GCS did not answer in time: next time
                log.warning("controller epoch %d: renewing the lease failed (%r)", epoch, e)
                await asyncio.sleep(interval)
                continue
            if not renewed:
                # A successor exists; this controller exits at its next checkpoint.
                log.error("controller epoch %d: a newer controller's lease is there; "
                          "renewing no more", epoch)
                return
            await asyncio.sleep(interval)

    async def _watch_loop_lag(self) -> None:
        """Say when this actor's event loop was held up for over a second: brokers fence a
        controller that leaves their heartbeats unanswered for a session timeout, and the
        log should then show whether it was busy, and for how long."""
        while True:
            before = time.monotonic()
            await asyncio.sleep(1.0)
            late = time.monotonic() - before - 1.0
            if late > 1.0:
                log.warning("controller: event loop held up for %.1f s", late)

    async def _schedule_background(self) -> None:
        """The auto-rebalance and metrics tasks, on this node's timer actor (scheduled again if it
        restarts; a successor's task replaces ours)."""
        me = ray.get_runtime_context().current_actor
        interval = self.state.config["leader.imbalance.check.interval.seconds"] * 1000
        await keep_scheduled(self.namespace,
                             [("controller:auto_rebalance", interval, me, "auto_rebalance"),
                              ("controller:report_metrics", report_interval_ms(), me,
                               "report_metrics")],
                             lambda: True)

    async def report_metrics(self) -> None:
        """KafkaController's gauges, to Ray's metrics: this actor is the active controller
        for as long as it lives (a fenced one exits)."""
        self.metrics.controller(controller_gauges(
            True, len(self.state.topics),
            ((st.leader, st.replicas) for st in self.state.partitions.values())))

    def _arm_session_check(self) -> None:
        """Have ``check_sessions`` run just after the earliest session deadline, unless a
        check is due before it already (heartbeats only move deadlines later)."""
        deadline = self.state.next_session_expiry_ms()
        if deadline is None:
            return
        if self._session_check is not None:
            if self._session_check_due <= deadline:
                return
            self._session_check.cancel()
        self._session_check_due = deadline
        self._session_check = self._session_timer.schedule(
            max(0, deadline + 1 - wall_ms()), self._start_session_check)

    def _start_session_check(self) -> None:
        # Held: the event loop keeps only weak references to its tasks.
        self._session_checking = asyncio.get_running_loop().create_task(self._sessions_due())

    async def _sessions_due(self) -> None:
        self._session_check = None
        try:
            await self.check_sessions()
        finally:
            self._arm_session_check()

    async def _apply(self, change, quiet_is_no_change: bool = False) -> Any:
        """Make one state change, and once a checkpoint holds it, send what it produced and
        answer. ``change`` returns the messages, or (messages, result). With
        ``quiet_is_no_change`` (periodic checks), a change that sends nothing changed nothing
        to checkpoint.

        Checkpoints are group commits: a change made while one is being written waits for
        the next, which covers every change made meanwhile (Kafka's controller appends its
        records in batches too). One checkpoint per change, each a whole snapshot written
        on the event loop, blocked it for seconds under a burst of AlterPartitions at 1,000
        partitions, long enough for the brokers to fence it."""
        out = change()   # synchronous: changes are made one at a time, in arrival order
        msgs, result = out if isinstance(out, tuple) else (out, None)
        if not msgs and quiet_is_no_change:
            return result
        self._changed += 1
        mine = self._changed
        self._outbox.append((mine, msgs))
        while self._durable < mine:
            if self._writer is None:
                self._writer = asyncio.get_running_loop().create_task(self._write_checkpoint())
            await asyncio.shield(self._writer)
        return result

    def _dispatch(self, messages: Iterable) -> None:
        by_broker: dict[int, list] = {}
        for m in messages:
            by_broker.setdefault(m.broker_id, []).append(m)
        for b, batch in by_broker.items():
            waiting = self._waiting.get(b)
            if waiting is None:
                waiting = self._waiting[b] = deque()
                self._wakeups[b] = asyncio.Event()
                self._senders[b] = asyncio.get_running_loop().create_task(self._sender(b))
            queue_batch(waiting, batch)
            self._queued[b] = self._queued.get(b, 0) + 1
            self._wakeups[b].set()

    async def _sender(self, broker_id: int) -> None:
        waiting, wakeup = self._waiting[broker_id], self._wakeups[broker_id]
        handle = None
        while True:
            if not waiting:
                wakeup.clear()
                await wakeup.wait()
                continue
            batch = waiting.popleft()
            try:
                if batch:
                    handle = await self._send_batch(broker_id, handle, batch)
            finally:
                self._handled[broker_id] = self._handled.get(broker_id, 0) + 1
                async with self._progress:
                    self._progress.notify_all()

    async def _send_batch(self, broker_id: int, handle, batch: list):
        """One batch to the broker (its handle looked up afresh once if it fails); the
        handle to use next."""
        for attempt in range(2):
            try:
                if handle is None:
                    handle = await lookup(broker_name(broker_id), self.namespace)
                    if handle is None:
                        raise LookupError(f"no broker {broker_id} at the moment")
                info = self.state.brokers.get(broker_id)
                await handle.apply_controller_messages.remote(
                    encode(batch), -1 if info is None else info.broker_epoch)
                break
            except Exception as e:
                # The handle may be to the broker's previous actor (stopped, then started
                # again): look the name up afresh once. A broker really gone registers
                # again later and then gets the whole state.
                handle = None
                info = self.state.brokers.get(broker_id)
                if attempt or info is None or not info.alive:
                    log.info("controller: broker %d unreachable (%r)", broker_id, e)
                    self.state.delivery_failed(broker_id)
                    break
        return handle

    async def _brokers_told(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until every live broker has been sent what was
        queued for it so far: an admin change is answered once the brokers' metadata holds
        it, so a client asking any broker next sees it (Kafka's CreateTopics waits for the
        metadata to propagate the same way)."""
        target = dict(self._queued)
        live = set(self.state.live_brokers())

        def told() -> bool:
            return all(self._handled.get(b, 0) >= n for b, n in target.items() if b in live)
        try:
            async with self._progress:
                await asyncio.wait_for(self._progress.wait_for(told), timeout_s)
        except asyncio.TimeoutError:
            log.info("controller: brokers not all told of an admin change within %.1f s",
                     timeout_s)

    # ---- brokers ---------------------------------------------------------------------------
    async def register_broker(self, broker_id: int, incarnation: str,
                              rack: str | None = None, endpoints: list | None = None) -> int:
        """A broker (re)joins. A new incarnation of a broker we think alive restarted: its
        replicas lost their state, so it first fails, then joins."""
        def change():
            msgs = []
            info = self.state.brokers.get(broker_id)
            if info is not None and info.alive and self.incarnations.get(broker_id) not in (
                    None, incarnation):
                msgs += self.state.broker_failed(broker_id)
            self.incarnations[broker_id] = incarnation
            msgs += self.state.register_broker(broker_id, rack, incarnation=incarnation,
                                               endpoints=endpoints)
            return msgs, self.state.controller_epoch
        try:
            return await self._apply(change)
        finally:
            self._arm_session_check()

    async def heartbeat(self, broker_id: int, incarnation: str) -> tuple[int, bool]:
        """(controller epoch, whether the broker must register again)."""
        if self.incarnations.get(broker_id) != incarnation:
            return self.state.controller_epoch, True
        try:
            lost_messages = self.state.heartbeat(broker_id)
        except InvalidRequestError:  # fenced after missed heartbeats
            return self.state.controller_epoch, True
        return self.state.controller_epoch, lost_messages

    async def check_sessions(self) -> None:
        await self._apply(self.state.expire_sessions, quiet_is_no_change=True)

    async def broker_failed(self, broker_id: int) -> None:
        await self._apply(lambda: self.state.broker_failed(broker_id))

    async def replicas_failed(self, broker_id: int, partitions: list) -> None:
        """A broker's replica host died and is back: see ``ControllerState.replicas_failed``."""
        await self._apply(lambda: self.state.replicas_failed(broker_id, partitions))

    async def controlled_shutdown(self, broker_id: int) -> list:
        """Move leadership off the broker; answer the partitions it still leads."""
        def change():
            msgs = self.state.controlled_shutdown(broker_id)
            still = [list(tp) for tp, st in self.state.partitions.items()
                     if st.leader == broker_id]
            return msgs, still
        return await self._apply(change)

    async def alter_partition(self, proposal: bytes) -> bytes:
        p: AlterPartition = decode(proposal)

        def change():
            try:
                msgs = self.state.alter_partition(p.topic, p.partition, p.leader_id,
                                                  p.leader_epoch, p.partition_epoch,
                                                  p.new_isr)
            except KafkaError as e:
                return [], encode(e)
            st = self.state.partitions[(p.topic, p.partition)]
            return msgs, encode((tuple(st.isr), st.partition_epoch))
        return await self._apply(change)

    async def init_producer_id(self) -> tuple[int, int]:
        """(producer id, producer epoch) for an idempotent producer."""
        return await self._apply(lambda: ([], (self.state.allocate_producer_ids(), 0)))

    async def allocate_producer_ids(self, count: int) -> int:
        """The first of a block of ``count`` producer ids, for a transaction coordinator."""
        return await self._apply(lambda: ([], self.state.allocate_producer_ids(count)))

    async def auto_rebalance(self) -> None:
        if self.state.config["auto.leader.rebalance.enable"]:
            await self._apply(self.state.auto_rebalance_check, quiet_is_no_change=True)

    # ---- admin -----------------------------------------------------------------------------
    async def _admin(self, change) -> bytes:
        try:
            result = await self._apply(change)
        except KafkaError as e:
            return encode(e)
        await self._brokers_told(ADMIN_PROPAGATION_WAIT_S)
        return encode(result)

    async def create_topic(self, name: str, num_partitions: int | None,
                           replication_factor: int | None, config: dict | None,
                           assignment: dict | None) -> bytes:
        def change():
            msgs = self.state.create_topic(
                name, num_partitions, replication_factor, config,
                {int(p): list(r) for p, r in assignment.items()} if assignment else None)
            return msgs, None
        return await self._admin(change)

    async def delete_topic(self, name: str) -> bytes:
        return await self._admin(lambda: (self.state.delete_topic(name), None))

    async def create_partitions(self, name: str, total: int,
                                assignment: list | None = None) -> bytes:
        return await self._admin(
            lambda: (self.state.create_partitions(name, total, assignment), None))

    async def reassign_partitions(self, targets: dict) -> bytes:
        return await self._admin(lambda: (self.state.reassign_partitions(
            {tuple(tp): list(r) for tp, r in targets.items()}), None))

    async def cancel_reassignment(self, topic: str, partition: int) -> bytes:
        return await self._admin(
            lambda: (self.state.cancel_reassignment((topic, partition)), None))

    async def list_reassignments(self, partitions: list | None = None) -> bytes:
        return encode(self.state.ongoing_reassignments(partitions))

    async def elect_preferred_leaders(self, partitions: list | None = None) -> bytes:
        tps = [tuple(tp) for tp in partitions] if partitions is not None else None
        return await self._admin(lambda: (self.state.elect_preferred_leaders(tps), None))

    async def alter_topic_config(self, name: str, config: dict) -> bytes:
        return await self._admin(lambda: (self.state.alter_topic_config(name, config), None))

    async def alter_user_scram_credentials(self, deletions: list, upsertions: list) -> bytes:
        """[(user, error or None)] for each user named (Kafka's AlterUserScramCredentials)."""
        return await self._admin(lambda: self.state.alter_user_scram_credentials(
            [tuple(d) for d in deletions], [tuple(u) for u in upsertions]))

    async def alter_client_quotas(self, alterations: list, validate_only: bool) -> bytes:
        """[(entity, error or None)] for each entity (Kafka's AlterClientQuotas)."""
        return await self._admin(lambda: self.state.alter_client_quotas(
            alterations, validate_only))

    async def create_acls(self, creations: list) -> bytes:
        """An error or None per creation (Kafka's CreateAcls)."""
        return await self._admin(lambda: self.state.create_acls(creations))

    async def delete_acls(self, filters: list) -> bytes:
        """Per filter the ACLs it removed, or its error (Kafka's DeleteAcls)."""
        return await self._admin(lambda: self.state.delete_acls(filters))

    async def metadata(self) -> bytes:
        image = self.state.metadata_image()
        image["controller_id"] = self.host_broker_id
        image["topic_configs"] = {n: dict(c) for n, c in self.state.topics.items()}
        return encode(image)

    async def describe_topic(self, name: str) -> bytes:
        try:
            return encode(self.state.describe_topic(name))
        except KafkaError as e:
            return encode(e)

    async def leader_imbalance(self) -> dict:
        return self.state.leader_imbalance()

    async def pid(self) -> int:
        return os.getpid()

    async def ping(self) -> tuple[int, int]:
        return self.state.controller_epoch, self.host_broker_id

    async def status(self) -> dict:
        """What the controller is doing (why a broker is not back is read here and in the
        broker's describe()): the brokers it knows, the changes not yet checkpointed, the
        batches waiting per broker, and its GCS calls."""
        return {"controller_epoch": self.state.controller_epoch,
                "host_broker": self.host_broker_id,
                "brokers": {b: {"alive": i.alive, "incarnation": i.incarnation}
                            for b, i in sorted(self.state.brokers.items())},
                "changes": self._changed, "durable": self._durable,
                "writing": self._writer is not None,
                "waiting_batches": {b: len(q) for b, q in self._waiting.items()},
                "gcs_calls": gcs_backlog()}
