"""Transactions in the simulator (issue 41): the production transaction coordinator core
(``actors.txn.coordinator``) as a process of its own on the simulated network, with its
``__transaction_state`` records durable across its crashes, and transactional producers
writing to the simulated topic through whichever broker believes it leads.

The coordinator's effects travel as messages: its state writes complete after a delay (or
fail with NOT_ENOUGH_REPLICAS; a crash may leave one written whose answer was lost), its
markers go to the partitions' leaders (``PartitionReplica.write_txn_marker``) and their
answers come back, or time out and are sent again. The schedule fails the coordinator over
(its successor loads the records with the next coordinator epoch and finishes what it
finds in PrepareCommit / PrepareAbort), cuts its links, fences producers (a new instance of
a transactional id; the old one keeps trying, a zombie), and aborts timed-out transactions.
Producers are verified at the leader (KIP-890) before a transaction's first batch there;
a batch that fails makes the transaction abort and the producer bump its epoch (KIP-360).

Invariants, checked after every step on every serving leader's log:
- atomicity: a transaction's markers agree on every partition (never COMMIT on one and
  ABORT on another);
- what producers were told: a commit answered to the client is never aborted anywhere, an
  abort answered is never committed;
- read_committed (the production fetch path at isolation level 1 and the consumer's
  ``SkippedBatches``) never returns a record of an aborted transaction, and returns every
  record of a committed transaction whose marker is below the last stable offset;
- the last stable offset never passes the first offset of a transaction still open there.
After the final heal every transaction a client was told committed is committed on every
partition it wrote to.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from actors.replica.fetch_many import fetch_many
from actors.replica.partition import Role
from actors.txn.coordinator import TransactionCoordinator, TxnConfig
from actors.txn.metadata import TransactionState
from actors.txn.transaction_log import read_value
from protocols.control_records import ABORT, COMMIT, control_record_type
from protocols.errors import (KafkaError, NotEnoughReplicasError, NotLeaderOrFollowerError,
                              RequestTimedOutError)
from protocols.messages import FetchManyRequest, FetchRequest
from protocols.records import (CONTROL_MASK, TRANSACTIONAL_MASK, Record, encode_batch,
                               iter_batches)
from rafka.consumer.fetch_buffer import SkippedBatches
from rafka.producer.transaction_manager import should_retry
from tests.sim.cluster import TOPIC

TXN = "txn-coordinator"
IDS = ("app-0", "app-1")
TXN_TIMEOUT_MS = 8_000
REQUEST_TIMEOUT_MS = 3_000
PRODUCE_TIMEOUT_MS = 3_000


@dataclass
class Client:
    """One instance of a transactional producer: one coordinator request at a time, as
    Kafka's TransactionManager sends them."""
    tid: str
    instance: int
    phase: str = "uninit"          # uninit, init, ready, add, open, end
    pid: int = -1
    epoch: int = -1
    waiting_until: int | None = None   # a coordinator request is out until then
    request: tuple | None = None       # (kind, args) of the request out, to resend
    txn: str | None = None             # the transaction's tag: "<tid>.<instance>.<n>"
    partitions: tuple = ()
    seq: dict = field(default_factory=dict)
    produces: dict = field(default_factory=dict)   # token -> deadline of an acks=all wait
    batches: int = 0
    failed: bool = False               # a batch failed: abort, then a new epoch
    zombie: bool = False


class TxnWorld:
    def __init__(self, sim):
        self.sim = sim
        self.rng = sim.rng
        self.state_log: list[tuple[bytes, bytes | None]] = []   # __transaction_state-0
        self.coordinator: TransactionCoordinator | None = None
        self.life = 0
        self.coordinator_epoch = 0
        self.next_producer_id = 1000            # the controller's blocks: never reused
        self.replies: dict[int, tuple] = {}     # request id -> (client key, kind)
        self.pending_writes: dict[int, object] = {}
        self.markers_out: dict[int, tuple] = {}  # token -> (send, partition)
        self.tokens = itertools.count(1)
        self.instances = itertools.count(1)
        self.txn_numbers = itertools.count(1)
        self.clients: dict[str, Client] = {}
        self.zombies: list[Client] = []
        self.told: dict[str, bool] = {}         # txn -> the outcome its client was told
        self.stats = sim.stats
        self._start_coordinator()

    # ---- the coordinator process -----------------------------------------------------------
    def _start_coordinator(self) -> None:
        self.life += 1
        self.coordinator_epoch += 1
        core = self.coordinator = TransactionCoordinator(0, TxnConfig(
            num_partitions=1, max_timeout_ms=60_000, retry_backoff_ms=100,
            completion_wait_ms=1_000))
        core.add_producer_ids(self.next_producer_id, 1_000)
        self.next_producer_id += 1_000
        effects, load = core.on_election(0, self.coordinator_epoch)
        self._perform(effects)
        if load:
            self._perform(core.on_loaded(0, self.coordinator_epoch, list(self.state_log),
                                         self.sim.clock()))

    def coordinator_failover(self) -> None:
        """The coordinator's process dies: a write in flight may have reached the log with
        its answer lost; the successor loads the log under the next coordinator epoch."""
        self.stats["txn coordinator failovers"] += 1
        for write in self.pending_writes.values():
            if self.rng.random() < 0.5:
                self._append(write)
        self.pending_writes.clear()
        self.markers_out.clear()
        self.replies.clear()
        self.coordinator = None
        self._start_coordinator()

    def _append(self, write) -> None:
        record = write.record
        self.state_log.append((record.key, record.value))
        if record.value is not None:
            transit = read_value(record.value)
            if transit.state in (TransactionState.PREPARE_COMMIT,
                                 TransactionState.PREPARE_ABORT):
                self.stats["txn " + transit.state.state_name] += 1

    def _perform(self, effects) -> None:
        sim, now = self.sim, self.sim.clock()
        for request, answer in effects.replies:
            who = self.replies.pop(request, None)
            if who is not None:
                (tid, instance), kind = who
                sim.net.send(TXN, ("client", tid), "txn_reply", (instance, kind, answer))
        for write in effects.writes:
            token = next(self.tokens)
            self.pending_writes[token] = write
            sim.net.send(TXN, TXN, "txn_write", (token, self.life),
                         delay_ms=write.delay_ms + self.rng.choice([1, 5, 30]))
        for send in effects.markers:
            for tp in send.partitions:
                token = next(self.tokens)
                self.markers_out[token] = (send, tp)
                leader = sim.controller.partitions[(tp.topic, tp.partition)].leader
                if leader in sim.up:
                    sim.net.send(TXN, leader, "txn_marker", (token, self.life, send, tp),
                                 dst_life=sim.lives[leader], delay_ms=send.delay_ms)
                sim.net.send(TXN, TXN, "txn_marker_timeout", (token, self.life),
                             delay_ms=send.delay_ms + REQUEST_TIMEOUT_MS)
        for transactional_id, request, deadline in effects.waits:
            sim.net.send(TXN, TXN, "txn_wait_over", (transactional_id, request, self.life),
                         delay_ms=max(0, deadline - now))

    # ---- delivery --------------------------------------------------------------------------
    def deliver(self, m) -> None:
        getattr(self, f"_on_{m.kind}")(m)

    def _on_txn_request(self, m) -> None:
        (tid, instance), kind, args, life = m.payload
        core = self.coordinator
        if core is None or life != self.life:
            return
        now = self.sim.clock()
        method = {"init": core.init_producer_id, "add": core.add_partitions_to_txn,
                  "end": core.end_txn}[kind]
        request, effects = method(*args, now)
        self.replies[request] = ((tid, instance), kind)
        self._perform(effects)

    def _on_txn_write(self, m) -> None:
        token, life = m.payload
        write = self.pending_writes.pop(token, None)
        if write is None or life != self.life:
            return
        error = None
        if self.rng.random() < 0.05:
            error = NotEnoughReplicasError("the ISR of __transaction_state-0 is too small")
        else:
            self._append(write)
        self._perform(self.coordinator.on_write_done(write, error, self.sim.clock()))

    def _on_txn_marker(self, m) -> None:
        token, life, send, tp = m.payload
        broker = self.sim._alive(m.dst, m.dst_life)
        if broker is None:
            return
        host = broker.host
        replica = host.replicas[tp.partition]

        def answer(result) -> None:
            self.sim._reply(broker, host, TXN, None, "txn_marker_answer",
                            (token, life, result.error))
        try:
            if replica.role is not Role.LEADER:
                raise NotLeaderOrFollowerError(f"broker {broker.id} does not lead {tp}")
            replica.write_txn_marker(send.producer_id, send.producer_epoch,
                                     send.coordinator_epoch, send.commit, REQUEST_TIMEOUT_MS,
                                     on_done=answer)
            self.stats["txn markers appended"] += 1
        except KafkaError as e:
            self.sim._reply(broker, host, TXN, None, "txn_marker_answer", (token, life, e))

    def _marker_outcome(self, token: int, life: int, error) -> None:
        found = self.markers_out.pop(token, None)
        if found is None or life != self.life:
            return
        send, tp = found
        self._perform(self.coordinator.on_markers_done(send, {tp: error}, self.sim.clock()))

    def _on_txn_marker_answer(self, m) -> None:
        self._marker_outcome(*m.payload)

    def _on_txn_marker_timeout(self, m) -> None:
        token, life = m.payload
        self._marker_outcome(token, life, RequestTimedOutError("no answer to the marker"))

    def _on_txn_wait_over(self, m) -> None:
        transactional_id, request, life = m.payload
        if life == self.life:
            self._perform(self.coordinator.completion_wait_over(transactional_id, request,
                                                                self.sim.clock()))

    def abort_timed_out(self) -> None:
        if self.coordinator is not None:
            self._perform(self.coordinator.abort_timed_out_transactions(self.sim.clock()))

    # ---- the schedule's transactional steps ------------------------------------------------
    def action(self):
        """(what, how) of one step of the schedule."""
        rng = self.rng
        roll = rng.random()
        tid = rng.choice(IDS)
        if roll < 0.86:
            return f"txn client {tid}", lambda: self.client_step(tid)
        if roll < 0.90:
            return f"txn fence {tid}", lambda: self.fence(tid)
        if roll < 0.93:
            return "txn coordinator failover", self.coordinator_failover
        return "txn abort timed out", self.abort_timed_out

    # ---- producers -------------------------------------------------------------------------
    def _client(self, tid: str) -> Client:
        client = self.clients.get(tid)
        if client is None:
            client = self.clients[tid] = Client(tid, next(self.instances))
        return client

    def fence(self, tid: str) -> None:
        """A new instance of the transactional id starts; the old one lives on as a zombie
        for a while (its requests must all be refused)."""
        old = self.clients.pop(tid, None)
        if old is not None and old.phase != "uninit":
            old.zombie = True
            self.zombies = [z for z in self.zombies if z.tid != tid][-3:] + [old]
            self.stats["txn producers fenced"] += 1
        self._client(tid)

    def _request(self, c: Client, kind: str, args: tuple) -> None:
        c.request = (kind, args)
        c.waiting_until = self.sim.clock() + REQUEST_TIMEOUT_MS
        self.sim.net.send(("client", c.tid), TXN, "txn_request",
                          ((c.tid, c.instance), kind, args, self.life))

    def _on_txn_reply(self, m) -> None:
        instance, kind, answer = m.payload
        tid = m.dst[1]
        c = self.clients.get(tid)
        if c is None or c.instance != instance:
            c = next((z for z in self.zombies if z.instance == instance), None)
        if c is None or c.request is None or c.request[0] != kind:
            return
        c.waiting_until, request = None, c.request
        c.request = None
        retry = isinstance(answer, KafkaError) and should_retry(answer)
        if retry:
            c.request = request                    # sent again on the client's next step
            c.waiting_until = self.sim.clock()
            return
        if isinstance(answer, KafkaError):
            self.stats[f"txn client {type(answer).__name__}"] += 1
            self._restart(c)                       # fatal for this instance
            return
        if kind == "init":
            c.pid, c.epoch = answer[0], answer[1]
            c.seq.clear()
            c.phase, c.failed = "ready", False
        elif kind == "add":
            c.phase = "open"
        else:
            # What the coordinator answered, zombie or not (a zombie whose successor has
            # not reached the coordinator yet may still end its transaction).
            commit = request[1][3]
            self.told[c.txn] = commit
            self.stats["txn committed" if commit else "txn aborted"] += 1
            c.phase, c.txn, c.partitions, c.batches = "ready", None, (), 0
            if c.failed:
                c.phase = "uninit"                 # a new epoch: sequences start again

    def _restart(self, c: Client) -> None:
        """The instance is done for (fenced, or the coordinator said no): its application
        closes it and starts a new one."""
        if c.zombie:
            self.zombies = [z for z in self.zombies if z is not c]
        elif self.clients.get(c.tid) is c:
            del self.clients[c.tid]
            self._client(c.tid)

    def client_step(self, tid: str) -> None:
        """The next thing one producer does (its zombie, sometimes)."""
        if self.zombies and self.rng.random() < 0.2:
            c = self.rng.choice(self.zombies)
        else:
            c = self._client(tid)
        now = self.sim.clock()
        expired = [t for t, deadline in c.produces.items() if deadline <= now]
        if expired:
            c.failed = True      # an acks=all batch unanswered in time: its fate is unknown
            for t in expired:
                del c.produces[t]
        if c.request is not None:
            if c.waiting_until is not None and c.waiting_until > now:
                return
            self._request(c, *c.request)           # no answer in time: ask again
            return
        if c.phase == "uninit":
            expected = (c.pid, c.epoch) if c.pid >= 0 else None
            c.phase = "init"
            self._request(c, "init", (c.tid, TXN_TIMEOUT_MS, expected))
        elif c.phase == "ready":
            n = next(self.txn_numbers)
            c.txn = f"{c.tid}.{c.instance}.{n}"
            partitions = self.sim.partitions
            c.partitions = tuple(sorted(self.rng.sample(
                partitions, self.rng.choice([1, len(partitions)]))))
            c.phase, c.batches = "add", 0
            self._request(c, "add", (c.tid, c.pid, c.epoch,
                                     [(TOPIC, p) for p in c.partitions]))
        elif c.phase == "open":
            if c.produces and self.rng.random() < 0.7:
                return                             # waits for its batches (a flush)
            if not c.failed and (c.batches < 2 or self.rng.random() < 0.5) and c.batches < 5:
                self._produce(c, self.rng.choice(c.partitions))
                return
            if c.produces:
                return
            commit = not c.failed and self.rng.random() < 0.85
            c.phase = "end"
            self._request(c, "end", (c.tid, c.pid, c.epoch, commit))

    def _produce(self, c: Client, p: int) -> None:
        sim = self.sim
        leader = sim._some_leader(p)
        c.batches += 1
        if leader is None:
            return
        guard = leader.start_txn_verification(c.pid)
        if guard is not None:
            answer = {} if self.coordinator is None else self.coordinator.verify_partitions(
                c.tid, c.pid, c.epoch, [(TOPIC, p)])
            if self.coordinator is None or any(e is not None for e in answer.values()):
                self.stats["txn batches refused by verification"] += 1
                return
            verified = {c.pid: guard}
        else:
            verified = None
        values = [f"{c.txn}.{p}.{c.batches}.{i}".encode()
                  for i in range(self.rng.choice([1, 3]))]
        seq = c.seq.get(p, 0)
        data = encode_batch([Record(None, v, sim.clock()) for v in values],
                            producer_id=c.pid, producer_epoch=c.epoch, base_sequence=seq,
                            transactional=True)
        token = next(self.tokens)

        def done(result, c=c, token=token) -> None:
            if c.produces.pop(token, None) is not None and result.error is not None:
                c.failed = True
        c.produces[token] = sim.clock() + PRODUCE_TIMEOUT_MS
        try:
            leader.produce(data, acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS, on_done=done,
                           verified=verified)
        except KafkaError as e:
            c.produces.pop(token, None)
            c.failed = True
            self.stats[f"txn batch refused {type(e).__name__}"] += 1
            return
        c.seq[p] = seq + len(values)
        self.stats["txn batches appended"] += 1

    # ---- invariants ------------------------------------------------------------------------
    def check(self, final: bool = False) -> None:
        outcomes: dict[str, set[int]] = {}
        for p in self.sim.partitions:
            leader = self.sim._current_leader(p)
            if leader is None:
                continue
            spans = self._spans(p, leader)
            for txn, span in spans.items():
                if span.kind is not None:
                    outcomes.setdefault(txn, set()).add(span.kind)
            self._check_read_committed(p, leader, spans)
            if final:
                for txn, span in spans.items():
                    if self.told.get(txn) and span.kind != COMMIT:
                        self.sim._fail(f"transaction {txn}, told committed, is not "
                                       f"committed on partition {p} after the heal")
        for txn, kinds in outcomes.items():
            if len(kinds) > 1:
                self.sim._fail(f"transaction {txn} committed on one partition and aborted on "
                               "another")
            told = self.told.get(txn)
            if told is not None and kinds != {COMMIT if told else ABORT}:
                self.sim._fail(f"transaction {txn}: its producer was told "
                               f"{'commit' if told else 'abort'}, a partition has the other "
                               "marker")

    def _spans(self, p: int, leader) -> dict[str, "Span"]:
        """Each transaction on the leader's log: its records there, and its marker (kind and
        offset; None while it is open). The LSO is checked against those still open."""
        log = leader.log
        open_by_pid: dict[int, tuple[int, set[str]]] = {}
        spans: dict[str, Span] = {}
        lso = leader.log.last_stable_offset
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            info = log.read_info(offset, 1 << 20)
            for batch in iter_batches(info.records):
                header = batch.header()
                if header.producer_id < 0 or not header.attributes & TRANSACTIONAL_MASK:
                    continue
                if header.attributes & CONTROL_MASK:
                    record = next(iter(batch.records()))
                    _, txns = open_by_pid.pop(header.producer_id, (None, set()))
                    for txn in txns:
                        spans[txn].kind = control_record_type(record.key)
                        spans[txn].marker = header.base_offset
                    continue
                _, txns = open_by_pid.setdefault(header.producer_id, (header.base_offset, set()))
                for record in batch.records():
                    txn = _txn_of(record.value)
                    txns.add(txn)
                    spans.setdefault(txn, Span()).values[record.value] = record.offset
            offset = info.next_offset
        for first, txns in open_by_pid.values():
            if first < lso:
                self.sim._fail(f"partition {p}: LSO {lso} passed the first offset {first} of "
                               f"the open transaction {sorted(txns)}")
        return spans

    def _check_read_committed(self, p: int, leader, spans: dict) -> None:
        """Read the partition at read_committed as a consumer does (the production fetch
        path to the LSO, then the consumer's skipping of aborted transactions): no record of
        a transaction not committed below the LSO, all of one that is."""
        host = next(b.host for b in self.sim.up.values() if b.host.replicas[p] is leader)
        seen: dict[str, set[bytes]] = {}
        offset = leader.log.log_start_offset
        lso = leader.log.last_stable_offset
        while offset < lso:
            request = FetchManyRequest(-1, 0, 1, 1 << 20, ((TOPIC, p, FetchRequest(
                -1, offset, leader.leader_epoch, isolation_level=1)),))
            answers: list = []
            fetch_many(host.cores, request, host.purgatories.fetch, leader.broker_id,
                       answers.append, host.sessions)
            [(_, _, result)] = answers[0].results
            if result.error is not None or not result.records:
                break
            skip = SkippedBatches(True, result.aborted_transactions)
            before = offset
            for batch in iter_batches(result.records):
                header = batch.header()
                end = header.base_offset + header.last_offset_delta + 1
                if end <= offset:
                    continue
                if end > lso:
                    self.sim._fail(f"partition {p}: read_committed read offset {end - 1} "
                                   f"past the LSO {lso}")
                if not skip(batch, header) and header.attributes & TRANSACTIONAL_MASK:
                    for record in batch.records():
                        seen.setdefault(_txn_of(record.value), set()).add(record.value)
                offset = end
            if offset == before:
                break
        hw = leader.log.high_watermark
        for txn, values in seen.items():
            span = spans.get(txn)
            if span is None or span.kind != COMMIT or span.marker >= hw:
                state = "open" if span is None or span.kind is None else \
                    "aborted" if span.kind == ABORT else f"committed at {span.marker}, HW {hw}"
                self.sim._fail(f"partition {p}: read_committed returned records of "
                               f"transaction {txn} ({state}; LSO {lso})")
        # A committed transaction's records below the LSO are all returned, none skipped
        # (those past it come with later fetches, once the transactions before them end).
        for txn, span in spans.items():
            if span.kind != COMMIT or span.marker >= hw:
                continue
            below = {v for v, o in span.values.items() if o < lso}
            if seen.get(txn, set()) != below:
                self.sim._fail(f"partition {p}: read_committed returned "
                               f"{len(seen.get(txn, ()))} of the {len(below)} records of "
                               f"committed transaction {txn} below the LSO {lso}")


@dataclass
class Span:
    """One transaction on one partition's log."""
    values: dict = field(default_factory=dict)   # value -> offset
    kind: int | None = None          # COMMIT, ABORT, or None while open
    marker: int | None = None        # the marker's offset


def _txn_of(value: bytes) -> str:
    """The transaction a record's value names: ``<tid>.<instance>.<n>.<p>.<batch>.<i>``."""
    return value.decode().rsplit(".", 3)[0]
