"""A transactional id's state at its coordinator (Kafka's TransactionState and
TransactionMetadata), pure.

A change is made in two steps, as in Kafka: ``prepare_*`` checks that the transition is
allowed from the current state and returns the ``TxnTransitMetadata`` to write to
``__transaction_state`` (the metadata then has that state pending, and refuses another
preparation); once the write is replicated, ``complete_transition`` applies it (or, if the
write failed, ``abort_pending`` forgets it). So the coordinator never answers from a state
its log does not hold.

The transitions are Kafka's for transaction versions 0 and 1 (the producer's epoch is bumped
by InitProducerId and when the coordinator fences a producer, not by every transaction's
end; version 2's per-transaction bump, KIP-890 part 2, is not offered).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum

from protocols.errors import ProducerFencedError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 2**15 - 1


class TransactionState(Enum):
    """Kafka's states: (id in the log, name DescribeTransactions shows, expiration allowed)."""

    EMPTY = (0, "Empty", True)
    ONGOING = (1, "Ongoing", False)
    PREPARE_COMMIT = (2, "PrepareCommit", False)
    PREPARE_ABORT = (3, "PrepareAbort", False)
    COMPLETE_COMMIT = (4, "CompleteCommit", True)
    COMPLETE_ABORT = (5, "CompleteAbort", True)
    DEAD = (6, "Dead", False)
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence", False)

    def __init__(self, state_id: int, state_name: str, expiration_allowed: bool):
        self.id = state_id
        self.state_name = state_name
        self.expiration_allowed = expiration_allowed

    @classmethod
    def from_id(cls, state_id: int) -> "TransactionState":
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"Unknown transaction state id {state_id} from the transaction "
                         "status message")

    @property
    def valid_previous_states(self) -> frozenset:
        return _PREVIOUS[self]


S = TransactionState
_PREVIOUS = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


@dataclass(frozen=True)
class TxnTransitMetadata:
    """What one transition writes to ``__transaction_state`` (the record's value)."""
    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset
    txn_start_timestamp: int
    txn_last_update_timestamp: int


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing: a producer may not be given SHORT_MAX."""
    return epoch >= SHORT_MAX - 1


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TransactionState = TransactionState.EMPTY
    topic_partitions: set = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    # A fence whose write failed keeps its bumped epoch unused: the next fence reuses it.
    has_failed_epoch_fence: bool = False

    # ---- preparing a transition ------------------------------------------------------------
    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Fence the producer (its transaction timed out, or a new instance of the same
        transactional id is initialising): the epoch goes up by one, then the transaction
        is aborted."""
        epoch = self.producer_epoch if self.has_failed_epoch_fence \
            or self.producer_epoch == SHORT_MAX else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=epoch)

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int,
                                         expected_epoch: int | None,
                                         now_ms: int) -> TxnTransitMetadata:
        """InitProducerId for this transactional id: a new epoch (KIP-360: a producer that
        gives its current epoch may recover after an error; its previous epoch, a retry of a
        call that succeeded; anything else is fenced)."""
        if is_epoch_exhausted(self.producer_epoch):
            raise ValueError(f"Cannot allocate any more producer epochs for producerId "
                             f"{self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFencedError(
                f"There is a newer producer with the same transactionalId which fences the "
                f"current one: epoch {expected_epoch} is neither {self.producer_epoch} nor "
                f"{self.last_producer_epoch}")
        return self._prepare(S.EMPTY, producer_epoch=epoch, last_producer_epoch=last,
                             txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(),
                             txn_start_timestamp=-1, txn_last_update_timestamp=now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, txn_timeout_ms: int,
                                     now_ms: int, record_last_epoch: bool
                                     ) -> TxnTransitMetadata:
        """The epochs of the producer id ran out: a new producer id, from epoch 0."""
        if self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT):
            raise ValueError("Cannot rotate producer ids while a transaction is still pending")
        return self._prepare(S.EMPTY, producer_id=new_producer_id, producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch
                             else NO_PRODUCER_EPOCH, txn_timeout_ms=txn_timeout_ms,
                             topic_partitions=frozenset(), txn_start_timestamp=-1,
                             txn_last_update_timestamp=now_ms)

    def prepare_add_partitions(self, partitions, now_ms: int) -> TxnTransitMetadata:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) \
            else self.txn_start_timestamp
        return self._prepare(S.ONGOING,
                             topic_partitions=frozenset(self.topic_partitions | set(partitions)),
                             txn_start_timestamp=start, txn_last_update_timestamp=now_ms)

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int
                                ) -> TxnTransitMetadata:
        return self._prepare(state, txn_last_update_timestamp=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        self.has_failed_epoch_fence = False
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare(state, next_producer_id=NO_PRODUCER_ID,
                             topic_partitions=frozenset(), txn_last_update_timestamp=now_ms)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, topic_partitions=frozenset())

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The current state as a transit, without a pending state (a fence then aborts)."""
        return self._transit(self.state)

    def _transit(self, state: TransactionState, **changes) -> TxnTransitMetadata:
        values = dict(producer_id=self.producer_id, prev_producer_id=self.prev_producer_id,
                      next_producer_id=self.next_producer_id,
                      producer_epoch=self.producer_epoch,
                      last_producer_epoch=self.last_producer_epoch,
                      txn_timeout_ms=self.txn_timeout_ms, state=state,
                      topic_partitions=frozenset(self.topic_partitions),
                      txn_start_timestamp=self.txn_start_timestamp,
                      txn_last_update_timestamp=self.txn_last_update_timestamp)
        values.update(changes)
        return TxnTransitMetadata(**values)

    def _prepare(self, state: TransactionState, **changes) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransition(
                f"Preparing transaction state transition to {state.state_name} while it "
                f"already has a pending state {self.pending_state.state_name}")
        transit = self._transit(state, **changes)
        if transit.producer_id < 0:
            raise ValueError(f"Illegal new producer id {transit.producer_id}")
        if state is not S.DEAD and transit.producer_epoch < 0:
            raise ValueError(f"Illegal new producer epoch {transit.producer_epoch}")
        if self.state not in state.valid_previous_states:
            raise IllegalTransition(
                f"Preparing transaction state transition to {state.state_name} failed since "
                f"the target state {state.state_name} is not a valid previous state of the "
                f"current state {self.state.state_name}")
        # The new record names the producer id it replaces (Kafka's prevProducerId).
        transit = dataclasses.replace(transit, prev_producer_id=self.producer_id)
        self.pending_state = state
        return transit

    # ---- completing it ---------------------------------------------------------------------
    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """The transit's record is in the log: it becomes the state (Kafka's checks that
        it is the one prepared and follows from the current state)."""
        to = self.pending_state
        if to is None:
            raise IllegalTransition(f"TransactionalId {self.transactional_id} completing "
                                    "transaction state transition while it does not have a "
                                    "pending state")
        ok = to is transit.state
        same = (transit.producer_epoch == self.producer_epoch
                and transit.producer_id == self.producer_id)
        if to is S.EMPTY:
            bumped = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id)
            ok = ok and (transit.producer_epoch == self.producer_epoch or bumped) \
                and not transit.topic_partitions and transit.txn_start_timestamp == -1
        elif to is S.ONGOING:
            ok = ok and same and transit.topic_partitions >= frozenset(self.topic_partitions) \
                and transit.txn_timeout_ms == self.txn_timeout_ms
        elif to in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            ok = ok and same and transit.topic_partitions == frozenset(self.topic_partitions) \
                and transit.txn_timeout_ms == self.txn_timeout_ms \
                and transit.txn_start_timestamp == self.txn_start_timestamp
        elif to in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            ok = ok and same and transit.txn_timeout_ms == self.txn_timeout_ms \
                and transit.txn_start_timestamp != -1
        else:   # PREPARE_EPOCH_FENCE and DEAD are never completed (Kafka's rule)
            ok = False
        if not ok or transit.txn_last_update_timestamp < self.txn_last_update_timestamp:
            raise IllegalTransition(f"TransactionalId {self.transactional_id} failed "
                                    f"transition to state {transit} due to unexpected "
                                    "metadata")
        self.producer_id = transit.producer_id
        self.prev_producer_id = transit.prev_producer_id
        self.next_producer_id = transit.next_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.state = to

    def abort_pending(self) -> None:
        """The pending transition's write failed: the state stays as it was."""
        if self.pending_state is S.PREPARE_EPOCH_FENCE:
            self.has_failed_epoch_fence = True
        self.pending_state = None

    @classmethod
    def from_transit(cls, transactional_id: str, transit: TxnTransitMetadata
                     ) -> "TransactionMetadata":
        """The state a record read back from ``__transaction_state`` gives (loading)."""
        return cls(transactional_id, transit.producer_id, transit.prev_producer_id,
                   transit.next_producer_id, transit.producer_epoch,
                   transit.last_producer_epoch, transit.txn_timeout_ms, transit.state,
                   set(transit.topic_partitions), transit.txn_start_timestamp,
                   transit.txn_last_update_timestamp)


class IllegalTransition(Exception):
    """A transition Kafka's coordinator treats as a bug (IllegalStateException): the
    coordinator's checks must have refused the request before."""
