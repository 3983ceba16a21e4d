"""Print segment files the way Kafka's ``kafka-dump-log.sh`` (kafka.tools.DumpLogSegments) does.

Every function here yields the lines to print and prints nothing itself, so the CLI decides
where they go. The per-file dumpers yield standard-output lines and raise on a file they
cannot read; the checks Kafka reports after all files (index entries that do not match the
log, out-of-order time index entries, offset gaps) are collected in ``DumpProblems`` and
printed last, on standard error, as Kafka does.

Index files are read raw rather than through ``storage.index``: the dump must show exactly
what is on disk, including the zero-filled preallocated tail of an index that was not trimmed
(Kafka opens it read-only with ``entries = file length / entry size`` and stops at the first
zero entry after the first).
"""
from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from protocols.errors import CorruptIndexError, KafkaError
from protocols.control_records import (ABORT, COMMIT, CONTROL_TYPES, EndTransactionMarker,
                                       control_record_type)
from protocols.records import NO_SEQUENCE, Record, RecordBatch
from storage.file_records import FileRecords
from storage.files import (INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
                           offset_from_file)
from storage.producer_state import SNAPSHOT_SUFFIX, decode_snapshot
from storage.transaction_index import TransactionIndex

NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
# Kafka's --max-bytes default is Integer.MAX_VALUE, which also means "no limit" to the
# trailing-bytes report.
UNLIMITED_BYTES = INT32_MAX

OFFSET_INDEX_ENTRY = struct.Struct(">iI")        # relative offset, position
TIME_INDEX_ENTRY = struct.Struct(">qi")          # timestamp, relative offset

RECORD_INDENT = "|"
TIMESTAMP_TYPE_NAMES = {"create_time": "CreateTime", "log_append_time": "LogAppendTime"}


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """The switches of kafka-dump-log.sh that apply to rafka's files."""

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    skip_record_metadata: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = UNLIMITED_BYTES

    @property
    def is_deep_iteration(self) -> bool:
        # Printing payloads needs the records, so it implies deep iteration (as in Kafka).
        return self.deep_iteration or self.print_data_log


@dataclass(frozen=True, slots=True)
class DumpLine:
    text: str
    stderr: bool = False


@dataclass
class DumpProblems:
    """Inconsistencies found while dumping, keyed by absolute file path, reported at the end."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    out_of_order_timestamps: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    shallow_offsets_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive_offsets: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @staticmethod
    def add(table: dict[str, list[tuple[int, int]]], path: Path, pair: tuple[int, int]) -> None:
        table.setdefault(str(Path(path).absolute()), []).append(pair)

    def __bool__(self) -> bool:
        return any((self.index_mismatches, self.time_index_mismatches,
                    self.out_of_order_timestamps, self.shallow_offsets_not_found,
                    self.non_consecutive_offsets))

    def lines(self) -> Iterator[str]:
        """Kafka's closing report. Index mismatches and offset gaps come out newest first
        because Kafka prepends them to immutable lists; the time index lists keep order."""
        for path, pairs in self.index_mismatches.items():
            yield f"Mismatches in :{path}"
            for index_offset, log_offset in reversed(pairs):
                yield f"  Index offset: {index_offset}, log offset: {log_offset}"
        for path, pairs in self.time_index_mismatches.items():
            yield f"Found timestamp mismatch in :{path}"
            for index_ts, log_ts in pairs:
                yield f"  Index timestamp: {index_ts}, log timestamp: {log_ts}"
        for path, pairs in self.out_of_order_timestamps.items():
            yield f"Found out of order timestamp in :{path}"
            for index_ts, previous_ts in pairs:
                yield f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous_ts}"
        for pairs in self.shallow_offsets_not_found.values():
            yield "The following indexed offsets are not found in the log."
            for index_offset, log_offset in pairs:
                yield f"Indexed offset: {index_offset}, found log offset: {log_offset}"
        for path, pairs in self.non_consecutive_offsets.items():
            yield f"Non-consecutive offsets in {path}"
            for first, second in reversed(pairs):
                yield f"  {first} is followed by {second}"


# ---- formatting of one batch / one record -----------------------------------------------

def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _decode(data: bytes) -> str:
    # Kafka's default StringDecoder: UTF-8, malformed input replaced rather than fatal.
    return bytes(data).decode("utf-8", errors="replace")


def timestamp_type_name(batch: RecordBatch) -> str:
    return TIMESTAMP_TYPE_NAMES.get(batch.timestamp_type, "NoTimestampType")


def record_sequence(batch: RecordBatch, record: Record) -> int:
    """A record's producer sequence: the batch's base sequence plus the offset delta,
    wrapping past Int.MaxValue to 0 as producer sequences do."""
    if batch.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    delta = record.offset - batch.base_offset
    if batch.base_sequence > INT32_MAX - delta:
        return delta - (INT32_MAX - batch.base_sequence) - 1
    return batch.base_sequence + delta


def format_batch(batch: RecordBatch, position: int) -> str:
    return (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
            f"count: {batch.record_count} baseSequence: {batch.base_sequence} "
            f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {_java_bool(batch.is_transactional)} "
            f"isControl: {_java_bool(batch.is_control)} "
            f"deleteHorizonMs: {_optional_long(batch.delete_horizon_ms)} "
            f"position: {position} {timestamp_type_name(batch)}: {batch.max_timestamp} "
            f"size: {batch.size_in_bytes} magic: {batch.magic} "
            f"compresscodec: {batch.compression} crc: {batch.crc} "
            f"isvalid: {_java_bool(batch.is_valid())}")


def describe_control_record(record: Record) -> str:
    """The control-record part of a record line: an end-transaction marker's type and
    coordinator epoch, otherwise the control type and its id."""
    type_id = control_record_type(record.key)
    if type_id in (ABORT, COMMIT):
        marker = EndTransactionMarker.deserialize(record)
        return f" endTxnMarker: {CONTROL_TYPES[type_id]} coordinatorEpoch: " \
               f"{marker.coordinator_epoch}"
    name = CONTROL_TYPES.get(type_id, "UNKNOWN")
    return f" controlType: {name}({type_id})"


def format_record(batch: RecordBatch, record: Record, *, print_contents: bool,
                  skip_record_metadata: bool = False) -> str:
    parts: list[str] = []
    prefix = f"{RECORD_INDENT} "
    if not skip_record_metadata:
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        header_keys = ",".join(k for k, _ in record.headers)
        parts.append(f"{prefix}offset: {record.offset} {timestamp_type_name(batch)}: "
                     f"{record.timestamp} keySize: {key_size} valueSize: {value_size}"
                     f" sequence: {record_sequence(batch, record)} headerKeys: [{header_keys}]")
        prefix = " "
        if batch.is_control:
            parts.append(describe_control_record(record))
    if print_contents and not batch.is_control:
        if record.key is not None:
            parts.append(f"{prefix}key: {_decode(record.key)}")
        if record.value is not None:
            parts.append(f" payload: {_decode(record.value)}")
    return "".join(parts)


# ---- raw index reading --------------------------------------------------------------------

def _read_entries(path: Path, entry: struct.Struct) -> tuple[list[tuple[int, int]], int]:
    """All whole entries of an index file (Kafka's read-only view) and the file length."""
    data = Path(path).read_bytes()
    count = len(data) // entry.size
    return [entry.unpack_from(data, i * entry.size) for i in range(count)], len(data)


def _segment_sibling(path: Path, suffix: str) -> Path:
    """The file of the same segment with another suffix, next to ``path`` (the part of the
    name before the first dot, as Kafka takes it)."""
    path = Path(path).absolute()
    return path.parent / (path.name.split(".", 1)[0] + suffix)


def read_offset_index(path: Path, base_offset: int) -> list[tuple[int, int]]:
    """``(offset, position)`` entries up to the preallocated zero tail."""
    raw, _ = _read_entries(path, OFFSET_INDEX_ENTRY)
    entries: list[tuple[int, int]] = []
    for i, (relative, position) in enumerate(raw):
        if relative == 0 and i > 0:
            break
        entries.append((base_offset + relative, position))
    return entries


def offset_index_sanity_check(path: Path, base_offset: int) -> None:
    """The check a broker runs at startup to decide whether to rebuild the index."""
    raw, length = _read_entries(path, OFFSET_INDEX_ENTRY)
    absolute = Path(path).absolute()
    if raw:
        last_offset = base_offset + raw[-1][0]
        if last_offset < base_offset:
            raise CorruptIndexError(
                f"Corrupt index found, index file {absolute} has non-zero size but the last "
                f"offset is {last_offset} which is less than the base offset {base_offset}")
    if length % OFFSET_INDEX_ENTRY.size:
        raise CorruptIndexError(
            f"Index file {absolute} is corrupt, found {length} bytes which is neither "
            f"positive nor a multiple of {OFFSET_INDEX_ENTRY.size}")


def time_index_sanity_check(path: Path, base_offset: int) -> None:
    raw, length = _read_entries(path, TIME_INDEX_ENTRY)
    absolute = Path(path).absolute()
    if raw:
        first_ts = raw[0][0]
        last_ts, last_relative = raw[-1]
        if last_ts < first_ts:
            raise CorruptIndexError(
                f"Corrupt time index found, time index file ({absolute}) has non-zero size "
                f"but the last timestamp is {last_ts} which is less than the first timestamp "
                f"{first_ts}")
        if base_offset + last_relative < base_offset:
            raise CorruptIndexError(
                f"Corrupt time index found, time index file ({absolute}) has non-zero size "
                f"but the last offset is {base_offset + last_relative} which is less than the "
                f"first offset {base_offset}")
    if length % TIME_INDEX_ENTRY.size:
        raise CorruptIndexError(
            f"Time index file {absolute} is corrupt, found {length} bytes which is neither "
            f"positive nor a multiple of {TIME_INDEX_ENTRY.size}")


# ---- per-file dumpers ----------------------------------------------------------------------

def dump_offset_index(path: str | Path, options: DumpOptions = DumpOptions(),
                      problems: DumpProblems | None = None) -> Iterator[str]:
    """``offset: O position: P`` per entry. Each entry is checked against the batch at its
    position in the segment's ``.log``; when that file is absent the entries are printed
    unchecked (Kafka fails instead), unless only verification was asked for."""
    problems = problems if problems is not None else DumpProblems()
    path = Path(path)
    base_offset = offset_from_file(path)
    raw, _ = _read_entries(path, OFFSET_INDEX_ENTRY)
    if not raw:
        yield f"{os.fspath(path)} is empty."
        return
    if options.index_sanity_check:
        offset_index_sanity_check(path, base_offset)
        yield f"{os.fspath(path)} passed sanity check."
        return
    log_path = _segment_sibling(path, LOG_SUFFIX)
    if not log_path.exists() and options.verify_index_only:
        raise FileNotFoundError(2, "cannot verify the index without its log file", str(log_path))
    records = FileRecords(log_path, create=False, read_only=True) if log_path.exists() else None
    try:
        for offset, position in read_offset_index(path, base_offset):
            if records is not None:
                first = next(records.batches(position, position + options.max_message_size),
                             None)
                log_offset = first[1].last_offset if first is not None else -1
                if log_offset != offset:
                    problems.add(problems.index_mismatches, path, (offset, log_offset))
            if not options.verify_index_only:
                yield f"offset: {offset} position: {position}"
    finally:
        if records is not None:
            records.close()


def _lookup(entries: list[tuple[int, int]], target: int) -> int:
    """Position of the greatest indexed offset <= target, 0 when there is none."""
    slot = bisect.bisect_right(entries, target, key=lambda e: e[0]) - 1
    return entries[slot][1] if slot >= 0 else 0


def dump_time_index(path: str | Path, options: DumpOptions = DumpOptions(),
                    problems: DumpProblems | None = None) -> Iterator[str]:
    """``timestamp: T offset: O`` per entry, each checked against the log: the entry's
    offset must be a batch's last offset and its timestamp that batch's largest record
    timestamp, and timestamps must increase."""
    problems = problems if problems is not None else DumpProblems()
    path = Path(path)
    base_offset = offset_from_file(path)
    if options.index_sanity_check:
        time_index_sanity_check(path, base_offset)
        yield f"{os.fspath(path)} passed sanity check."
        return
    raw, _ = _read_entries(path, TIME_INDEX_ENTRY)
    log_path = _segment_sibling(path, LOG_SUFFIX)
    index_path = _segment_sibling(path, INDEX_SUFFIX)
    if not log_path.exists() and options.verify_index_only:
        raise FileNotFoundError(2, "cannot verify the index without its log file", str(log_path))
    records = FileRecords(log_path, create=False, read_only=True) if log_path.exists() else None
    offsets = read_offset_index(index_path, base_offset) if index_path.exists() else []
    previous_ts = NO_TIMESTAMP
    try:
        for i, (timestamp, relative) in enumerate(raw):
            offset = base_offset + relative
            if offset == base_offset and i > 0:
                return
            if records is not None:
                position = _lookup(offsets, offset)
                batch = next((b for _, b in records.batches(position)
                              if b.last_offset >= offset), None)
                if batch is None:
                    problems.add(problems.shallow_offsets_not_found, path, (offset, -1))
                elif batch.last_offset != offset:
                    problems.add(problems.shallow_offsets_not_found, path,
                                  (offset, batch.last_offset))
                else:
                    max_ts = max((r.timestamp for r in batch.records()), default=NO_TIMESTAMP)
                    if max_ts != timestamp:
                        problems.add(problems.time_index_mismatches, path, (timestamp, max_ts))
                    if previous_ts >= timestamp:
                        problems.add(problems.out_of_order_timestamps, path,
                                      (timestamp, previous_ts))
            if not options.verify_index_only:
                yield f"timestamp: {timestamp} offset: {offset}"
            previous_ts = timestamp
    finally:
        if records is not None:
            records.close()


def dump_log(path: str | Path, options: DumpOptions = DumpOptions(),
             problems: DumpProblems | None = None) -> Iterator[str]:
    """A line per batch; with deep iteration a ``|`` line per record, with the key and
    payload when printing data. Bytes after the last whole batch are reported."""
    problems = problems if problems is not None else DumpProblems()
    path = Path(path)
    base_offset = offset_from_file(path)
    records = FileRecords(path, create=False, read_only=True)
    try:
        yield f"Log starting offset: {base_offset}"
        end = min(records.size, options.max_bytes)
        valid_bytes = 0
        last_offset = -1
        for _, batch in records.batches(0, end):
            yield format_batch(batch, valid_bytes)
            if options.is_deep_iteration:
                for record in batch.records():
                    if last_offset != -1 and record.offset != last_offset + 1:
                        problems.add(problems.non_consecutive_offsets, path,
                                      (last_offset, record.offset))
                    last_offset = record.offset
                    yield format_record(batch, record, print_contents=options.print_data_log,
                                        skip_record_metadata=options.skip_record_metadata)
            valid_bytes += batch.size_in_bytes
        trailing = end - valid_bytes
        if trailing > 0 and options.max_bytes == UNLIMITED_BYTES:
            yield f"Found {trailing} invalid bytes at the end of {path.name}"
    finally:
        records.close()


def dump_producer_snapshot(path: str | Path, options: DumpOptions = DumpOptions(),
                           problems: DumpProblems | None = None) -> Iterator[str]:
    """Kafka's dumpProducerIdSnapshot line per entry; a corrupt snapshot is reported, as
    Kafka's CorruptSnapshotException, on stderr by the caller."""
    for e in decode_snapshot(Path(path).read_bytes()):
        txn = ("OptionalLong.empty" if e.current_txn_first_offset is None
               else f"OptionalLong[{e.current_txn_first_offset}]")
        line = (f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: "
                f"{e.coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: "
                f"{e.last_timestamp} ")
        b = e.batch
        if b is not None:
            line += (f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} "
                     f"lastOffset: {b.last_offset} offsetDelta: {b.last_offset - b.first_offset} "
                     f"timestamp: {b.timestamp}")
        yield line


def dump_txn_index(path: str | Path, options: DumpOptions = DumpOptions(),
                   problems: DumpProblems | None = None) -> Iterator[str]:
    """Kafka's dumpTxnIndex line per aborted transaction."""
    index = TransactionIndex(offset_from_file(Path(path)), Path(path))
    for txn in index.all_aborted_txns():
        yield (f"version: {txn.version} producerId: {txn.producer_id} firstOffset: "
               f"{txn.first_offset} lastOffset: {txn.last_offset} lastStableOffset: "
               f"{txn.last_stable_offset}")


FileDumper = Callable[[str | Path, DumpOptions, DumpProblems], Iterator[str]]

# Kafka picks the dumper by the text after the LAST dot, so ``.log.deleted`` or
# ``.index.swap`` files are "unknown", as is ``leader-epoch-checkpoint`` (no dot at all).
DUMPERS: dict[str, FileDumper] = {
    LOG_SUFFIX: dump_log,
    INDEX_SUFFIX: dump_offset_index,
    TIME_INDEX_SUFFIX: dump_time_index,
    SNAPSHOT_SUFFIX: dump_producer_snapshot,
    TXN_INDEX_SUFFIX: dump_txn_index,
}


def dumper_for(path: str | Path) -> FileDumper | None:
    name = Path(path).name
    dot = name.rfind(".")
    return DUMPERS.get(name[dot:]) if dot >= 0 else None


class LogDumper:
    """Dumps files one after another, like one run of kafka-dump-log.sh; ``failed`` lists
    the files that could not be dumped (a run goes on past them)."""

    def __init__(self, options: DumpOptions = DumpOptions()):
        self.options = options
        self.problems = DumpProblems()
        self.failed: list[str] = []

    def dump(self, paths: Iterable[str | Path]) -> Iterator[DumpLine]:
        for path in paths:
            shown = os.fspath(path)
            yield DumpLine(f"Dumping {shown}")
            dumper = dumper_for(path)
            if dumper is None:
                yield DumpLine(f"Ignoring unknown file {shown}", stderr=True)
                continue
            try:
                for text in dumper(path, self.options, self.problems):
                    yield DumpLine(text)
            except OSError as e:
                self.failed.append(shown)
                where = e.filename if e.filename is not None else shown
                yield DumpLine(f"Error: {where}: {e.strerror or e}", stderr=True)
            except (KafkaError, ValueError) as e:
                self.failed.append(shown)
                yield DumpLine(f"Error: {shown}: {type(e).__name__}: {e}", stderr=True)
        for text in self.problems.lines():
            yield DumpLine(text, stderr=True)
