"""The columnar decoder (protocols/columnar.py) against the per-record decoder: on the common
path (no headers, ordinary varints) it gives exactly the same records; off it, and for any
body that does not add up, it declines (None) and the per-record decoder decides."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import columnar
from protocols.records import (RECORDS_OFFSET, MemoryRecordsBuilder, Record, RecordBatch,
                               _decode_records, encode_batch, iter_batches)

N = columnar.MIN_RECORDS


def body_of(data: bytes) -> bytes:
    return data[RECORDS_OFFSET:]


def both(data: bytes, append_time=None):
    """(columnar answer, per-record answer) for a one-batch buffer."""
    (batch,) = iter_batches(data)
    args = (body_of(data), batch.record_count, batch.base_offset, batch.base_timestamp,
            append_time)
    return columnar.record_tuples(*args), _decode_records(*args)


plain_records = st.lists(
    st.builds(Record, st.none() | st.binary(max_size=40),
              st.none() | st.binary(max_size=300) | st.just(b"L" * 9_000),
              st.integers(0, 2**42)),
    min_size=N, max_size=80)


@settings(max_examples=100, deadline=None)
@given(records=plain_records, base=st.integers(0, 2**40))
def test_records_without_headers_decode_column_by_column_exactly_as_one_by_one(records, base):
    # Null keys and values, empty ones, 3-byte lengths (values of 8 KB and more), timestamps before
    # the batch's first (negative deltas) and 6-byte timestamp deltas.
    data = encode_batch(records, base_offset=base)
    fast, slow = both(data)
    assert fast is not None, "the common path declined a batch it covers"
    assert fast == slow
    assert [(key, value, ts) for _, ts, key, value, _ in fast] == \
        [(r.key, r.value, r.timestamp) for r in records]


def test_gaps_in_offsets_of_a_compacted_batch_are_kept():
    builder = MemoryRecordsBuilder()
    for i in range(N):
        builder.append(1_000 + i, b"k%d" % i, b"v", offset_delta=i * 70)  # deltas past 63
    fast, slow = both(builder.build(base_offset=500))
    assert fast == slow
    assert [offset for offset, *_ in fast] == [500 + i * 70 for i in range(N)]


def test_columns_are_the_records_fields_and_log_append_time_replaces_each_time():
    records = [Record(None, b"x" * 100, 1_700_000_000_000 + i) for i in range(N * 4)]
    data = encode_batch(records, base_offset=10)
    (batch,) = iter_batches(data)
    body = body_of(data)
    fast = columnar.record_columns(body, len(records), 10, 1_700_000_000_000, 42)
    slow = _decode_records(body, len(records), 10, 1_700_000_000_000, 42)
    assert [list(column) for column in zip(*slow)][:4] == list(fast)
    assert fast[0][:2] == [10, 11] and set(fast[1]) == {42} and fast[2][0] is None
    # The batch's own view: no headers anywhere, so none is kept per record.
    assert batch.record_columns() == (*columnar.record_columns(
        body, len(records), 10, 1_700_000_000_000, None), None)


def test_headers_small_batches_and_huge_varints_take_the_per_record_path():
    headers = [Record(None, b"v", 0, (("h", b"1"),))] + [Record(None, b"v", 0)] * N
    assert both(encode_batch(headers))[0] is None
    assert both(encode_batch([Record(None, b"v", 0)] * (N - 1)))[0] is None
    builder = MemoryRecordsBuilder()
    builder.append(-2**62, None, b"v")
    for i in range(N):
        builder.append(2**62 - 1, None, b"v")   # a delta of 2**63 - 1: a 10-byte varlong
    fast, slow = both(builder.build())
    assert fast is None and len(slow) == N + 1


@settings(max_examples=150, deadline=None)
@given(records=plain_records, at=st.integers(0, 10**9), byte=st.integers(0, 255))
def test_a_damaged_body_is_never_decoded_differently(records, at, byte):
    # Whatever one wrong byte does, the columnar path either declines or agrees with the
    # per-record decoder (which then raises CorruptRecordError, or decodes the same records).
    data = bytearray(encode_batch(records))
    at = RECORDS_OFFSET + at % (len(data) - RECORDS_OFFSET)
    data[at] = byte
    (batch,) = iter_batches(bytes(data))
    args = (body_of(bytes(data)), batch.record_count, batch.base_offset,
            batch.base_timestamp, None)
    fast = columnar.record_tuples(*args)
    if fast is not None:
        assert fast == _decode_records(*args)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(N, 9_000), size=st.integers(0, 200), keyed=st.booleans())
def test_records_of_one_size_are_located_without_a_loop_however_many(n, size, keyed):
    # A bulk producer's batch: the records differ only in their offset delta (1 byte below
    # 64, 2 below 8192, 3 above), so every start follows from the first record.
    data = encode_batch([Record(b"k" if keyed else None, b"v" * size, 7)] * n)
    body = body_of(data)
    guessed = columnar._guessed_starts(body, n, columnar.padded(body))
    assert guessed is not None
    columnar_answer, per_record = both(data)
    assert columnar_answer == per_record


def test_a_length_spelled_in_more_bytes_than_it_needs_is_not_guessed():
    # Record 1's length varint 0x0a re-spelled 0x8a 0x00 (the same value, one byte longer):
    # valid to the per-record decoder, so the guess must not shift the later records.
    records = [Record(None, b"abc", 7)] * N
    body = bytearray(body_of(encode_batch(records)))
    second = body[0] // 2 + 1
    body[second:second + 1] = bytes([body[second] | 0x80, 0x00])
    assert columnar._guessed_starts(bytes(body), N, columnar.padded(bytes(body))) is None


def bodies_of(batches: list[bytes]):
    """The bodies of several one-batch buffers end to end and padded, as a fetch's batches
    of one partition reach ``locate_batches``: (joined, arr, bodies, counts)."""
    parsed = [next(iter_batches(data)) for data in batches]
    bodies = [body_of(data) for data in batches]
    joined = b"".join([*bodies, bytes(columnar.PADDING)])
    return joined, columnar.padded(b"".join(bodies)), bodies, [b.record_count for b in parsed]


def looped(joined: bytes, bodies, counts) -> list[int] | None:
    """Each body's record starts by the per-body loop, end to end (None if one declines)."""
    starts, at = [], 0
    for body, count in zip(bodies, counts):
        if count:
            found = columnar._looped_starts(joined, count, at, at + len(body))
            if found is None:
                return None
            starts += found
        at += len(body)
    return starts


varied_records = st.lists(
    st.builds(Record, st.none() | st.binary(max_size=36),
              st.none() | st.binary(max_size=2_000), st.integers(0, 2**42)),
    min_size=0, max_size=60)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(varied_records, min_size=columnar.LANES_MIN, max_size=70))
def test_many_bodies_are_followed_side_by_side_as_each_is_followed_alone(batches):
    # A fetch of Kafka-sized batches (16 KiB: a few dozen records of differing sizes each)
    # is located one record index at a time for all its bodies at once: the same starts as
    # the loop over each body, and the same records as the per-record decoder.
    # No record left (compaction removed them all): an empty body, stepped over.
    data = [encode_batch(records) if records else encode_batch([], last_offset_delta=3)
            for records in batches]
    joined, arr, bodies, counts = bodies_of(data)
    held = [c for c in counts if c]
    expected = looped(joined, bodies, counts)
    assert expected is not None
    if held:
        ends = np.cumsum([len(b) for b in bodies])
        kept = np.flatnonzero(np.array(counts) > 0)
        lanes = columnar._lane_starts(arr, (ends - [len(b) for b in bodies])[kept],
                                      np.array(held), ends[kept])
        assert lanes is not None and lanes.tolist() == expected
    parsed = list(iter_batches(b"".join(data)))
    if sum(held) >= columnar.MIN_RECORDS:
        columns = RecordBatch.arrow_columns_of(parsed)
        assert columns["offset"].to_pylist() == [o for b in parsed for o, *_ in
                                                 b.record_tuples()]
        assert columns["value"].to_pylist() == [r.value for rs in batches for r in rs]


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(plain_records, min_size=columnar.LANES_MIN, max_size=24),
       at=st.integers(0, 10**9), byte=st.integers(0, 255))
def test_a_damaged_body_among_many_is_never_followed_differently(batches, at, byte):
    # One wrong byte in one of many bodies: side by side, the bodies are either declined
    # (the loop then decides) or followed to exactly the loop's starts. Bodies holding
    # 8 KiB values (3-byte lengths) are declined whole: the loop takes them.
    joined, arr, bodies, counts = bodies_of([encode_batch(records) for records in batches])
    damaged = bytearray(joined)
    damaged[at % (len(joined) - columnar.PADDING)] = byte
    joined = bytes(damaged)
    arr = np.frombuffer(joined, np.uint8)
    ends = np.cumsum([len(b) for b in bodies])
    lanes = columnar._lane_starts(arr, ends - [len(b) for b in bodies], np.array(counts),
                                  ends)
    if lanes is not None:
        assert lanes.tolist() == looped(joined, bodies, counts)
    if not any(r.value is not None and len(r.value) > 8_000 for rs in batches for r in rs):
        assert (lanes is None) == (looped(joined, bodies, counts) is None)


def test_the_loop_follows_lengths_of_every_width_and_declines_a_negative_one():
    # Records of 8 KiB and more have length varints of three bytes, which the loop's table
    # of two-byte lengths does not hold: it decodes those, and still finds every start.
    sizes = [5, 200, 8_300, 60, 70_000, 1, 9_000] * 3
    body = body_of(encode_batch([Record(b"k", b"v" * n, 5) for n in sizes]))
    joined = body + bytes(columnar.PADDING)
    starts = columnar._looped_starts(joined, len(sizes), 0, len(body))
    assert starts is not None and len(starts) == len(sizes)
    follows = []
    for at in starts:
        z, after = columnar.decode_unsigned_varint(joined, at)
        follows.append(after + (z >> 1))
    assert follows == starts[1:] + [len(body)]
    # The third record's length made negative (zig-zag: odd), in its three bytes.
    damaged = bytearray(joined)
    damaged[starts[2]] |= 1
    assert columnar._looped_starts(bytes(damaged), len(sizes), 0, len(body)) is None
    columnar_answer, per_record = both(encode_batch([Record(b"k", b"v" * n, 5)
                                                     for n in sizes]))
    assert columnar_answer is not None and columnar_answer == per_record


def test_one_long_body_among_short_ones_is_looped_over():
    # Side by side, steps cost the same with one body left as with fifty: a body of 5,000
    # records beside a few short ones is looped over instead, and located the same.
    data = [encode_batch([Record(b"k", b"v" * (i % 7), 5)] * (5_000 if i == 0 else 20))
            for i in range(20)]
    parsed = list(iter_batches(b"".join(data)))
    columns = RecordBatch.arrow_columns_of(parsed)
    assert columns["value"].to_pylist() == [v for b in parsed for _, _, _, v, _ in
                                            b.record_tuples()]


def test_following_side_by_side_holds_one_start_per_record_in_memory():
    # One long body beside thousands of one-record bodies: the starts are written to one
    # array of a slot per record, not a (records of the longest body x bodies) table.
    import tracemalloc
    data = [encode_batch([Record(None, b"v" * (i % 5), 5)] * (2_000 if i == 0 else 1))
            for i in range(5_001)]
    joined, arr, bodies, counts = bodies_of(data)
    ends = np.cumsum([len(b) for b in bodies])
    tracemalloc.start()
    try:
        starts = columnar._lane_starts(arr, ends - [len(b) for b in bodies], np.array(counts),
                                       ends)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert starts.tolist() == looped(joined, bodies, counts)
    assert peak < 2_000_000   # the table would take 2,000 x 5,001 x 8 bytes: 80 MB


def test_a_header_count_of_zero_in_two_bytes_is_left_to_the_per_record_decoder():
    # 0x80 0x00 spells zero: Kafka reads no header. The columnar path declines (no header
    # to locate) and the per-record decoder reads every record.
    def record(i: int) -> bytes:
        fields = bytes([0x00, 0x00, 2 * i, 0x01, 0x02]) + b"v" + bytes([0x80, 0x00])
        return bytes([2 * len(fields)]) + fields
    body = b"".join(record(i) for i in range(N))
    batch = columnar.BatchBody(body, N, 0, 1_000, None)
    assert columnar.batches_record_columns([batch]) is None
    assert _decode_records(body, N, 0, 1_000, None) == [(i, 1_000, None, b"v", ())
                                                         for i in range(N)]
