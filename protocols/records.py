"""Kafka RecordBatch v2 (magic 2): encode, shallow and deep iteration, in-place patches.

Batch layout (big-endian)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records...

The CRC-32C covers attributes to the end, so baseOffset and partitionLeaderEpoch can be
patched by the broker without recomputing it. Each record is
``length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
keyLength varint | key | valueLength varint | value | headerCount varint | headers``
with zig-zag varints, as in Kafka's DefaultRecord.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import crc32c as _crc32c

from protocols import columnar
from protocols.compression import (CODEC_IDS, COMPRESSION_TYPES, CODEC_NAMES, compress,
                                   decompress)
from protocols.errors import CorruptRecordError, UnsupportedVersionError
from protocols.varint import decode_unsigned_varint, decode_varint, encode_varint

__all__ = ["BatchHeader", "MAGIC", "LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "NO_TIMESTAMP", "NO_SEQUENCE", "COMPRESSION_TYPES",
           "MemoryRecordsBuilder", "Record", "RecordBatch", "encode_batch", "iter_batches", "read_batch_header",
           "set_base_offset", "set_partition_leader_epoch", "set_log_append_time"]

MAGIC = 2
NO_TIMESTAMP = -1
NO_SEQUENCE = -1          # a batch of no idempotent producer, or a control batch
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
LOG_OVERHEAD = 12
# The smallest record: length, attributes, timestamp delta, offset delta, key length, value
# length and header count, one byte each.
MIN_RECORD_BYTES = 7
RECORD_BATCH_OVERHEAD = 61
# The smallest batchLength: the header after the batchLength field.
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiiBIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_OFFSET_AND_LENGTH = struct.Struct(">qi")

TIMESTAMP_TYPES = ("create_time", "log_append_time")
_crc = _crc32c.crc32c


@dataclass(slots=True)
class Record:
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: tuple = ()
    offset: int | None = None

    def __post_init__(self):
        if not isinstance(self.headers, tuple):
            self.headers = tuple(tuple(h) for h in self.headers)


# ---- encoding ---------------------------------------------------------------------------
# Varints of the small non-negative numbers every record carries (lengths, deltas), looked
# up rather than computed: the producer encodes each record as it is sent. Spelled out by
# width (zig-zag of n >= 0 is 2n): encode_varint 16,384 times took ~25 ms of every
# process's import (each new Spark or Ray worker's).
_SMALL_VARINTS = (tuple(bytes((2 * n,)) for n in range(64))
                  + tuple(bytes((2 * n & 0x7F | 0x80, 2 * n >> 7)) for n in range(64, 8_192))
                  + tuple(bytes((2 * n & 0x7F | 0x80, 2 * n >> 7 & 0x7F | 0x80, 2 * n >> 14))
                          for n in range(8_192, 16_384)))


def _varint(n: int) -> bytes:
    return _SMALL_VARINTS[n] if 0 <= n < 16_384 else encode_varint(n)


def _nullable(data: bytes | None) -> bytes:
    """Length-prefixed bytes; a null is length -1 (varint 0x01)."""
    return b"\x01" if data is None else _varint(len(data)) + data


def _headers(headers) -> bytes:
    if not headers:
        return b"\x00"
    parts = [_varint(len(headers))]
    for hkey, hvalue in headers:
        parts.append(_nullable(hkey.encode() if isinstance(hkey, str) else bytes(hkey)))
        parts.append(_nullable(hvalue))
    return b"".join(parts)


class MemoryRecordsBuilder:
    """Kafka's MemoryRecordsBuilder: records are encoded into the batch body as they are
    appended, so the producer never holds them as objects; ``build`` adds the header (and
    compresses) when the batch is sent, and may be called again for a retry."""

    __slots__ = ("body", "count", "base_timestamp", "max_timestamp", "last_offset_delta")

    def __init__(self):
        self.body = bytearray()
        self.count = 0
        self.base_timestamp = NO_TIMESTAMP
        self.max_timestamp = NO_TIMESTAMP
        self.last_offset_delta = -1

    def append(self, timestamp: int, key: bytes | None, value: bytes | None,
               headers=(), offset_delta: int | None = None) -> int:
        """Encode one record; returns the bytes it added. ``offset_delta`` defaults to the
        next one (a compacted batch passes its gaps)."""
        if self.count == 0:
            self.base_timestamp = timestamp
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        if offset_delta is None:
            offset_delta = self.last_offset_delta + 1
        elif offset_delta <= self.last_offset_delta:
            raise ValueError(f"offset delta {offset_delta} is not above the previous "
                             f"{self.last_offset_delta}")
        self.last_offset_delta = offset_delta
        self.count += 1
        # One join (not five concatenations): this runs for every record a producer sends.
        delta = timestamp - self.base_timestamp
        record = b"".join((
            b"\x00",
            _SMALL_VARINTS[delta] if 0 <= delta < 16_384 else encode_varint(delta),
            _SMALL_VARINTS[offset_delta] if offset_delta < 16_384 else encode_varint(offset_delta),
            b"\x01" if key is None else _varint(len(key)) + key,
            b"\x01" if value is None else (_SMALL_VARINTS[len(value)] if len(value) < 16_384
                                            else encode_varint(len(value))),
            b"" if value is None else value,
            _headers(headers) if headers else b"\x00"))
        n = len(record)
        length = _SMALL_VARINTS[n] if n < 16_384 else encode_varint(n)
        body = self.body
        body += length
        body += record
        return len(length) + n

    @classmethod
    def from_columns(cls, values, keys=None, timestamps=None, headers=None, *,
                     now_ms: int | None = None) -> "MemoryRecordsBuilder":
        """A builder holding many records at once, encoded column by column
        (``arrow_records.encode_body``: no Python loop per record): the same body the
        records appended one by one give. ``values`` and ``keys`` are Arrow binary or string
        arrays or sequences of bytes, str or None; ``timestamps`` None (now), one int, or one
        per record; ``headers`` None or one list of (key, value) per record
        (``arrow_records.as_headers``)."""
        from protocols import arrow_records
        return cls.from_encoded(arrow_records.encode_body(
            values, keys, timestamps, headers,
            now_ms=time.time_ns() // 1_000_000 if now_ms is None else now_ms))

    @classmethod
    def from_encoded(cls, encoded) -> "MemoryRecordsBuilder":
        """A builder holding a body ``arrow_records`` encoded (an ``EncodedBody``)."""
        builder = cls()
        builder.body = encoded.body
        builder.count = encoded.count
        builder.base_timestamp = encoded.base_timestamp
        builder.max_timestamp = encoded.max_timestamp
        builder.last_offset_delta = encoded.count - 1
        return builder

    @property
    def size_in_bytes(self) -> int:
        return RECORD_BATCH_OVERHEAD + len(self.body)

    def records(self) -> list[tuple]:
        """``(offset delta, timestamp, key, value, headers)`` of every record appended (a
        producer splitting a batch the broker found too large)."""
        return _decode_records(bytes(self.body), self.count, 0, self.base_timestamp, None)

    def build(self, *, base_offset: int = 0, compression: str = "none",
              timestamp_type: str = "create_time", producer_id: int = -1,
              producer_epoch: int = -1, base_sequence: int = -1,
              partition_leader_epoch: int = -1, transactional: bool = False,
              control: bool = False, last_offset_delta: int | None = None) -> bytes:
        """The batch's bytes."""
        return b"".join(self.build_parts(
            base_offset=base_offset, compression=compression, timestamp_type=timestamp_type,
            producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=base_sequence, partition_leader_epoch=partition_leader_epoch,
            transactional=transactional, control=control, last_offset_delta=last_offset_delta))

    def build_parts(self, *, base_offset: int = 0, compression: str = "none",
                    timestamp_type: str = "create_time", producer_id: int = -1,
                    producer_epoch: int = -1, base_sequence: int = -1,
                    partition_leader_epoch: int = -1, transactional: bool = False,
                    control: bool = False, last_offset_delta: int | None = None
                    ) -> tuple[bytearray, bytes | bytearray | memoryview]:
        """The batch as its header and its body, not joined: a producer sends the two one
        after the other, its body where it was encoded (a megabyte for send_batch)."""
        codec = CODEC_IDS.get(compression)
        if codec is None:
            raise ValueError(f"unknown compression type {compression!r}; "
                             f"expected one of {', '.join(COMPRESSION_TYPES)}")
        if timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"unknown timestamp type {timestamp_type!r}")
        if last_offset_delta is None:
            last_offset_delta = self.last_offset_delta
        elif last_offset_delta < self.last_offset_delta:
            raise ValueError(f"last_offset_delta {last_offset_delta} is below a record's "
                             f"offset delta {self.last_offset_delta}")
        body = compress(compression, bytes(self.body)) if codec else self.body
        attributes = codec
        if timestamp_type == "log_append_time":
            attributes |= TIMESTAMP_TYPE_MASK
        if transactional:
            attributes |= TRANSACTIONAL_MASK
        if control:
            attributes |= CONTROL_MASK
        header = bytearray(RECORD_BATCH_OVERHEAD)
        _HEADER.pack_into(header, 0, base_offset, MIN_BATCH_LENGTH + len(body),
                          partition_leader_epoch, MAGIC, 0, attributes, last_offset_delta,
                          self.base_timestamp, self.max_timestamp, producer_id, producer_epoch,
                          base_sequence, self.count)
        # The CRC runs on from the header's tail into the body.
        _U32.pack_into(header, CRC_OFFSET,
                       _crc(body, _crc(memoryview(header)[ATTRIBUTES_OFFSET:])))
        return header, body


def encode_batch(records: Iterable[Record], *, base_offset: int = 0,
                 compression: str = "none", timestamp_type: str = "create_time",
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 partition_leader_epoch: int = -1, transactional: bool = False,
                 control: bool = False, now_ms: int | None = None,
                 last_offset_delta: int | None = None) -> bytes:
    """One v2 record batch holding ``records``. A record with ``offset`` set keeps its offset
    delta (compaction leaves gaps); ``last_offset_delta`` forces the batch's last offset."""
    records = records if isinstance(records, (list, tuple)) else list(records)
    if not records and last_offset_delta is None:
        raise ValueError("a record batch needs at least one record (or last_offset_delta)")
    if now_ms is None:
        now_ms = time.time_ns() // 1_000_000
    builder = MemoryRecordsBuilder()
    for i, r in enumerate(records):
        if r.offset is None:
            delta = i
        else:
            delta = r.offset - base_offset
            if delta < 0:
                raise ValueError(f"record offset {r.offset} is below the batch base offset "
                                 f"{base_offset}")
        builder.append(now_ms if r.timestamp is None else r.timestamp, r.key, r.value,
                       r.headers, delta)
    if not records:
        builder.base_timestamp = builder.max_timestamp = NO_TIMESTAMP
    return builder.build(base_offset=base_offset, compression=compression,
                         timestamp_type=timestamp_type, producer_id=producer_id,
                         producer_epoch=producer_epoch, base_sequence=base_sequence,
                         partition_leader_epoch=partition_leader_epoch,
                         transactional=transactional, control=control,
                         last_offset_delta=last_offset_delta)


def encode_batch_columns(values, keys=None, timestamps=None, headers=None, *,
                         base_offset: int = 0,
                         compression: str = "none", producer_id: int = -1,
                         producer_epoch: int = -1, base_sequence: int = -1,
                         partition_leader_epoch: int = -1, now_ms: int | None = None) -> bytes:
    """One v2 record batch of many records given as columns (see
    ``MemoryRecordsBuilder.from_columns``): byte for byte what ``encode_batch`` makes of the
    same records."""
    return MemoryRecordsBuilder.from_columns(values, keys, timestamps, headers,
                                             now_ms=now_ms).build(
        base_offset=base_offset, compression=compression, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch)


# ---- reading ----------------------------------------------------------------------------
class BatchHeader(NamedTuple):
    """All 61 header bytes unpacked at once (cheaper than one field at a time)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


class RecordBatch:
    """A view over one batch's bytes; header fields are read on demand, records only by
    ``records()``. ``position`` is where the batch began in the buffer it came from."""

    __slots__ = ("_buf", "position", "_start", "_size")

    def __init__(self, buf, position: int = 0, start: int | None = None,
                 size: int | None = None):
        self._buf = buf
        self.position = position
        self._start = position if start is None else start
        if size is None:
            size = LOG_OVERHEAD + _I32.unpack_from(buf, self._start + LENGTH_OFFSET)[0]
        self._size = size

    def header(self) -> BatchHeader:
        if self._size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"Record batch of {self._size} bytes is smaller than the "
                                     "v2 header")
        return BatchHeader._make(_HEADER.unpack_from(self._buf, self._start))

    # header fields
    def _i32(self, off: int) -> int:
        return _I32.unpack_from(self._buf, self._start + off)[0]

    def _i64(self, off: int) -> int:
        return _I64.unpack_from(self._buf, self._start + off)[0]

    @property
    def buffer(self) -> memoryview:
        return memoryview(self._buf)[self._start:self._start + self._size]

    @property
    def base_offset(self) -> int:
        return self._i64(BASE_OFFSET_OFFSET)

    @property
    def batch_length(self) -> int:
        return self._size - LOG_OVERHEAD

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def partition_leader_epoch(self) -> int:
        return self._i32(PARTITION_LEADER_EPOCH_OFFSET)

    @property
    def magic(self) -> int:
        return self._buf[self._start + MAGIC_OFFSET]

    @property
    def crc(self) -> int:
        return _U32.unpack_from(self._buf, self._start + CRC_OFFSET)[0]

    @property
    def attributes(self) -> int:
        return _I16.unpack_from(self._buf, self._start + ATTRIBUTES_OFFSET)[0]

    @property
    def compression(self) -> str:
        codec = self.attributes & COMPRESSION_MASK
        name = CODEC_NAMES.get(codec)
        if name is None:
            from protocols.errors import UnsupportedCompressionTypeError
            raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
        return name

    @property
    def timestamp_type(self) -> str:
        return TIMESTAMP_TYPES[1 if self.attributes & TIMESTAMP_TYPE_MASK else 0]

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534: with the delete-horizon bit, baseTimestamp holds the time after which
        the batch's tombstones may be removed."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_offset_delta(self) -> int:
        return self._i32(LAST_OFFSET_DELTA_OFFSET)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def base_timestamp(self) -> int:
        return self._i64(BASE_TIMESTAMP_OFFSET)

    @property
    def max_timestamp(self) -> int:
        return self._i64(MAX_TIMESTAMP_OFFSET)

    @property
    def producer_id(self) -> int:
        return self._i64(PRODUCER_ID_OFFSET)

    @property
    def producer_epoch(self) -> int:
        return _I16.unpack_from(self._buf, self._start + PRODUCER_EPOCH_OFFSET)[0]

    @property
    def base_sequence(self) -> int:
        return self._i32(BASE_SEQUENCE_OFFSET)

    @property
    def last_sequence(self) -> int:
        base = self.base_sequence
        if base < 0:
            return -1
        return (base + self.last_offset_delta) % (2**31)

    @property
    def record_count(self) -> int:
        return self._i32(RECORDS_COUNT_OFFSET)

    # integrity
    def compute_checksum(self) -> int:
        start = self._start
        return _crc(memoryview(self._buf)[start + ATTRIBUTES_OFFSET:start + self._size])

    def is_valid(self) -> bool:
        return (self._size >= RECORD_BATCH_OVERHEAD and self.magic == MAGIC
                and self.crc == self.compute_checksum())

    def ensure_valid(self) -> None:
        if self._size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"Record batch at offset {self.base_offset} is only "
                                     f"{self._size} bytes, less than the v2 header")
        if self.magic != MAGIC:
            raise UnsupportedVersionError(f"Record batch magic {self.magic} is not supported "
                                          f"(only magic {MAGIC})")
        stored, computed = self.crc, self.compute_checksum()
        if stored != computed:
            raise CorruptRecordError(
                f"Record batch at offset {self.base_offset} is corrupt (stored crc = {stored}, "
                f"computed crc = {computed})")

    # deep iteration
    def records(self) -> Iterator[Record]:
        for offset, ts, key, value, headers in self.record_tuples():
            yield Record(key, value, ts, headers, offset)

    def _body(self, copy: bool = True) -> bytes:
        """The records' bytes, decompressed (a copy either way, unless ``copy`` is False:
        then an uncompressed batch's are a view of the buffer), once the record count is
        known to fit them: the decoders size their columns by it."""
        start = self._start
        body = memoryview(self._buf)[start + RECORDS_OFFSET:start + self._size]
        codec = self.attributes & COMPRESSION_MASK
        if copy or codec:
            body = bytes(body)
        if codec:
            body = decompress(self.compression, body)
        count = self.record_count
        if count < 0 or count * MIN_RECORD_BYTES > len(body):
            raise CorruptRecordError(f"Found invalid record count {count} in the magic v2 "
                                     f"batch at offset {self.base_offset} ({len(body)} bytes "
                                     f"of records)")
        return body

    def _append_time(self) -> int | None:
        return self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None

    def _decode(self, body: bytes) -> list[tuple]:
        try:
            return _decode_records(body, self.record_count, self.base_offset,
                                   self.base_timestamp, self._append_time())
        except (IndexError, struct.error, UnicodeDecodeError) as e:
            raise CorruptRecordError(f"Record batch at offset {self.base_offset} does not "
                                     f"decode: {e}") from None

    def record_tuples(self) -> list[tuple]:
        """Every record as ``(offset, timestamp, key, value, headers)``, located column by
        column (``columnar.py``) or, off its common path, decoded in one pass over a bytes
        copy of the body."""
        body = self._body()
        fast = columnar.record_tuples(body, self.record_count, self.base_offset,
                                      self.base_timestamp, self._append_time())
        return fast if fast is not None else self._decode(body)

    def record_columns(self) -> tuple[list, list, list, list, list | None]:
        """The records as columns: ``(offsets, timestamps, keys, values, headers)``, lists in
        offset order, ``headers`` None when no record has any. The consumer's hot path: no
        object per record until the application takes them."""
        return RecordBatch.record_columns_of([self])

    def arrow_columns(self, headers: bool = False) -> dict:
        """The records as Arrow arrays: ``offset``, ``timestamp`` (int64), ``key``, ``value``
        (binary), and ``headers`` (a list of (key, value) structs per record) when asked
        for or when a record has one. Located column by column on the common path
        (``arrow_records``), else decoded record by record."""
        from protocols import arrow_records
        columns = self.arrow_columns_of([self])
        if headers and "headers" not in columns:
            columns["headers"] = arrow_records.no_headers(self.record_count)
        return columns

    @staticmethod
    def arrow_columns_of(batches: list["RecordBatch"]) -> dict:
        """``arrow_columns`` of consecutive batches as one set of columns, located
        together (``arrow_records.decode_batches``); batches off the common path are
        decoded one by one. ``headers`` is there when a record has one."""
        import pyarrow as pa

        from protocols import arrow_records
        bodies = RecordBatch._bodies(batches)
        columns = arrow_records.decode_batches(bodies)
        if columns is not None:
            return columns
        each = []
        for batch, body in zip(batches, bodies):
            found = arrow_records.decode_batches([body])
            each.append(found if found is not None else
                        arrow_records.columns_from_tuples(batch._decode(bytes(body.body))))
        if len(each) == 1:
            return each[0]
        if any("headers" in c for c in each):
            for c, batch in zip(each, batches):
                c.setdefault("headers", arrow_records.no_headers(batch.record_count))
        return {name: pa.concat_arrays([c[name] for c in each]) for name in each[0]}

    @staticmethod
    def record_columns_of(batches: list["RecordBatch"]
                          ) -> tuple[list, list, list, list, list | None]:
        """``record_columns`` of consecutive batches end to end, headers and all (``headers``
        None when no record has one), located together (``columnar.batches_record_columns``:
        one numpy pass per field for all) when every batch is on the common path, else
        batch by batch."""
        bodies = RecordBatch._bodies(batches)
        fast = columnar.batches_record_columns(bodies)
        if fast is not None:
            return fast
        each = []
        for batch, body in zip(batches, bodies):
            alone = columnar.batches_record_columns([body]) if len(batches) > 1 else None
            if alone is None:
                records = batch._decode(bytes(body.body))
                offsets, timestamps, keys, values, headers = (
                    map(list, zip(*records)) if records else ([], [], [], [], []))
                alone = (offsets, timestamps, keys, values, headers if any(headers) else None)
            each.append(alone)
        columns = tuple([value for c in each for value in c[i]] for i in range(4))
        if all(c[4] is None for c in each):
            return (*columns, None)
        return (*columns, [h for c in each for h in
                           (c[4] if c[4] is not None else [()] * len(c[0]))])

    @staticmethod
    def _bodies(batches: list["RecordBatch"]) -> list[columnar.BatchBody]:
        return [columnar.BatchBody(b._body(copy=False), b.record_count, b.base_offset,
                                   b.base_timestamp, b._append_time()) for b in batches]

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.record_count}, size={self._size}, "
                f"compression={self.compression})")


def _decode_records(body: bytes, count: int, base_offset: int, base_ts: int,
                    append_time: int | None) -> list[tuple]:
    # Nearly every varint in a record is one or two bytes (a 100-byte value's length, offset
    # deltas past 63, timestamp deltas past 63 ms are two): those are read inline, longer
    # ones by decode_varint. Zig-zag of z is (z >> 1) ^ -(z & 1).
    out = []
    append = out.append
    pos = 0
    size = len(body)
    for _ in range(count):
        b = body[pos]
        if b < 0x80:
            z = b
            pos += 1
        elif body[pos + 1] < 0x80:
            z = (b & 0x7F) | (body[pos + 1] << 7)
            pos += 2
        else:
            z, pos = decode_unsigned_varint(body, pos)
        length = (z >> 1) ^ -(z & 1)
        end = pos + length
        if length < 0 or end > size:
            raise CorruptRecordError(f"Record in batch {base_offset} claims {length} bytes "
                                     "beyond the batch")
        pos += 1                        # the attributes byte
        b = body[pos]
        if b < 0x80:
            z = b
            pos += 1
        elif body[pos + 1] < 0x80:
            z = (b & 0x7F) | (body[pos + 1] << 7)
            pos += 2
        else:
            z, pos = decode_unsigned_varint(body, pos)
        ts_delta = (z >> 1) ^ -(z & 1)
        b = body[pos]
        if b < 0x80:
            z = b
            pos += 1
        elif body[pos + 1] < 0x80:
            z = (b & 0x7F) | (body[pos + 1] << 7)
            pos += 2
        else:
            z, pos = decode_unsigned_varint(body, pos)
        off_delta = (z >> 1) ^ -(z & 1)
        b = body[pos]
        if b == 1:
            key = None
            pos += 1
        else:
            if b < 0x80:
                z = b
                pos += 1
            elif body[pos + 1] < 0x80:
                z = (b & 0x7F) | (body[pos + 1] << 7)
                pos += 2
            else:
                z, pos = decode_unsigned_varint(body, pos)
            if z & 1:
                raise CorruptRecordError(f"Record in batch {base_offset} has a "
                                         "negative length other than -1")
            klen = z >> 1
            key = body[pos:pos + klen]
            pos += klen
        b = body[pos]
        if b == 1:
            value = None
            pos += 1
        else:
            if b < 0x80:
                z = b
                pos += 1
            elif body[pos + 1] < 0x80:
                z = (b & 0x7F) | (body[pos + 1] << 7)
                pos += 2
            else:
                z, pos = decode_unsigned_varint(body, pos)
            if z & 1:
                raise CorruptRecordError(f"Record in batch {base_offset} has a "
                                         "negative length other than -1")
            vlen = z >> 1
            value = body[pos:pos + vlen]
            pos += vlen
        if body[pos] == 0:
            headers = ()
            pos += 1
        else:
            nheaders, pos = decode_varint(body, pos)
            if not 0 <= nheaders <= (end - pos) // 2:     # a header takes 2 bytes at least
                raise CorruptRecordError(f"Record in batch {base_offset} has an invalid "
                                         f"number of headers {nheaders}")
            hs = []
            for _h in range(nheaders):
                hklen, pos = decode_varint(body, pos)
                if not 0 <= hklen <= end - pos:
                    raise CorruptRecordError(f"Record in batch {base_offset} has a header "
                                             f"key of invalid size {hklen}")
                hkey = body[pos:pos + hklen].decode()
                pos += hklen
                hvlen, pos = decode_varint(body, pos)
                if hvlen < -1 or hvlen > end - pos:
                    raise CorruptRecordError(f"Record in batch {base_offset} has a header "
                                             f"value of invalid size {hvlen}")
                if hvlen < 0:
                    hvalue = None
                else:
                    hvalue = body[pos:pos + hvlen]
                    pos += hvlen
                hs.append((hkey, hvalue))
            headers = tuple(hs)
        if pos != end:
            raise CorruptRecordError(f"Record in batch {base_offset} has {end - pos} bytes "
                                     "unaccounted for")
        ts = append_time if append_time is not None else base_ts + ts_delta
        append((base_offset + off_delta, ts, key, value, headers))
    return out


def read_batch_header(buffer, position: int = 0) -> tuple[int, int] | None:
    """(baseOffset, batchLength) at ``position``, or None if fewer than 12 bytes remain."""
    if len(buffer) - position < LOG_OVERHEAD:
        return None
    return _OFFSET_AND_LENGTH.unpack_from(buffer, position)


def iter_batches(buffer, position: int = 0) -> Iterator[RecordBatch]:
    """Shallow iteration: every complete batch, reading headers only. Stops silently at an
    incomplete tail (as Kafka's batch iterator does); a batchLength below the v2 header is
    CorruptRecordError and a magic other than 2 UnsupportedVersionError. No CRC check."""
    end = len(buffer)
    unpack = _OFFSET_AND_LENGTH.unpack_from
    while end - position >= LOG_OVERHEAD:
        _, length = unpack(buffer, position)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"Record batch size {length + LOG_OVERHEAD} at position "
                                     f"{position} is smaller than the minimum "
                                     f"{RECORD_BATCH_OVERHEAD}")
        if end - position > MAGIC_OFFSET:
            magic = buffer[position + MAGIC_OFFSET]
            if magic != MAGIC:
                raise UnsupportedVersionError(f"Record batch magic {magic} at position "
                                              f"{position} is not supported (only {MAGIC})")
        size = LOG_OVERHEAD + length
        if end - position < size:
            return
        yield RecordBatch(buffer, position, position, size)
        position += size


def transactional_producers(buffer) -> dict[int, int]:
    """The producers (id -> epoch) of the transactional data batches in ``buffer``: what a
    leader verifies with their transaction coordinators before appending (KIP-890)."""
    out: dict[int, int] = {}
    for batch in iter_batches(buffer):
        if batch.is_transactional and not batch.is_control:
            out[batch.producer_id] = batch.producer_epoch
    return out


# ---- in-place patches (the broker's, which never decodes records) -----------------------
def set_base_offset(buf, position: int, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf, position: int, epoch: int) -> None:
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf, position: int, timestamp_ms: int) -> None:
    """Stamp LogAppendTime: set the timestamp-type bit and maxTimestamp; both are inside the
    CRC, so it is recomputed (Kafka's setMaxTimestamp)."""
    attrs = _I16.unpack_from(buf, position + ATTRIBUTES_OFFSET)[0]
    _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    size = LOG_OVERHEAD + _I32.unpack_from(buf, position + LENGTH_OFFSET)[0]
    _U32.pack_into(buf, position + CRC_OFFSET,
                   _crc(memoryview(buf)[position + ATTRIBUTES_OFFSET:position + size]))
