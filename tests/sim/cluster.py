"""A deterministic, seeded simulator of a replicated topic.

Three brokers hold replicas of a two-partition topic on real log directories, each broker
with one replica host (its own timing wheel and purgatories); a real ``ControllerState``
elects leaders, expires broker sessions and accepts AlterPartition proposals fenced by
leader and partition epoch. Replication runs the production code: each host's followers
fetch through one ``ReplicaFetcher`` per leader broker, placed by the production
``FetcherPlacement`` (OffsetsForLeaderEpoch truncation first, fetch sessions, per-partition
backoff), and the leader's host answers with ``fetch_many`` and its ``FetchSessionCache``
(one slot, two or a thousand: evictions happen) and ``offsets_for_leader_epochs``, as
``ReplicaHostActor`` does. Everything between processes is a message on the simulated
network (``tests.sim.network``): fetches (long polls included) and their answers,
OffsetsForLeaderEpoch, AlterPartition, heartbeats, the reports of failed replicas, and the
controller's LeaderAndIsr / UpdateMetadata. Links have latency and jitter (answers overtake
each other; a host's requests to one leader keep their order, as on one TCP connection),
and the fault schedule cuts links (a broker can lose the controller and be
fenced while it still believes it leads), slows links (slow followers), crashes brokers (the
process dies: what was written to its files survives, nothing else) and restarts them, stops
them with a controlled shutdown (``ControlledShutdown``'s retries against the controller's
answers), crashes a broker's replica host alone (the broker reports its replicas and the
controller moves leadership off them), fails the controller over (what the old one sent
arrives late, from a zombie). Producers (acks=all and acks=1) and consumers talk to
whichever broker believes it leads.

A controller message lost on a cut link is known to the controller (its call failed, as
in ``ControllerActor._send_batch``): that broker registers again at its next heartbeat and
so learns the whole state. After every step the invariants (docs/architecture.md,
"Invariants") are checked, and after the final heal every follower must catch up with its
leader (liveness); a violation raises ``InvariantViolation`` naming the seed and step, for
replay with ``python -m tests.sim.run --seed N --verbose``.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
import shutil
from collections import Counter
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from actors.broker.state import BrokerState, ControlledShutdown
from actors.controller.state import ControllerState
from actors.replica.alter_partition import AlterPartitionSender
from actors.replica.fetch_many import fetch_many, offsets_for_leader_epochs
from actors.replica.fetch_session import FetchSessionCache
from actors.replica.fetcher import ReplicaFetcher
from actors.replica.fetcher_placement import FetcherPlacement
from actors.replica.partition import (FetchRequest, PartitionReplica, Purgatories,
                                      ReplicaConfig, Role)
from actors.timer.system_timer import SystemTimer
from protocols.errors import (InvalidRequestError, KafkaError, StaleControllerEpochError)
from protocols.messages import FetchManyRequest, FetchManyResponse, LeaderAndIsr
from protocols.records import CONTROL_MASK, Record, encode_batch, iter_batches
from storage import Log
from tests.sim.network import Network

TOPIC = "sim"
CONTROLLER = "controller"
ZOMBIE = "zombie-controller"
REQUEST_TIMEOUT_MS = 3_000       # a fetch or AlterPartition without an answer is retried
SESSION_TIMEOUT_MS = 6_000       # broker.session.timeout.ms
LAG_TIME_MAX_MS = 2_000          # replica.lag.time.max.ms
FETCH_BACKOFF_MS = 1_000         # replica.fetch.backoff.ms
LIVENESS_STEPS = 120             # after healing: 30 s for every follower to catch up


class InvariantViolation(AssertionError):
    pass


class Clock:
    def __init__(self):
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Host:
    """A broker's replica host (``actors.replica.replica_host``): its replicas, their timer and
    purgatories, the fetchers of its followers (one per leader broker) and the fetch sessions
    of its leaders. A host crash loses all of it but the files; its broker lives on."""
    life: int
    timer: SystemTimer
    purgatories: Purgatories
    sessions: FetchSessionCache
    fetchers: FetcherPlacement[int]  # keyed by the leader's broker id
    replicas: dict[int, PartitionReplica] = field(default_factory=dict)
    cores: dict[tuple[str, int], PartitionReplica] = field(default_factory=dict)
    # partition -> its leader's AlterPartition sender
    alter_senders: dict[int, AlterPartitionSender] = field(default_factory=dict)
    # leader broker -> (the fetcher's request in flight, when it gives up on the answer)
    in_flight: dict[int, tuple[object, int]] = field(default_factory=dict)


@dataclass
class Broker:
    """What one broker process holds; a crash throws all of it away but the files."""
    id: int
    life: int
    host: Host
    state: BrokerState  # the broker's decisions on controller messages, as the actor's
    # partitions a host crash took down that the controller has not heard of yet
    unreported: tuple = ()
    # a controlled stop under way (BrokerActor.shutdown): its attempts, the deadline of the
    # attempt in flight, when the next attempt goes
    stopping: ControlledShutdown | None = None
    stop_deadline_ms: int | None = None
    stop_retry_at_ms: int | None = None


class Simulation:
    def __init__(self, seed: int, root: Path | None = None, *, brokers: int = 3,
                 partitions: int = 2, epochs: bool = True, steps: int = 150,
                 transactions: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix=f"rafka-sim-{seed}-")) if root is None else root
        self.clock = Clock()
        self.net = Network(self.rng, self.clock,
                           fifo=lambda s, d: CONTROLLER in (s, d) or ZOMBIE in (s, d),
                           on_lost=self._on_lost)
        self.config = ReplicaConfig(
            replica_lag_time_max_ms=LAG_TIME_MAX_MS, leader_epoch_truncation=epochs,
            replica_fetch_backoff_ms=FETCH_BACKOFF_MS,
            replica_fetch_max_bytes=self.rng.choice([64, 300, 1 << 20]),
            replica_fetch_response_max_bytes=self.rng.choice([300, 1 << 20]))
        self._host_lives = itertools.count(1)
        # max.incremental.fetch.session.cache.slots: one slot makes two followers of a
        # leader host evict each other's sessions (FETCH_SESSION_ID_NOT_FOUND, full fetches).
        self.session_slots = self.rng.choice([1, 2, 1000])
        # What the schedule exercised, summed over seeds by ``tests.sim.run``.
        self.stats: Counter = Counter()
        self.log_config = {"min.insync.replicas": 2, "segment.bytes": 4096}
        self.broker_ids = list(range(brokers))
        self.partitions = list(range(partitions))
        self.up: dict[int, Broker] = {}
        self._opened: list[Log] = []
        self.lives: dict[int, int] = {}
        self.hw_checkpoint: dict[tuple[int, int], int] = {}
        self.controller = ControllerState(
            self.clock, {"broker.session.timeout.ms": SESSION_TIMEOUT_MS},
            rng=random.Random(seed))
        self.leaders_by_epoch: dict[int, dict[int, int]] = {p: {} for p in self.partitions}
        self.acked: dict[int, dict[int, bytes]] = {p: {} for p in self.partitions}
        self.leader_hw: dict[int, tuple[int, int]] = {}
        self.counter = 0
        self.step_no = 0
        self.trace: list[str] = []
        for b in self.broker_ids:
            self._start(b)
        n = len(self.broker_ids)
        assignment = {p: [self.broker_ids[(p + i) % n] for i in range(n)]
                      for p in self.partitions}
        self._send_all(CONTROLLER, self.controller.create_topic(TOPIC, assignment=assignment))
        self.run_until(self.clock() + 50)
        # Transactional producers and a transaction coordinator (``tests.sim.transactions``).
        self.txn = None
        if transactions:
            from tests.sim.transactions import TxnWorld
            self.txn = TxnWorld(self)

    # ---- processes -------------------------------------------------------------------------
    def close(self) -> None:
        # Crashed brokers' logs were abandoned open, as a dead process leaves them; release
        # the descriptors now, or thousands of seeds in one process run out of them.
        for lg in self._opened:
            for seg in lg.segments:
                seg.close_handlers()
        self._opened.clear()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def _start(self, b: int) -> Broker:
        life = self.lives[b] = self.lives.get(b, 0) + 1
        broker = self.up[b] = Broker(b, life, self._new_host(b), BrokerState(b))
        # Registration rides on Ray's actor creation, not on a link that could be cut. A
        # new incarnation of a broker the controller thinks alive (its crash unnoticed)
        # first fails, as ControllerActor.register_broker does.
        info = self.controller.brokers.get(b)
        if info is not None and info.alive:
            self._send_all(CONTROLLER, self.controller.broker_failed(b))
        self._send_all(CONTROLLER, self.controller.register_broker(b))
        return broker

    def _new_host(self, b: int) -> Host:
        """A replica host started on broker ``b``: its replicas open from their files."""
        timer = SystemTimer(self.clock)
        purgatories = Purgatories.create(timer, b)
        # Its life, larger for every later host, is its fetchers' replica epoch.
        life = next(self._host_lives)
        host = Host(life, timer, purgatories,
                    FetchSessionCache(self.session_slots, self.clock, rng=self.rng),
                    FetcherPlacement(lambda: ReplicaFetcher(b, self.config, self.clock, life)))
        for p in self.partitions:
            log = Log.open(self.root / f"broker-{b}" / f"{TOPIC}-{p}", self.log_config,
                           clock=self.clock, high_watermark=self.hw_checkpoint.get((b, p), 0))
            self._opened.append(log)
            replica = host.replicas[p] = host.cores[(TOPIC, p)] = PartitionReplica(
                TOPIC, p, b, log, clock=self.clock, config=self.config, purgatories=purgatories,
                on_high_watermark=lambda hw, k=(b, p): self.hw_checkpoint.__setitem__(k, hw))
            host.alter_senders[p] = AlterPartitionSender(replica, self.clock, REQUEST_TIMEOUT_MS)
        return host

    def _alive(self, b: int, life: int | None) -> Broker | None:
        broker = self.up.get(b)
        if broker is None or (life is not None and broker.life != life):
            return None
        return broker

    # ---- sending ---------------------------------------------------------------------------
    def _send_all(self, src: str, messages) -> None:
        for m in messages:
            life = self.lives.get(m.broker_id) if m.broker_id in self.up else None
            if life is not None:
                self.net.send(src, m.broker_id, "control", m, dst_life=life)

    def _reply(self, broker: Broker, host: Host, dst: int, dst_life: int, kind: str,
               payload) -> None:
        """Send unless the sender's host has died since the work began (a timer task of a
        dead host's purgatory must not speak for it)."""
        if self._alive(broker.id, broker.life) is not None and broker.host is host:
            self.net.send(broker.id, dst, kind, payload, dst_life=dst_life)

    def _maybe_send_alter(self, broker: Broker, p: int) -> None:
        proposal = broker.host.alter_senders[p].next_to_send()
        if proposal is not None:
            self.net.send(broker.id, CONTROLLER, "alter", (proposal, broker.life))

    def _on_lost(self, m) -> None:
        # ControllerActor._send_batch: a call to a live broker that fails is reported to
        # the controller's state, which has that broker register again at its next
        # heartbeat (and so learn the whole state).
        if m.src == CONTROLLER and m.kind == "control" and self._alive(m.dst, m.dst_life):
            self.controller.delivery_failed(m.dst)
            self.stats["controller messages lost to live brokers"] += 1

    # ---- delivery --------------------------------------------------------------------------
    def deliver(self, m) -> None:
        if m.kind.startswith("txn_"):
            self.txn.deliver(m)
        elif m.kind == "control":
            self._on_control(m)
        elif m.dst == CONTROLLER:
            self._on_controller_request(m)
        else:
            getattr(self, f"_on_{m.kind}")(m)

    def _on_control(self, m) -> None:
        broker = self._alive(m.dst, m.dst_life)
        if broker is None:
            return
        try:
            work = broker.state.on_controller_batch([m.payload])
        except StaleControllerEpochError:
            return
        for msg in work.leader_and_isr:
            if msg.topic == TOPIC:
                self._become(broker, msg)

    def _become(self, broker: Broker, msg: LeaderAndIsr) -> None:
        host = broker.host
        replica = host.replicas[msg.partition]
        if msg.leader >= 0:
            seen = self.leaders_by_epoch[msg.partition].setdefault(msg.leader_epoch, msg.leader)
            if seen != msg.leader:
                self._fail(f"partition {msg.partition}: leaders {seen} and {msg.leader} in "
                           f"epoch {msg.leader_epoch}")
        try:
            # As the host applies it (HostedReplica.become): a new leader or epoch moves the
            # partition to the fetcher for its leader; one that no longer follows leaves.
            if replica.apply_leader_and_isr(msg.leader, msg.leader_epoch,
                                            msg.partition_epoch, list(msg.isr),
                                            list(msg.replicas)):
                self._follow(host, replica)
        except KafkaError:
            return  # FENCED_LEADER_EPOCH: an older LeaderAndIsr than what we hold
        self._ensure_fetching(host, replica)
        self._poll_fetchers(broker)

    # ---- the host's fetchers (ReplicaFetcherManager's follow / ensure / unfollow) ------------
    # Placement is the production FetcherPlacement; locating a leader's host, which the actors
    # do through Ray, is knowing its broker id here.
    def _unfollow(self, host: Host, p: int) -> None:
        emptied = host.fetchers.remove(TOPIC, p)
        if emptied is not None:
            host.in_flight.pop(emptied, None)  # its task is cancelled: no answer is awaited

    def _follow(self, host: Host, replica: PartitionReplica) -> None:
        self._unfollow(host, replica.partition)
        if replica.role is Role.FOLLOWER:
            host.fetchers.place(replica, replica.leader_id)

    def _ensure_fetching(self, host: Host, replica: PartitionReplica) -> None:
        if replica.role is not Role.FOLLOWER:
            self._unfollow(host, replica.partition)
        elif not host.fetchers.is_placed(TOPIC, replica.partition):
            self._follow(host, replica)

    def _on_controller_request(self, m) -> None:
        c = self.controller
        if m.kind == "heartbeat":
            b, life = m.payload
            if self._alive(b, life) is None:
                return
            try:
                register = c.heartbeat(b)
            except InvalidRequestError:
                # Fenced after missed heartbeats: the broker registers again (KRaft unfences
                # a broker that catches up; this is the same in one step).
                register = True
            if register:    # ... or told to, a message to it having been lost
                self._send_all(CONTROLLER, c.register_broker(b))
            return
        if m.kind == "controlled_shutdown":
            b, life = m.payload
            if self._alive(b, life) is None:
                return
            # ControllerActor.controlled_shutdown: move leadership off, answer what it leads.
            msgs = c.controlled_shutdown(b)
            still = [p for (_, p), st in c.partitions.items() if st.leader == b]
            self.net.send(CONTROLLER, b, "controlled_shutdown_answer", still, dst_life=life)
            self._send_all(CONTROLLER, msgs)
            return
        if m.kind == "replicas_failed":
            b, life, partitions = m.payload
            if self._alive(b, life) is None:
                return
            msgs = c.replicas_failed(b, [(TOPIC, p) for p in partitions])
            self.net.send(CONTROLLER, b, "replicas_failed_answer", partitions, dst_life=life)
            self._send_all(CONTROLLER, msgs)
            return
        proposal, life = m.payload
        try:
            msgs = c.alter_partition(proposal.topic, proposal.partition, proposal.leader_id,
                                     proposal.leader_epoch, proposal.partition_epoch,
                                     proposal.new_isr)
            st = c.partitions[(TOPIC, proposal.partition)]
            answer = (proposal, list(st.isr), st.partition_epoch, None)
        except KafkaError as e:
            msgs, answer = [], (proposal, None, -1, e)
        self.net.send(CONTROLLER, proposal.leader_id, "alter_answer", answer, dst_life=life)
        self._send_all(CONTROLLER, msgs)

    def _on_alter_answer(self, m) -> None:
        broker = self._alive(m.dst, m.dst_life)
        if broker is None:
            return
        proposal, isr, partition_epoch, error = m.payload
        broker.host.alter_senders[proposal.partition].on_answer(proposal, isr, partition_epoch,
                                                                error)
        self._maybe_send_alter(broker, proposal.partition)   # a newer proposal goes now

    def _on_controlled_shutdown_answer(self, m) -> None:
        broker = self._alive(m.dst, m.dst_life)
        if broker is not None and broker.stop_deadline_ms is not None:
            self._stop_attempt_done(broker, m.payload)

    def _on_replicas_failed_answer(self, m) -> None:
        broker = self._alive(m.dst, m.dst_life)
        if broker is not None and broker.unreported == m.payload:
            broker.unreported = ()

    # ---- replication between hosts: the production fetcher and request handling -------------
    def _on_fetch(self, m) -> None:
        """A follower host's FetchManyRequest at the leader broker's host: ``fetch_many``
        with the host's fetch sessions, as ``ReplicaHostActor.fetch_many`` serves it."""
        request, sender_life = m.payload
        leader = self.up.get(m.dst)
        if leader is None:
            return  # connection refused: the follower's request times out
        host = leader.host

        def answer(response: FetchManyResponse) -> None:
            self._reply(leader, host, m.src, sender_life, "fetch_answer", (request, response))
        moved = fetch_many(host.cores, request, host.purgatories.fetch, leader.id, answer,
                           host.sessions)
        for _, p in moved:
            self._maybe_send_alter(leader, p)

    def _on_epochs(self, m) -> None:
        request, sender_life = m.payload
        leader = self.up.get(m.dst)
        if leader is None:
            return
        self._reply(leader, leader.host, m.src, sender_life, "epochs_answer",
                    (request, offsets_for_leader_epochs(leader.host.cores, request, leader.id)))

    def _answer_for(self, m) -> tuple[Host, ReplicaFetcher] | None:
        """The follower host and fetcher an answer is for, if it is the answer to the request
        that fetcher has in flight (not one it gave up on, nor one to a dead host)."""
        follower = self.up.get(m.dst)
        if follower is None or follower.host.life != m.dst_life:
            return None
        host = follower.host
        request = m.payload[0]
        sent = host.in_flight.get(m.src)
        fetcher = host.fetchers.fetchers.get(m.src)
        if sent is None or sent[0] is not request or fetcher is None:
            return None
        del host.in_flight[m.src]
        return host, fetcher

    def _on_fetch_answer(self, m) -> None:
        found = self._answer_for(m)
        if found is not None:
            response = m.payload[1]
            if response.error is not None:
                self.stats[type(response.error).__name__] += 1
            found[1].on_fetch_response(response)
            self._poll_fetchers(self.up[m.dst])

    def _on_epochs_answer(self, m) -> None:
        found = self._answer_for(m)
        if found is not None:
            found[1].on_epoch_end_offsets(*m.payload)
            self._poll_fetchers(self.up[m.dst])

    def _fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.seed} step {self.step_no}: {what}\n  trace: "
                                 + " | ".join(self.trace[-14:]))

    # ---- time ------------------------------------------------------------------------------
    def _set_time(self, now_ms: int) -> None:
        self.clock.now_ms = max(self.clock.now_ms, now_ms)
        for broker in list(self.up.values()):
            if self._alive(broker.id, broker.life) is not None:
                broker.host.timer.advance_clock()
                self._poll_fetchers(broker)
                self._drive_stop(broker)

    def run_until(self, until_ms: int) -> None:
        """Let time pass: every message due by then arrives, in order, timers fire."""
        while True:
            at = self.net.next_arrival_ms()
            if at is None or at > until_ms:
                break
            m = self.net.pop()
            if m is None:
                break
            self._set_time(m.arrival_ms)
            self.deliver(m)
        self._set_time(until_ms)

    def deliver_next(self) -> None:
        at = self.net.next_arrival_ms()
        if at is not None:
            self.run_until(at)

    def advance(self, ms: int) -> None:
        """Time passes in heartbeat-sized slices: brokers heartbeat, sessions expire."""
        end = self.clock() + ms
        while True:
            for b, broker in sorted(self.up.items()):
                self.net.send(b, CONTROLLER, "heartbeat", (b, broker.life))
                self._report_failed(broker)   # retried until the controller answers
            self.run_until(min(end, self.clock() + 1_000))
            self._send_all(CONTROLLER, self.controller.expire_sessions())
            if self.clock() >= end:
                break

    # ---- client and replica actions --------------------------------------------------------
    def _current_leader(self, p: int) -> PartitionReplica | None:
        """The leader the controller chose, once it has learned it leads this epoch."""
        st = self.controller.partitions[(TOPIC, p)]
        broker = self.up.get(st.leader)
        if broker is None:
            return None
        r = broker.host.replicas[p]
        return r if r.role is Role.LEADER and r.leader_epoch == st.leader_epoch else None

    def _some_leader(self, p: int) -> PartitionReplica | None:
        """Whichever broker a client reaches that believes it leads: usually the current
        one, sometimes a deposed leader that has not heard yet."""
        current = self._current_leader(p)
        believers = [b.host.replicas[p] for b in self.up.values()
                     if b.host.replicas[p].role is Role.LEADER]
        if current is not None and (self.rng.random() < 0.8 or not believers):
            return current
        return self.rng.choice(believers) if believers else None

    def produce(self, p: int, acks: int) -> None:
        leader = self._some_leader(p)
        if leader is None:
            return
        self.counter += 1
        value = f"r{self.counter}".encode()
        data = encode_batch([Record(None, value, self.clock())])
        acked = self.acked[p]

        def done(result, value=value):
            if result.error is None and acks == -1:
                if result.base_offset in acked and acked[result.base_offset] != value:
                    self._fail(f"partition {p}: offset {result.base_offset} acknowledged "
                               "twice")
                acked[result.base_offset] = value
        try:
            leader.produce(data, acks=acks, timeout_ms=3_000, on_done=done)
        except KafkaError:
            pass  # NOT_ENOUGH_REPLICAS and friends: the client would retry

    def _poll_fetchers(self, broker: Broker) -> None:
        """Each fetcher keeps one request outstanding (``fetcher_manager._FetcherTask``): the
        next goes out when the answer arrives; one without an answer in time fails as a
        whole. The wait of each fetch is drawn: an answer may come at once or long-polled."""
        if self._alive(broker.id, broker.life) is None:
            return
        host = broker.host
        now = self.clock()
        for leader_id, fetcher in host.fetchers.fetchers.items():
            sent = host.in_flight.get(leader_id)
            if sent is not None:
                if sent[1] > now:
                    continue
                del host.in_flight[leader_id]
                fetcher.on_error(sent[0])
            request = fetcher.next_request()
            if request is None:
                continue
            if isinstance(request, FetchManyRequest):
                request = dataclasses.replace(request,
                                              max_wait_ms=self.rng.choice([0, 500, 500]))
                kind = "fetch"
                self.stats["incremental fetches" if request.session_epoch > 0
                           else "full fetches"] += 1
            else:
                kind = "epochs"
                self.stats["OffsetsForLeaderEpoch requests"] += 1
            host.in_flight[leader_id] = (request, now + REQUEST_TIMEOUT_MS)
            # One connection per fetcher host and leader, kept across timeouts
            # (fetcher_manager._FetcherTask): the leader reads its requests in order. A
            # later start of the host has its own, so a dead start's fetch may still come
            # late (the replica epoch refuses it).
            self.net.send(broker.id, leader_id, kind, (request, host.life),
                          order_key=(broker.id, host.life, leader_id))

    def consume(self, p: int) -> None:
        """A consumer's fetch, as a consumer sends it: one FetchManyRequest to the leader's
        host, without a session here, answered at once."""
        leader = self._some_leader(p)
        if leader is None or leader.high_watermark <= leader.log.log_start_offset:
            return
        host = next(b.host for b in self.up.values() if b.host.replicas[p] is leader)
        hw = leader.high_watermark
        offset = self.rng.randrange(leader.log.log_start_offset, hw + 1)
        request = FetchManyRequest(-1, 0, 1, 1 << 20, (
            (TOPIC, p, FetchRequest(-1, offset, leader.leader_epoch)),))
        answers: list[FetchManyResponse] = []
        fetch_many(host.cores, request, host.purgatories.fetch, leader.broker_id,
                   answers.append, host.sessions)
        for _, _, result in answers[0].results:
            for batch in iter_batches(result.records):
                if batch.last_offset >= hw:
                    self._fail(f"partition {p}: a consumer saw offset {batch.last_offset} >= "
                               f"HW {hw}")

    def check_isr(self, b: int, p: int) -> None:
        broker = self.up.get(b)
        if broker is not None and broker.host.replicas[p].role is Role.LEADER:
            broker.host.replicas[p].maybe_shrink_isr()
            self._maybe_send_alter(broker, p)

    # ---- faults ----------------------------------------------------------------------------
    def crash(self, b: int, noticed: bool) -> None:
        """The process dies. The controller hears of it at once through Ray (the actor's
        death) or, when ``noticed`` is false, only when its session expires."""
        if b not in self.up or len(self.up) == 1:
            return
        del self.up[b]
        if noticed:
            self._send_all(CONTROLLER, self.controller.broker_failed(b))

    def crash_host(self, b: int) -> None:
        """Broker ``b``'s replica host dies alone: its replicas, fetchers, fetch sessions and
        timers are gone, its files stay. The broker starts it again (the replicas reopen from
        their files, holding no role) and reports them to the controller until it answers
        (``ReplicaManager._host_died``), whose LeaderAndIsr gives them their roles back."""
        broker = self.up.get(b)
        if broker is None:
            return
        self.stats["host crashes"] += 1
        broker.host = self._new_host(b)
        broker.unreported = tuple(self.partitions)
        self._report_failed(broker)

    def _report_failed(self, broker: Broker) -> None:
        if broker.unreported:
            self.net.send(broker.id, CONTROLLER, "replicas_failed",
                          (broker.id, broker.life, broker.unreported))

    def controlled_stop(self, b: int) -> None:
        """The broker is stopped (``rafka server stop``, ``BrokerActor.shutdown``): it asks
        the controller to move leadership off it, again while it still leads something or
        an attempt gets no answer, up to Kafka's controlled.shutdown.max.retries (3),
        controlled.shutdown.retry.backoff.ms (5 s) apart; then it stops and tells the
        controller. Meanwhile it serves as before."""
        broker = self.up.get(b)
        if broker is None or broker.stopping is not None or len(self.up) == 1:
            return
        self.stats["controlled stops"] += 1
        broker.stopping = ControlledShutdown(max_retries=3, backoff_ms=5_000)
        self._send_controlled_shutdown(broker)

    def _send_controlled_shutdown(self, broker: Broker) -> None:
        broker.stop_retry_at_ms = None
        broker.stop_deadline_ms = self.clock() + REQUEST_TIMEOUT_MS
        self.net.send(broker.id, CONTROLLER, "controlled_shutdown", (broker.id, broker.life))

    def _drive_stop(self, broker: Broker) -> None:
        now = self.clock()
        if broker.stop_deadline_ms is not None and now >= broker.stop_deadline_ms:
            self._stop_attempt_done(broker, None)          # no answer in time
        elif broker.stop_retry_at_ms is not None and now >= broker.stop_retry_at_ms:
            self._send_controlled_shutdown(broker)

    def _stop_attempt_done(self, broker: Broker, still_leading: list | None) -> None:
        broker.stop_deadline_ms = None
        wait_ms = broker.stopping.on_answer(still_leading)
        if wait_ms is not None:
            broker.stop_retry_at_ms = self.clock() + wait_ms
            return
        if len(self.up) == 1:
            broker.stopping = None  # as crash: the simulation always keeps one broker up
            return
        if still_leading == []:
            self.stats["controlled stops with nothing led"] += 1
        # Stopped: the logs are closed (what they hold stays), and the controller is told.
        del self.up[broker.id]
        self._send_all(CONTROLLER, self.controller.broker_failed(broker.id))

    def restart(self, b: int) -> None:
        if b not in self.up:
            self._start(b)

    def controller_failover(self) -> None:
        """The controller's process dies; a successor loads its checkpoint (epoch + 1).
        What the old one had already sent is still on the wire and may arrive much later,
        after the successor's own messages: brokers must refuse it by controller epoch.
        (A zombie cannot decide anything new: on Ray it is killed before a successor can
        take the name, and its checkpoint writes are fenced by the epoch in the store.)"""
        delay = {}
        for m in self.net.queue:
            if m.src == CONTROLLER and m.kind == "control":
                m.src = ZOMBIE
                # Late by a per-link amount, so each link stays FIFO.
                m.arrival_ms += delay.setdefault(m.dst, self.rng.choice([0, 500, 5_000]))
        heapq.heapify(self.net.queue)
        self.controller = ControllerState.from_snapshot(self.controller.to_snapshot(),
                                                        self.clock)
        self._send_all(CONTROLLER, self.controller.full_state())

    def _endpoints(self) -> list:
        from tests.sim.transactions import TXN
        return self.broker_ids + [CONTROLLER] + ([TXN] if self.txn is not None else [])

    # ---- invariants ------------------------------------------------------------------------
    def check(self) -> None:
        for p in self.partitions:
            self._check_partition(p)
        if self.txn is not None:
            self.txn.check()

    def _check_partition(self, p: int) -> None:
        leader = self._current_leader(p)
        if leader is None:
            return
        st = self.controller.partitions[(TOPIC, p)]
        if any(r in self.up for r in st.isr):
            records = {}
            offset = leader.log.log_start_offset
            while offset < leader.log.log_end_offset:
                info = leader.log.read_info(offset, 1 << 20)
                for batch in iter_batches(info.records):
                    if batch.header().attributes & CONTROL_MASK:
                        continue     # transaction markers: the same bytes every time
                    for r in batch.records():
                        records[r.offset] = r.value
                offset = info.next_offset
            below_hw = [v for o, v in records.items() if o < leader.high_watermark]
            if len(below_hw) != len(set(below_hw)):
                self._fail(f"partition {p}: a committed record appears twice below the HW")
            for off, value in self.acked[p].items():
                if records.get(off) != value:
                    self._fail(f"partition {p}: acknowledged offset {off} ({value!r}) lost: "
                               f"leader {st.leader} has {records.get(off)!r}")
        epoch, hw = self.leader_hw.get(p, (-1, -1))
        if epoch == st.leader_epoch and leader.high_watermark < hw:
            self._fail(f"partition {p}: HW went back from {hw} to {leader.high_watermark} "
                       f"in epoch {epoch}")
        self.leader_hw[p] = (st.leader_epoch, leader.high_watermark)
        for b, broker in self.up.items():
            f = broker.host.replicas[p]
            if (b == st.leader or f.role is not Role.FOLLOWER or f.needs_truncation
                    or f.leader_epoch != st.leader_epoch):
                continue
            hw = f.high_watermark
            if hw > leader.log.log_end_offset:
                self._fail(f"partition {p}: follower {b} HW {hw} beyond leader LEO "
                           f"{leader.log.log_end_offset}")
            mine = f.log.read(0, 1 << 30, max_offset=hw) if hw > 0 else b""
            theirs = leader.log.read(0, 1 << 30, max_offset=hw) if hw > 0 else b""
            if mine != theirs:
                self._fail(f"partition {p}: follower {b} differs from leader {st.leader} "
                           f"below HW {hw}")

    # ---- the schedule ----------------------------------------------------------------------
    def step(self) -> None:
        self.step_no += 1
        rng = self.rng
        roll = rng.random()
        b = rng.choice(self.broker_ids)
        p = rng.choice(self.partitions)
        if self.txn is not None and rng.random() < 0.35:
            action, run = self.txn.action()
        elif roll < 0.18:
            action, run = f"produce all p{p}", lambda: self.produce(p, -1)
        elif roll < 0.24:
            action, run = f"produce 1 p{p}", lambda: self.produce(p, 1)
        elif roll < 0.51:
            action, run = "deliver", self.deliver_next
        elif roll < 0.54:
            action, run = f"crash host b{b}", lambda: self.crash_host(b)
        elif roll < 0.59:
            action, run = f"consume p{p}", lambda: self.consume(p)
        elif roll < 0.64:
            action, run = f"isr check b{b} p{p}", lambda: self.check_isr(b, p)
        elif roll < 0.78:
            ms = rng.choice([10, 100, 500, 2_500])
            action, run = f"advance {ms}", lambda: self.advance(ms)
        elif roll < 0.805:
            noticed = rng.random() < 0.6
            action = f"crash b{b}{'' if noticed else ' (unnoticed)'}"
            run = lambda: self.crash(b, noticed)  # noqa: E731
        elif roll < 0.82:
            action, run = f"controlled stop b{b}", lambda: self.controlled_stop(b)
        elif roll < 0.87:
            action, run = f"restart b{b}", lambda: self.restart(b)
        elif roll < 0.90:
            x, y = rng.sample(self._endpoints(), 2)
            action, run = f"cut {x}-{y}", lambda: self.net.cut(x, y)
        elif roll < 0.93:
            x, y = rng.sample(self.broker_ids, 2)
            ms = rng.choice([1_500, 4_000])
            action, run = f"slow {x}-{y} {ms}ms", lambda: self.net.slow(x, y, ms)
        elif roll < 0.96:
            action, run = "heal", self.net.heal
        else:
            action, run = "controller failover", self.controller_failover
        self.trace.append(action)
        try:
            run()
        except InvariantViolation:
            raise
        except Exception as e:  # any crash of the logic under test is a failure of this seed
            self._fail(f"{action} raised {type(e).__name__}: {e}")
        self.check()

    def heal(self) -> None:
        """Everyone back, every link fine, time for followers to catch up; then every
        acknowledged record must still be there."""
        self.trace.append("final heal")
        self.net.heal()
        for b in self.broker_ids:
            self.restart(b)
        # A broker in the middle of a controlled shutdown stops when it is done (it may
        # hold the last ISR place of a partition): it is started again once it has.
        for _ in range(LIVENESS_STEPS):
            if all(broker.stopping is None for broker in self.up.values()):
                break
            self.advance(250)
            self.check()
        for b in self.broker_ids:
            self.restart(b)
        for _ in range(40):
            self.advance(250)
            self.check()
        # Liveness: with every broker up and every link fine, each follower catches up with
        # its leader and the HW reaches the log end (a fetcher that stopped naming a
        # partition's position, or a broker that missed its LeaderAndIsr, would leave it
        # behind for good).
        if not self._caught_up():
            self._fail(f"liveness: {LIVENESS_STEPS * 250 / 1000:.0f} s after healing, still "
                       f"behind: {'; '.join(self._lagging()[:3])}")
        if self.txn is not None:
            # That a transaction told committed ends committed everywhere is liveness too:
            # its markers wait for min.insync.replicas, so it is asked once replication is
            # back, and the markers have had time to be retried.
            for _ in range(40):
                self.advance(250)
                self.check()
            self.txn.check(final=True)

    def _caught_up(self) -> bool:
        """Whether every follower catches up within ``LIVENESS_STEPS``."""
        for _ in range(LIVENESS_STEPS):
            if not self._lagging():
                return True
            self.advance(250)
            self.check()
        return not self._lagging()

    def _lagging(self) -> list[str]:
        behind = []
        for p in self.partitions:
            leader = self._current_leader(p)
            if leader is None:
                behind.append(f"partition {p} has no serving leader")
                continue
            end = leader.log.log_end_offset
            if leader.high_watermark != end:
                behind.append(f"partition {p}: HW {leader.high_watermark} < log end {end}")
            for b, broker in self.up.items():
                f = broker.host.replicas[p]
                if f is not leader and f.log_end_offset != end:
                    behind.append(f"partition {p}: follower {b} ({f.role.value}, epoch "
                                  f"{f.leader_epoch}) at {f.log_end_offset}, leader at {end}")
        return behind

    def run(self) -> "Simulation":
        try:
            for _ in range(self.steps):
                self.step()
            self.heal()
        finally:
            self.close()
        return self
