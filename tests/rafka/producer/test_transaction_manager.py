"""The transactional producer's decisions, pure (cases of Kafka's TransactionManagerTest,
named after them): the state machine, partitions joining the transaction before their
batches go, abortable and fatal errors, EndTxn skipped for a transaction the coordinator
never heard of, and KIP-360's epoch bump after an abort that left sequence gaps."""
from __future__ import annotations

import pytest

from protocols.errors import (ConcurrentTransactionsError, CoordinatorNotAvailableError,
                              FencedInstanceIdError, IllegalGenerationError,
                              IllegalStateError, InvalidProducerEpochError,
                              InvalidProducerIdMappingError, KafkaError,
                              NotCoordinatorError, ProducerFencedError,
                              TopicAuthorizationFailedError,
                              TransactionalIdAuthorizationFailedError, UnknownMemberIdError)
from protocols.topics import TopicPartition
from rafka.producer.sender import SenderState
from rafka.producer.accumulator import RecordAccumulator
from rafka.consumer.coordinator import CommitFailedError
from rafka.producer.transaction_manager import (State, TransactionManager, coordinator_error,
                                                offset_commit_error, should_retry)

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def ready_manager(pid: int = 13, epoch: int = 1) -> TransactionManager:
    txn = TransactionManager("app-1", 60_000)
    assert txn.begin_init() is None
    txn.on_init((pid, epoch))
    assert txn.state is State.READY
    return txn


def in_transaction(*tps: TopicPartition) -> TransactionManager:
    txn = ready_manager()
    txn.begin_transaction()
    for tp in tps:
        txn.maybe_add_partition(tp)
    added = txn.partitions_to_add()
    if added:
        assert txn.on_partitions_added(added, None) is False
    return txn


def test_fail_before_init_transactions():
    """testFailIfNotReadyForSendNoProducerId / beginTransaction before initTransactions."""
    txn = TransactionManager("app-1", 60_000)
    with pytest.raises(IllegalStateError, match="initTransactions"):
        txn.check_send()
    with pytest.raises(IllegalStateError, match="initTransactions"):
        txn.begin_transaction()


def test_send_only_inside_a_transaction():
    """testFailIfNotReadyForSendIdempotentProducer's transactional twin: READY refuses."""
    txn = ready_manager()
    with pytest.raises(IllegalStateError, match="Cannot call send in state READY"):
        txn.check_send()
    txn.begin_transaction()
    txn.check_send()


def test_begin_transaction_twice_is_an_invalid_transition():
    txn = ready_manager()
    txn.begin_transaction()
    with pytest.raises(IllegalStateError, match="from state IN_TRANSACTION to state "
                                                "IN_TRANSACTION"):
        txn.begin_transaction()


def test_partitions_are_added_before_their_batches_go():
    """testBasicTransaction: the partition waits for AddPartitionsToTxn's answer."""
    txn = ready_manager()
    txn.begin_transaction()
    txn.maybe_add_partition(TP0)
    txn.maybe_add_partition(TP1)
    txn.maybe_add_partition(TP0)
    assert not txn.send_allowed(TP0)
    assert txn.partitions_to_add() == [TP0, TP1]
    assert txn.partitions_to_add() == []          # one request in flight for them
    txn.maybe_add_partition(TP0)                  # already being added: not again
    assert not txn.send_allowed(TP0)
    txn.on_partitions_added([TP0, TP1], None)
    assert txn.send_allowed(TP0) and txn.send_allowed(TP1) and txn.started


def test_drain_waits_for_partitions_not_yet_in_the_transaction():
    """The sender drains only what the transaction allows."""
    txn = in_transaction(TP0)
    acc = RecordAccumulator(1 << 20, 0, 1 << 25, 120_000, lambda: 0)
    for tp in (TP0, TP1):
        acc.append(tp, 0, None, b"v" * 10, (), 31)
    acc.flushing = 1
    state = SenderState(5, 1 << 20, True, 2**31 - 1, 120_000, transactional=True)
    state.set_producer_id(13, 1)
    ready, _ = acc.ready(0)
    requests, _ = state.drain(ready, lambda tp: ("host-1", "h1"), acc, txn.send_allowed)
    assert [b.tp for r in requests for b in r.batches] == [TP0]


@pytest.mark.parametrize("error", [ConcurrentTransactionsError(), NotCoordinatorError(),
                                   CoordinatorNotAvailableError()])
def test_retriable_add_partitions_errors_are_asked_again(error):
    """testRetryAddPartitionsRequest / testNotCoordinator... : asked again, not abortable."""
    txn = ready_manager()
    txn.begin_transaction()
    txn.maybe_add_partition(TP0)
    tps = txn.partitions_to_add()
    assert txn.on_partitions_added(tps, error) is True
    assert txn.state is State.IN_TRANSACTION
    assert txn.partitions_to_add() == [TP0]


def test_topic_authorization_failure_on_add_partitions_is_abortable():
    """testTopicAuthorizationFailureInAddPartitions: abortable, then the abort works."""
    txn = ready_manager()
    txn.begin_transaction()
    txn.maybe_add_partition(TP0)
    assert txn.on_partitions_added(txn.partitions_to_add(),
                                   TopicAuthorizationFailedError("no")) is False
    assert txn.state is State.ABORTABLE_ERROR
    with pytest.raises(KafkaError, match="previous transactional"):
        txn.check_send()
    with pytest.raises(KafkaError, match="error state"):
        txn.begin_commit()
    assert txn.begin_abort() is False             # the coordinator never heard of it
    assert txn.on_end(None) is False
    assert txn.state is State.READY


@pytest.mark.parametrize("error", [ProducerFencedError("fenced"),
                                   TransactionalIdAuthorizationFailedError("no")])
def test_fatal_errors_leave_only_close(error):
    """testProducerFencedExceptionInAddPartitions / testTransactionalIdAuthorization...:
    fatal; even abort refuses."""
    txn = ready_manager()
    txn.begin_transaction()
    txn.maybe_add_partition(TP0)
    txn.on_partitions_added(txn.partitions_to_add(), error)
    assert txn.state is State.FATAL_ERROR
    with pytest.raises(type(error)):
        txn.begin_abort()
    with pytest.raises(KafkaError):
        txn.begin_transaction()


def test_an_old_epoch_at_the_coordinator_means_fenced():
    """Kafka's handlers turn INVALID_PRODUCER_EPOCH into PRODUCER_FENCED."""
    assert isinstance(coordinator_error(InvalidProducerEpochError("old")), ProducerFencedError)
    assert coordinator_error(None) is None
    assert should_retry(ConcurrentTransactionsError()) and not should_retry(
        ProducerFencedError())


def test_commit_without_partitions_or_offsets_needs_no_end_txn():
    """testCommitTransactionWithNoPartitions...: completed locally."""
    txn = ready_manager()
    txn.begin_transaction()
    assert txn.begin_commit() is False
    assert txn.on_end(None) is False
    assert txn.state is State.READY


def test_commit_of_a_started_transaction_asks_end_txn_and_retries_concurrent():
    txn = in_transaction(TP0)
    assert txn.begin_commit() is True
    assert txn.on_end(ConcurrentTransactionsError()) is True     # asked again
    assert txn.state is State.COMMITTING_TRANSACTION
    assert txn.begin_commit() is True                            # a commit retried
    assert txn.on_end(None) is False
    assert txn.state is State.READY and not txn.partitions and not txn.started


def test_offsets_start_the_transaction():
    """testSendOffsetsToTransaction... : the group's offsets alone need an EndTxn."""
    txn = ready_manager()
    with pytest.raises(IllegalStateError, match="not in progress"):
        txn.begin_add_offsets()
    txn.begin_transaction()
    txn.begin_add_offsets()
    txn.on_offsets_added(None)
    assert txn.begin_commit() is True


def test_failed_batch_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch():
    """testAbortableErrorWhileAbortInProgress / KIP-360's bump: a batch that failed after
    it was sent leaves a sequence gap, so the abort ends in INITIALIZING with the current id
    and epoch given as expected."""
    txn = in_transaction(TP0)
    txn.on_batch_failed(KafkaError("broker said no"), sequenced=True)
    assert txn.state is State.ABORTABLE_ERROR
    assert txn.begin_abort() is True
    assert txn.on_end(None) is False
    assert txn.state is State.INITIALIZING
    assert txn.begin_init() == (13, 1)
    txn.on_init((13, 2))
    assert txn.state is State.READY and txn.producer_epoch == 2
    assert not txn.epoch_bump_required


def test_unsent_batch_failing_needs_no_bump():
    txn = in_transaction(TP0)
    txn.on_batch_failed(KafkaError("expired"), sequenced=False)
    txn.begin_abort()
    txn.on_end(None)
    assert txn.state is State.READY


def test_forgotten_producer_id_is_abortable_and_bumps():
    """INVALID_PRODUCER_ID_MAPPING (the id expired at the coordinator): abort, re-init."""
    txn = in_transaction(TP0)
    txn.fail(InvalidProducerIdMappingError("expired"))
    assert txn.state is State.ABORTABLE_ERROR and txn.epoch_bump_required


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_end_txn_answering_a_forgotten_producer_id_aborts_without_end_txn_then_bumps(ending):
    """EndTxnHandler's INVALID_PRODUCER_ID_MAPPING (abortableErrorIfPossible): the abort
    that follows does not ask EndTxn again (the coordinator would refuse it the same way)
    and a new InitProducerId, with the current id and epoch, ends the transaction."""
    txn = in_transaction(TP0)
    txn.begin_commit() if ending == "commit" else txn.begin_abort()
    with pytest.raises(InvalidProducerIdMappingError):
        txn.on_end(InvalidProducerIdMappingError("expired"))
    assert txn.epoch_bump_required
    assert txn.begin_abort() is False
    txn.on_end(None)
    assert txn.state is State.INITIALIZING and txn.bump_pending()
    txn.on_init((13, 2))
    assert txn.state is State.READY and not txn.bump_pending()


def test_a_new_epoch_starts_with_no_transaction():
    """init_transactions after an abort whose EndTxn went unanswered: the partitions and
    offsets of that transaction are the coordinator's to end; the next transaction adds
    its partitions again (and asks EndTxn only if it adds any)."""
    txn = in_transaction(TP0)
    txn.begin_abort()
    assert txn.begin_init() == (13, 1)
    txn.on_init((13, 2))
    txn.begin_transaction()
    txn.maybe_add_partition(TP0)
    assert not txn.send_allowed(TP0) and txn.partitions_to_add() == [TP0]
    assert txn.begin_commit() is False


def test_offset_commit_errors_as_kafkas_txn_offset_commit_handler():
    assert isinstance(offset_commit_error(UnknownMemberIdError("gone"), "g"), CommitFailedError)
    assert isinstance(offset_commit_error(IllegalGenerationError("old"), "g"),
                      CommitFailedError)
    fenced = FencedInstanceIdError("static member replaced")
    assert offset_commit_error(fenced, "g") is fenced


def test_fatal_end_txn_answer_is_raised_and_sticks():
    txn = in_transaction(TP0)
    txn.begin_commit()
    with pytest.raises(ProducerFencedError):
        txn.on_end(ProducerFencedError("newer instance"))
    assert txn.state is State.FATAL_ERROR


def test_init_errors_are_raised_fatal_ones_stick():
    txn = TransactionManager("app-1", 60_000)
    txn.begin_init()
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        txn.on_init(TransactionalIdAuthorizationFailedError("no"))
    assert txn.state is State.FATAL_ERROR
    txn = TransactionManager("app-2", 60_000)
    txn.begin_init()
    with pytest.raises(ConcurrentTransactionsError):
        txn.on_init(ConcurrentTransactionsError())
    txn.begin_init()                       # init_transactions may be called again
    txn.on_init((5, 0))
    assert txn.state is State.READY
