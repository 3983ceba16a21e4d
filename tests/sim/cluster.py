"""A deterministic, seeded simulator of one replicated partition.

Three brokers hold replicas on real log directories; a minimal controller elects leaders
from the live ISR and accepts AlterPartition proposals fenced by leader and partition epoch;
producers (acks=all and acks=1) and consumers run against the leader. A seeded schedule
interleaves produces, follower fetches (whose responses may be lost), consumer fetches,
ISR checks, clock advances, broker crashes (the process dies: what was written survives,
nothing else) and restarts. After every step the invariants of ARCHITECTURE.md are checked;
a violation raises ``InvariantViolation`` naming the seed and step, for replay with
``python -m tests.sim.run --seed N``.
"""
from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from actors.controller.messages import LeaderAndIsr, check_controller_epoch
from actors.controller.state import ControllerState
from actors.replica.partition import (FetchRequest, PartitionReplica, ReplicaConfig, Role)
from actors.timer.system_timer import SystemTimer
from protocols.errors import KafkaError, StaleControllerEpochError
from protocols.records import Record, encode_batch, iter_batches
from storage import Log

TOPIC = "sim"


class InvariantViolation(AssertionError):
    pass


class Clock:
    def __init__(self):
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


class Simulation:
    def __init__(self, seed: int, root: Path | None = None, *, brokers: int = 3,
                 epochs: bool = True, steps: int = 150):
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix=f"rafka-sim-{seed}-")) if root is None else root
        self.clock = Clock()
        self.timer = SystemTimer(self.clock)
        self.config = ReplicaConfig(replica_lag_time_max_ms=2_000,
                                    leader_epoch_truncation=epochs)
        self.log_config = {"min.insync.replicas": 2, "segment.bytes": 4096}
        self.broker_ids = list(range(brokers))
        self.up: dict[int, PartitionReplica] = {}
        self.hw_checkpoint: dict[int, int] = {}
        self.controller = ControllerState(self.clock, {"broker.session.timeout.ms": 10**9},
                                          rng=random.Random(seed))
        self.zombie: ControllerState | None = None  # a replaced controller that still talks
        self.known_controller_epoch: dict[int, int] = {}
        self.leaders_by_epoch: dict[int, int] = {}
        self.acked: dict[int, bytes] = {}
        self.counter = 0
        self.step_no = 0
        self.trace: list[str] = []
        self._leader_hw: tuple[int, int] = (-1, -1)
        self.in_flight: list[tuple[int, object]] = []  # delayed fetch responses per follower
        for b in self.broker_ids:
            self._start(b)
            self._apply(self.controller.register_broker(b))
        self._apply(self.controller.create_topic(TOPIC, assignment={0: list(self.broker_ids)}))

    # ---- plumbing --------------------------------------------------------------------------
    def close(self) -> None:
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def _start(self, b: int) -> PartitionReplica:
        log = Log.open(self.root / f"broker-{b}" / f"{TOPIC}-0", self.log_config,
                       clock=self.clock, high_watermark=self.hw_checkpoint.get(b, 0))
        replica = PartitionReplica(
            TOPIC, 0, b, log, clock=self.clock, timer=self.timer, config=self.config,
            on_high_watermark=lambda hw, b=b: self.hw_checkpoint.__setitem__(b, hw))
        self.up[b] = replica
        return replica

    def _apply(self, messages) -> None:
        """Deliver controller messages; brokers refuse those of an older controller."""
        for m in messages:
            replica = self.up.get(m.broker_id)
            if replica is None:
                continue
            try:
                check_controller_epoch(self.known_controller_epoch.get(m.broker_id, 0),
                                       m.controller_epoch)
            except StaleControllerEpochError:
                continue
            self.known_controller_epoch[m.broker_id] = m.controller_epoch
            if not isinstance(m, LeaderAndIsr):
                continue
            if m.leader >= 0:
                seen = self.leaders_by_epoch.setdefault(m.leader_epoch, m.leader)
                if seen != m.leader:
                    self._fail(f"leaders {seen} and {m.leader} in epoch {m.leader_epoch}")
            if m.leader == m.broker_id:
                replica.become_leader(m.leader_epoch, m.partition_epoch, list(m.isr),
                                      list(m.replicas))
            elif m.leader >= 0:
                replica.become_follower(m.leader, m.leader_epoch, m.partition_epoch,
                                        list(m.replicas), list(m.isr))
            else:
                replica.make_offline()

    @property
    def _state(self):
        return self.controller.partitions[(TOPIC, 0)]

    def _leader(self) -> PartitionReplica | None:
        r = self.up.get(self._state.leader)
        return r if r is not None and r.role is Role.LEADER else None

    def _alter_partition(self, leader: PartitionReplica) -> None:
        proposal = leader.take_alter_partition()
        if proposal is None:
            return
        try:
            messages = self.controller.alter_partition(
                proposal.topic, proposal.partition, proposal.leader_id, proposal.leader_epoch,
                proposal.partition_epoch, proposal.new_isr)
        except KafkaError as e:
            leader.on_alter_partition_result(None, self._state.partition_epoch, e)
            return
        leader.on_alter_partition_result(list(self._state.isr), self._state.partition_epoch)
        self._apply(messages)

    def _fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.seed} step {self.step_no}: {what}\n  trace: "
                                 + " | ".join(self.trace[-12:]))

    # ---- actions ---------------------------------------------------------------------------
    def produce(self, acks: int) -> None:
        leader = self._leader()
        if leader is None:
            return
        self.counter += 1
        value = f"r{self.counter}".encode()
        data = encode_batch([Record(None, value, self.clock())])

        def done(result, value=value, acks=acks):
            if result.error is None and acks == -1:
                if result.base_offset in self.acked and self.acked[result.base_offset] != value:
                    self._fail(f"offset {result.base_offset} acknowledged twice")
                self.acked[result.base_offset] = value

        try:
            leader.produce(data, acks=acks, timeout_ms=3_000, on_done=done)
        except KafkaError:
            pass  # NOT_ENOUGH_REPLICAS and friends: the client would retry

    def replicate(self, b: int, lose_response: bool, delay_response: bool = False) -> None:
        follower, leader = self.up.get(b), self._leader()
        if follower is None or leader is None or follower.role is not Role.FOLLOWER:
            return
        try:
            epoch = follower.truncation_request()
            if epoch is not None:
                follower.on_leader_epoch_end_offset(
                    *leader.offsets_for_leader_epoch(epoch, follower.leader_epoch))
                return
            request = dataclasses.replace(follower.fetch_request(), max_wait_ms=0,
                                          max_bytes=self.rng.choice([64, 300, 1 << 20]))
            result = leader.fetch(request)
        except KafkaError:
            return
        self._alter_partition(leader)
        if result is None or lose_response:
            return
        if delay_response:
            self.in_flight.append((b, result))
        else:
            follower.on_fetch_result(result)

    def deliver_late(self) -> None:
        """A delayed response arrives, in any order, possibly after leadership moved."""
        if not self.in_flight:
            return
        b, result = self.in_flight.pop(self.rng.randrange(len(self.in_flight)))
        if b in self.up:
            self.up[b].on_fetch_result(result)

    def consume(self) -> None:
        leader = self._leader()
        if leader is None or leader.high_watermark <= leader.log.log_start_offset:
            return
        hw = leader.high_watermark
        offset = self.rng.randrange(leader.log.log_start_offset, hw + 1)
        result = leader.fetch(FetchRequest(-1, offset, leader.leader_epoch))
        for batch in iter_batches(result.records):
            if batch.last_offset >= hw:
                self._fail(f"a consumer saw offset {batch.last_offset} >= HW {hw}")

    def check_isr(self) -> None:
        leader = self._leader()
        if leader is not None and leader.maybe_shrink_isr() is not None:
            self._alter_partition(leader)

    def crash(self, b: int) -> None:
        if b not in self.up or len(self.up) == 1:
            return
        del self.up[b]
        self._apply(self.controller.broker_failed(b))

    def restart(self, b: int) -> None:
        if b in self.up:
            return
        self._start(b)
        self._apply(self.controller.register_broker(b))

    def controller_failover(self) -> None:
        """The controller's process dies; a successor loads its checkpoint (epoch + 1).
        The old one lingers as a zombie whose requests brokers must refuse."""
        self.zombie = self.controller
        self.controller = ControllerState.from_snapshot(self.controller.to_snapshot(),
                                                        self.clock)
        self._apply(self.controller._update_metadata())

    def zombie_speaks(self) -> None:
        if self.zombie is not None:
            victim = self.rng.choice(self.zombie.live_brokers() or [0])
            self._apply(self.zombie.broker_failed(victim))

    def advance(self, ms: int) -> None:
        self.clock.now_ms += ms
        self.timer.advance_clock()

    # ---- invariants ------------------------------------------------------------------------
    def check(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        c = self._state
        live_isr = [r for r in c.isr if r in self.up]
        if live_isr:
            records = {}
            offset = leader.log.log_start_offset
            while offset < leader.log.log_end_offset:
                info = leader.log.read_info(offset, 1 << 20)
                for batch in iter_batches(info.records):
                    for r in batch.records():
                        records[r.offset] = r.value
                offset = info.next_offset
            below_hw = [v for o, v in records.items() if o < leader.high_watermark]
            if len(below_hw) != len(set(below_hw)):
                self._fail("a committed record appears twice below the HW")
            for off, value in self.acked.items():
                if records.get(off) != value:
                    self._fail(f"acknowledged offset {off} ({value!r}) lost: leader {c.leader} "
                               f"has {records.get(off)!r}")
        epoch, hw = self._leader_hw
        if epoch == c.leader_epoch and leader.high_watermark < hw:
            self._fail(f"HW went back from {hw} to {leader.high_watermark} in epoch {epoch}")
        self._leader_hw = (c.leader_epoch, leader.high_watermark)
        for b, f in self.up.items():
            if (b == c.leader or f.role is not Role.FOLLOWER or f.needs_truncation
                    or f.leader_epoch != c.leader_epoch):
                continue
            hw = f.high_watermark
            if hw > leader.log.log_end_offset:
                self._fail(f"follower {b} HW {hw} beyond leader LEO {leader.log.log_end_offset}")
            mine = f.log.read(0, 1 << 30, max_offset=hw) if hw > 0 else b""
            theirs = leader.log.read(0, 1 << 30, max_offset=hw) if hw > 0 else b""
            if mine != theirs:
                self._fail(f"follower {b} differs from leader {c.leader} below HW {hw}")

    # ---- the schedule ----------------------------------------------------------------------
    def step(self) -> None:
        self.step_no += 1
        rng = self.rng
        roll = rng.random()
        b = rng.choice(self.broker_ids)
        if roll < 0.20:
            action, run = "produce all", lambda: self.produce(-1)
        elif roll < 0.28:
            action, run = "produce 1", lambda: self.produce(1)
        elif roll < 0.58:
            lose = rng.random() < 0.15
            delay = not lose and rng.random() < 0.2
            action = f"fetch {b}{' (lost)' if lose else ' (delayed)' if delay else ''}"
            run = lambda: self.replicate(b, lose, delay)  # noqa: E731
        elif roll < 0.62:
            action, run = "late delivery", self.deliver_late
        elif roll < 0.70:
            action, run = "consume", self.consume
        elif roll < 0.76:
            action, run = "isr check", self.check_isr
        elif roll < 0.85:
            ms = rng.choice([10, 500, 2_500])
            action, run = f"advance {ms}", lambda: self.advance(ms)
        elif roll < 0.91:
            action, run = f"crash {b}", lambda: self.crash(b)
        elif roll < 0.97:
            action, run = f"restart {b}", lambda: self.restart(b)
        elif roll < 0.985:
            action, run = "controller failover", self.controller_failover
        else:
            action, run = "zombie controller", self.zombie_speaks
        self.trace.append(action)
        try:
            run()
        except InvariantViolation:
            raise
        except Exception as e:  # any crash of the logic under test is a failure of this seed
            self._fail(f"{action} raised {type(e).__name__}: {e}")
        self.check()

    def run(self) -> "Simulation":
        try:
            for _ in range(self.steps):
                self.step()
            # Heal: everyone back, caught up; every acknowledged record must be there.
            for b in self.broker_ids:
                self.restart(b)
            for _ in range(20):
                for b in self.broker_ids:
                    self.replicate(b, lose_response=False)
                self.check()
        finally:
            self.close()
        return self
