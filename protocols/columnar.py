"""A record batch's records located column by column: where each record's fields lie in the
batch body, found with numpy over the whole batch instead of a Python loop that decodes
every field of every record.

Only the record boundaries need a loop (each record's length says where the next begins):
one varint per record, followed in Python for a few bodies, or one numpy step per record
index for many bodies side by side (a fetch of Kafka-sized batches). Every other field
(attributes, timestampDelta, offsetDelta, key and value lengths, the header count) is
decoded for all records at once, and the records are then built by ``map`` and ``zip``
over the columns, in C.

The common path is records with varints of at most 5 bytes (9 for the timestamp delta)
and at most ``MAX_HEADERS`` headers each; anything else, and anything that does not add up (a length that is
negative or runs past the record or the body), answers ``None``, and the caller falls back to
the per-record decoder, which gives the exact error. So this module never decides that a
batch is corrupt; it only proves that a batch is well formed and simple.
"""
from __future__ import annotations

from itertools import repeat
from typing import NamedTuple, Sequence

import numpy as np

from protocols.varint import decode_unsigned_varint

__all__ = ["BatchBody", "HeaderColumns", "LocatedBatches", "RecordColumns",
           "batches_record_columns", "locate_batches", "locate_records", "located_batches",
           "padded", "record_columns", "record_tuples"]

# Below this many records numpy's fixed cost per call outweighs the per-record loop it saves.
MIN_RECORDS = 16

# The longest timestamp delta taken here: 9 bytes hold 63 bits, all an int64 column holds.
_MAX_VARLONG = 9
# Zero bytes after a body, so that reading a varint (up to 9 bytes), or the two bytes the
# record loop looks up, at any position within it stays inside the array.
PADDING = 16


def padded(body: bytes) -> np.ndarray:
    """The body as bytes with ``PADDING`` zeros after it: made once per batch, shared by
    every vectorised read of it."""
    return np.frombuffer(body + bytes(PADDING), dtype=np.uint8)


class HeaderColumns(NamedTuple):
    """The records' headers: how many each record has, then every header in record order,
    the start and length of its key and value (value length -1: null)."""

    count: np.ndarray
    key_start: np.ndarray
    key_length: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray


class RecordColumns(NamedTuple):
    """Per record, as numpy int64 arrays: offsetDelta, timestampDelta, and the start and
    length of key and value in the body (length -1: null); ``headers`` None when no record
    has one."""

    offset_delta: np.ndarray
    timestamp_delta: np.ndarray
    key_start: np.ndarray
    key_length: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray
    headers: HeaderColumns | None = None


def _zigzag_width(values: np.ndarray) -> np.ndarray:
    """Bytes in the zig-zag varint of each non-negative value."""
    z = values.astype(np.int64) << 1
    width = np.ones(len(values), np.int64)
    for bits in (7, 14, 21, 28, 35):
        width += z >= (1 << bits)
    return width


def _guessed_starts(body: bytes, count: int, arr: np.ndarray):
    """Where each record begins when the records differ only in their offset delta (a bulk
    producer's usually do: same key and value sizes, same timestamp delta width), found
    without a loop: guess every record's length from the first one's, then check, all at
    once, that each guessed start holds a length varint saying exactly the guessed length
    and that the last record ends at the body's end. ``(starts, (lengths, their widths))``,
    or None when the guess is wrong."""
    try:
        z, after = decode_unsigned_varint(body, 0)
        # The second record (offset delta 1, one byte as 0 is) is as long as the first:
        # most batches of records of varied sizes are told apart here, before numpy.
        if z & 1 or (count > 1 and decode_unsigned_varint(body, after + (z >> 1))[0] != z):
            return None
    except Exception:
        return None
    offset_width = _zigzag_width(np.arange(count))
    lengths = (z >> 1) - 1 + offset_width
    size = _zigzag_width(lengths) + lengths
    starts = np.cumsum(size) - size
    if int(starts[-1] + size[-1]) != len(body):
        return None
    decoded = _varints(arr, starts, 5)
    if decoded is None or not np.array_equal(decoded[0], lengths) \
            or not (decoded[1] == size - lengths).all():
        return None   # another length, or one spelled in more bytes than it needs
    return starts, decoded


def _looped_starts(buf: bytes, count: int, begin: int, end: int) -> list[int] | None:
    """Where each of ``count`` records in ``buf[begin:end]`` begins (positions in ``buf``),
    by the one loop per record (each length varint locates the next record: its two bytes
    looked up in ``_STEPS``, the few lengths of three bytes or more decoded); None unless
    they end exactly at ``end``."""
    starts: list[int] = []
    append = starts.append
    steps = _STEPS
    pos = begin
    try:
        for _ in range(count):
            append(pos)
            step = steps[buf[pos] | (buf[pos + 1] << 8)]
            if step == _NOT_FOLLOWED:   # a record of 8 KiB or more, or a negative length
                z, after = decode_unsigned_varint(buf, pos)
                if z & 1:
                    return None
                step = after - pos + (z >> 1)
            pos += step
    except Exception:                   # ran off the end, or a varint past 10 bytes
        return None
    return starts if pos == end else None


def _varints(arr: np.ndarray, pos: np.ndarray, max_bytes: int):
    """The zig-zag varints at ``pos``, as (values, widths); None if one is longer than
    ``max_bytes``. ``arr`` is padded so that reading ``max_bytes`` past any position is
    safe; a varint read into the padding is caught by the caller's end check."""
    b0 = arr[pos]
    two = b0 >= 0x80
    if not two.any():                   # every one a single byte: most header counts, keys
        value = b0.astype(np.int64)
        return (value >> 1) ^ -(value & 1), 1
    b1 = arr[pos + 1]
    if not (two & (b1 >= 0x80)).any():  # at most two bytes: most lengths and deltas
        value = np.where(two, (b0 & 0x7F).astype(np.int64) | (b1.astype(np.int64) << 7), b0)
        return (value >> 1) ^ -(value & 1), two + 1
    value = np.zeros(len(pos), np.int64)
    width = np.zeros(len(pos), np.int64)
    more = np.ones(len(pos), bool)
    for i in range(max_bytes):
        b = arr[pos + i].astype(np.int64)
        value |= np.where(more, (b & 0x7F) << (7 * i), 0)
        width += more
        more &= b >= 0x80
        if not more.any():
            return (value >> 1) ^ -(value & 1), width
    return None


def locate_records(body: bytes, count: int, arr: np.ndarray | None = None
                   ) -> RecordColumns | None:
    """The columns of a decompressed batch body holding ``count`` records, or None when the
    batch is not on the common path (see the module's docstring). ``arr``: ``padded(body)``
    when the caller has it."""
    # Padding: every read starts at or before the body's end (each field is checked to end
    # within its record before the next is read) and reads at most 9 bytes on.
    joined = body + bytes(PADDING)
    return locate_batches(joined, [body], [count], np.frombuffer(joined, dtype=np.uint8)
                          if arr is None else arr)


def locate_batches(joined: bytes, bodies: list, counts: list[int], arr: np.ndarray
                   ) -> RecordColumns | None:
    """``locate_records`` of several batch bodies at once (a fetch's batches of one
    partition): ``joined`` is the bodies end to end and padded, ``arr`` its bytes as numpy,
    and every start in the answer is a position in it. One numpy pass per field for all
    their records, not one per batch: a fetch of 16 KiB batches (Kafka's default
    batch.size) holds dozens."""
    positions: list = []
    at = 0
    # Records of one size (a bulk producer's) are located without a loop, body by body; from
    # the first body whose records differ on, the bodies' record boundaries are followed
    # side by side (``_lane_starts``) or one body after another (their guess would cost
    # more than it saves).
    first = len(bodies)
    for i, (body, count) in enumerate(zip(bodies, counts)):
        if count == 0:
            if len(body):
                return None
            continue
        # A view from the body's start: what follows it is the next body, or the padding.
        located = _guessed_starts(body, count, arr[at:])
        if located is None:
            first = i
            break
        positions.append(located[0] + at)
        at += len(body)
    rest = _followed_starts(joined, arr, bodies[first:], counts[first:], at)
    if rest is None:
        return None
    positions += rest
    if not positions:
        return None
    pos = np.concatenate(positions) if len(positions) > 1 else positions[0]
    decoded = _varints(arr, pos, 5)
    if decoded is None:
        return None
    return _locate_fields(arr, pos, decoded[0], decoded[1])


class BatchBody(NamedTuple):
    """A decompressed batch body and what its header says of its records."""
    body: bytes
    count: int
    base_offset: int
    base_timestamp: int
    append_time: int | None   # LogAppendTime: every record's timestamp


class LocatedBatches(NamedTuple):
    """Consecutive batches' records located together: ``joined`` the bodies end to end and
    padded, every start in ``columns`` a position in it, and each record's offset and
    timestamp."""
    joined: bytes
    columns: RecordColumns
    offsets: np.ndarray
    timestamps: np.ndarray


def located_batches(batches: Sequence[BatchBody]) -> LocatedBatches | None:
    """``locate_batches`` of the batches' bodies (one copy: the bodies end to end, then the
    padding every vectorised read relies on), with each record's offset and timestamp
    (LogAppendTime where the batch has it); None when one is off the common path."""
    joined = b"".join([*(b.body for b in batches), bytes(PADDING)])
    arr = np.frombuffer(joined, dtype=np.uint8)
    counts = [b.count for b in batches]
    located = locate_batches(joined, [b.body for b in batches], counts, arr)
    if located is None:
        return None
    if len(batches) == 1:
        b = batches[0]
        offsets = located.offset_delta + b.base_offset
        timestamps = (np.full(b.count, b.append_time, np.int64) if b.append_time is not None
                      else located.timestamp_delta + b.base_timestamp)
    else:
        offsets = located.offset_delta + np.repeat(
            np.array([b.base_offset for b in batches], np.int64), counts)
        appended = [b.append_time is not None for b in batches]
        bases = np.repeat(np.array([b.append_time if b.append_time is not None
                                    else b.base_timestamp for b in batches], np.int64), counts)
        timestamps = (located.timestamp_delta + bases if not any(appended) else
                      np.where(np.repeat(appended, counts), bases,
                               located.timestamp_delta + bases))
    return LocatedBatches(joined, located, offsets, timestamps)


def batches_record_columns(batches: Sequence[BatchBody]
                           ) -> tuple[list, list, list, list, list | None] | None:
    """``(offsets, timestamps, keys, values, headers)`` of consecutive batches' records as
    lists, located together: what the per-record decoder gives, ``headers`` None when no
    record has one. None when a batch is off the common path, or they hold fewer than
    ``MIN_RECORDS`` records."""
    count = sum(b.count for b in batches)
    if count < MIN_RECORDS:
        return None
    found = located_batches(batches)
    if found is None:
        return None
    joined, c = found.joined, found.columns
    headers = None
    if c.headers is not None:
        headers = _header_tuples(joined, c.headers, count)
        if headers is None:
            return None
    return (found.offsets.tolist(), found.timestamps.tolist(),
            _slices(joined, c.key_start, c.key_length, count),
            _slices(joined, c.value_start, c.value_length, count), headers)


def _header_tuples(body: bytes, h: HeaderColumns, count: int) -> list[tuple] | None:
    """Each record's headers as the per-record decoder gives them (a tuple of (str key,
    bytes value or None) pairs; ``()`` for none), or None when a key is not UTF-8 (that
    decoder then says so)."""
    n = len(h.key_start)
    try:
        keys = list(map(bytes.decode, _slices(body, h.key_start, h.key_length, n)))
    except UnicodeDecodeError:
        return None
    pairs = list(zip(keys, _slices(body, h.value_start, h.value_length, n)))
    headers: list[tuple] = [()] * count
    held = np.flatnonzero(h.count)
    start = 0
    for record, end in zip(held.tolist(), np.cumsum(h.count[held]).tolist()):
        headers[record] = tuple(pairs[start:end])
        start = end
    return headers


def _followed_starts(joined: bytes, arr: np.ndarray, bodies: list, counts: list[int],
                     at: int) -> list[np.ndarray] | None:
    """Where each record of ``bodies`` (the first at ``at`` in ``joined``) begins, found by
    following each body's length varints: all the bodies side by side when there are
    enough of them, else one loop per body."""
    sizes = [len(body) for body in bodies]
    if any(count == 0 and size for count, size in zip(counts, sizes)):
        return None
    held = [count for count in counts if count]
    if held and sum(held) >= LANES_MIN * max(held):
        ends = at + np.cumsum(sizes)
        begins = ends - sizes
        kept = np.flatnonzero(np.asarray(counts) > 0)
        starts = _lane_starts(arr, begins[kept], np.asarray(held, np.int64), ends[kept])
        if starts is not None:
            return [starts]
    positions = []
    for count, size in zip(counts, sizes):
        if count:
            starts = _looped_starts(joined, count, at, at + size)
            if starts is None:
                return None
            positions.append(np.asarray(starts, dtype=np.int64))
        at += size
    return positions


# Side by side, each step costs a few numpy calls whatever the number of bodies: worth it
# from about this many records per step (on average over the steps) on.
LANES_MIN = 16
_NOT_FOLLOWED = 1 << 40


def _advance_table() -> np.ndarray:
    """For each two bytes ``b0 b1`` (read as one little-endian word) at a record's start:
    the distance to the next record's start when they begin a length varint of one or two
    bytes holding a length of zero or more, else ``_NOT_FOLLOWED`` (a negative length, or a
    varint of three bytes or more: records of 8 KiB and up, which the loop takes)."""
    word = np.arange(1 << 16, dtype=np.int64)
    b0, b1 = word & 0xFF, word >> 8
    one = b0 < 0x80
    z = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
    followed = (one | (b1 < 0x80)) & (z & 1 == 0)
    return np.where(followed, np.where(one, 1, 2) + (z >> 1), _NOT_FOLLOWED)


_ADVANCE = _advance_table()
_STEPS = _ADVANCE.tolist()   # the same, for the loop (a list's items cost less to it)


def _lane_starts(arr: np.ndarray, begins: np.ndarray, counts: np.ndarray, ends: np.ndarray
                 ) -> np.ndarray | None:
    """Every record's start in the bodies at ``begins`` (``counts`` records each, ending at
    ``ends``; none empty), in order: one numpy step per record index, moving every body
    still holding that many records to its next record at once (a table lookup of the two
    bytes there). None when a body's records do not end exactly at its end, or one has a
    length the table does not follow (the loop then decides)."""
    words = np.ndarray((len(arr) - 1,), "<u2", arr, 0, (1,))   # two bytes at any position
    last = len(words) - 1
    order = np.argsort(-counts, kind="stable")     # the bodies with most records first
    pos = begins[order].astype(np.int64)
    first = (np.cumsum(counts) - counts)[order]    # where each body's starts go
    most = int(counts[order[0]])
    # Bodies still stepping at step i: those holding more than i records (a prefix).
    stepping = np.searchsorted(-counts[order], -np.arange(1, most + 1), side="right")
    starts = np.empty(int(counts.sum()), np.int64)
    for i, n in enumerate(stepping.tolist()):
        at = pos[:n]
        starts[first[:n] + i] = at
        # A body gone wrong may have stepped past the array: it is kept past ``last``
        # (clamped, then a step of at least one), which no body's end is (every end is
        # PADDING bytes before the array's).
        np.minimum(at, last, out=at)
        at += _ADVANCE[words[at]]
        if i & 63 == 63 and int(pos.max()) > last:
            return None
    if not np.array_equal(pos, ends[order]):
        return None
    return starts


def _locate_fields(arr: np.ndarray, pos: np.ndarray, length: np.ndarray, width: np.ndarray
                   ) -> RecordColumns | None:
    """The fields of the records starting at ``pos``, whose length varints (``length``,
    ``width`` bytes) are read."""
    end = pos + width + length
    pos = pos + width + 1               # past the attributes byte
    columns = []
    if (pos > end).any():
        return None
    for max_bytes in (_MAX_VARLONG, 5):  # timestampDelta (a varlong), offsetDelta
        decoded = _varints(arr, pos, max_bytes)
        if decoded is None:
            return None
        columns.append(decoded[0])
        pos = pos + decoded[1]
        if (pos > end).any():
            return None
    for _ in range(2):                  # key, value
        decoded = _varints(arr, pos, 5)
        if decoded is None:
            return None
        size, width = decoded
        if (size < -1).any():
            return None
        start = pos + width
        columns += [start, size]
        pos = start + np.maximum(size, 0)
        if (pos > end).any():
            return None
    # The header count: most records have none, a single zero byte ending the record.
    if not arr[pos].any():
        if not np.array_equal(pos + 1, end):
            return None
        return RecordColumns(columns[1], columns[0], *columns[2:])
    headers = _locate_headers(arr, pos, end)
    if headers is None:
        return None
    return RecordColumns(columns[1], columns[0], *columns[2:], headers)


# More headers than this in one record: the per-record decoder takes the batch (a pass per
# header index costs more than it saves).
MAX_HEADERS = 64


def _locate_headers(arr: np.ndarray, pos: np.ndarray, end: np.ndarray
                    ) -> HeaderColumns | None:
    """Every record's headers, from its header count at ``pos`` to its end at ``end``: one
    numpy pass per header index (the j-th header of every record that has j+1), each field
    checked to end within its record. None when anything is off the common path (a
    negative count or key length, a record not ending where its last header does)."""
    decoded = _varints(arr, pos, 5)
    if decoded is None:
        return None
    count, width = decoded
    # No header at all though a count byte is not zero (zero spelled in two bytes): the
    # per-record decoder reads it.
    if (count < 0).any() or int(count.max()) > MAX_HEADERS or not count.any():
        return None
    pos = pos + width
    fields: list[list[np.ndarray]] = [[], [], [], [], []]   # record, key start/len, value
    for j in range(int(count.max())):
        rows = np.flatnonzero(count > j)
        at, limit = pos[rows], end[rows]
        found = [rows]
        for allow_null in (False, True):              # the key, then the value
            decoded = _varints(arr, at, 5)
            if decoded is None:
                return None
            size, width = decoded
            if (size < (-1 if allow_null else 0)).any():
                return None
            start = at + width
            found += [start, size]
            at = start + np.maximum(size, 0)
            if (at > limit).any():
                return None
        pos[rows] = at
        for column, value in zip(fields, found):
            column.append(value)
    if not np.array_equal(pos, end):
        return None
    record = np.concatenate(fields[0])
    order = np.argsort(record, kind="stable")   # record by record, each's in order
    return HeaderColumns(count, *(np.concatenate(c)[order] for c in fields[1:]))


def _slices(body: bytes, start: np.ndarray, length: np.ndarray, count: int) -> list:
    """The byte strings at ``start`` with ``length`` (None where -1)."""
    if (length < 0).all():
        return [None] * count
    starts, ends = start.tolist(), (start + length).tolist()
    if (length >= 0).all():
        return list(map(body.__getitem__, map(slice, starts, ends)))
    return [None if n < 0 else body[s:e] for s, e, n in zip(starts, ends, length.tolist())]


def record_columns(body: bytes, count: int, base_offset: int, base_ts: int,
                   append_time: int | None) -> tuple[list, list, list, list] | None:
    """``(offsets, timestamps, keys, values)`` of the batch's records as lists (a batch on
    the common path has no headers), or None when the batch is off the common path (and
    ``records._decode_records`` must run)."""
    found = batches_record_columns([BatchBody(body, count, base_offset, base_ts, append_time)])
    if found is None or found[4] is not None:
        return None
    return found[:4]


def record_tuples(body: bytes, count: int, base_offset: int, base_ts: int,
                  append_time: int | None) -> list[tuple] | None:
    """What ``records._decode_records`` returns for the same arguments, or None when the
    batch is off the common path (and that decoder must run)."""
    columns = record_columns(body, count, base_offset, base_ts, append_time)
    if columns is None:
        return None
    return list(zip(*columns, repeat(())))
