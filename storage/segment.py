"""LogSegment: one ``.log`` file with its ``.index`` and ``.timeindex`` (and its ``.txnindex``
once a transaction was aborted in it: ``storage.transaction_index``).

A segment is named by its base offset. Index entries are added every
``index.interval.bytes`` of appended data, mapping a batch's last offset to the batch's
position, so a lookup lands at most about that many bytes before the wanted batch.
"""
from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from protocols.records import (LAST_OFFSET_DELTA_OFFSET, MAGIC, MAGIC_OFFSET, NO_TIMESTAMP,
                               RECORDS_OFFSET, RecordBatch, iter_batches)
from protocols.file_region import FileRegion
from storage.file_records import BatchLocation, FileRecords
from storage.files import (INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
                           filename_prefix,
                           segment_file)
from storage.index import OffsetIndex, TimeIndex, TimestampOffset
from storage.transaction_index import TransactionIndex
from protocols.errors import CorruptIndexError, CorruptRecordError, UnsupportedVersionError

INT_MAX = 2**31 - 1
_BASE_OFFSET = struct.Struct(">q")
_I32 = struct.Struct(">i")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What the segment needs to know of each batch it appends (from the batch header)."""

    last_offset: int
    max_timestamp: int
    size: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Bytes read from a segment: whole batches starting at ``position`` (or, read as a
    region, the bytes named: see ``LogSegment.read``)."""

    fetch_offset: int
    segment_base_offset: int
    position: int
    records: bytes | FileRegion
    first_batch_base_offset: int
    next_offset: int  # offset after the last batch returned


class LogSegment:
    def __init__(self, log: FileRecords, offset_index: OffsetIndex, time_index: TimeIndex,
                 txn_index: TransactionIndex, base_offset: int, index_interval_bytes: int,
                 rolling_jitter_ms: int, created_ms: int):
        self.log = log
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = created_ms
        self.bytes_since_last_index_entry = 0
        # The first batch's max timestamp, the reference for time-based rolling.
        self._rolling_based_timestamp: int | None = None
        # Set when an index entry was found not to describe the .log: lookups then scan the
        # segment from its start, and closing deletes the indexes so the next open rebuilds.
        self.indexes_distrusted = False
        last = time_index.last_entry
        self._max_timestamp_so_far = last.timestamp
        self._offset_of_max_timestamp_so_far = last.offset

    @classmethod
    def open(cls, directory: Path, base_offset: int, *, index_interval_bytes: int,
             max_index_size: int, rolling_jitter_ms: int = 0, now_ms: int,
             suffix: str = "") -> "LogSegment":
        directory = Path(directory)
        log = FileRecords(segment_file(directory, base_offset, LOG_SUFFIX, suffix))
        offset_index = OffsetIndex(segment_file(directory, base_offset, INDEX_SUFFIX, suffix),
                                   base_offset, max_index_size)
        time_index = TimeIndex(segment_file(directory, base_offset, TIME_INDEX_SUFFIX, suffix),
                               base_offset, max_index_size)
        txn_index = TransactionIndex(base_offset, segment_file(directory, base_offset,
                                                               TXN_INDEX_SUFFIX, suffix))
        return cls(log, offset_index, time_index, txn_index, base_offset,
                   index_interval_bytes, rolling_jitter_ms, now_ms)

    # ---- facts ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.log.size

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_so_far

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._offset_of_max_timestamp_so_far

    @property
    def largest_timestamp(self) -> int:
        """What time retention judges: the largest record timestamp, or the file's
        modification time if no record carries a timestamp (Kafka's largestTimestamp)."""
        if self._max_timestamp_so_far >= 0:
            return self._max_timestamp_so_far
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log.path).st_mtime * 1000)

    @property
    def name(self) -> str:
        return filename_prefix(self.base_offset)

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT_MAX

    def rolling_based_timestamp(self) -> int | None:
        if self._rolling_based_timestamp is None and self.log.size > 0:
            for loc in self.log.locations(0, chunk_bytes=4096):
                self._rolling_based_timestamp = loc.max_timestamp
                break
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        first = self.rolling_based_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(self, *, segment_bytes: int, segment_ms: int, messages_size: int,
                    max_timestamp_in_messages: int, max_offset_in_messages: int,
                    now_ms: int) -> bool:
        """Kafka's four roll conditions: size, time since the first timestamp, a full index,
        and an offset that cannot be stored relative to this segment's base offset."""
        reached_roll_ms = (self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                           > segment_ms - self.rolling_jitter_ms)
        return (self.size > segment_bytes - messages_size
                or (self.size > 0 and reached_roll_ms)
                or self.offset_index.is_full()
                or self.time_index.is_full()
                or not self.can_convert_to_relative_offset(max_offset_in_messages))

    # ---- writing -------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview, batches: Sequence[BatchInfo]) -> None:
        """Append whole batches. Index entries are added as Kafka does: before a batch, if
        more than index.interval.bytes were appended since the last entry."""
        if not batches:
            return
        self._ensure_index_files()   # the first records: the index files too
        position = start_size = self.log.size
        rolling_before = self._rolling_based_timestamp
        if position == 0:
            self._rolling_based_timestamp = batches[0].max_timestamp
        offsets_before = self.offset_index.entries
        times_before = self.time_index.entries
        state_before = (self.bytes_since_last_index_entry, self._max_timestamp_so_far,
                        self._offset_of_max_timestamp_so_far)
        try:
            self.log.append(data)
            for b in batches:
                if b.max_timestamp > self._max_timestamp_so_far:
                    self._max_timestamp_so_far = b.max_timestamp
                    self._offset_of_max_timestamp_so_far = b.last_offset
                if self.bytes_since_last_index_entry > self.index_interval_bytes:
                    self.offset_index.append(b.last_offset, position)
                    self.time_index.maybe_append(self._max_timestamp_so_far,
                                                 self._offset_of_max_timestamp_so_far)
                    self.bytes_since_last_index_entry = 0
                position += b.size
                self.bytes_since_last_index_entry += b.size
        except BaseException:
            # Leave the segment exactly as it was before this append.
            if self.log.size > start_size:
                self.log.truncate_to(start_size)
            self._rolling_based_timestamp = rolling_before
            self._undo_append(offsets_before, times_before, state_before)
            raise

    def _ensure_index_files(self) -> None:
        if not self.offset_index.on_disk or not self.time_index.on_disk:
            self.offset_index.ensure_on_disk()
            self.time_index.ensure_on_disk()

    def _undo_append(self, offset_entries: int, time_entries: int, state) -> None:
        if self.offset_index.entries > offset_entries:
            self.offset_index.truncate_to(self.offset_index.entry(offset_entries).offset)
        if self.time_index.entries > time_entries:
            self.time_index.truncate_to(self.time_index.entry(time_entries).offset)
        (self.bytes_since_last_index_entry, self._max_timestamp_so_far,
         self._offset_of_max_timestamp_so_far) = state

    # ---- reading -------------------------------------------------------------------------
    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchLocation | None:
        """The first batch whose last offset is >= ``offset``: index lookup, then a scan.

        An index is trusted after a clean shutdown if it passes the sanity check, as in
        Kafka; an entry can still be corrupt in the middle. Each entry used is checked
        against the .log (its batch ends at its offset, which is not past the target):
        one read of a header the scan reads anyway, and a wrong entry costs a scan from
        the segment's start rather than a wrong answer."""
        return self.log.search_for_offset(offset, max(self._indexed_position(offset),
                                                      starting_position))

    def _indexed_position(self, offset: int) -> int:
        """Where the batches ending at or after ``offset`` start, at the latest (a checked
        offset index entry, else the segment's start)."""
        if self.indexes_distrusted:
            return 0
        mapping = self.offset_index.lookup(offset)
        position = mapping.position
        if position and not (mapping.offset <= offset
                             and self._batch_ends_at(position, mapping.offset)):
            self._distrust_indexes(f"{self.offset_index.path} maps offset {mapping.offset} "
                                   f"to position {position}, where no batch ending at it "
                                   f"starts")
            return 0
        return position

    def _batch_ends_at(self, position: int, last_offset: int) -> bool:
        header = self.log.read(position, RECORDS_OFFSET)
        return (len(header) == RECORDS_OFFSET and header[MAGIC_OFFSET] == MAGIC
                and _BASE_OFFSET.unpack_from(header)[0]
                + _I32.unpack_from(header, LAST_OFFSET_DELTA_OFFSET)[0] == last_offset)

    def _distrust_indexes(self, why: str) -> None:
        self.indexes_distrusted = True
        log.error("Corrupt index found: %s. Segment %s is read without its indexes until "
                  "they are rebuilt on the next open.", why, self.log.path)

    def read(self, start_offset: int, max_size: int, max_offset: int | None = None,
             min_one_message: bool = True, as_region: bool = False) -> FetchDataInfo | None:
        """Whole batches from the one containing ``start_offset``, at most ``max_size`` bytes
        (but at least one batch if ``min_one_message``), none with an offset >= max_offset.
        None if the segment holds nothing at or after ``start_offset``.

        ``as_region``: the bytes named, not read (a ``FileRegion``), cut where Kafka's
        LogSegment.read cuts without reading them: at ``max_offset``'s batch or after
        ``max_size`` bytes, so the last batch may be partial; ``next_offset`` is then not
        known without reading: an offset at or past the region's end from the offset index
        (Kafka's fetchUpperBoundOffset), or -1 (``Log.read_info`` bounds it)."""
        if max_size < 0:
            raise ValueError(f"Invalid max size {max_size} for log read from segment {self.log}")
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        if max_offset is not None and start.last_offset >= max_offset:
            return FetchDataInfo(start_offset, self.base_offset, start.position, b"",
                                 start.base_offset, start.base_offset)
        want = max(max_size, start.size) if min_one_message else max_size
        if as_region:
            end = self.log.size
            if max_offset is not None:
                stop = self.translate_offset(max_offset, start.position)
                if stop is not None:
                    end = stop.position
            size = min(want, end - start.position)
            upper = None if self.indexes_distrusted else \
                self.offset_index.fetch_upper_bound_offset(start.position + size)
            return FetchDataInfo(start_offset, self.base_offset, start.position,
                                 self.log.region(start.position, size) if size > 0 else b"",
                                 start.base_offset, -1 if upper is None else upper)
        data = self.log.read(start.position, want)
        end, next_offset = 0, start.base_offset
        for batch in iter_batches(data):
            if batch.position + batch.size_in_bytes > max_size and end > 0:
                break
            if batch.position + batch.size_in_bytes > want:
                break
            if max_offset is not None and batch.last_offset >= max_offset:
                break
            end = batch.position + batch.size_in_bytes
            next_offset = batch.last_offset + 1
        if len(data) != end:
            data = data[:end]
        return FetchDataInfo(start_offset, self.base_offset, start.position, data,
                             start.base_offset, next_offset)

    def read_next_offset(self) -> int:
        """The offset after the last batch of the segment (base offset if empty)."""
        next_offset = self.base_offset
        for loc in self.log.locations(self._indexed_position(2**63 - 1)):
            next_offset = loc.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int,
                                 starting_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with timestamp >= target, scanning from
        the time index's hint; decodes only the one batch that holds the answer."""
        hint: TimestampOffset = (TimestampOffset(NO_TIMESTAMP, self.base_offset)
                                 if self.indexes_distrusted
                                 else self.time_index.lookup(timestamp))
        start = self.translate_offset(max(hint.offset, starting_offset))
        if hint.offset > max(starting_offset, self.base_offset) and (
                start is None or hint.timestamp > timestamp
                or start.last_offset != hint.offset or start.max_timestamp != hint.timestamp):
            # An entry (T, O) says the batch ending at O has the largest timestamp so far,
            # T: checked, as offset index entries are.
            self._distrust_indexes(f"{self.time_index.path} maps timestamp {hint.timestamp} "
                                   f"to offset {hint.offset}, which no batch with that "
                                   f"largest timestamp ends at")
            start = self.translate_offset(starting_offset)
        if start is None:
            return None
        for pos, batch in self.log.batches(start.position, chunk_bytes=64 * 1024):
            if batch.max_timestamp >= timestamp:
                for record in batch.records():
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return record.timestamp, record.offset
        return None

    # ---- recovery and truncation ---------------------------------------------------------
    def recover(self, max_message_bytes: int,
                on_batch: Callable[[RecordBatch], None] | None = None) -> int:
        """Rebuild both indexes from the ``.log`` and cut off a torn or corrupt tail.
        Returns the number of bytes truncated."""
        self.offset_index.truncate()
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.truncate()
        self.time_index.resize(self.time_index.max_index_size)
        self.bytes_since_last_index_entry = 0
        self._max_timestamp_so_far = NO_TIMESTAMP
        self._offset_of_max_timestamp_so_far = self.base_offset
        self._rolling_based_timestamp = None
        expected_min = [self.base_offset]

        def rebuild(position: int, batch: RecordBatch) -> bool:
            last_offset = batch.last_offset
            if batch.base_offset < expected_min[0] or not self.can_convert_to_relative_offset(
                    last_offset):
                return False
            expected_min[0] = last_offset + 1
            if batch.max_timestamp > self._max_timestamp_so_far:
                self._max_timestamp_so_far = batch.max_timestamp
                self._offset_of_max_timestamp_so_far = last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(self._max_timestamp_so_far,
                                             self._offset_of_max_timestamp_so_far)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += batch.size_in_bytes
            if on_batch is not None:
                on_batch(batch)
            return True

        valid_end = self.log.valid_prefix(0, max_message_bytes, rebuild)
        truncated = self.log.truncate_to(valid_end)
        # Aborted transactions whose markers were cut off with a torn tail are no longer
        # here; the log's producer-state replay indexes any marker that is but lacks one.
        self.txn_index.truncate_to(expected_min[0])
        self.time_index.maybe_append(self._max_timestamp_so_far,
                                     self._offset_of_max_timestamp_so_far, skip_full_check=True)
        if self.log.size:
            # Records and no index file (lost, or a small segment's entries all in memory):
            # made now, or every later open would find it missing and recover again.
            self._ensure_index_files()
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed."""
        loc = self.translate_offset(offset)
        if loc is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        removed = self.log.truncate_to(loc.position)
        self.bytes_since_last_index_entry = 0
        if self.log.size == 0:
            self._rolling_based_timestamp = None
        self._reload_largest_timestamp()
        return removed

    def _reload_largest_timestamp(self) -> None:
        last = self.time_index.last_entry
        self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far = last
        start = self.offset_index.lookup(last.offset).position
        for loc in self.log.locations(start):
            if loc.max_timestamp > self._max_timestamp_so_far:
                self._max_timestamp_so_far = loc.max_timestamp
                self._offset_of_max_timestamp_so_far = loc.last_offset

    # ---- lifecycle -----------------------------------------------------------------------
    def on_become_inactive(self) -> None:
        """At roll: record the final time-index entry and trim the preallocated indexes."""
        self.time_index.maybe_append(self._max_timestamp_so_far,
                                     self._offset_of_max_timestamp_so_far, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def sanity_check(self, largest_timestamp: bool = True) -> None:
        """Kafka's index checks on open, and one more: the time index's last entry must be
        the segment's largest timestamp (the batch ending at its offset has it, no batch
        after has a larger one). The log reads that entry as the segment's largest
        timestamp to skip segments in a lookup by time, so a truncated or emptied time
        index would otherwise hide records. Reads the batches after that entry only: few
        when timestamps grow, as they mostly do."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        if not largest_timestamp:
            return
        try:
            self._check_largest_timestamp()
        except (CorruptRecordError, UnsupportedVersionError) as e:
            raise CorruptIndexError(f"Segment {self.log.path} does not read where its indexes "
                                    f"point: {e}") from None

    def _check_largest_timestamp(self) -> None:
        last = self.time_index.last_entry
        position = 0
        if self.time_index.entries:
            start = self.translate_offset(last.offset)
            if start is None or start.last_offset != last.offset \
                    or start.max_timestamp != last.timestamp:
                raise CorruptIndexError(
                    f"Time index file {self.time_index.path} is corrupt: its last entry maps "
                    f"timestamp {last.timestamp} to offset {last.offset}, where the log has "
                    f"no batch with that largest timestamp")
            position = start.position + start.size
        for loc in self.log.locations(position):
            if loc.max_timestamp > last.timestamp:
                raise CorruptIndexError(
                    f"Time index file {self.time_index.path} is corrupt: its last entry has "
                    f"timestamp {last.timestamp}, the batch at offset {loc.base_offset} "
                    f"{loc.max_timestamp}")

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def files(self) -> list[Path]:
        """The segment's files: its indexes once it took records, a ``.txnindex`` only
        on the first aborted transaction."""
        txn = [self.txn_index.path] if self.txn_index.path.exists() else []
        return [self.log.path, *(index.path for index in (self.offset_index, self.time_index)
                                 if index.on_disk), *txn]

    def change_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the segment's files, e.g. "" -> ".deleted" or ".swap" -> ""."""
        def renamed(path: Path) -> Path:
            name = path.name
            base = name[: len(name) - len(old_suffix)] if old_suffix else name
            return path.with_name(base + new_suffix)

        self.log.rename_to(renamed(self.log.path))
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def close(self) -> None:
        if self.log.closed:
            return
        if self.indexes_distrusted:
            self.offset_index.delete()    # rebuilt from the .log on the next open
            self.time_index.delete()
            self.log.close()
            return
        self.time_index.maybe_append(self._max_timestamp_so_far,
                                     self._offset_of_max_timestamp_so_far, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.log.close()

    def close_handlers(self) -> None:
        """Close files without touching their contents (before renaming or deleting)."""
        self.offset_index.close()
        self.time_index.close()
        self.log.close()

    def delete(self) -> None:
        self.close_handlers()
        for path in self.files():
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"

