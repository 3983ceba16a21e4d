"""One replica of one partition: Kafka's Partition + ReplicaManager decisions, pure.

No Ray here and no I/O but the replica's own ``storage.Log``. Time comes from an injected
clock; delayed produces and fetches wait in purgatories driven by an injected timer. The
actor shell (or the simulator) moves the messages this object asks for: fetches to the
leader, OffsetsForLeaderEpoch before fetching, AlterPartition proposals to the controller.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

from actors.timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from protocols.errors import (FencedLeaderEpochError, InvalidRequiredAcksError,
                              InvalidTxnStateError, KafkaError,
                              NotEnoughReplicasAfterAppendError, NotEnoughReplicasError,
                              NotLeaderOrFollowerError, OffsetNotAvailableError,
                              OffsetOutOfRangeError, RequestTimedOutError,
                              UnknownLeaderEpochError)
from protocols.messages import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED,
                                AlterPartition, DeleteRecordsResult, FetchRequest, FetchResult,
                                ProduceResult)
from protocols.records import iter_batches, transactional_producers
from storage import Log
from storage.epoch import UNDEFINED_EPOCH

log = logging.getLogger(__name__)

CONSUMER_REPLICA_ID = -1


def consumer_limit(log: Log, isolation_level: int) -> int:
    """What a consumer may see (read, or be told of by ListOffsets): up to the high
    watermark, or for read_committed up to the last stable offset."""
    return log.last_stable_offset if isolation_level == READ_COMMITTED \
        else log.high_watermark


def fetch_limit(log: Log, request: FetchRequest) -> int | None:
    """How far a fetch may read: a follower to the log end (None), a consumer to
    ``consumer_limit``."""
    return None if request.replica_id >= 0 else consumer_limit(log, request.isolation_level)


def next_offset_after(records: bytes, default: int) -> int:
    """The offset after the last batch of ``records`` (``default`` when there is none)."""
    last = None
    for last in iter_batches(records):
        pass
    return default if last is None else last.last_offset + 1


class Role(str, Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


@dataclass(frozen=True)
class ReplicaConfig:
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    replica_fetch_backoff_ms: int = 1000
    # Tests only: False restores pre-KIP-101 "truncate to the high watermark".
    leader_epoch_truncation: bool = True
    # KIP-890: a transaction's first batch at a partition is appended only once its
    # coordinator confirms the partition is in the transaction.
    transaction_partition_verification: bool = True

    @classmethod
    def from_broker_config(cls, b: dict) -> "ReplicaConfig":
        return cls(replica_lag_time_max_ms=b["replica.lag.time.max.ms"],
                   replica_fetch_wait_max_ms=b["replica.fetch.wait.max.ms"],
                   replica_fetch_min_bytes=b["replica.fetch.min.bytes"],
                   replica_fetch_max_bytes=b["replica.fetch.max.bytes"],
                   replica_fetch_response_max_bytes=b["replica.fetch.response.max.bytes"],
                   replica_fetch_backoff_ms=b["replica.fetch.backoff.ms"],
                   transaction_partition_verification=b[
                       "transaction.partition.verification.enable"])


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's remote Replica)."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_fetch_ms: int = -1
    last_fetch_leader_log_end_offset: int = -1
    last_caught_up_ms: int = 0
    # The largest replica epoch its fetches named (Kafka's broker epoch, KIP-903): a fetch
    # naming a smaller one was sent by an earlier start of the follower and arrived late.
    replica_epoch: int = -1
    # The fetch session where this partition sits parked for this follower
    # (actors.replica.fetch_session): each of its fetches counts as a caught-up fetch here.
    parked_in: Any = None

    def caught_up_ms(self) -> int:
        if self.parked_in is None:
            return self.last_caught_up_ms
        return max(self.last_caught_up_ms, self.parked_in.last_used_ms)


@dataclass
class Purgatories:
    """Where a replica's delayed operations wait. A replica host shares one set among all
    its replicas (Kafka's ReplicaManager has one purgatory per kind, keyed by partition), so
    one delayed fetch can watch many partitions."""

    produce: DelayedOperationPurgatory
    fetch: DelayedOperationPurgatory
    delete_records: DelayedOperationPurgatory

    @classmethod
    def create(cls, timer, broker_id: int = -1) -> "Purgatories":
        return cls(DelayedOperationPurgatory("Produce", timer, broker_id=broker_id),
                   DelayedOperationPurgatory("Fetch", timer, broker_id=broker_id),
                   DelayedOperationPurgatory("DeleteRecords", timer, broker_id=broker_id))


class _DelayedWithResult(DelayedOperation):
    """A delayed operation that hands ``result`` to ``on_done`` exactly once; on expiry the
    result carries the error ``timeout_error`` builds (REQUEST_TIMED_OUT)."""

    def __init__(self, delay_ms: int, replica: "PartitionReplica", result, on_done):
        super().__init__(delay_ms)
        self.replica = replica
        self.result = result
        self.on_done = on_done

    def timeout_error(self) -> KafkaError:
        raise NotImplementedError  # each operation words its own timeout

    def on_complete(self) -> None:
        self.on_done(self.result)

    def on_expiration(self) -> None:
        pass

    def run(self) -> None:
        with self.lock:
            if not self.is_completed:
                self.result.error = self.timeout_error()
        super().run()


class DelayedProduce(_DelayedWithResult):
    """acks=all: completes once the HW reaches ``required_offset`` (or times out)."""

    def __init__(self, delay_ms: int, replica: "PartitionReplica", required_offset: int,
                 result: ProduceResult, on_done: Callable[[ProduceResult], None]):
        super().__init__(delay_ms, replica, result, on_done)
        self.required_offset = required_offset

    def try_complete(self) -> bool:
        error = self.replica.check_enough_replicas_reach_offset(self.required_offset)
        if error is False:
            return False
        self.result.error = error
        return self.force_complete()

    def timeout_error(self) -> KafkaError:
        return RequestTimedOutError(f"acks=all produce to {self.replica.name} timed out "
                                    f"waiting for the high watermark to reach "
                                    f"{self.required_offset}")


class DelayedDeleteRecords(_DelayedWithResult):
    """DeleteRecords: completes once every replica's log start offset (the low watermark)
    has reached the requested offset, or times out."""

    def __init__(self, delay_ms: int, replica: "PartitionReplica", offset: int,
                 on_done: Callable[[DeleteRecordsResult], None]):
        super().__init__(delay_ms, replica, DeleteRecordsResult(), on_done)
        self.offset = offset

    def try_complete(self) -> bool:
        r = self.replica
        if r.role is not Role.LEADER:
            self.result.error = NotLeaderOrFollowerError(f"Leadership of {r.name} moved")
            return self.force_complete()
        low = r.low_watermark
        if low >= self.offset:
            self.result.low_watermark = low
            return self.force_complete()
        return False

    def timeout_error(self) -> KafkaError:
        return RequestTimedOutError(f"DeleteRecords on {self.replica.name} timed out at low "
                                    f"watermark {self.replica.low_watermark} (wanted "
                                    f"{self.offset})")


class DelayedFetch(DelayedOperation):
    """Completes once ``min_bytes`` are readable (after an append for followers, after an
    HW increase for consumers) or after ``max_wait_ms`` with whatever there is."""

    def __init__(self, replica: "PartitionReplica", request: FetchRequest,
                 on_done: Callable[[FetchResult], None]):
        super().__init__(request.max_wait_ms)
        self.replica = replica
        self.request = request
        self.on_done = on_done

    def try_complete(self) -> bool:
        r = self.replica
        if r.role is not Role.LEADER:
            return self.force_complete()
        limit = r.log.log_end_offset if self.request.replica_id >= 0 else r.high_watermark
        if limit > self.request.fetch_offset:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        try:
            self.on_done(self.replica.read_for_fetch(self.request))
        except KafkaError as e:
            self.on_done(FetchResult(error=e, leader_epoch=self.replica.leader_epoch,
                                     fetch_offset=self.request.fetch_offset))

    def on_expiration(self) -> None:
        pass


class PartitionReplica:
    def __init__(self, topic: str, partition: int, broker_id: int, log_: Log, *,
                 clock: Callable[[], int], timer=None, config: ReplicaConfig = ReplicaConfig(),
                 on_high_watermark: Callable[[int], None] | None = None,
                 purgatories: Purgatories | None = None):
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log_
        self.clock = clock
        self.config = config
        self.on_high_watermark = on_high_watermark
        self.role = Role.OFFLINE
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.followers: dict[int, FollowerState] = {}
        self.pending_alter: AlterPartition | None = None
        self.needs_truncation = False
        self._key = (topic, partition)  # the purgatories' watch key
        # The last fetch request built, and the state it was built from: an idle follower
        # asks the same thing twice a second (its fetcher compares requests by identity).
        self._fetch_request: tuple[tuple, FetchRequest] | None = None
        # Producer id -> the guard of its transaction's verification with the coordinator
        # (Kafka's VerificationGuard): a marker for the producer meanwhile voids it.
        self._verification: dict[int, object] = {}
        if purgatories is None:
            purgatories = Purgatories.create(timer, broker_id)
        self.produce_purgatory = purgatories.produce
        self.fetch_purgatory = purgatories.fetch
        self.delete_records_purgatory = purgatories.delete_records

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    # ==== controller-driven transitions ===================================================
    def _check_newer_epoch(self, leader_epoch: int) -> None:
        if leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"LeaderAndIsr for {self.name} with leader epoch {leader_epoch} is older than "
                f"the current {self.leader_epoch}")

    def become_leader(self, leader_epoch: int, partition_epoch: int, isr: list[int],
                      replicas: list[int]) -> None:
        self._check_newer_epoch(leader_epoch)
        now = self.clock()
        self.role = Role.LEADER
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.pending_alter = None
        self.needs_truncation = False
        # The new epoch starts at our log end: what we hold is this epoch's history.
        self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
        self.followers = {r: FollowerState(r, last_caught_up_ms=now)
                          for r in self.replicas if r != self.broker_id}
        self.maybe_increment_high_watermark()
        self.wake_fetchers()  # a new epoch: fetchers must hear

    def become_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int,
                        replicas: list[int], isr: list[int] | None = None) -> None:
        self._check_newer_epoch(leader_epoch)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr or [])
        self.followers = {}
        self.pending_alter = None
        self._complete_all_delayed()
        if self.config.leader_epoch_truncation:
            self.needs_truncation = True  # ask the leader first: see truncation_request
        else:
            # Pre-KIP-101: cut back to the (checkpointed) high watermark, then fetch.
            self.log.truncate_to(self.log.high_watermark)
            self.needs_truncation = False

    def apply_leader_and_isr(self, leader: int, leader_epoch: int, partition_epoch: int,
                             isr: list[int], replicas: list[int]) -> bool:
        """Apply a LeaderAndIsr (FENCED_LEADER_EPOCH if older than ours). Returns True when
        this replica now follows a new leader or epoch (its fetcher must start over)."""
        same = (self.leader_id == leader and self.leader_epoch == leader_epoch
                and self.role is (Role.LEADER if leader == self.broker_id else Role.FOLLOWER))
        if same:
            self.update_assignment(partition_epoch, isr, replicas)
            return False
        if leader == self.broker_id:
            self.become_leader(leader_epoch, partition_epoch, isr, replicas)
            return False
        if leader >= 0:
            self.become_follower(leader, leader_epoch, partition_epoch, replicas, isr)
            return True
        self.make_offline()
        return False

    def update_assignment(self, partition_epoch: int, isr: list[int],
                          replicas: list[int]) -> None:
        """A LeaderAndIsr in our current leader epoch: only the ISR or the replica set moved
        (a reassignment, or a new controller restating the state). Keep our role; a leader
        keeps what it knows of its followers and starts tracking new replicas.

        The controller moves the partition epoch with every change of ISR or replicas, so
        one no newer than ours restates what we hold. It must not withdraw an AlterPartition
        in flight: the controller may accept it after the restatement was sent, and a
        leader that forgot the proposal would ignore that answer and go on computing its HW
        over a smaller ISR than the controller's, which may later elect a replica missing
        records acknowledged meanwhile (found by the simulator: a controller failover's
        restatement crossing an ISR expansion)."""
        if partition_epoch <= self.partition_epoch:
            return
        self.partition_epoch = partition_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        if self.role is Role.LEADER:
            now = self.clock()
            self.followers = {r: self.followers.get(r) or FollowerState(r, last_caught_up_ms=now)
                              for r in self.replicas if r != self.broker_id}
            self.pending_alter = None
            self.maybe_increment_high_watermark()
            self.wake_fetchers()  # the ISR or replicas moved

    def make_offline(self) -> None:
        self.role = Role.OFFLINE
        self._complete_all_delayed()

    def _complete_all_delayed(self) -> None:
        self.produce_purgatory.check_and_complete(self._key)
        self.fetch_purgatory.check_and_complete(self._key)
        self.delete_records_purgatory.check_and_complete(self._key)

    # ==== follower side ===================================================================
    def truncation_request(self) -> int | None:
        """The epoch to ask the leader about (OffsetsForLeaderEpoch), or None."""
        if self.role is not Role.FOLLOWER or not self.needs_truncation:
            return None
        latest = self.log.leader_epoch_cache.latest_epoch
        return UNDEFINED_EPOCH if latest is None else latest

    def on_leader_epoch_end_offset(self, epoch: int, end_offset: int,
                                   leader_epoch: int | None = None) -> int | None:
        """Truncate as KIP-279 says and return the truncation offset. ``leader_epoch`` is
        the epoch the request was sent in: a late answer from an earlier leadership, or one
        arriving after truncation already happened, is dropped (None)."""
        if (self.role is not Role.FOLLOWER or not self.needs_truncation
                or (leader_epoch is not None and leader_epoch != self.leader_epoch)):
            return None
        leo = self.log.log_end_offset
        done = True
        if end_offset < 0:
            # The leader knows nothing of our epoch (or we have none): fall back to the HW.
            target = self.log.high_watermark
        else:
            own_epoch, own_end = self.log.leader_epoch_cache.end_offset_for(epoch, leo)
            if own_end < 0:
                target = min(end_offset, leo)
            elif own_epoch != epoch:
                # The leader answered for an epoch we never had (its largest <= ours). Our
                # history diverges after the end of our own largest epoch below it: cut
                # there and ask again about that epoch (Kafka's intermediate truncation).
                target = min(own_end, leo)
                done = False
            else:
                target = min(end_offset, own_end, leo)
        self.log.truncate_to(target)
        # Also when nothing was cut: an epoch that starts at our log end (we led it and
        # wrote nothing) must go, or the next question would be the same one.
        self.log.leader_epoch_cache.truncate_from_end(target)
        self.needs_truncation = not done
        return self.log.log_end_offset

    def fetch_request(self) -> FetchRequest | None:
        if self.role is not Role.FOLLOWER or self.needs_truncation:
            return None
        state = (self.log.log_end_offset, self.leader_epoch, self.log.log_start_offset)
        cached = self._fetch_request
        if cached is not None and cached[0] == state:
            return cached[1]
        c = self.config
        request = FetchRequest(self.broker_id, state[0], state[1], c.replica_fetch_max_bytes,
                               c.replica_fetch_min_bytes, c.replica_fetch_wait_max_ms, state[2])
        self._fetch_request = (state, request)
        return request

    def on_fetch_result(self, result: FetchResult) -> None:
        if self.role is not Role.FOLLOWER or self.needs_truncation:
            return
        if (result.leader_epoch != self.leader_epoch
                or result.fetch_offset != self.log.log_end_offset):
            return  # a late answer to an old request: its data may no longer fit
        if isinstance(result.error, OffsetOutOfRangeError):
            if result.log_start_offset > self.log.log_end_offset:
                self.log.truncate_fully_and_start_at(result.log_start_offset)
            elif 0 <= result.log_end_offset < self.log.log_end_offset:
                # Pre-epoch behaviour's last resort: cut to the leader's end.
                self.log.truncate_to(result.log_end_offset)
            return
        if result.error is not None:
            return
        if result.records:
            self.log.append_as_follower(result.records)
        new_hw = min(result.high_watermark, self.log.log_end_offset)
        if new_hw > self.log.high_watermark:
            self._set_high_watermark(new_hw)
        if result.log_start_offset > self.log.log_start_offset:
            self.log.delete_records(min(result.log_start_offset, self.log.high_watermark))

    # ==== leader side: produce ============================================================
    def produce(self, records: bytes, acks: int, timeout_ms: int,
                on_done: Callable[[ProduceResult], None] | None = None,
                verified: dict[int, object] | None = None) -> ProduceResult | None:
        """Append as leader. acks 0/1 answer at once; acks=-1 answers when the HW passes
        the batch. ``on_done`` is called exactly once; the result is also returned when it
        is known at once. ``verified``: producer id -> the guard of its transaction's
        verification (``start_txn_verification``), for transactional records."""
        done = on_done or (lambda r: None)
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), not {acks}")
        self._check_leader_with_isr(acks)
        producers = transactional_producers(records)
        for producer_id in producers:
            self._check_verified(producer_id, (verified or {}).get(producer_id))
        appended = self.log.append_as_leader(records, self.leader_epoch)
        for producer_id in producers:
            self._verification.pop(producer_id, None)   # its transaction is open here now
        return self._appended(appended, acks, timeout_ms, done)

    def start_txn_verification(self, producer_id: int) -> object | None:
        """A transactional batch of a producer whose transaction is not open here yet is
        appended only after its coordinator confirms the partition is in the transaction
        (KIP-890, ``transaction.partition.verification.enable``): None when no verification
        is needed, else the guard to give ``produce`` once the coordinator has answered.
        A marker for the producer written meanwhile voids the guard, so a batch verified
        for a transaction that has since ended cannot open a transaction nobody ends."""
        if not self.config.transaction_partition_verification \
                or self.log.producer_state.has_ongoing_txn(producer_id):
            return None
        # Batches of the transaction arriving together (several requests in flight) share
        # the guard, as Kafka's VerificationStateEntry is shared: only a marker voids it.
        guard = self._verification.get(producer_id)
        if guard is None:
            guard = self._verification[producer_id] = object()
        return guard

    def _check_verified(self, producer_id: int, guard: object | None) -> None:
        if not self.config.transaction_partition_verification \
                or self.log.producer_state.has_ongoing_txn(producer_id):
            return
        if guard is None or self._verification.get(producer_id) is not guard:
            raise InvalidTxnStateError(
                f"The transactional records of producer {producer_id} to {self.name} were "
                "not verified with its transaction coordinator, or its transaction ended "
                "since: the partition must be added to the transaction (AddPartitionsToTxn) "
                "before the produce")

    def write_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         commit: bool, timeout_ms: int,
                         on_done: Callable[[ProduceResult], None] | None = None
                         ) -> ProduceResult | None:
        """End a producer's transaction here with a COMMIT or ABORT marker, as the
        transaction coordinator asks (Kafka's WriteTxnMarkers): appended as leader and
        answered once the ISR has it (acks=all), as Kafka's coordinator requires."""
        done = on_done or (lambda r: None)
        self._check_leader_with_isr(-1)
        self._verification.pop(producer_id, None)
        info = self.log.append_end_txn_marker(producer_id, producer_epoch, coordinator_epoch,
                                              commit, self.leader_epoch)
        return self._appended(info, -1, timeout_ms, done)

    def _check_leader_with_isr(self, acks: int) -> None:
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"Broker {self.broker_id} is not the leader of "
                                           f"{self.name}")
        min_isr = self.log.config.min_insync_replicas
        if acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {self.isr} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr} for partition {self.name}")

    def _appended(self, info, acks: int, timeout_ms: int,
                  done: Callable[[ProduceResult], None]) -> ProduceResult | None:
        """After an append as leader: the result now (acks 0/1, or the ISR already has
        it), or None and ``done`` called once the HW passes it or the timeout comes."""
        result = ProduceResult(info.first_offset, info.log_append_time,
                               self.log.log_start_offset)
        self.fetch_purgatory.check_and_complete(self._key)  # followers waiting for data
        self.maybe_increment_high_watermark()
        if acks != -1:
            done(result)
            return result
        op = DelayedProduce(timeout_ms, self, info.last_offset + 1, result, done)
        if self.produce_purgatory.try_complete_else_watch(op, [self._key]):
            return result
        return None

    def check_enough_replicas_reach_offset(self, required_offset: int):
        """False while waiting; None when done; an error when it cannot succeed."""
        if self.role is not Role.LEADER:
            return NotLeaderOrFollowerError(f"Leadership of {self.name} moved while an acks=all "
                                            "produce waited")
        if self.log.high_watermark >= required_offset:
            min_isr = self.log.config.min_insync_replicas
            if len(self.isr) < min_isr:
                return NotEnoughReplicasAfterAppendError(
                    f"The ISR of {self.name} shrank to {self.isr} while waiting, below "
                    f"min.insync.replicas={min_isr}")
            return None
        return False

    # ==== leader side: fetch ==============================================================
    def check_fetch_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"Fetch for {self.name} with leader epoch "
                                         f"{current_leader_epoch} < {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(f"Fetch for {self.name} with leader epoch "
                                          f"{current_leader_epoch} > {self.leader_epoch}")

    def fetch(self, request: FetchRequest,
              on_done: Callable[[FetchResult], None] | None = None) -> FetchResult | None:
        """Serve a follower's or a consumer's fetch; long-poll in a DelayedFetch when fewer
        than ``min_bytes`` are there and ``max_wait_ms`` > 0."""
        done = on_done or (lambda r: None)
        self.accept_fetch(request)
        result = self.read_or_out_of_range(request)
        if (result.error is not None or len(result.records) >= request.min_bytes
                or request.max_wait_ms <= 0):
            done(result)
            return result
        # Either completes at once (done gets a fresh read) or waits for an append / HW rise.
        self.fetch_purgatory.try_complete_else_watch(DelayedFetch(self, request, done),
                                                     [self._key])
        return None

    def accept_fetch(self, request: FetchRequest, replica_epoch: int = -1) -> bool:
        """Check a fetch against this replica's role and leader epoch (raising Kafka's
        errors) and record a follower's position: its ISR and the HW may move. False when
        nothing could have moved (a consumer's fetch, or an in-sync follower asking again
        from our log end): no ISR change to send. ``replica_epoch``: which start of the
        follower sent it (``FetchManyRequest.replica_epoch``)."""
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"Broker {self.broker_id} is not the leader of "
                                           f"{self.name}")
        self.check_fetch_epoch(request.current_leader_epoch)
        if request.replica_id >= 0:
            return self._update_follower(request.replica_id, request.fetch_offset,
                                         request.log_start_offset, replica_epoch)
        return False

    def wake_fetchers(self) -> None:
        """Something a fetcher is told of moved outside its fetch (a new leader epoch, the
        ISR, the log start): the fetches waiting here, and the fetch sessions that parked
        this partition, hear of it."""
        self.fetch_purgatory.check_and_complete(self._key)

    def park_follower(self, replica_id: int, session: Any) -> None:
        """The follower's fetch session skips this partition while it is idle: its fetches
        count as caught up here (``FollowerState.caught_up_ms``)."""
        state = self.followers.get(replica_id)
        if state is not None:
            state.parked_in = session

    def unpark_follower(self, replica_id: int, session: Any) -> None:
        """Something happened here: the follower's last fetch in the session, at our log
        end, becomes its recorded one (Kafka's rule reads it at the follower's next fetch)."""
        state = self.followers.get(replica_id)
        if state is not None and state.parked_in is session:
            fetched = session.last_used_ms
            state.last_caught_up_ms = max(state.last_caught_up_ms, fetched)
            state.last_fetch_ms = max(state.last_fetch_ms, fetched)
            state.parked_in = None

    def read_or_out_of_range(self, request: FetchRequest, as_region: bool = False
                             ) -> FetchResult:
        """The read, or OFFSET_OUT_OF_RANGE with where the log starts and ends (a follower
        cuts or restarts its log from them)."""
        try:
            return self.read_for_fetch(request, as_region)
        except OffsetOutOfRangeError as e:
            return FetchResult(b"", self.log.high_watermark, self.log.log_start_offset,
                               self.log.log_end_offset, e, self.leader_epoch,
                               request.fetch_offset)

    def read_for_fetch(self, request: FetchRequest, as_region: bool = False) -> FetchResult:
        """A follower reads to the log end, a consumer to the high watermark, a
        read_committed consumer to the last stable offset, told which transactions in what
        it read were aborted (Kafka's LocalLog.read with FetchIsolation.TXN_COMMITTED).
        ``as_region``: a consumer's records are named, not read (a FileRegion, for a broker
        on this node to send from the file); its last batch may be partial, so a
        read_committed one is told the aborted transactions below an offset at or past the
        region's end (``Log.read_info``'s bound: a superset, as Kafka's is)."""
        log = self.log
        consumer = request.replica_id < 0
        committed = consumer and request.isolation_level == READ_COMMITTED
        limit = fetch_limit(log, request)
        if as_region and consumer:
            info = log.read_info(request.fetch_offset, request.max_bytes, max_offset=limit,
                                 as_region=True)
            records = info.records
            upper = min(limit, info.next_offset) if records else request.fetch_offset
        else:
            records = log.read(request.fetch_offset, request.max_bytes, max_offset=limit)
            upper = next_offset_after(records, request.fetch_offset) if committed else -1
        aborted = None
        if committed:
            aborted = tuple((t.producer_id, t.first_offset)
                            for t in log.collect_aborted_transactions(request.fetch_offset,
                                                                      upper)) \
                if upper > request.fetch_offset else ()
        return FetchResult(records, log.high_watermark, log.log_start_offset,
                           log.log_end_offset, None, self.leader_epoch, request.fetch_offset,
                           log.last_stable_offset, aborted)

    def _update_follower(self, replica_id: int, fetch_offset: int,
                         log_start_offset: int = -1, replica_epoch: int = -1) -> bool:
        state = self.followers.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(f"Broker {replica_id} is not a replica of "
                                           f"{self.name}")
        if replica_epoch >= 0:
            # Kafka's Replica.updateFetchStateOrThrow: a dead start's fetch, delivered after
            # its successor's, would set the position back to where the dead one was, and
            # the successor's fetch session would not say it again while it stays put.
            if replica_epoch < state.replica_epoch:
                raise NotLeaderOrFollowerError(
                    f"Received stale fetch state update from broker {replica_id} for "
                    f"{self.name}: replica epoch {replica_epoch} vs expected "
                    f"{state.replica_epoch}")
            state.replica_epoch = replica_epoch
        now = self.clock()
        leo = self.log.log_end_offset
        if (fetch_offset == state.log_end_offset >= leo and state.broker_id in self.isr
                and log_start_offset == state.log_start_offset):
            # An idle in-sync follower at our end, asking again (twice a second, for every
            # partition of its fetch session): it stays caught up; nothing else can move.
            state.last_caught_up_ms = state.last_fetch_ms = now
            state.last_fetch_leader_log_end_offset = leo
            return False
        # Kafka's rule: caught up if it fetched from where our log ended at its last fetch.
        if fetch_offset >= self.log.log_end_offset:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.last_fetch_leader_log_end_offset >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        if log_start_offset >= 0:
            state.log_start_offset = log_start_offset
            self.delete_records_purgatory.check_and_complete(self._key)
        state.last_fetch_ms = now
        state.last_fetch_leader_log_end_offset = self.log.log_end_offset
        self._maybe_expand_isr(state)
        self.maybe_increment_high_watermark()
        return True

    # ==== high watermark and ISR ==========================================================
    def _maximal_isr(self) -> list[int]:
        """The ISR HW must respect: current ISR plus replicas a pending expansion adds."""
        isr = list(self.isr)
        if self.pending_alter is not None:
            isr.extend(r for r in self.pending_alter.new_isr if r not in isr)
        return isr

    def maybe_increment_high_watermark(self) -> bool:
        if self.role is not Role.LEADER:
            return False
        candidates = [self.log.log_end_offset]
        for r in self._maximal_isr():
            if r != self.broker_id:
                state = self.followers.get(r)
                candidates.append(state.log_end_offset if state else -1)
        new_hw = min(candidates)
        if new_hw > self.log.high_watermark:
            self._set_high_watermark(new_hw)
            self.produce_purgatory.check_and_complete(self._key)
            self.fetch_purgatory.check_and_complete(self._key)
            return True
        return False

    def _set_high_watermark(self, hw: int) -> None:
        self.log.update_high_watermark(hw)
        if self.on_high_watermark is not None:
            self.on_high_watermark(self.log.high_watermark)

    def _maybe_expand_isr(self, state: FollowerState) -> None:
        if (state.broker_id in self.isr or self.pending_alter is not None
                or state.log_end_offset < self.log.high_watermark):
            return
        start = next((e.start_offset for e in self.log.leader_epoch_cache.epoch_entries()
                      if e.epoch == self.leader_epoch), 0)
        if state.log_end_offset < start:
            return  # not yet past the start of this leader's epoch
        self._propose(self.isr + [state.broker_id])

    def maybe_shrink_isr(self) -> AlterPartition | None:
        """replica.lag.time.max.ms: followers that have not caught up for that long leave."""
        if self.role is not Role.LEADER or self.pending_alter is not None:
            return None
        now = self.clock()
        lagging = [r for r in self.isr if r != self.broker_id and
                   now - self.followers[r].caught_up_ms() > self.config.replica_lag_time_max_ms]
        if not lagging:
            return None
        return self._propose([r for r in self.isr if r not in lagging])

    def _propose(self, new_isr: list[int]) -> AlterPartition:
        self.pending_alter = AlterPartition(self.topic, self.partition, self.broker_id,
                                            self.leader_epoch, self.partition_epoch,
                                            tuple(new_isr))
        return self.pending_alter

    def take_alter_partition(self) -> AlterPartition | None:
        """The proposal waiting to be sent to the controller, if any."""
        return self.pending_alter

    def on_alter_partition_result(self, isr: list[int] | None, partition_epoch: int,
                                  error: KafkaError | None = None) -> None:
        self.pending_alter = None
        if error is None and isr is not None:
            self.isr = list(isr)
            self.partition_epoch = partition_epoch
            self.wake_fetchers()  # parked fetches: ISR moved
        self.maybe_increment_high_watermark()
        self.produce_purgatory.check_and_complete(self._key)

    # ==== DeleteRecords ===================================================================
    @property
    def low_watermark(self) -> int:
        """The smallest log start offset over the live replicas (Kafka's lowWatermark)."""
        starts = [self.log.log_start_offset]
        starts += [f.log_start_offset for f in self.followers.values()
                   if f.broker_id in self.isr]
        return min(starts)

    def delete_records(self, offset: int, timeout_ms: int,
                       on_done: Callable[[DeleteRecordsResult], None] | None = None
                       ) -> DeleteRecordsResult | None:
        """Move the log start offset to ``offset`` (-1: the HW); answer once every in-sync
        replica has followed (their fetches carry their log start offsets)."""
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"Broker {self.broker_id} is not the leader of "
                                           f"{self.name}")
        target = self.log.high_watermark if offset == -1 else offset
        self.log.delete_records(target)  # OffsetOutOfRangeError above the HW
        self.wake_fetchers()
        op = DelayedDeleteRecords(timeout_ms, self, target, on_done or (lambda r: None))
        if self.delete_records_purgatory.try_complete_else_watch(op, [self._key]):
            return op.result
        return None

    # ==== other requests ==================================================================
    def list_offsets(self, timestamp: int, current_leader_epoch: int = -1,
                     isolation_level: int = 0) -> tuple[int, int]:
        """ListOffsets on the leader: ``(offset, timestamp)``. EARLIEST_TIMESTAMP gives the
        log start offset, LATEST_TIMESTAMP the high watermark (what a consumer can read up
        to; for read_committed the last stable offset), any other time the first offset at
        or after it below that (``(-1, -1)`` when there is none)."""
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"Broker {self.broker_id} is not the leader of "
                                           f"{self.name}")
        self.check_fetch_epoch(current_leader_epoch)
        log = self.log
        if timestamp == EARLIEST_TIMESTAMP:
            return log.log_start_offset, -1
        epoch_start = next((e.start_offset for e in log.leader_epoch_cache.epoch_entries()
                            if e.epoch == self.leader_epoch), 0)
        if self.high_watermark < epoch_start:
            # KIP-207: a new leader does not know the committed end until its followers have
            # fetched in its epoch; "latest" now could go backwards.
            raise OffsetNotAvailableError(
                f"The high watermark of {self.name} is not yet known in leader epoch "
                f"{self.leader_epoch}; retry")
        fetchable = consumer_limit(log, isolation_level)
        if timestamp == LATEST_TIMESTAMP:
            return fetchable, -1
        found = log.fetch_offset_by_timestamp(timestamp)
        if found is None or found[1] >= fetchable:
            return -1, -1
        found_timestamp, offset = found
        return offset, found_timestamp

    def active_producers(self) -> list[tuple[int, int, int, int, int, int]]:
        """DescribeProducers on the leader: ``(producer id, epoch, last sequence, last
        timestamp, coordinator epoch, current transaction's first offset or -1)`` of each
        producer whose state this log keeps."""
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"Broker {self.broker_id} is not the leader of "
                                           f"{self.name}")
        return [(e.producer_id, e.epoch, e.last_seq,
                 e.batches[-1].timestamp if e.batches else e.last_timestamp,
                 e.coordinator_epoch,
                 -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
                for e in self.log.producer_state.producers.values()]

    def offsets_for_leader_epoch(self, requested_epoch: int,
                                 current_leader_epoch: int = -1) -> tuple[int, int]:
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(f"Broker {self.broker_id} is not the leader of "
                                           f"{self.name}")
        self.check_fetch_epoch(current_leader_epoch)
        return self.log.leader_epoch_cache.end_offset_for(requested_epoch,
                                                          self.log.log_end_offset)
