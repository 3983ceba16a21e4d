"""A transactional id's state at its coordinator (actors/txn/metadata.py): Kafka's
TransactionMetadataTest cases for transaction versions 0 and 1, and the two-step
transition (prepare, then complete once the record is written)."""
from __future__ import annotations

import pytest

from actors.txn.metadata import (NO_PRODUCER_EPOCH, SHORT_MAX, IllegalTransition,
                                 TransactionMetadata, TransactionState)
from protocols.errors import ProducerFencedError
from protocols.topics import TopicPartition

S = TransactionState
NOW = 1_700_000_000_000
PID = 23423


def metadata(epoch: int = NO_PRODUCER_EPOCH, state: TransactionState = S.EMPTY,
             last_epoch: int = NO_PRODUCER_EPOCH, partitions=()) -> TransactionMetadata:
    return TransactionMetadata("txn-1", PID, producer_epoch=epoch, last_producer_epoch=last_epoch,
                               state=state, topic_partitions=set(partitions),
                               txn_start_timestamp=NOW if partitions else -1,
                               txn_last_update_timestamp=NOW)


def bump(m: TransactionMetadata, expected: int | None = None) -> TransactionMetadata:
    m.complete_transition(m.prepare_increment_producer_epoch(30_000, expected, NOW + 1))
    return m


def test_initialize_epoch():
    m = bump(metadata())
    assert (m.producer_id, m.producer_epoch, m.last_producer_epoch) == (PID, 0, NO_PRODUCER_EPOCH)
    assert (m.state, m.txn_timeout_ms, m.txn_start_timestamp) == (S.EMPTY, 30_000, -1)


def test_normal_epoch_bump():
    m = bump(metadata(735, S.EMPTY))
    assert (m.producer_epoch, m.last_producer_epoch) == (736, NO_PRODUCER_EPOCH)


def test_bump_epoch_not_allowed_if_epochs_exhausted():
    m = metadata(SHORT_MAX - 1, S.EMPTY)
    with pytest.raises(ValueError, match="Cannot allocate any more producer epochs"):
        m.prepare_increment_producer_epoch(30_000, None, NOW)
    assert m.pending_state is None


def test_fence_producer_after_epochs_exhausted():
    m = metadata(SHORT_MAX - 1, S.ONGOING, partitions=[TopicPartition("t", 0)])
    fence = m.prepare_fence_producer_epoch()
    assert (fence.state, fence.producer_epoch) == (S.PREPARE_EPOCH_FENCE, SHORT_MAX)
    with pytest.raises(IllegalTransition):          # a fence is never completed itself
        m.complete_transition(fence)


def test_fence_producer_not_allowed_if_it_would_overflow():
    m = metadata(SHORT_MAX, S.ONGOING, partitions=[TopicPartition("t", 0)])
    assert m.prepare_fence_producer_epoch().producer_epoch == SHORT_MAX


def test_a_failed_fence_keeps_its_bumped_epoch_for_the_next_try():
    m = metadata(5, S.ONGOING, partitions=[TopicPartition("t", 0)])
    assert m.prepare_fence_producer_epoch().producer_epoch == 6
    m.producer_epoch = 6          # the coordinator keeps the bumped epoch in memory
    m.abort_pending()             # ... and its write failed
    assert m.has_failed_epoch_fence
    assert m.prepare_fence_producer_epoch().producer_epoch == 6


def test_rotate_producer_id():
    m = metadata(SHORT_MAX - 1, S.COMPLETE_COMMIT)
    rotated = m.prepare_producer_id_rotation(PID + 1, 30_000, NOW + 1, record_last_epoch=True)
    m.complete_transition(rotated)
    assert (m.producer_id, m.prev_producer_id, m.producer_epoch, m.last_producer_epoch) == \
        (PID + 1, PID, 0, SHORT_MAX - 1)


def test_rotate_producer_id_in_ongoing_state():
    m = metadata(SHORT_MAX - 1, S.ONGOING, partitions=[TopicPartition("t", 0)])
    with pytest.raises(ValueError, match="still pending"):
        m.prepare_producer_id_rotation(PID + 1, 30_000, NOW, record_last_epoch=False)


def test_attempted_epoch_bump_with_newly_created_metadata():
    m = bump(metadata(), expected=0)
    assert (m.producer_epoch, m.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)


def test_epoch_bump_with_current_epoch_provided():
    m = bump(metadata(735, S.EMPTY), expected=735)
    assert (m.producer_epoch, m.last_producer_epoch) == (736, 735)


def test_attempted_epoch_bump_with_last_epoch():
    # A retry of an InitProducerId that succeeded: the current epoch again, not a new one.
    m = bump(metadata(735, S.EMPTY, last_epoch=734), expected=734)
    assert (m.producer_epoch, m.last_producer_epoch) == (735, 734)


def test_attempted_epoch_bump_with_fenced_epoch():
    m = metadata(735, S.EMPTY, last_epoch=734)
    with pytest.raises(ProducerFencedError):
        m.prepare_increment_producer_epoch(30_000, 733, NOW)


def test_a_transaction_from_first_partition_to_commit():
    m = bump(metadata())
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    m.complete_transition(m.prepare_add_partitions([t0], NOW + 10))
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (S.ONGOING, {t0}, NOW + 10)
    m.complete_transition(m.prepare_add_partitions([t1], NOW + 20))
    assert (m.topic_partitions, m.txn_start_timestamp) == ({t0, t1}, NOW + 10)
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 30))
    assert m.state is S.PREPARE_COMMIT and m.topic_partitions == {t0, t1}
    m.complete_transition(m.prepare_complete(NOW + 40))
    assert (m.state, m.topic_partitions, m.producer_epoch) == (S.COMPLETE_COMMIT, set(), 0)
    m.complete_transition(m.prepare_add_partitions([t1], NOW + 50))   # the next one
    assert (m.state, m.txn_start_timestamp) == (S.ONGOING, NOW + 50)


def test_transitions_kafka_does_not_allow_are_refused():
    m = bump(metadata())
    with pytest.raises(IllegalTransition, match="not a valid previous state"):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)       # nothing to commit
    with pytest.raises(IllegalTransition, match="not a valid previous state"):
        m.prepare_complete(NOW)
    m.prepare_add_partitions([TopicPartition("t", 0)], NOW + 5)
    with pytest.raises(IllegalTransition, match="already has a pending state"):
        m.prepare_add_partitions([TopicPartition("t", 1)], NOW + 6)
    m.abort_pending()                                           # its write failed
    assert m.state is S.EMPTY and m.pending_state is None


def test_a_transit_other_than_the_one_prepared_is_not_completed():
    m = bump(metadata())
    prepared = m.prepare_add_partitions([TopicPartition("t", 0)], NOW + 5)
    other = prepared.__class__(**{**prepared.__dict__, "producer_epoch": 7})
    with pytest.raises(IllegalTransition, match="unexpected metadata"):
        m.complete_transition(other)


def test_states_carry_kafkas_ids_and_names():
    assert [(s.id, s.state_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert S.from_id(4) is S.COMPLETE_COMMIT
    with pytest.raises(ValueError, match="Unknown transaction state id 9"):
        S.from_id(9)
