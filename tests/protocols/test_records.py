"""Kafka RecordBatch v2: byte layout, codecs, shallow/deep iteration, in-place patches."""
from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.compression import COMPRESSION_TYPES, compress, decompress
from protocols.errors import CorruptRecordError, UnsupportedVersionError
from protocols.records import (RECORD_BATCH_OVERHEAD, MemoryRecordsBuilder, Record,
                               encode_batch, iter_batches, read_batch_header, set_base_offset,
                               set_log_append_time, set_partition_leader_epoch)
from protocols.varint import decode_varint, encode_varint


def hand_built_batch() -> bytes:
    """One record (key b"k", value b"v", timestamp 1000) at base offset 0, written out field
    by field from Kafka's DefaultRecordBatch / DefaultRecord layout."""
    record = bytes([
        0x10,        # length 8, zig-zag
        0x00,        # attributes
        0x00,        # timestampDelta 0
        0x00,        # offsetDelta 0
        0x02, 0x6B,  # keyLength 1, "k"
        0x02, 0x76,  # valueLength 1, "v"
        0x00,        # header count 0
    ])
    after_crc = struct.pack(">hiqqqhii", 0, 0, 1000, 1000, -1, -1, -1, 1) + record
    head = struct.pack(">qiib", 0, 49 + len(record), -1, 2)
    return head + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc


def test_encoding_is_byte_for_byte_kafkas_layout():
    encoded = encode_batch([Record(b"k", b"v", 1000)])
    assert encoded == hand_built_batch()
    assert len(encoded) == RECORD_BATCH_OVERHEAD + 9


def test_header_fields_read_back():
    data = encode_batch([Record(b"a", b"1", 5000), Record(b"b", b"2", 5007)], base_offset=40,
                        producer_id=77, producer_epoch=3, base_sequence=11,
                        partition_leader_epoch=9, transactional=True)
    (b,) = iter_batches(data)
    assert (b.base_offset, b.last_offset, b.next_offset, b.record_count) == (40, 41, 42, 2)
    assert (b.base_timestamp, b.max_timestamp) == (5000, 5007)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (77, 3, 11, 12)
    assert (b.partition_leader_epoch, b.magic, b.size_in_bytes) == (9, 2, len(data))
    assert b.is_transactional and not b.is_control
    assert b.timestamp_type == "create_time" and b.compression == "none"
    assert b.is_valid()
    assert b.header().record_count == 2


def test_records_round_trip_with_null_key_value_and_headers():
    records = [Record(None, None, 1), Record(b"", b"", 2), Record(b"k", b"v" * 1000, 3,
                                                                  (("h1", b"x"), ("h2", None)))]
    (b,) = iter_batches(encode_batch(records, base_offset=100))
    got = list(b.records())
    assert [(r.key, r.value, r.timestamp, r.headers, r.offset) for r in got] == [
        (None, None, 1, (), 100), (b"", b"", 2, (), 101),
        (b"k", b"v" * 1000, 3, (("h1", b"x"), ("h2", None)), 102)]


def test_control_bit():
    (b,) = iter_batches(encode_batch([Record(b"\x00\x00\x00\x00", b"", 1)], control=True))
    assert b.is_control


@pytest.mark.parametrize("codec", COMPRESSION_TYPES)
def test_every_codec_round_trips(codec):
    records = [Record(b"key-%d" % i, b"value " * 50, 1_000 + i) for i in range(200)]
    data = encode_batch(records, compression=codec)
    (b,) = iter_batches(data)
    assert b.compression == codec and b.is_valid()
    assert [(r.key, r.value, r.timestamp) for r in b.records()] == \
        [(r.key, r.value, r.timestamp) for r in records]
    if codec != "none":
        assert len(data) < len(encode_batch(records))


def test_snappy_uses_xerial_framing_and_reads_raw_snappy_too():
    framed = compress("snappy", b"abc" * 100)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    import cramjam
    raw = bytes(cramjam.snappy.compress_raw(b"abc" * 100))
    assert decompress("snappy", raw) == b"abc" * 100


def test_lz4_is_a_frame_with_independent_blocks():
    frame = compress("lz4", b"x" * 100_000)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg = frame[4]
    assert flg & 0x20  # block independence, as KafkaLZ4BlockOutputStream writes


def test_corrupt_byte_fails_the_crc():
    data = bytearray(encode_batch([Record(b"k", b"value", 1)]))
    data[-3] ^= 0x01
    (b,) = iter_batches(bytes(data))
    assert not b.is_valid()
    with pytest.raises(CorruptRecordError, match="stored crc"):
        b.ensure_valid()


def test_wrong_magic_is_unsupported_version():
    data = bytearray(encode_batch([Record(b"k", b"v", 1)]))
    data[16] = 1
    with pytest.raises(UnsupportedVersionError):
        list(iter_batches(bytes(data)))


def test_batch_length_below_the_header_is_corrupt():
    data = bytearray(encode_batch([Record(b"k", b"v", 1)]))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(data)))


def test_shallow_iteration_stops_at_a_torn_tail():
    one = encode_batch([Record(b"a", b"1", 1)])
    two = encode_batch([Record(b"b", b"2", 2)], base_offset=1)
    for cut in range(len(two)):
        got = list(iter_batches(one + two[:cut]))
        assert [b.base_offset for b in got] == [0]
    assert [b.position for b in iter_batches(one + two)] == [0, len(one)]
    assert read_batch_header(one + two, len(one)) == (1, len(two) - 12)
    assert read_batch_header(one, len(one) - 5) is None


def test_patching_offset_and_epoch_keeps_the_crc_valid():
    buf = bytearray(encode_batch([Record(b"k", b"v", 1), Record(b"k", b"w", 2)]))
    set_base_offset(buf, 0, 123_456_789)
    set_partition_leader_epoch(buf, 0, 42)
    (b,) = iter_batches(bytes(buf))
    assert b.is_valid()
    assert (b.base_offset, b.partition_leader_epoch) == (123_456_789, 42)
    assert [r.offset for r in b.records()] == [123_456_789, 123_456_790]


def test_log_append_time_patch_recomputes_the_crc():
    buf = bytearray(encode_batch([Record(b"k", b"v", 1), Record(b"k", b"w", 2)]))
    set_log_append_time(buf, 0, 9_999)
    (b,) = iter_batches(bytes(buf))
    assert b.is_valid() and b.timestamp_type == "log_append_time"
    assert [r.timestamp for r in b.records()] == [9_999, 9_999]


def test_records_with_offsets_keep_gaps_and_last_offset_delta_is_kept():
    """What compaction writes: surviving records keep their offsets."""
    data = encode_batch([Record(b"a", b"1", 1, offset=10), Record(b"c", b"3", 3, offset=12)],
                        base_offset=10, last_offset_delta=4)
    (b,) = iter_batches(data)
    assert [r.offset for r in b.records()] == [10, 12]
    assert (b.last_offset, b.record_count) == (14, 2)
    empty = encode_batch([], base_offset=20, last_offset_delta=3)
    (e,) = iter_batches(empty)
    assert (e.record_count, e.last_offset, list(e.records())) == (0, 23, [])
    with pytest.raises(ValueError):
        encode_batch([])


@pytest.mark.parametrize("value", [0, 1, -1, 63, 64, -64, -65, 2**31 - 1, -2**31,
                                   2**63 - 1, -2**63])
def test_varint_edges(value):
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0) == (value, len(encoded))


def test_the_encoders_table_of_small_varints_is_encode_varints():
    from protocols.records import _SMALL_VARINTS
    assert list(_SMALL_VARINTS) == [encode_varint(n) for n in range(16_384)]


def test_varint_examples():
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(300) == b"\xd8\x04"
    assert len(encode_varint(-2**63)) == 10


records_strategy = st.lists(
    st.builds(Record, st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=200),
              st.integers(0, 2**42),
              st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)),
                       max_size=3).map(tuple)),
    min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(records=records_strategy, codec=st.sampled_from(COMPRESSION_TYPES),
       base=st.integers(0, 2**40))
def test_round_trip_property(records, codec, base):
    data = encode_batch(records, base_offset=base, compression=codec)
    (b,) = iter_batches(data)
    assert b.is_valid()
    got = list(b.records())
    assert [(r.key, r.value, r.timestamp, r.headers) for r in got] == \
        [(r.key, r.value, r.timestamp, r.headers) for r in records]
    assert [r.offset for r in got] == list(range(base, base + len(records)))
    assert b.max_timestamp == max(r.timestamp for r in records)


def test_builder_encodes_as_records_are_appended_and_builds_again_for_a_retry():
    # Kafka's MemoryRecordsBuilder: the producer appends one record at a time; the batch
    # equals the one encoded from the whole list, and a retry builds the same bytes.
    records = [Record(None, b"v" * 100, 1_000_000), Record(b"k", b"x" * 20_000, 999_000),
               Record(b"k2", None, 1_000_500, (("h", b"1"), ("h2", None))),
               Record(b"", b"", 2_000_000_000_000)]
    builder = MemoryRecordsBuilder()
    for r in records:
        builder.append(r.timestamp, r.key, r.value, r.headers)
    built = builder.build(producer_id=7, producer_epoch=1, base_sequence=40)
    assert built == encode_batch(records, producer_id=7, producer_epoch=1, base_sequence=40)
    assert builder.build(producer_id=7, producer_epoch=1, base_sequence=40) == built
    assert builder.size_in_bytes == len(built)
    batch = next(iter_batches(built))
    assert batch.max_timestamp == 2_000_000_000_000 and batch.base_timestamp == 1_000_000
    assert [(r.key, r.value, r.timestamp, r.headers) for r in batch.records()] == \
        [(r.key, r.value, r.timestamp, r.headers) for r in records]


def test_a_negative_length_other_than_null_is_corrupt():
    builder = MemoryRecordsBuilder()
    builder.append(0, b"key", b"value")
    data = bytearray(builder.build())
    key_length_at = RECORD_BATCH_OVERHEAD + 4   # length, attributes, ts delta, offset delta
    assert data[key_length_at] == 6             # zig-zag 3
    data[key_length_at] = 5                     # zig-zag -3
    with pytest.raises(CorruptRecordError):
        next(iter_batches(bytes(data))).record_tuples()
