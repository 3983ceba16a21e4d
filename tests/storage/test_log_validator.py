"""LogValidator: what an append must pass, and the leader's offsets (cases of Kafka's
LogValidatorTest that apply to v2 batches)."""
from __future__ import annotations

import pytest

from protocols.errors import (CorruptRecordError, InvalidRecordError, RecordListTooLargeError,
                              RecordTooLargeError)
from protocols.records import Record, encode_batch, iter_batches
from storage.config import LogConfig
from storage.log_validator import assign_offsets, validate_as_leader, validate_batches
from tests.storage.conftest import batch, keyed_batch


def config(**props) -> LogConfig:
    return LogConfig.from_props(props)


def test_every_batch_is_returned_with_its_header():
    buf = batch(3) + batch(2)
    batches = validate_batches(buf, config(), "t-0", leader=True)
    assert [h.record_count for _, h in batches] == [3, 2]


def test_a_batch_above_max_message_bytes_is_refused():
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=200"):
        validate_batches(batch(5), config(**{"max.message.bytes": 200}), "t-0", leader=True)


def test_a_corrupt_batch_and_trailing_bytes_are_refused():
    buf = bytearray(batch(2))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        validate_batches(bytes(buf), config(), "t-0", leader=False)
    with pytest.raises(CorruptRecordError, match="3 trailing bytes"):
        validate_batches(batch(1) + b"abc", config(), "t-0", leader=False)


def test_a_leader_refuses_an_empty_append_and_a_keyless_record_on_a_compacted_topic():
    with pytest.raises(InvalidRecordError, match="holds no record batch"):
        validate_batches(b"", config(), "t-0", leader=True)
    assert validate_batches(b"", config(), "t-0", leader=False) == []
    with pytest.raises(InvalidRecordError, match="without key"):
        validate_batches(batch(1), config(**{"cleanup.policy": "compact"}), "t-0", leader=True)
    validate_batches(keyed_batch([(b"k", b"v")]), config(**{"cleanup.policy": "compact"}),
                     "t-0", leader=True)


def test_an_append_larger_than_a_segment_is_refused():
    with pytest.raises(RecordListTooLargeError):
        validate_batches(batch(20), config(**{"segment.bytes": 1000}), "t-0", leader=True)


def test_the_topics_compression_type_recompresses_other_codecs():
    buf, batches = validate_as_leader(bytearray(batch(3)), config(**{"compression.type": "gzip"}),
                                      "t-0")
    assert [b.compression for b, _ in batches] == ["gzip"]
    assert [r.value[:2] for b in iter_batches(buf) for r in b.records()] == [b"v0", b"v1", b"v2"]
    same = bytearray(batch(3))
    kept, _ = validate_as_leader(same, config(), "t-0")   # producer: the batch as it came
    assert kept is same


def test_the_leader_stamps_offsets_epoch_and_log_append_time_in_place():
    buf = bytearray(batch(3) + batch(2))
    batches = validate_batches(buf, config(), "t-0", leader=True)
    infos, records = assign_offsets(buf, batches, 40, 7, 1_234)
    assert records == 5 and [i.last_offset for i in infos] == [42, 44]
    stamped = list(iter_batches(buf))
    assert [(b.base_offset, b.partition_leader_epoch) for b in stamped] == [(40, 7), (43, 7)]
    assert all(b.max_timestamp == 1_234 for b in stamped) and infos[0].max_timestamp == 1_234
    plain = bytearray(encode_batch([Record(None, b"x", 99)]))
    infos, _ = assign_offsets(plain, validate_batches(plain, config(), "t-0", True), 0, 0, -1)
    assert infos[0].max_timestamp == 99                    # CreateTime: the producer's
