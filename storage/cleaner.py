"""Log compaction (``cleanup.policy=compact``): keep the latest record for every key.

One pass over a log (Kafka's Cleaner.doClean):

1. The cleanable range is [first dirty offset, first uncleanable offset): the uncleanable
   part starts at the active segment, the high watermark, or the first segment younger than
   ``min.compaction.lag.ms``, whichever comes first.
2. An offset map (key -> latest offset) is built over the dirty range.
3. Segments from the start of the log to the end of the dirty range are rewritten in groups
   no larger than ``segment.bytes``: a record survives if no later record has its key.
   Offsets are preserved (gaps appear), batch headers are kept, and each batch keeps its
   last offset so the log's next offsets do not move.
4. Each group is written to ``.cleaned`` files and swapped in with ``Log.replace_segments``
   (.cleaned -> .swap -> old segments .deleted -> final names), so a crash between any two
   steps recovers on the next ``Log.open``.

Tombstones (null values) survive the pass that first cleans them; afterwards they are
removed once the segment holding them has no record newer than now - delete.retention.ms
(the record-time variant of Kafka's delete horizon, deterministic under an injected clock).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protocols.records import Record, RecordBatch, encode_batch
from storage.files import (CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
                           segment_file)
from storage.log import Log
from storage.segment import BatchInfo, LogSegment

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
DEFAULT_MAX_MAP_ENTRIES = 4_000_000


@dataclass
class CleanerStats:
    first_dirty_offset: int = 0
    end_offset: int = 0  # the next first dirty offset
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    invalid_records_removed: int = 0
    segments_cleaned: int = 0
    groups: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class CleanableRange:
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


class AbortedTransactions:
    """Which data batches belong to aborted transactions, met in offset order (Kafka's
    CleanedTransactionMetadata): from the aborted transactions every segment's
    ``.txnindex`` lists (an entry sits in its marker's segment, which may come after the
    transaction's data). A compaction neither counts their keys as the latest nor keeps
    their records; the markers stay."""

    def __init__(self, log_: Log):
        self._pending = sorted((t.first_offset, t.producer_id, t.last_offset)
                               for seg in log_.segments
                               for t in seg.txn_index.all_aborted_txns())
        self._next = 0
        self._open: dict[int, int] = {}   # producer id -> its aborted transaction's marker

    def contains(self, batch: RecordBatch) -> bool:
        while self._next < len(self._pending) \
                and self._pending[self._next][0] <= batch.base_offset:
            _, producer_id, marker = self._pending[self._next]
            self._open[producer_id] = marker
            self._next += 1
        marker = self._open.get(batch.producer_id)
        if marker is None:
            return False
        if batch.base_offset >= marker:
            del self._open[batch.producer_id]   # the marker itself, or past it
            return False
        return batch.is_transactional and not batch.is_control


def cleanable_range(log_: Log, first_dirty_offset: int | None,
                    now_ms: int) -> CleanableRange:
    segments = log_.segments
    first_dirty = log_.log_start_offset if first_dirty_offset is None else first_dirty_offset
    if first_dirty < log_.log_start_offset or first_dirty > log_.log_end_offset:
        first_dirty = log_.log_start_offset  # the log moved under the checkpoint
    uncleanable = min(log_.active_segment.base_offset, log_.high_watermark)
    # Nothing from an open transaction's first offset on: its records may yet be aborted
    # (Kafka's firstUnstableOffset bound).
    if log_.first_unstable_offset is not None:
        uncleanable = min(uncleanable, log_.first_unstable_offset)
    lag = log_.config.min_compaction_lag_ms
    if lag > 0:
        for seg in segments:
            if seg.base_offset >= uncleanable:
                break
            if seg.largest_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    first_dirty = min(first_dirty, uncleanable)
    clean = dirty = 0
    for i, seg in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else log_.log_end_offset
        if nxt <= first_dirty:
            clean += seg.size
        elif nxt <= uncleanable:
            dirty += seg.size
    return CleanableRange(first_dirty, uncleanable, clean, dirty)


class Cleaner:
    def __init__(self, max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES):
        self.max_map_entries = max_map_entries

    def needs_cleaning(self, log_: Log, first_dirty_offset: int | None,
                       now_ms: int | None = None) -> bool:
        """The dirty ratio reached ``min.cleanable.dirty.ratio``, or a dirty record waited
        longer than ``max.compaction.lag.ms``."""
        if not log_.config.compact:
            return False
        now = log_.clock() if now_ms is None else now_ms
        r = cleanable_range(log_, first_dirty_offset, now)
        if r.dirty_bytes == 0:
            return False
        if r.dirty_ratio >= log_.config.min_cleanable_dirty_ratio:
            return True
        max_lag = log_.config.max_compaction_lag_ms
        for seg in log_.segments:
            if seg.base_offset >= r.first_uncleanable_offset:
                break
            if seg.base_offset >= r.first_dirty_offset:
                first_ts = seg.rolling_based_timestamp()
                if first_ts is not None and 0 <= first_ts < now - max_lag:
                    return True
        return False

    # ---- one pass ------------------------------------------------------------------------
    def clean(self, log_: Log, first_dirty_offset: int | None = None,
              now_ms: int | None = None) -> CleanerStats:
        now = log_.clock() if now_ms is None else now_ms
        truncations = log_.truncations
        r = cleanable_range(log_, first_dirty_offset, now)
        stats = CleanerStats(first_dirty_offset=r.first_dirty_offset,
                             end_offset=r.first_dirty_offset)
        if r.first_uncleanable_offset <= r.first_dirty_offset:
            return stats
        offset_map, map_end = self._build_offset_map(log_, r, stats)
        stats.end_offset = map_end
        horizon = now - log_.config.delete_retention_ms
        to_clean = [s for s in self._segments_below(log_, map_end)]
        for group in self._group_by_size(log_, to_clean):
            if not self._clean_group(log_, group, offset_map, r.first_dirty_offset, horizon,
                                     stats, truncations):
                # Truncated meanwhile: the pass stops, and the next starts where this did.
                stats.end_offset = r.first_dirty_offset
                break
        return stats

    @staticmethod
    def _segments_below(log_: Log, end_offset: int) -> list[LogSegment]:
        segments = log_.segments
        out = []
        for i, seg in enumerate(segments):
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if nxt is None or nxt > end_offset:
                break
            out.append(seg)
        return out

    def _build_offset_map(self, log_: Log, r: CleanableRange,
                          stats: CleanerStats) -> tuple[dict[bytes, int], int]:
        """key -> latest offset over the dirty range; stops at a segment boundary if the map
        fills (Kafka's dedupe buffer), and returns where it stopped."""
        offset_map: dict[bytes, int] = {}
        segments = log_.segments
        end = r.first_dirty_offset
        aborted = AbortedTransactions(log_)
        for i, seg in enumerate(segments):
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else log_.log_end_offset
            if nxt <= r.first_dirty_offset:
                continue
            if nxt > r.first_uncleanable_offset:
                break
            if offset_map and len(offset_map) >= self.max_map_entries:
                break
            for _, batch in seg.log.batches():
                if aborted.contains(batch) or batch.is_control:
                    continue
                for record in batch.records():
                    if record.offset >= r.first_dirty_offset and record.key is not None:
                        offset_map[record.key] = record.offset
            end = nxt
        return offset_map, end

    @staticmethod
    def _group_by_size(log_: Log, segments: list[LogSegment]) -> list[list[LogSegment]]:
        """Consecutive segments whose total size fits one segment and whose offsets fit a
        relative offset from the group's base (Kafka's groupSegmentsBySize)."""
        groups: list[list[LogSegment]] = []
        max_size = log_.config.segment_bytes
        all_segments = log_.segments
        i = 0
        while i < len(segments):
            group = [segments[i]]
            size = segments[i].size
            i += 1
            while i < len(segments):
                seg = segments[i]
                pos = all_segments.index(seg)
                nxt = (all_segments[pos + 1].base_offset if pos + 1 < len(all_segments)
                       else log_.log_end_offset)
                if size + seg.size > max_size or nxt - 1 - group[0].base_offset > INT_MAX:
                    break
                group.append(seg)
                size += seg.size
                i += 1
            groups.append(group)
        return groups

    def _clean_group(self, log_: Log, group: list[LogSegment], offset_map: dict[bytes, int],
                     first_dirty: int, horizon: int, stats: CleanerStats,
                     truncations: int) -> bool:
        base = group[0].base_offset
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            segment_file(log_.dir, base, suffix, CLEANED_SUFFIX).unlink(missing_ok=True)
        cleaned = log_.new_cleaned_segment(base)
        try:
            for seg in group:
                # Offsets stay, and markers are kept: the aborted transactions stay indexed.
                for txn in seg.txn_index.all_aborted_txns():
                    cleaned.txn_index.append(txn)
            aborted = AbortedTransactions(log_)
            for seg_index, seg in enumerate(group):
                drop_tombstones = seg.largest_timestamp <= horizon
                batches = list(seg.log.batches())
                for b_index, (_, batch) in enumerate(batches):
                    is_last = seg_index == len(group) - 1 and b_index == len(batches) - 1
                    stats.bytes_read += batch.size_in_bytes
                    if aborted.contains(batch):
                        # An aborted transaction's records go (the last batch of the group
                        # stays whole: it keeps the segment's last offset).
                        data = bytes(batch.buffer) if is_last else None
                    else:
                        data = self._filter_batch(batch, offset_map, first_dirty,
                                                  drop_tombstones, is_last, stats)
                    if data is None:
                        continue
                    info = BatchInfo(batch.last_offset, batch.max_timestamp, len(data))
                    cleaned.append(data, [info])
                    stats.bytes_written += len(data)
                    if log_.fault_injector:
                        log_.fault_injector("clean.writing")
            cleaned.on_become_inactive()
            cleaned.flush()
        except BaseException:
            cleaned.close_handlers()
            raise
        if not log_.replace_segments([cleaned], group, truncations):
            log.info("%s: truncated while segments %s were cleaned: the copy dropped",
                     log_.dir, [s.base_offset for s in group])
            return False
        stats.segments_cleaned += len(group)
        stats.groups.append([s.base_offset for s in group])
        log.info("%s: cleaned segments %s into %d bytes", log_.dir,
                 [s.base_offset for s in group], cleaned.size)
        return True

    @staticmethod
    def _filter_batch(batch: RecordBatch, offset_map: dict[bytes, int], first_dirty: int,
                      drop_tombstones: bool, keep_if_empty: bool,
                      stats: CleanerStats) -> bytes | None:
        if batch.is_control:
            return bytes(batch.buffer)
        retained: list[Record] = []
        count = 0
        for record in batch.records():
            count += 1
            key = record.key
            if key is None:
                stats.invalid_records_removed += 1
                continue
            latest = offset_map.get(key)
            if latest is not None and record.offset < latest:
                continue
            if record.value is None and drop_tombstones and record.offset < first_dirty:
                stats.tombstones_removed += 1
                continue
            retained.append(record)
        stats.records_read += count
        stats.records_retained += len(retained)
        if len(retained) == count:
            return bytes(batch.buffer)  # nothing removed: copy the batch verbatim
        if not retained and not keep_if_empty:
            return None
        # An emptied last batch stays (with no records) so the segment still ends at the
        # same offset and the swap covers every segment it replaces.
        return encode_batch(retained, base_offset=batch.base_offset,
                            compression=batch.compression, timestamp_type=batch.timestamp_type,
                            producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                            base_sequence=batch.base_sequence,
                            partition_leader_epoch=batch.partition_leader_epoch,
                            transactional=batch.is_transactional,
                            last_offset_delta=batch.last_offset_delta)
