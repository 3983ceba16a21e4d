"""Record batches as Arrow columns (protocols/arrow_records.py): the columnar encoder makes
byte for byte the batch the per-record encoder makes of the same records, and the columnar
decoder gives the records the per-record decoder gives, for random records (nulls, empty
values, large varints, negative timestamp deltas) and Arrow inputs of every binary kind."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols import columnar
from protocols.arrow_records import HEADERS_TYPE, encode_bodies
from protocols.errors import CorruptRecordError
from protocols.records import (MemoryRecordsBuilder, Record, RecordBatch, encode_batch,
                               encode_batch_columns, iter_batches)

NOW = 1_700_000_000_000

payloads = st.one_of(st.none(), st.binary(max_size=40),
                     st.binary(min_size=128, max_size=300),      # 2-byte length varints
                     st.binary(min_size=8_200, max_size=8_300))  # 3-byte length varints
timestamps = st.integers(NOW - 2**40, NOW + 2**40)                # varlongs up to 6 bytes


@st.composite
def record_columns(draw):
    n = draw(st.integers(1, 40))
    values = draw(st.lists(payloads, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(payloads, min_size=n, max_size=n)))
    stamps = draw(st.one_of(st.none(), st.lists(timestamps, min_size=n, max_size=n)))
    return values, keys, stamps


header_lists = st.one_of(
    st.none(), st.lists(st.tuples(st.text(max_size=12),
                                  st.one_of(st.none(), st.binary(max_size=20),
                                            st.binary(min_size=130, max_size=140))),
                        max_size=3))


# Records with headers and 8 KiB values are large inputs for hypothesis: that is the point.
LARGE = [HealthCheck.data_too_large, HealthCheck.too_slow]


def per_record(values, keys, stamps, headers=None, **batch) -> bytes:
    return encode_batch([Record(None if keys is None else keys[i], v,
                                NOW if stamps is None else stamps[i],
                                tuple(headers[i] or ()) if headers is not None else ())
                         for i, v in enumerate(values)], **batch)


@settings(max_examples=150, deadline=None)
@given(record_columns())
def test_the_columnar_encoder_matches_the_per_record_encoder_byte_for_byte(columns):
    values, keys, stamps = columns
    assert encode_batch_columns(values, keys, stamps, now_ms=NOW) == \
        per_record(values, keys, stamps)


@settings(max_examples=150, deadline=None, suppress_health_check=LARGE)
@given(record_columns(), st.data())
def test_headers_encode_column_by_column_as_the_per_record_encoder_does(columns, data):
    # Kafka's header: a String key (never null), a nullable byte[] value; a record may
    # have none, one or many, and a header list may be null (none).
    values, keys, stamps = columns
    headers = data.draw(st.lists(header_lists, min_size=len(values), max_size=len(values)))
    expected = per_record(values, keys, stamps, headers)
    assert encode_batch_columns(values, keys, stamps, headers, now_ms=NOW) == expected
    as_arrow = pa.array([None if h is None else [{"key": k, "value": v} for k, v in h]
                         for h in headers], HEADERS_TYPE)
    assert encode_batch_columns(values, keys, stamps, as_arrow, now_ms=NOW) == expected
    # A slice of a bigger column (non-zero list offsets) encodes as its own records.
    padded = pa.concat_arrays([pa.array([[{"key": "x", "value": b"y"}]], HEADERS_TYPE),
                               as_arrow]).slice(1)
    assert encode_batch_columns(values, keys, stamps, padded, now_ms=NOW) == expected



def test_many_headers_a_record_take_a_count_of_two_bytes_column_by_column_too():
    """A header count of 64 or more is a two-byte varint (zig-zag: 128 and up); records
    with none, 63, 64 and 8,192 headers side by side, from a slice of a bigger column."""
    counts = [0, 63, 64, 1, 8_192, 0, 200]
    headers = [[(f"k{j}", None if j % 5 == 0 else bytes([j % 256]) * (j % 3))
                for j in range(n)] or None for n in counts]
    values = [b"v%d" % i for i in range(len(counts))]
    expected = per_record(values, None, None, headers)
    as_arrow = pa.array([[{"key": "x", "value": b"y"}] * 70] + [
        None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
        HEADERS_TYPE).slice(1)
    assert encode_batch_columns(values, None, None, as_arrow, now_ms=NOW) == expected


def test_a_null_header_key_is_refused():
    headers = pa.array([[{"key": None, "value": b"v"}]], HEADERS_TYPE)
    with pytest.raises(ValueError, match="header's key must not be null"):
        encode_batch_columns([b"a"], headers=headers, now_ms=NOW)


@settings(max_examples=100, deadline=None)
@given(record_columns(), st.sampled_from(["none", "gzip", "lz4", "zstd", "snappy"]))
def test_the_arrow_decoder_gives_what_the_per_record_decoder_gives(columns, codec):
    values, keys, stamps = columns
    data = per_record(values, keys, stamps, base_offset=500, compression=codec)
    [batch] = iter_batches(data)
    got = batch.arrow_columns()
    offsets, ts, ks, vs, _ = zip(*batch.record_tuples())
    assert got["offset"].to_pylist() == list(offsets) and got["timestamp"].to_pylist() == list(ts)
    assert got["key"].to_pylist() == list(ks) and got["value"].to_pylist() == list(vs)
    assert "headers" not in got


def test_arrow_arrays_of_every_binary_kind_encode_as_their_bytes():
    values = ["α", None, "", "plain"]
    expected = per_record([None if v is None else v.encode() for v in values], None, None)
    for array in (pa.array(values, pa.string()), pa.array(values, pa.large_string()),
                  pa.array([None if v is None else v.encode() for v in values], pa.binary()),
                  pa.chunked_array([pa.array(values[:2]), pa.array(values[2:])]),
                  pa.array(["skip"] + values, pa.string()).slice(1)):
        assert encode_batch_columns(array, now_ms=NOW) == expected, array.type
    assert encode_batch_columns(values, now_ms=NOW) == expected     # a list of str


def test_the_builder_from_columns_sends_and_retries_like_the_per_record_one():
    columnar = MemoryRecordsBuilder.from_columns([b"a", b"b"], [b"k", None], [NOW, NOW + 5])
    single = MemoryRecordsBuilder()
    single.append(NOW, b"k", b"a")
    single.append(NOW + 5, None, b"b")
    assert columnar.build(producer_id=3, producer_epoch=0, base_sequence=9) == \
        single.build(producer_id=3, producer_epoch=0, base_sequence=9)
    assert columnar.records() == single.records()                 # split on MESSAGE_TOO_LARGE


def test_headers_are_decoded_as_columns_and_can_be_asked_for():
    data = encode_batch([Record(b"k", b"v", NOW, [("trace", b"1")]), Record(None, b"w", NOW)])
    [batch] = iter_batches(data)
    got = batch.arrow_columns()
    assert got["headers"].to_pylist() == [[{"key": "trace", "value": b"1"}], []]
    [plain] = iter_batches(encode_batch([Record(None, b"x", NOW)] * 20))
    assert plain.arrow_columns(headers=True)["headers"].to_pylist() == [[]] * 20


def test_log_append_time_stamps_every_record():
    data = bytearray(encode_batch([Record(None, b"x", NOW + i) for i in range(20)],
                                  timestamp_type="log_append_time"))
    [batch] = iter_batches(bytes(data))
    assert set(batch.arrow_columns()["timestamp"].to_pylist()) == {batch.max_timestamp}


def test_columns_that_do_not_line_up_are_refused():
    with pytest.raises(ValueError, match="3 entries where 2 records"):
        encode_batch_columns([b"a", b"b"], [b"k"] * 3, now_ms=NOW)
    with pytest.raises(ValueError, match="1 timestamps where 2 records"):
        encode_batch_columns([b"a", b"b"], timestamps=[NOW], now_ms=NOW)
    with pytest.raises(TypeError, match="int64"):
        encode_batch_columns(pa.array([1, 2]), now_ms=NOW)
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch_columns([], now_ms=NOW)


def test_an_iterator_of_str_is_read_once_and_encoded_as_utf8():
    assert encode_batch_columns(iter(["α", None]), now_ms=NOW) == \
        per_record(["α".encode(), None], None, None)


def python_records(columns: dict) -> list[tuple]:
    """Arrow columns as ``record_tuples`` gives them: (offset, timestamp, key, value,
    headers as a tuple of (key, value))."""
    headers = columns["headers"].to_pylist() if "headers" in columns else \
        [[]] * len(columns["offset"])
    return list(zip(columns["offset"].to_pylist(), columns["timestamp"].to_pylist(),
                    columns["key"].to_pylist(), columns["value"].to_pylist(),
                    [tuple((h["key"], h["value"]) for h in hs) for hs in headers]))


@settings(max_examples=80, deadline=None, suppress_health_check=LARGE)
@given(record_columns(), st.data())
def test_headers_are_located_column_by_column_as_the_per_record_decoder_reads_them(
        columns, data):
    values, keys, stamps = columns
    headers = data.draw(st.lists(header_lists, min_size=len(values), max_size=len(values)))
    [batch] = iter_batches(per_record(values, keys, stamps, headers, base_offset=70))
    body = batch._body()
    assert columnar.locate_records(body, batch.record_count) is not None   # no fallback
    assert python_records(batch.arrow_columns()) == \
        [(o, t, k, v, tuple(h)) for o, t, k, v, h in batch.record_tuples()]


@settings(max_examples=40, deadline=None, suppress_health_check=LARGE)
@given(st.lists(st.tuples(record_columns(), st.sampled_from(["create_time", "log_append_time"]),
                          st.sampled_from(["none", "lz4"]), st.booleans()),
                min_size=1, max_size=5), st.data())
def test_consecutive_batches_decode_together_as_each_decodes_alone(batches, data):
    # A fetch's batches of one partition become one set of columns (the consumer's Arrow
    # chunk): what each batch gives alone, in order, whatever their timestamp types,
    # codecs, and whether their records have headers.
    made, offset = [], 0
    for (values, keys, stamps), timestamp_type, codec, with_headers in batches:
        headers = data.draw(st.lists(header_lists, min_size=len(values),
                                     max_size=len(values))) if with_headers else None
        made.append(per_record(values, keys, stamps, headers, base_offset=offset,
                               compression=codec, timestamp_type=timestamp_type))
        offset += len(values) + 3
    parsed = list(iter_batches(b"".join(made)))
    expected = [(o, t, k, v, tuple(h)) for b in parsed for o, t, k, v, h in b.record_tuples()]
    assert python_records(RecordBatch.arrow_columns_of(parsed)) == expected


def test_a_header_key_that_is_not_utf8_is_refused_as_the_per_record_decoder_refuses_it():
    good = encode_batch([Record(b"k", b"v", NOW, [("trace", b"1")])] * 20)
    bad = good.replace(b"trace", b"tr\xffce")
    [batch] = iter_batches(bad)
    with pytest.raises(CorruptRecordError, match="does not decode"):
        batch.arrow_columns()


@settings(max_examples=60, deadline=None, suppress_health_check=LARGE)
@given(record_columns(), st.data())
def test_batches_encoded_together_are_byte_for_byte_each_encoded_alone(columns, data):
    values, keys, stamps = columns
    headers = data.draw(st.lists(header_lists, min_size=len(values), max_size=len(values)))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(values)), max_size=4))) |
                  {len(values)})
    counts = [b - a for a, b in zip([0] + cuts, cuts)]
    together = encode_bodies(values, keys, stamps, headers, counts, now_ms=NOW)
    start = 0
    for count, body in zip(counts, together):
        alone = MemoryRecordsBuilder.from_columns(
            values[start:start + count], None if keys is None else keys[start:start + count],
            None if stamps is None else stamps[start:start + count],
            headers[start:start + count], now_ms=NOW)
        assert (bytes(body.body), body.count, body.base_timestamp, body.max_timestamp) == \
            (bytes(alone.body), alone.count, alone.base_timestamp, alone.max_timestamp)
        start += count
