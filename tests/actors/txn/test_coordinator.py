"""The transaction coordinator's decisions (actors/txn/coordinator.py), with the clock and
every write's outcome given by the test: Kafka's TransactionCoordinatorTest cases (their
names in the docstrings), then the whole life of a transaction, its markers and the
coordinator's own work (timeouts, expiration, loading after a failover)."""
from __future__ import annotations

import pytest

from actors.txn.coordinator import (PARTITION_GONE, Effects, InitProducerIdResult, MarkerSend,
                                    TransactionCoordinator, TxnConfig, TxnWrite)
from actors.txn.metadata import (NO_PRODUCER_EPOCH, SHORT_MAX, TransactionMetadata,
                                 TransactionState)
from actors.txn.transaction_log import read_key, read_value
from protocols.errors import (ConcurrentTransactionsError, CoordinatorLoadInProgressError,
                              CoordinatorNotAvailableError, InvalidProducerEpochError,
                              InvalidProducerIdMappingError, InvalidRequestError,
                              InvalidTransactionTimeoutError, InvalidTxnStateError,
                              NotCoordinatorError, NotEnoughReplicasError,
                              NotLeaderOrFollowerError, ProducerFencedError,
                              TransactionalIdNotFoundError)
from protocols.java_hash import coordinator_partition_for
from protocols.topics import OFFSETS_TOPIC, TopicPartition

S = TransactionState
TXN = "transactionalId"
PID = 10
EPOCH = 1
TIMEOUT = 1000
COORD_EPOCH = 5
NOW = 1_700_000_000_000
PARTITION = coordinator_partition_for(TXN, 50)
TP1, TP2 = TopicPartition("topic1", 0), TopicPartition("topic1", 1)


class Driver:
    """A coordinator whose writes succeed (or fail as told), collecting answers and
    markers as the shell would."""

    def __init__(self, loaded: bool = True, config: TxnConfig = TxnConfig()):
        self.core = TransactionCoordinator(1, config)
        self.core.add_producer_ids(PID, 100)
        self.replies: dict[int, object] = {}
        self.markers: list[MarkerSend] = []
        self.waits: list[tuple] = []
        self.written: list[TxnWrite] = []
        self.write_errors: list[BaseException | None] = []   # next writes' outcomes
        self.now = NOW
        if loaded:
            assert self.core.on_election(PARTITION, COORD_EPOCH)[1]
            self.perform(self.core.on_loaded(PARTITION, COORD_EPOCH, [], NOW))

    def put(self, metadata: TransactionMetadata) -> TransactionMetadata:
        self.core.txns[metadata.transactional_id] = metadata
        return metadata

    def perform(self, effects: Effects) -> None:
        for request, answer in effects.replies:
            self.replies[request] = answer
        self.markers += effects.markers
        self.waits += effects.waits
        for write in effects.writes:
            self.written.append(write)
            error = self.write_errors.pop(0) if self.write_errors else None
            self.perform(self.core.on_write_done(write, error, self.now))

    def call(self, call: tuple[int, Effects]):
        request, effects = call
        self.perform(effects)
        return self.replies.pop(request, "no answer yet")

    def init(self, txn=TXN, timeout=TIMEOUT, expected=None):
        return self.call(self.core.init_producer_id(txn, timeout, expected, self.now))

    def add(self, partitions, pid=PID, epoch=EPOCH, txn=TXN):
        return self.call(self.core.add_partitions_to_txn(txn, pid, epoch, partitions,
                                                         self.now))

    def end(self, commit: bool, pid=PID, epoch=EPOCH, txn=TXN):
        return self.call(self.core.end_txn(txn, pid, epoch, commit, self.now))

    def deliver_markers(self, outcome=None) -> list[MarkerSend]:
        """Every marker out gets ``outcome`` on each of its partitions."""
        sent, self.markers = self.markers, []
        for send in sent:
            self.perform(self.core.on_markers_done(
                send, {tp: outcome for tp in send.partitions}, self.now))
        return sent


def txn_metadata(state=S.EMPTY, epoch=EPOCH, partitions=(), pid=PID, last_epoch=NO_PRODUCER_EPOCH,
                 prev_pid=PID, start=NOW) -> TransactionMetadata:
    return TransactionMetadata(TXN, pid, prev_pid, -1, epoch, last_epoch, TIMEOUT, state,
                               set(partitions),
                               start if partitions or state is S.ONGOING else -1, NOW)


# ---- InitProducerId ----------------------------------------------------------------------

def test_invalid_request_when_transactional_id_is_empty():
    """shouldReturnInvalidRequestWhenTransactionalIdIsEmpty"""
    d = Driver()
    assert isinstance(d.init(""), InvalidRequestError)
    assert isinstance(d.init(None), InvalidRequestError)


def test_init_pid_with_epoch_zero_for_new_transactional_id():
    """shouldInitPidWithEpochZeroForNewTransactionalId"""
    d = Driver()
    assert d.init() == InitProducerIdResult(PID, 0)
    record = d.written[-1].record
    assert read_key(record.key) == TXN
    stored = read_value(record.value)
    assert (stored.producer_id, stored.producer_epoch, stored.state) == (PID, 0, S.EMPTY)
    assert d.core.txns[TXN].producer_epoch == 0


def test_new_producer_id_if_no_state_and_producer_id_and_epoch_given():
    """shouldGenerateNewProducerIdIfNoStateAndProducerIdAndEpochProvided (KIP-360: the
    coordinator forgot the id, the producer recovers with its old id)"""
    d = Driver()
    assert d.init(expected=(PID + 50, 3)) == InitProducerIdResult(PID, 0)


def test_new_producer_id_if_epochs_exhausted():
    """shouldGenerateNewProducerIdIfEpochsExhausted"""
    d = Driver()
    d.put(txn_metadata(S.EMPTY, epoch=SHORT_MAX - 1, last_epoch=SHORT_MAX - 2))
    d.core.producer_ids.clear()
    d.core.add_producer_ids(PID + 1, 1)
    assert d.init() == InitProducerIdResult(PID + 1, 0)


def test_not_coordinator_and_load_in_progress():
    """shouldRespondWithNotCoordinatorOnInitPidWhenNotCoordinator,
    shouldRespondWithCoordinatorLoadInProgressOnInitPidWhenCoordinatorLoading, and the same
    for AddPartitionsToTxn"""
    d = Driver(loaded=False)
    assert isinstance(d.init(), NotCoordinatorError)
    assert isinstance(d.add([TP1]), NotCoordinatorError)
    d.core.on_election(PARTITION, COORD_EPOCH)
    assert isinstance(d.init(), CoordinatorLoadInProgressError)
    assert isinstance(d.add([TP1]), CoordinatorLoadInProgressError)
    assert isinstance(d.core.describe_transaction(TXN), CoordinatorLoadInProgressError)


def test_invalid_transaction_timeout():
    d = Driver()
    assert isinstance(d.init(timeout=900_001), InvalidTransactionTimeoutError)
    assert isinstance(d.init(timeout=0), InvalidTransactionTimeoutError)
    assert d.init(timeout=900_000) == InitProducerIdResult(PID, 0)


def test_increment_epoch_on_init_pid_when_existing_empty_transaction():
    """shouldIncrementEpochAndUpdateMetadataOnHandleInitPidWhenExistingEmptyTransaction"""
    d = Driver()
    d.put(txn_metadata(S.COMPLETE_COMMIT, epoch=EPOCH))
    assert d.init() == InitProducerIdResult(PID, EPOCH + 1)
    assert d.core.txns[TXN].state is S.EMPTY


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_init_pid_waits_for_a_transaction_completing(state):
    """shouldWaitForCommitToCompleteOnHandleInitPidAndExistingTransactionInPrepare*State"""
    d = Driver()
    d.put(txn_metadata(state, partitions=[TP1]))
    assert isinstance(d.init(), ConcurrentTransactionsError)


def test_init_pid_aborts_the_ongoing_transaction_with_a_fenced_epoch():
    """shouldAbortTransactionOnHandleInitPidWhenExistingTransactionInOngoingState: the new
    producer hears CONCURRENT_TRANSACTIONS while the old transaction is aborted with epoch
    + 1; its retry then gets epoch + 2."""
    d = Driver()
    d.put(txn_metadata(S.ONGOING, partitions=[TP1, TP2]))
    assert isinstance(d.init(), ConcurrentTransactionsError)
    prepare = read_value(d.written[-1].record.value)
    assert (prepare.state, prepare.producer_epoch) == (S.PREPARE_ABORT, EPOCH + 1)
    assert [m.partitions for m in d.markers] == [frozenset({TP1, TP2})]
    assert (d.markers[0].producer_epoch, d.markers[0].commit) == (EPOCH + 1, False)
    assert isinstance(d.init(), ConcurrentTransactionsError)   # markers still out
    d.deliver_markers()
    assert d.core.txns[TXN].state is S.COMPLETE_ABORT
    assert d.init() == InitProducerIdResult(PID, EPOCH + 2)


def test_fence_write_failing_does_not_bump_the_epoch_again():
    """shouldNotRepeatedlyBumpEpochDueToInitPidDuringOngoingTxnIfAppendToLogFails"""
    d = Driver()
    m = d.put(txn_metadata(S.ONGOING, partitions=[TP1]))
    d.write_errors = [NotEnoughReplicasError()]
    assert isinstance(d.init(), CoordinatorNotAvailableError)
    assert (m.producer_epoch, m.has_failed_epoch_fence) == (EPOCH + 1, True)
    d.write_errors = [NotEnoughReplicasError()]
    assert isinstance(d.init(), CoordinatorNotAvailableError)
    assert (m.producer_epoch, m.has_failed_epoch_fence) == (EPOCH + 1, True)
    assert isinstance(d.init(), ConcurrentTransactionsError)
    assert (m.producer_epoch, m.has_failed_epoch_fence, m.state) == \
        (EPOCH + 1, False, S.PREPARE_ABORT)


def test_last_epoch_fences_when_epochs_are_exhausted():
    """shouldUseLastEpochToFenceWhenEpochsAreExhausted"""
    d = Driver()
    d.put(txn_metadata(S.ONGOING, epoch=SHORT_MAX - 1, last_epoch=SHORT_MAX - 2,
                       partitions=[TP1]))
    d.core.producer_ids.clear()
    d.core.add_producer_ids(PID + 1, 1)
    assert isinstance(d.init(), ConcurrentTransactionsError)
    prepare = read_value(d.written[-1].record.value)
    assert (prepare.state, prepare.producer_epoch) == (S.PREPARE_ABORT, SHORT_MAX)
    d.deliver_markers()
    # Epoch Short.MAX_VALUE is never handed out: the retry rotates the producer id.
    assert d.init() == InitProducerIdResult(PID + 1, 0)


def test_init_pid_with_no_last_producer_data_is_fenced():
    """testInitProducerIdWithNoLastProducerData"""
    d = Driver()
    d.put(txn_metadata(S.EMPTY, epoch=EPOCH + 1, prev_pid=-1))
    assert isinstance(d.init(expected=(PID, EPOCH)), ProducerFencedError)


def test_fence_producer_when_mapping_exists_with_different_producer_id():
    """testFenceProducerWhenMappingExistsWithDifferentProducerId"""
    d = Driver()
    d.put(txn_metadata(S.EMPTY, pid=PID + 1, epoch=EPOCH, last_epoch=EPOCH - 1))
    assert isinstance(d.init(expected=(PID, EPOCH)), ProducerFencedError)


def test_init_pid_with_current_epoch_given_and_its_retry():
    """testInitProducerIdWithCurrentEpochProvided"""
    d = Driver()
    d.put(txn_metadata(S.EMPTY, epoch=10, last_epoch=9))
    assert d.init(expected=(PID, 10)) == InitProducerIdResult(PID, 11)
    assert d.init(expected=(PID, 10)) == InitProducerIdResult(PID, 11)


def test_init_pid_stale_current_epoch_is_fenced():
    """testInitProducerIdStaleCurrentEpochProvided"""
    d = Driver()
    d.put(txn_metadata(S.EMPTY, epoch=10, last_epoch=9))
    assert d.init() == InitProducerIdResult(PID, 11)
    assert isinstance(d.init(expected=(PID, 10)), ProducerFencedError)


def test_retry_init_pid_after_producer_id_rotation():
    """testRetryInitProducerIdAfterProducerIdRotation and
    testInitProducerIdWithInvalidEpochAfterProducerIdRotation"""
    d = Driver()
    d.put(txn_metadata(S.EMPTY, epoch=SHORT_MAX - 1, last_epoch=SHORT_MAX - 2))
    d.core.producer_ids.clear()
    d.core.add_producer_ids(PID + 1, 10)
    assert d.init(expected=(PID, SHORT_MAX - 1)) == InitProducerIdResult(PID + 1, 0)
    assert d.init(expected=(PID, SHORT_MAX - 1)) == InitProducerIdResult(PID + 1, 0)
    assert isinstance(d.init(expected=(PID, SHORT_MAX - 2)), ProducerFencedError)


def test_a_state_change_in_progress_answers_concurrent_transactions():
    """shouldNotBumpEpochWithPendingTransaction"""
    d = Driver()
    m = d.put(txn_metadata(S.EMPTY))
    m.prepare_add_partitions({TP1}, NOW)
    assert isinstance(d.init(), ConcurrentTransactionsError)
    assert isinstance(d.add([TP1]), ConcurrentTransactionsError)
    assert isinstance(d.end(True), ConcurrentTransactionsError)


def test_controller_ids_run_out():
    d = Driver()
    d.core.producer_ids.clear()
    assert d.core.needs_producer_ids
    assert isinstance(d.init(), CoordinatorNotAvailableError)
    assert TXN not in d.core.txns


# ---- AddPartitionsToTxn ------------------------------------------------------------------

def test_add_partitions_errors():
    """shouldRespondWithInvalidPidMappingOnAddPartitionsToTransactionWhenTransactionalIdNotPresent,
    ...WhenTransactionalIdIsEmpty, shouldRespondWithProducerFencedOnAddPartitionsWhenEpochsAreDifferent,
    shouldRespondWithConcurrentTransactions*OnAddPartitionsWhenStateIsPrepare*"""
    d = Driver()
    assert isinstance(d.add([TP1]), InvalidProducerIdMappingError)
    assert isinstance(d.add([TP1], txn=""), InvalidRequestError)
    d.put(txn_metadata(S.EMPTY, epoch=EPOCH + 1))
    assert isinstance(d.add([TP1]), ProducerFencedError)
    assert isinstance(d.add([TP1], pid=PID + 1, epoch=EPOCH + 1), InvalidProducerIdMappingError)
    for state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        d.put(txn_metadata(state, partitions=[TP1]))
        assert isinstance(d.add([TP2]), ConcurrentTransactionsError)


def test_add_partitions_writes_and_starts_the_transaction():
    """shouldAppendNewMetadataToLogOnAddPartitionsWhenPartitionsAdded,
    shouldRespondWithSuccessOnAddPartitionsWhenStateIsOngoing,
    shouldRespondWithErrorsNoneOnAddPartitionWhenNoErrorsAndPartitionsTheSame"""
    d = Driver()
    d.init()
    d.now += 7
    assert d.add([TP1], epoch=0) is None
    m = d.core.txns[TXN]
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (S.ONGOING, {TP1}, NOW + 7)
    writes = len(d.written)
    assert d.add([TP1], epoch=0) is None          # already in: answered without a write
    assert len(d.written) == writes
    d.now += 5
    assert d.add([TP2], epoch=0) is None
    assert (m.topic_partitions, m.txn_start_timestamp) == ({TP1, TP2}, NOW + 7)
    assert read_value(d.written[-1].record.value).topic_partitions == {TP1, TP2}


def test_add_partitions_write_failing_leaves_the_state():
    d = Driver()
    d.init()
    d.write_errors = [NotLeaderOrFollowerError()]
    assert isinstance(d.add([TP1], epoch=0), NotCoordinatorError)
    m = d.core.txns[TXN]
    assert (m.state, m.topic_partitions, m.pending_state) == (S.EMPTY, set(), None)


def test_add_offsets_adds_the_groups_offsets_partition():
    d = Driver()
    d.init()
    assert d.call(d.core.add_offsets_to_txn(TXN, PID, 0, "my-group", NOW)) is None
    assert d.core.txns[TXN].topic_partitions == {
        TopicPartition(OFFSETS_TOPIC, coordinator_partition_for("my-group", 50))}


def test_verify_partitions():
    """testVerifyPartitionHandling, shouldRespondWithErrorsNoneOnAddPartitionWhenOngoingVerifyOnlyAndPartitionsTheSame,
    shouldRespondWithInvalidTxnStateWhenVerifyOnlyAndPartitionNotPresent"""
    d = Driver()
    d.put(txn_metadata(S.ONGOING, partitions=[TP1]))
    answer = d.core.verify_partitions(TXN, PID, EPOCH, [TP1, TP2])
    assert answer[TP1] is None and isinstance(answer[TP2], InvalidTxnStateError)
    assert all(isinstance(e, ProducerFencedError)
               for e in d.core.verify_partitions(TXN, PID, EPOCH + 1, [TP1]).values())
    assert all(isinstance(e, InvalidProducerIdMappingError)
               for e in d.core.verify_partitions(TXN, PID + 1, EPOCH, [TP1]).values())
    d.put(txn_metadata(S.PREPARE_COMMIT, partitions=[TP1]))
    assert isinstance(d.core.verify_partitions(TXN, PID, EPOCH, [TP1])[TP1],
                      ConcurrentTransactionsError)


# ---- EndTxn ------------------------------------------------------------------------------

def test_end_txn_errors():
    """shouldReturnInvalidRequestOnEndTxnRequestWhenTransactionalIdIsEmpty,
    shouldRespondWithInvalidRequestOnEndTxnWhenTransactionalIdIsNull,
    shouldRespondWithNotCoordinatorOnEndTxnWhenIsNotCoordinatorForId,
    shouldRespondWithInvalidPidMappingOnEndTxnWhenTxnIdDoesntExist,
    shouldRespondWithInvalidPidMappingOnEndTxnWhenPidDosentMatchMapped,
    shouldReplyWithProducerFencedOnEndTxnWhenEpochIsNotSameAsTransaction"""
    d = Driver()
    assert isinstance(d.end(True, txn=""), InvalidRequestError)
    assert isinstance(d.end(True), InvalidProducerIdMappingError)
    d.put(txn_metadata(S.ONGOING, partitions=[TP1]))
    assert isinstance(d.end(True, pid=PID + 1), InvalidProducerIdMappingError)
    assert isinstance(d.end(True, epoch=EPOCH + 1), ProducerFencedError)
    assert isinstance(d.end(True, epoch=EPOCH - 1), ProducerFencedError)
    d.core.on_resignation(PARTITION)
    assert isinstance(d.end(True), NotCoordinatorError)


@pytest.mark.parametrize("state,commit,expected", [
    (S.COMPLETE_COMMIT, True, None),            # shouldReturnOkOnEndTxnWhenStatusIsCompleteCommitAndResultIsCommit
    (S.COMPLETE_ABORT, False, None),            # ...CompleteAbortAndResultIsAbort
    (S.COMPLETE_ABORT, True, InvalidTxnStateError),   # shouldReturnInvalidTxnRequestOnEndTxnRequestWhenStatusIsCompleteAbortAndResultIsNotAbort
    (S.COMPLETE_COMMIT, False, InvalidTxnStateError), # ...CompleteCommitAndResultIsNotCommit
    (S.PREPARE_COMMIT, True, ConcurrentTransactionsError),  # shouldReturnConcurrentTxnRequestOnEndTxnRequestWhenStatusIsPrepareCommit
    (S.PREPARE_ABORT, True, InvalidTxnStateError),    # shouldReturnInvalidTxnRequestOnEndTxnRequestWhenStatusIsPrepareAbort
    (S.EMPTY, True, InvalidTxnStateError),
    (S.EMPTY, False, InvalidTxnStateError),
])
def test_end_txn_by_state(state, commit, expected):
    d = Driver()
    d.put(txn_metadata(state, partitions=[TP1] if state.name.startswith("PREPARE") else []))
    answer = d.end(commit)
    assert answer is None if expected is None else isinstance(answer, expected)
    assert d.written == [] and d.markers == []


@pytest.mark.parametrize("commit", [True, False])
def test_a_transaction_from_start_to_end(commit):
    """shouldAppendPrepareCommitToLogOnEndTxnWhenStatusIsOngoingAndResultIsCommit,
    shouldAppendPrepareAbortToLogOnEndTxnWhenStatusIsOngoingAndResultIsAbort: the client
    is answered once PrepareX is written; the markers follow; CompleteX after the last."""
    d = Driver()
    assert d.init() == InitProducerIdResult(PID, 0)
    assert d.add([TP1, TP2], epoch=0) is None
    assert d.end(commit, epoch=0) is None
    m = d.core.txns[TXN]
    prepare = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
    complete = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
    assert read_value(d.written[-1].record.value).state is prepare
    assert (m.state, m.pending_state) == (prepare, complete)
    [send] = d.markers
    assert (send.producer_id, send.producer_epoch, send.commit, send.coordinator_epoch,
            send.partitions) == (PID, 0, commit, COORD_EPOCH, frozenset({TP1, TP2}))
    # A retry of the EndTxn while the markers are out.
    assert isinstance(d.end(commit, epoch=0), ConcurrentTransactionsError)
    # One partition's marker lands, the other's leader moved: only that one is sent again.
    d.markers = []
    d.perform(d.core.on_markers_done(send, {TP1: None, TP2: NotLeaderOrFollowerError()},
                                     d.now))
    [again] = d.markers
    assert again.partitions == frozenset({TP2}) and again.delay_ms == 100
    assert m.topic_partitions == {TP2} and m.state is prepare
    d.deliver_markers()
    assert (m.state, m.pending_state, m.topic_partitions) == (complete, None, set())
    stored = read_value(d.written[-1].record.value)
    assert (stored.state, stored.topic_partitions) == (complete, frozenset())
    assert d.end(commit, epoch=0) is None          # a retry after completion
    assert d.add([TP1], epoch=0) is None           # and the next transaction
    assert d.core.txns[TXN].state is S.ONGOING


def test_the_next_transactions_add_partitions_waits_for_the_last_ones_completion():
    """Where Kafka answers CONCURRENT_TRANSACTIONS (and the client backs off), the request
    waits for the markers and the completion, then is served; past completion_wait_ms it
    gets Kafka's answer; a coordinator that resigns meanwhile answers NOT_COORDINATOR."""
    d = Driver()
    d.init()
    d.add([TP1], epoch=0)
    d.end(True, epoch=0)
    request, effects = d.core.add_partitions_to_txn(TXN, PID, 0, [TP2], d.now)
    d.perform(effects)
    assert request not in d.replies and d.waits == [(TXN, request, d.now + 1000)]
    d.deliver_markers()                            # CompleteCommit written: served
    assert d.replies[request] is None
    assert (d.core.txns[TXN].state, d.core.txns[TXN].topic_partitions) == (S.ONGOING, {TP2})
    d.end(False, epoch=0)
    request, effects = d.core.add_partitions_to_txn(TXN, PID, 0, [TP1], d.now)
    d.perform(effects)
    d.perform(d.core.completion_wait_over(TXN, request, d.now + 1000))
    assert isinstance(d.replies[request], ConcurrentTransactionsError)
    request, effects = d.core.add_partitions_to_txn(TXN, PID, 0, [TP1], d.now)
    d.perform(effects)
    d.perform(d.core.on_resignation(PARTITION))
    assert isinstance(d.replies[request], NotCoordinatorError)
    assert d.core.completion_wait_over(TXN, request, d.now) == Effects()


def test_end_txn_with_no_partitions_completes_at_once():
    d = Driver()
    d.put(txn_metadata(S.ONGOING))
    assert d.end(True) is None
    assert d.markers == [] and d.core.txns[TXN].state is S.COMPLETE_COMMIT


def test_markers_for_a_deleted_topic_are_dropped_and_fencing_abandons():
    d = Driver()
    d.put(txn_metadata(S.ONGOING, partitions=[TP1]))
    d.end(True)
    d.deliver_markers(PARTITION_GONE)
    assert d.core.txns[TXN].state is S.COMPLETE_COMMIT
    # A marker refused because the producer's epoch moved on: another round of the
    # coordinator finishes it, this one sends nothing more.
    d.put(txn_metadata(S.ONGOING, partitions=[TP1]))
    d.end(False)
    d.deliver_markers(InvalidProducerEpochError())
    assert d.markers == [] and d.core.txns[TXN].state is S.PREPARE_ABORT


def test_completion_write_is_retried_while_the_partition_cannot_take_it():
    d = Driver()
    d.put(txn_metadata(S.ONGOING, partitions=[TP1]))
    d.end(True)
    d.write_errors = [NotEnoughReplicasError(), NotEnoughReplicasError()]
    d.deliver_markers()
    completions = [w for w in d.written if w.transit.state is S.COMPLETE_COMMIT]
    assert len(completions) == 3 and completions[-1].delay_ms == 100
    assert d.core.txns[TXN].state is S.COMPLETE_COMMIT


def test_markers_of_a_resigned_coordinator_are_dropped():
    d = Driver()
    d.put(txn_metadata(S.ONGOING, partitions=[TP1]))
    d.end(True)
    d.core.on_resignation(PARTITION, COORD_EPOCH)
    d.deliver_markers()
    assert d.written[-1].transit.state is S.PREPARE_COMMIT and TXN not in d.core.txns


def test_end_txn_write_lost_to_a_new_coordinator_epoch_answers_not_coordinator():
    d = Driver()
    d.put(txn_metadata(S.ONGOING, partitions=[TP1]))
    request, effects = d.core.end_txn(TXN, PID, EPOCH, True, NOW)
    [write] = effects.writes
    assert d.core.on_election(PARTITION, COORD_EPOCH + 1)[1]
    answer = d.core.on_write_done(write, None, NOW).replies
    assert [(r, type(a)) for r, a in answer] == [(request, NotCoordinatorError)]


# ---- loading, timeouts, expiration -------------------------------------------------------

def records_of(d: Driver) -> list[tuple[bytes, bytes | None]]:
    return [(w.record.key, w.record.value) for w in d.written]


def test_a_new_coordinator_loads_and_finishes_a_prepared_commit():
    """TransactionStateManagerTest's loading: PrepareCommit found in the log sends its
    markers again under the new coordinator epoch."""
    old = Driver()
    old.init()
    old.add([TP1, TP2], epoch=0)
    old.end(True, epoch=0)            # the old coordinator dies before any marker
    new = Driver(loaded=False)
    assert new.core.on_election(PARTITION, COORD_EPOCH + 1)[1]
    assert isinstance(new.init(), CoordinatorLoadInProgressError)
    new.perform(new.core.on_loaded(PARTITION, COORD_EPOCH + 1, records_of(old), NOW))
    [send] = new.markers
    assert (send.coordinator_epoch, send.commit, send.partitions) == \
        (COORD_EPOCH + 1, True, frozenset({TP1, TP2}))
    new.deliver_markers()
    assert new.core.txns[TXN].state is S.COMPLETE_COMMIT
    # The old coordinator's markers are dropped once it resigns.
    old.core.on_resignation(PARTITION)
    assert old.core.on_markers_done(old.markers[0], {TP1: None, TP2: None}, NOW) == Effects()


def test_load_ignores_a_partition_that_moved_meanwhile():
    d = Driver(loaded=False)
    d.core.on_election(PARTITION, COORD_EPOCH)
    d.core.on_election(PARTITION, COORD_EPOCH + 1)
    assert d.core.on_loaded(PARTITION, COORD_EPOCH, [], NOW) == Effects()
    assert PARTITION in d.core.loading


def test_expired_ongoing_transactions_are_aborted_with_a_bumped_epoch():
    """shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch,
    shouldNotAbortExpiredTransactionsThatHaveAPendingStateTransition"""
    d = Driver()
    m = d.put(txn_metadata(S.ONGOING, partitions=[TP1], start=NOW))
    d.perform(d.core.abort_timed_out_transactions(NOW + TIMEOUT))     # not yet
    assert d.written == []
    d.now = NOW + TIMEOUT + 1
    d.perform(d.core.abort_timed_out_transactions(d.now))
    assert read_value(d.written[-1].record.value).state is S.PREPARE_ABORT
    assert (m.producer_epoch, d.markers[0].producer_epoch) == (EPOCH + 1, EPOCH + 1)
    assert len(d.markers) == 1
    d.perform(d.core.abort_timed_out_transactions(NOW + 10 * TIMEOUT))  # completing: no more
    assert len(d.markers) == 1
    d.deliver_markers()
    assert m.state is S.COMPLETE_ABORT
    # The old producer is fenced.
    assert isinstance(d.end(True), ProducerFencedError)
    assert isinstance(d.add([TP2]), ProducerFencedError)


def test_timed_out_abort_write_failing_does_not_bump_the_epoch_twice():
    """shouldNotBumpEpochWhenAbortingExpiredTransactionIfAppendToLogFails"""
    d = Driver()
    m = d.put(txn_metadata(S.ONGOING, partitions=[TP1], start=NOW))
    d.write_errors = [NotEnoughReplicasError()]
    d.perform(d.core.abort_timed_out_transactions(NOW + TIMEOUT + 1))
    assert (m.producer_epoch, m.has_failed_epoch_fence, m.state) == (EPOCH + 1, True, S.ONGOING)
    d.perform(d.core.abort_timed_out_transactions(NOW + TIMEOUT + 2))
    assert (m.producer_epoch, m.state) == (EPOCH + 1, S.PREPARE_ABORT)


def test_idle_transactional_ids_expire_with_a_tombstone():
    config = TxnConfig(transactional_id_expiration_ms=1000)
    d = Driver(config=config)
    d.put(txn_metadata(S.COMPLETE_COMMIT))
    d.put(TransactionMetadata("busy", PID + 1, producer_epoch=0, state=S.ONGOING,
                              topic_partitions={TP1}, txn_start_timestamp=NOW,
                              txn_last_update_timestamp=NOW))
    d.perform(d.core.expire_transactional_ids(NOW + 1000))
    assert TXN not in d.core.txns
    tombstones = [w for w in d.written if w.record.value is None]
    assert [read_key(w.record.key) for w in tombstones] == [TXN]
    assert isinstance(d.core.describe_transaction(TXN), TransactionalIdNotFoundError)


def test_expiration_write_failing_keeps_the_id():
    d = Driver(config=TxnConfig(transactional_id_expiration_ms=1000))
    m = d.put(txn_metadata(S.EMPTY))
    d.write_errors = [NotEnoughReplicasError()]
    d.perform(d.core.expire_transactional_ids(NOW + 5000))
    assert d.core.txns[TXN] is m and m.pending_state is None and m.state is S.EMPTY


# ---- DescribeTransactions / ListTransactions ---------------------------------------------

def test_describe_transactions():
    """testDescribeTransactionsWithEmptyTransactionalId, ...WithExpiringTransactionalId,
    testDescribeTransactions"""
    d = Driver()
    assert isinstance(d.core.describe_transaction(""), InvalidRequestError)
    assert isinstance(d.core.describe_transaction(TXN), TransactionalIdNotFoundError)
    d.put(txn_metadata(S.ONGOING, partitions=[TP2, TP1], start=NOW))
    assert d.core.describe_transaction(TXN) == {
        "transactional_id": TXN, "state": "Ongoing", "producer_id": PID,
        "producer_epoch": EPOCH, "transaction_timeout_ms": TIMEOUT,
        "transaction_start_time_ms": NOW, "partitions": [TP1, TP2]}
    d.put(txn_metadata(S.DEAD))
    assert isinstance(d.core.describe_transaction(TXN), TransactionalIdNotFoundError)


def test_list_transactions_filters():
    d = Driver(config=TxnConfig(num_partitions=1))
    d.core.on_election(0, 1)
    d.core.on_loaded(0, 1, [], NOW)
    for i, state in enumerate([S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.DEAD]):
        d.put(TransactionMetadata(f"t{i}", 100 + i, producer_epoch=0, state=state,
                                  txn_start_timestamp=NOW - 1000 * i,
                                  txn_last_update_timestamp=NOW))
    unknown, listed = d.core.list_transactions()
    assert unknown == [] and [t["transactional_id"] for t in listed] == ["t0", "t1", "t2"]
    unknown, listed = d.core.list_transactions(states=["Ongoing", "Bogus"])
    assert unknown == ["Bogus"] and [t["state"] for t in listed] == ["Ongoing"]
    _, listed = d.core.list_transactions(producer_ids=[101, 102])
    assert [t["producer_id"] for t in listed] == [101, 102]
    _, listed = d.core.list_transactions(duration_ms=1500, now_ms=NOW)
    assert [t["transactional_id"] for t in listed] == ["t2"]
    d.core.on_election(0, 2)
    assert isinstance(d.core.list_transactions(), CoordinatorLoadInProgressError)
