"""Record batches as Arrow columns, both ways, without a Python loop per record.

Encoding: the values (and keys, timestamps) of many records, as Arrow arrays or any
sequences of bytes or strings, become a v2 batch body in a few numpy passes: every varint of
every record is computed at once (zig-zag, then base-128 groups), and Arrow's element-wise
join lays the records end to end (the varints, key and value of each). Headers (Spark's
``array<struct<key: string, value: binary>>``) are encoded the same way one level down: every
header's bytes at once, then each record's joined by Arrow's list join. The body, and so the
batch ``MemoryRecordsBuilder`` builds from it, is byte for byte the one the per-record
builder makes from the same records.

Decoding: a batch body located by ``columnar.locate_records`` becomes Arrow columns
(offset, timestamp, key, value; headers when a record has one): the body is read as an
Arrow binary array whose elements are the keys (or values) and the bytes between them, and
Arrow takes every other element into a plain binary array; a batch off that common path
(unusual varints, many headers) is decoded record by record and then converted.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from protocols import columnar

# A record's fixed bytes around its fields: attributes (always 0) and the header count (0).
_ATTRIBUTES = 0
_NO_HEADERS = 0
_MAX_VARINT = 10


class EncodedBody(NamedTuple):
    """A batch body (a read-only view) and what the batch header needs from it."""
    body: memoryview
    count: int
    base_timestamp: int
    max_timestamp: int


def as_binary(data: Any, count: int | None = None) -> pa.Array:
    """``data`` (an Arrow binary or string array, chunked or not, or a sequence of bytes,
    str or None) as an Arrow ``binary`` array."""
    if isinstance(data, pa.ChunkedArray):
        data = _one_array(data)
    if not isinstance(data, pa.Array):
        data = data if isinstance(data, (list, tuple)) else list(data)   # once: may be an iterator
        data = pa.array(data, type=pa.string() if _has_str(data) else pa.binary())
    if pa.types.is_string(data.type) or pa.types.is_large_string(data.type):
        data = data.cast(pa.binary() if pa.types.is_string(data.type) else pa.large_binary())
    if pa.types.is_large_binary(data.type):
        data = data.cast(pa.binary())
    if not pa.types.is_binary(data.type):
        raise TypeError(f"expected bytes or strings, got an Arrow {data.type} array")
    if count is not None and len(data) != count:
        raise ValueError(f"{len(data)} entries where {count} records were given")
    return data


def _one_array(data: pa.ChunkedArray) -> pa.Array:
    """A chunked array as one array: its only chunk as it is (Arrow's ``combine_chunks``
    copies even one chunk: ~0.1 s for a table column of 128 MB)."""
    return data.chunk(0) if data.num_chunks == 1 else data.combine_chunks()


def _has_str(data) -> bool:
    for item in data:
        if item is not None:
            return isinstance(item, str)
    return False


def timestamp_column(timestamps: Any, count: int, now_ms: int) -> np.ndarray:
    """Records' timestamps as int64 milliseconds: None (now for all), one int (for all), or
    one per record (a sequence, numpy or Arrow array)."""
    if timestamps is None or isinstance(timestamps, (int, np.integer)):
        return np.full(count, now_ms if timestamps is None else int(timestamps), np.int64)
    if isinstance(timestamps, (pa.Array, pa.ChunkedArray)):
        timestamps = timestamps.cast(pa.int64()).to_numpy()
    stamps = np.asarray(timestamps, dtype=np.int64)
    if len(stamps) != count:
        raise ValueError(f"{len(stamps)} timestamps where {count} records were given")
    return stamps


def _lengths(array: pa.Array) -> np.ndarray:
    """Each entry's length in bytes, -1 for a null (Kafka's null key or value)."""
    return pc.fill_null(pc.binary_length(array), -1).to_numpy().astype(np.int64)


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kafka's zig-zag varints of int64 ``values``: (width per value, bytes (n, width max))."""
    n = len(values)
    if n > 1 and values[0] == values[-1] and values.min() == values.max():
        # One value for all (a length or a timestamp delta usually is): its bytes, repeated.
        width, groups = _varints(values[:1])
        return np.broadcast_to(width, (n,)), np.broadcast_to(groups, (n, groups.shape[1]))
    z = ((values << 1) ^ (values >> 63)).astype(np.uint64)
    groups = [z & np.uint64(0x7F)]
    width = np.ones(n, np.int64)
    rest = z >> np.uint64(7)
    while rest.any():
        more = rest != 0
        groups[-1] = groups[-1] | (more.astype(np.uint64) << np.uint64(7))
        width += more
        groups.append(rest & np.uint64(0x7F))
        rest = rest >> np.uint64(7)
    return width, np.stack(groups, axis=1).astype(np.uint8)


@functools.lru_cache(maxsize=8)
def _offset_deltas(count: int) -> tuple[np.ndarray, np.ndarray]:
    """The varints of offset deltas 0 .. count-1: the same for every batch of ``count``
    records (read-only: shared)."""
    width, groups = _varints(np.arange(count, dtype=np.int64))
    width.flags.writeable = groups.flags.writeable = False
    return width, groups


def _byte_runs(fields: list) -> pa.Array:
    """Per record, the bytes of ``fields`` one after another, as a binary array. A field is
    ``(width, groups)`` from ``_varints`` or one constant byte (an int).

    Each record's run starts where the widths before it end (a cumulative sum), and each
    field's j-th bytes are written there for every record at once: a scatter per field and
    byte, masked only for bytes past the field's narrowest varint."""
    count = len(next(f for f in fields if not isinstance(f, int))[0])
    total = np.zeros(count, np.int64)
    for field in fields:
        total += 1 if isinstance(field, int) else field[0]
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(total, out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    pos = offsets[:-1].astype(np.int64)
    for field in fields:
        if isinstance(field, int):
            data[pos] = field
            pos += 1
            continue
        width, groups = field
        narrowest = int(width.min())
        for j in range(groups.shape[1]):
            if j < narrowest:
                data[pos + j] = groups[:, j]
            else:
                longer = width > j
                data[pos[longer] + j] = groups[longer, j]
        pos += width
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(data)])


_EMPTY = pa.scalar(b"", pa.binary())
_NO_HEADERS_BYTE = pa.scalar(bytes([_NO_HEADERS]), pa.binary())


def as_headers(headers: Any, count: int) -> pa.Array | None:
    """``headers`` (an Arrow list of (key, value) structs, chunked or not, or a sequence with
    one list of ``(key, value)`` pairs or None per record) as a ``HEADERS_TYPE`` array; None
    when no record has a header."""
    if headers is None:
        return None
    if isinstance(headers, pa.ChunkedArray):
        headers = _one_array(headers)
    if not isinstance(headers, pa.Array):
        headers = pa.array([None if h is None else
                            [{"key": k, "value": v.encode() if isinstance(v, str) else v}
                             for k, v in h] for h in headers], HEADERS_TYPE)
    elif headers.type != HEADERS_TYPE:
        headers = headers.cast(HEADERS_TYPE)
    if len(headers) != count:
        raise ValueError(f"{len(headers)} header lists where {count} records were given")
    if not pc.any(pc.greater(pc.list_value_length(headers), 0)).as_py():
        return None
    return headers


def header_field(headers: pa.Array) -> pa.Array:
    """Per record, its ``headerCount`` varint and headers (``headerKeyLength, headerKey,
    headerValueLength, headerValue`` each) as one binary array."""
    n = pc.fill_null(pc.list_value_length(headers), 0).to_numpy().astype(np.int64)
    flat = pc.list_flatten(headers)   # null lists add nothing
    keys, values = flat.field("key"), flat.field("value")
    if keys.null_count:
        raise ValueError("a record header's key must not be null")
    keys = as_binary(keys)
    value_len = _lengths(values)
    each = pc.binary_join_element_wise(
        _byte_runs([_varints(_lengths(keys))]), keys, _byte_runs([_varints(value_len)]),
        pc.fill_null(values, _EMPTY), _EMPTY)
    offsets = np.zeros(len(n) + 1, np.int32)
    np.cumsum(n, out=offsets[1:])
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), each), _EMPTY)
    return _prefixed(_varints(n), joined)


def _prefixed(field: tuple[np.ndarray, np.ndarray], array: pa.Array) -> pa.Array:
    """Per entry of ``array`` (binary, no nulls), its varint (``field``, from ``_varints``)
    then its bytes, as one binary array. Most records have no header: Arrow's element-wise
    join would pay ~40 ns for each of them, where here the varints are scattered as
    ``_byte_runs`` does and every entry's bytes are laid after them in one masked copy."""
    width, groups = field
    count = len(array)
    ends = np.frombuffer(array.buffers()[1], np.int32, count + 1, array.offset * 4)
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(width + np.diff(ends), out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    rest = np.ones(len(data), bool)     # the bytes after each varint
    pos = offsets[:-1].astype(np.int64)
    narrowest = int(width.min(initial=_MAX_VARINT))
    for j in range(groups.shape[1]):
        every = j < narrowest
        at = pos + j if every else (pos + j)[width > j]
        data[at] = groups[:, j] if every else groups[width > j, j]
        rest[at] = False
    if int(ends[-1]) > int(ends[0]):
        data[rest] = np.frombuffer(array.buffers()[2], np.uint8, int(ends[-1] - ends[0]),
                                   int(ends[0]))
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(data)])


def encode_body(values: Any, keys: Any = None, timestamps: Any = None, headers: Any = None,
                *, now_ms: int) -> EncodedBody:
    """The v2 batch body of records with these values, keys (None: all null), timestamps
    (None: ``now_ms`` for all; an int for all; or one per record) and headers (None: none;
    see ``as_headers``), offset deltas 0, 1, ...."""
    count = len(values) if hasattr(values, "__len__") else None
    if count is None:
        values = list(values)
        count = len(values)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    return encode_bodies(values, keys, timestamps, headers, [count], now_ms=now_ms)[0]


def encode_bodies(values: Any, keys: Any, timestamps: Any, headers: Any,
                  counts: Sequence[int], *, now_ms: int,
                  encoded_headers: pa.Array | None = None) -> list[EncodedBody]:
    """The bodies of consecutive batches of ``counts`` records each, encoded together:
    ``encode_body`` of each run of records, in one pass over all of them (a producer's
    16 KiB batches hold a few dozen records each; a pass per batch would pay numpy's fixed
    costs a hundred times over).

    Each record is ``length, attributes, timestampDelta, offsetDelta, keyLength, key,
    valueLength, value, headerCount, headers``: the varints are computed for all records at
    once (deltas from each batch's first record), and Arrow's element-wise join lays the
    records end to end in C; each batch's body is then its run of that buffer."""
    value_array = as_binary(values)
    count = len(value_array)
    sizes = np.asarray(counts, np.int64)
    if count == 0 or (sizes <= 0).any() or int(sizes.sum()) != count:
        raise ValueError(f"batches of {list(counts)} records for {count} records")
    value_len = _lengths(value_array)
    if keys is None:
        key_array, key_len = None, np.full(count, -1, np.int64)
    else:
        key_array = as_binary(keys, count)
        key_len = _lengths(key_array)
    stamps = timestamp_column(timestamps, count, now_ms)
    firsts = np.cumsum(sizes) - sizes
    base_ts = stamps[firsts]
    if len(sizes) == 1:
        ts, off = _varints(stamps - base_ts[0]), _offset_deltas(count)
    else:
        batch_of = np.repeat(np.arange(len(sizes)), sizes)
        ts = _varints(stamps - base_ts[batch_of])
        off = _varints(np.arange(count, dtype=np.int64) - firsts[batch_of])
    key_field, value_field = _varints(key_len), _varints(value_len)
    if encoded_headers is None:
        header_array = as_headers(headers, count)
        encoded_headers = None if header_array is None else header_field(header_array)
    if encoded_headers is None:
        headers_field, header_len = _NO_HEADERS_BYTE, 1
    else:
        headers_field = encoded_headers
        header_len = pc.binary_length(headers_field).to_numpy().astype(np.int64)
    record_len = (1 + ts[0] + off[0] + key_field[0] + np.maximum(key_len, 0)
                  + value_field[0] + np.maximum(value_len, 0) + header_len)
    head = [_varints(record_len), _ATTRIBUTES, ts, off, key_field]
    if key_array is None:   # nothing between the null key's length and the value's
        pieces = [_byte_runs(head + [value_field])]
    else:
        pieces = [_byte_runs(head), pc.fill_null(key_array, _EMPTY), _byte_runs([value_field])]
    pieces += [pc.fill_null(value_array, _EMPTY), headers_field]
    records = pc.binary_join_element_wise(*pieces, _EMPTY)
    offsets = np.frombuffer(records.buffers()[1], np.int32, count=count + 1,
                            offset=records.offset * 4)
    bounds = offsets[np.append(firsts, count)].tolist()
    data = memoryview(records.buffers()[2])
    max_ts = np.maximum.reduceat(stamps, firsts).tolist()
    # Views of the one buffer, not copies: the batch is copied once, as it is built.
    return [EncodedBody(data[bounds[i]:bounds[i + 1]], n, b, m)
            for i, (n, b, m) in enumerate(zip(sizes.tolist(), base_ts.tolist(), max_ts))]


# ---- decoding --------------------------------------------------------------------------------
def _binary_from(body: bytes, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """The byte strings at ``start`` with ``length`` (-1: null) in ``body``, as one Arrow
    binary array. The strings lie in the body in order, so the body is already a binary
    array whose elements alternate between them and the bytes between them (offsets: each
    string's start and end); Arrow's ``take`` of every other element copies them out in C."""
    count = len(length)
    if count == 0:
        return pa.array([], pa.binary())
    nulls = length < 0
    null_count = int(nulls.sum())
    if null_count == count:
        return pa.nulls(count, pa.binary())
    bounds = np.empty(2 * count, np.int64)
    bounds[0::2] = start
    bounds[1::2] = start + np.maximum(length, 0)
    validity = None
    if null_count:
        present = np.ones(2 * count - 1, bool)
        present[0::2] = ~nulls
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    both = pa.Array.from_buffers(pa.large_binary(), 2 * count - 1,
                                 [validity, pa.py_buffer(bounds), pa.py_buffer(body)],
                                 null_count)
    return both.take(pa.array(np.arange(0, 2 * count - 1, 2))).cast(pa.binary())


COLUMNS = ("offset", "timestamp", "key", "value")


BatchBody = columnar.BatchBody


def decode_columns(body: bytes, count: int, base_offset: int, base_timestamp: int,
                   append_time: int | None) -> dict[str, pa.Array] | None:
    """The columns of a decompressed batch body (see ``RecordBatch.arrow_columns``), or
    None off the common path."""
    return decode_batches([BatchBody(body, count, base_offset, base_timestamp, append_time)])


def decode_batches(batches: Sequence[BatchBody]) -> dict[str, pa.Array] | None:
    """The columns (offset, timestamp, key, value; ``headers`` when a record has one) of
    several batches' records, in order, located in one pass over all of them
    (``columnar.locate_batches``), or None when one is off the common path."""
    found = columnar.located_batches(batches)
    if found is None:
        return None
    joined, located = found.joined, found.columns
    columns = {"offset": pa.array(found.offsets, pa.int64()),
               "timestamp": pa.array(found.timestamps, pa.int64()),
               "key": _binary_from(joined, located.key_start, located.key_length),
               "value": _binary_from(joined, located.value_start, located.value_length)}
    if located.headers is not None:
        headers = _header_list(joined, located.headers)
        if headers is None:
            return None
        columns["headers"] = headers
    return columns


def _header_list(body: bytes, h: columnar.HeaderColumns) -> pa.Array | None:
    """The located headers as a ``HEADERS_TYPE`` array (an empty list for a record without
    any); None when a key is not UTF-8 (the per-record decoder then says so)."""
    keys = _binary_from(body, h.key_start, h.key_length)
    try:
        keys = keys.cast(pa.string())
    except pa.ArrowInvalid:
        return None
    values = _binary_from(body, h.value_start, h.value_length)
    offsets = np.zeros(len(h.count) + 1, np.int32)
    np.cumsum(h.count, out=offsets[1:])
    return pa.ListArray.from_arrays(
        pa.array(offsets), pa.StructArray.from_arrays([keys, values],
                                                      fields=list(HEADERS_TYPE.value_type)))


def columns_from_tuples(records: Sequence[tuple]) -> dict[str, pa.Array]:
    """Decoded records ``(offset, timestamp, key, value, headers)`` as the same columns, with
    ``headers`` (a list of (key, value) structs per record) when any record has one."""
    offsets, timestamps, keys, values, headers = (list(c) for c in zip(*records)) \
        if records else ([], [], [], [], [])
    out = {"offset": pa.array(offsets, pa.int64()), "timestamp": pa.array(timestamps, pa.int64()),
           "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}
    if any(headers):
        out["headers"] = pa.array([[{"key": k, "value": v} for k, v in h] for h in headers],
                                  HEADERS_TYPE)
    return out


HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def no_headers(count: int) -> pa.Array:
    """An empty header list for each of ``count`` records."""
    return pa.ListArray.from_arrays(pa.array(np.zeros(count + 1, np.int32)),
                                    pa.array([], HEADERS_TYPE.value_type))
