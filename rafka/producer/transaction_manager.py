"""The transactional producer's decisions, pure (the transactional half of Kafka's
TransactionManager): the transaction's state, which partitions it holds, which wait to be
added (AddPartitionsToTxn) before their batches may be sent, and what an answer's error
means: retry, an abortable error (the application must abort), or a fatal one (the
producer is fenced and must be closed). No Ray, no threads: the producer's transactional
calls and its sender thread (``rafka.producer.producer``, ``rafka.producer.sender_thread``)
hold it under the producer's lock and perform what it says.

The states and their transitions are Kafka's (``TransactionManager.State``)::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY
                                                             -> ABORTING_TRANSACTION -> READY
    any -> ABORTABLE_ERROR (a batch or a request of the transaction failed) -> ABORTING_...
    any -> FATAL_ERROR (fenced by a newer instance, not authorized, ...)

An aborted transaction whose batches failed leaves gaps in its partitions' sequences: the
abort is followed by InitProducerId with the current id and epoch (KIP-360), which bumps the
epoch and starts the sequences again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from protocols.errors import (ConcurrentTransactionsError, IllegalGenerationError, IllegalStateError,
                              InvalidProducerEpochError, InvalidProducerIdMappingError,
                              InvalidTxnStateError, KafkaError, ProducerFencedError,
                              TransactionalIdAuthorizationFailedError, UnknownMemberIdError,
                              UnknownProducerIdError)
from protocols.topics import TopicPartition
from rafka.client.retry import is_retriable


class State(Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = State
# Kafka's State.isTransitionValid: the states each state may be entered from.
_ENTERED_FROM = {
    S.INITIALIZING: {S.UNINITIALIZED, S.INITIALIZING, S.ABORTING_TRANSACTION},
    S.READY: {S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION},
    S.IN_TRANSACTION: {S.READY},
    S.COMMITTING_TRANSACTION: {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION},
    S.ABORTING_TRANSACTION: {S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION},
    S.ABORTABLE_ERROR: {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR},
}

# Answers after which the producer can do nothing but close (Kafka's fatal errors).
FATAL = (ProducerFencedError, TransactionalIdAuthorizationFailedError, InvalidTxnStateError)


class TransactionAbortedError(KafkaError):
    """A record queued in a transaction that was aborted before it was sent (Kafka's
    TransactionAbortedException)."""
    name = "TRANSACTION_ABORTED"


def coordinator_error(answer):
    """A transaction coordinator's answer as the producer takes it: an old epoch there means
    a newer instance of this transactional id took over (Kafka's handlers turn
    INVALID_PRODUCER_EPOCH into PRODUCER_FENCED)."""
    if isinstance(answer, InvalidProducerEpochError):
        return ProducerFencedError(str(answer))
    return answer


def offset_commit_error(error, group_id: str):
    """TxnOffsetCommit's error as the application is given it: a member the group has moved
    past (KIP-447's fencing by generation) is Kafka's CommitFailedException (a fenced static
    member's FENCED_INSTANCE_ID stays itself, as Kafka's TxnOffsetCommitHandler has it)."""
    if isinstance(error, (UnknownMemberIdError, IllegalGenerationError)):
        from rafka.consumer.coordinator import CommitFailedError
        return CommitFailedError(f"Transaction offset commit failed: the group {group_id} "
                                 f"has moved past this member ({error.name}): {error}")
    return error


def should_retry(error: KafkaError) -> bool:
    """A coordinator's answer worth asking again (after retry.backoff.ms; a moved
    coordinator is looked up again by ``CoordinatorClient``)."""
    return is_retriable(error) or isinstance(error, ConcurrentTransactionsError)


@dataclass
class TransactionManager:
    transactional_id: str
    transaction_timeout_ms: int
    state: State = State.UNINITIALIZED
    last_error: KafkaError | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    # Partitions sent to in this transaction: added (their batches may go), being added
    # (an AddPartitionsToTxn in flight), and new (to be added).
    partitions: set[TopicPartition] = field(default_factory=set)
    pending_partitions: set[TopicPartition] = field(default_factory=set)
    new_partitions: set[TopicPartition] = field(default_factory=set)
    # Whether the coordinator knows of this transaction (a partition or a group's offsets
    # were added to it): a transaction it does not know ends without EndTxn.
    started: bool = False
    # A batch of the transaction failed: its partition's sequence has a gap that only a new
    # epoch closes (KIP-360's bump after the abort).
    epoch_bump_required: bool = False

    # ---- transitions -----------------------------------------------------------------------
    def _transition(self, target: State, error: KafkaError | None = None) -> None:
        if target is S.FATAL_ERROR:
            self.state, self.last_error = target, error
            return
        if self.state is S.FATAL_ERROR:
            raise self._error_state()
        if self.state not in _ENTERED_FROM[target]:
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: Invalid "
                                    f"transition attempted from state {self.state.value} "
                                    f"to state {target.value}")
        self.state = target
        if target is S.ABORTABLE_ERROR:
            self.last_error = error
        elif target is S.READY:
            self.last_error = None

    def _error_state(self) -> KafkaError:
        error = self.last_error
        if isinstance(error, FATAL):
            return type(error)(f"Cannot execute transactional method because we are in an "
                               f"error state: {error}")
        return KafkaError("Cannot execute transactional method because we are in an error "
                          f"state: {error!r}")

    def fail(self, error: KafkaError) -> None:
        """An error on the transaction's path: fatal ones end the producer; any other
        makes the transaction abortable (one that is already ending stays so)."""
        if isinstance(error, FATAL):
            self._transition(S.FATAL_ERROR, error)
            return
        if isinstance(error, (InvalidProducerIdMappingError, UnknownProducerIdError)):
            # The coordinator forgot the id (transactional.id.expiration.ms): a new
            # InitProducerId after the abort gets it again (KIP-360).
            self.epoch_bump_required = True
        if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
            self._transition(S.ABORTABLE_ERROR, error)

    # ---- init_transactions -----------------------------------------------------------------
    def begin_init(self) -> tuple[int, int] | None:
        """init_transactions: the expected (producer id, epoch) to send with InitProducerId
        (KIP-360), None for a fresh producer."""
        self._transition(S.INITIALIZING)
        return (self.producer_id, self.producer_epoch) if self.producer_id >= 0 else None

    def on_init(self, answer) -> None:
        """InitProducerId's answer: (producer id, epoch), or the error (raised)."""
        if isinstance(answer, KafkaError):
            if isinstance(answer, FATAL):
                self._transition(S.FATAL_ERROR, answer)
            raise answer
        self.producer_id, self.producer_epoch = int(answer[0]), int(answer[1])
        self.epoch_bump_required = False
        # A new epoch starts with no transaction (an abort whose EndTxn was not answered
        # may come here: what it had added is the coordinator's to end, not this one's).
        self.partitions.clear()
        self.pending_partitions.clear()
        self.new_partitions.clear()
        self.started = False
        self._transition(S.READY)

    # ---- the transaction -------------------------------------------------------------------
    def begin_transaction(self) -> None:
        if self.state is S.UNINITIALIZED or self.state is S.INITIALIZING:
            raise IllegalStateError("Cannot call beginTransaction before completing a call "
                                    "to initTransactions when transactions are enabled.")
        if self.state is S.ABORTABLE_ERROR or self.state is S.FATAL_ERROR:
            raise self._error_state()
        self._transition(S.IN_TRANSACTION)

    def check_send(self) -> None:
        """Kafka's failIfNotReadyForSend: records go only into an open transaction."""
        if self.state is S.ABORTABLE_ERROR or self.state is S.FATAL_ERROR:
            raise KafkaError("Cannot perform send because at least one previous "
                             f"transactional or idempotent request has failed with errors: "
                             f"{self.last_error!r}")
        if self.producer_id < 0:
            raise IllegalStateError("Cannot perform a 'send' before completing a call to "
                                    "initTransactions when transactions are enabled.")
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot call send in state {self.state.value}")

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        if tp not in self.partitions and tp not in self.pending_partitions:
            self.new_partitions.add(tp)

    def send_allowed(self, tp: TopicPartition) -> bool:
        """A partition's batches go once it is in the transaction."""
        return tp in self.partitions

    def partitions_to_add(self) -> list[TopicPartition]:
        """The new partitions, now being added (one AddPartitionsToTxn for them all)."""
        if not self.new_partitions or self.state not in (S.IN_TRANSACTION,
                                                         S.COMMITTING_TRANSACTION):
            return []
        wanted = sorted(self.new_partitions)
        self.pending_partitions.update(wanted)
        self.new_partitions.clear()
        return wanted

    def on_partitions_added(self, tps: list[TopicPartition], error: KafkaError | None) -> bool:
        """AddPartitionsToTxn's answer for ``tps``. True when it is to be asked again."""
        self.pending_partitions.difference_update(tps)
        if error is None:
            self.partitions.update(tps)
            self.started = True
            return False
        if should_retry(error):
            self.new_partitions.update(tps)
            return True
        self.fail(error)
        return False

    def begin_add_offsets(self) -> None:
        """send_offsets_to_transaction: only inside a transaction."""
        if self.state is S.ABORTABLE_ERROR or self.state is S.FATAL_ERROR:
            raise self._error_state()
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError("Cannot send offsets if a transaction is not in progress "
                                    f"(currentState= {self.state.value})")

    def on_offsets_added(self, error: KafkaError | None) -> None:
        """AddOffsetsToTxn's answer (None: the coordinator now knows the transaction, so
        its end must be told, whatever TxnOffsetCommit then answers: Kafka's
        transactionStarted), or TxnOffsetCommit's error."""
        if error is None:
            self.started = True
        else:
            self.fail(error)

    # ---- the end ---------------------------------------------------------------------------
    def begin_commit(self) -> bool:
        """commit_transaction, once every record is sent: whether EndTxn is to be asked (a
        transaction the coordinator never heard of commits here alone)."""
        if self.state is S.ABORTABLE_ERROR or self.state is S.FATAL_ERROR:
            raise self._error_state()
        self._transition(S.COMMITTING_TRANSACTION)
        return self.started

    def begin_abort(self) -> bool:
        """abort_transaction: whether EndTxn is to be asked. Not when the coordinator forgot
        the producer id (INVALID_PRODUCER_ID_MAPPING): it would refuse EndTxn the same way,
        and the new InitProducerId after the abort ends the transaction (Kafka's
        beginCompletingTransaction)."""
        if self.state is S.FATAL_ERROR:
            raise self._error_state()
        self._transition(S.ABORTING_TRANSACTION)
        return self.started and not isinstance(self.last_error, (InvalidProducerIdMappingError,
                                                                 UnknownProducerIdError))

    def bump_pending(self) -> bool:
        """An abort finished but its new epoch (KIP-360) was not given yet: a retried
        abort asks InitProducerId again."""
        return self.state is S.INITIALIZING and self.producer_id >= 0

    def on_end(self, error: KafkaError | None) -> bool:
        """EndTxn's answer (None when none was asked). True when it is to be asked again;
        an error that is not retried is raised."""
        if error is None:
            committing = self.state is S.COMMITTING_TRANSACTION
            self.partitions.clear()
            self.pending_partitions.clear()
            self.new_partitions.clear()
            self.started = False
            if not committing and self.epoch_bump_required:
                self._transition(S.INITIALIZING)   # the caller bumps the epoch (KIP-360)
            else:
                self._transition(S.READY)
            return False
        if should_retry(error):
            return True
        if isinstance(error, (InvalidProducerIdMappingError, UnknownProducerIdError)):
            # The coordinator forgot the producer id: the abort skips EndTxn and a new
            # InitProducerId ends the transaction (Kafka's abortableErrorIfPossible).
            self.epoch_bump_required = True
            self.last_error = error
        if isinstance(error, FATAL):
            self._transition(S.FATAL_ERROR, error)
        elif self.state is S.COMMITTING_TRANSACTION:
            self._transition(S.ABORTABLE_ERROR, error)
        raise error

    def on_batch_failed(self, error: BaseException, sequenced: bool = True) -> None:
        """A batch of the transaction failed for good; one that was sent (``sequenced``)
        leaves a gap in its partition's sequence."""
        if sequenced:
            self.epoch_bump_required = True
        self.fail(error if isinstance(error, KafkaError) else KafkaError(repr(error)))
