"""Control records (protocols/control_records.py): Kafka's EndTransactionMarkerTest and
ControlRecordTypeTest, and the marker batch as Kafka's MemoryRecords.withEndTransactionMarker
writes it."""
from __future__ import annotations

import struct

import pytest

from protocols.control_records import (ABORT, COMMIT, EndTransactionMarker,
                                       control_record_type, end_txn_marker_batch)
from protocols.errors import KafkaError
from protocols.records import NO_SEQUENCE, Record, iter_batches


def record(key: bytes, value: bytes | None) -> Record:
    return Record(key, value, 0)


@pytest.mark.parametrize("control_type", [ABORT, COMMIT])
def test_serde(control_type):
    marker = EndTransactionMarker(control_type, 79)
    assert marker.key() == struct.pack(">hh", 0, control_type)
    assert marker.value() == struct.pack(">hi", 0, 79)
    assert EndTransactionMarker.deserialize(record(marker.key(), marker.value())) == marker
    assert marker.committed == (control_type == COMMIT)


def test_cannot_deserialize_unknown_control_type():
    with pytest.raises(KafkaError, match="LEADER_CHANGE"):
        EndTransactionMarker.deserialize(record(struct.pack(">hh", 0, 2),
                                                struct.pack(">hi", 0, 1)))


def test_illegal_negative_version():
    with pytest.raises(KafkaError, match="Invalid version found for end transaction marker"):
        EndTransactionMarker.deserialize(record(struct.pack(">hh", 0, COMMIT),
                                                struct.pack(">hi", -1, 1)))
    with pytest.raises(KafkaError, match="Invalid version found for control record: -1"):
        control_record_type(struct.pack(">hh", -1, COMMIT))


def test_not_enough_bytes():
    with pytest.raises(KafkaError, match="Invalid end transaction marker value of 3 bytes"):
        EndTransactionMarker.deserialize(record(struct.pack(">hh", 0, ABORT), b"\0\0\0"))
    with pytest.raises(KafkaError, match="at least 4 bytes, but found only 2"):
        control_record_type(b"\0\0")


def test_deserialize_newer_version():
    # A later version may add fields after the coordinator epoch: they are skipped.
    value = struct.pack(">hiq", 1, 79, 12345)
    assert EndTransactionMarker.deserialize(record(struct.pack(">hh", 0, COMMIT), value)) == \
        EndTransactionMarker(COMMIT, 79)


def test_the_marker_batch_is_a_transactional_control_batch_of_the_producer():
    data = end_txn_marker_batch(EndTransactionMarker(ABORT, 5), 4321, 7, timestamp_ms=1_000,
                                base_offset=40, partition_leader_epoch=3)
    (batch,) = iter_batches(data)
    assert batch.is_control and batch.is_transactional and batch.is_valid()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == \
        (4321, 7, NO_SEQUENCE)
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (40, 40, 3)
    (only,) = batch.records()
    assert EndTransactionMarker.deserialize(only) == EndTransactionMarker(ABORT, 5)
    assert only.timestamp == 1_000
