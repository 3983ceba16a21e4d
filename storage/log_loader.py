"""LogLoader: a log's segments from its directory at open, after a clean or an unclean
shutdown (Kafka's LogLoader).

In order: files of unfinished work go (``.deleted`` deletions scheduled before the restart,
``.cleaned`` output of a compaction cut short, a ``.swap`` that may be incomplete); each
segment is opened and its indexes checked, rebuilt when missing or corrupt; a finished
``.swap`` replaces the segments it covers; after an unclean shutdown every segment from the
one holding the recovery point is re-validated and a torn tail cut off (with every segment
after it). The leader-epoch cache learns the epochs of re-validated batches and is cut to
the loaded log. The log's producer state is rebuilt by the log itself, after loading.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from protocols.errors import CorruptIndexError, KafkaStorageError
from protocols.records import RecordBatch
from storage.config import LogConfig
from storage.epoch import LeaderEpochFileCache
from storage.files import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX,
                           SWAP_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, offset_from_file,
                           segment_file)
from storage.log_segments import LogSegments
from storage.segment import LogSegment

log = logging.getLogger(__name__)

# new_segment(base_offset, suffix): a segment of this log opened with its config.
SegmentFactory = Callable[[int, str], LogSegment]

# What a segment leaves in the directory, finished or not.
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
                     DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)


@dataclass
class LoadedLog:
    """What loading found (Kafka's LoadedLogOffsets, with the segments)."""

    segments: LogSegments
    log_start_offset: int
    log_end_offset: int
    recovery_point: int


class LogLoader:
    def __init__(self, directory: Path, config: LogConfig, new_segment: SegmentFactory,
                 leader_epoch_cache: LeaderEpochFileCache):
        self.dir = directory
        self.config = config
        self.new_segment = new_segment
        self.leader_epoch_cache = leader_epoch_cache

    def load(self, recovery_point: int, log_start_offset: int,
             clean_shutdown: bool) -> LoadedLog:
        segments: dict[int, LogSegment] = {}
        # A new replica's directory holds no segment's file: nothing to clean up or load
        # (thousands of them open when a topic is created).
        if self._holds_segment_files():
            swap_files = self._remove_unfinished_work()
            segments = self._load_segments(None if clean_shutdown else recovery_point)
            self._complete_swaps(segments, swap_files)
        loaded = LogSegments(segments.values())
        if not clean_shutdown:
            self._recover_from(loaded, recovery_point)
        self._check_segment_order(loaded, gaps_allowed=self.config.compact)
        if not len(loaded):
            loaded.add(self.new_segment(max(log_start_offset, 0), ""))
        end = loaded.active.read_next_offset()
        recovery_point = (min(max(recovery_point, 0), end) if not clean_shutdown else end)
        for segment in loaded.values()[:-1]:
            segment.on_become_inactive()  # recovery preallocated their indexes
        loaded.active.resize_indexes(self.config.segment_index_bytes)
        start = min(max(log_start_offset, loaded[0].base_offset), end)
        self.leader_epoch_cache.truncate_from_end(end)
        self.leader_epoch_cache.truncate_from_start(start)
        return LoadedLog(loaded, start, end, recovery_point)

    def _holds_segment_files(self) -> bool:
        with os.scandir(self.dir) as entries:
            return any(entry.name.endswith(_SEGMENT_SUFFIXES) for entry in entries)

    def _remove_unfinished_work(self) -> list[Path]:
        """Delete the files of work a restart cut short; the ``.swap`` files to complete."""
        swap_files: list[Path] = []
        cleaned_offsets: list[int] = []
        for path in sorted(self.dir.iterdir()):
            name = path.name
            if not path.is_file():
                continue
            if name.endswith(DELETED_SUFFIX):
                path.unlink()  # a deletion that was scheduled before the restart
            elif name.endswith(CLEANED_SUFFIX):
                cleaned_offsets.append(offset_from_file(path))
                path.unlink()  # an unfinished compaction: it is simply redone later
            elif name.endswith(SWAP_SUFFIX):
                swap_files.append(path)
        # A .swap newer than an unfinished .cleaned may be incomplete (Kafka's rule).
        min_cleaned = min(cleaned_offsets, default=None)
        for path in list(swap_files):
            if min_cleaned is not None and offset_from_file(path) >= min_cleaned:
                path.unlink()
                swap_files.remove(path)
        return swap_files

    def _load_segments(self, recovery_point: int | None) -> dict[int, LogSegment]:
        """Every segment, its indexes checked (rebuilt when they fail). After an unclean
        shutdown (``recovery_point`` given) the segments from the one holding it are
        recovered next anyway: their time indexes, unfinished, are not held to the
        largest-timestamp check."""
        segments: dict[int, LogSegment] = {}
        cut_at = float("inf")
        paths = sorted(self.dir.glob(f"*{LOG_SUFFIX}"))
        bases = [offset_from_file(p) for p in paths]
        recovered_from = float("inf") if recovery_point is None else max(
            [b for b in bases if b <= recovery_point] or [min(bases, default=0)])
        for path, base in zip(paths, bases):
            index_missing = not segment_file(self.dir, base, INDEX_SUFFIX).exists()
            time_missing = not segment_file(self.dir, base, TIME_INDEX_SUFFIX).exists()
            segment = self.new_segment(base, "")
            # Index files are made when the segment first takes records (storage.index):
            # an empty segment's missing indexes are empty, not lost.
            needs_rebuild = (index_missing or time_missing) and segment.size > 0
            if not needs_rebuild:
                try:
                    segment.sanity_check(largest_timestamp=base < recovered_from)
                except CorruptIndexError as e:
                    log.warning("%s: rebuilding index of segment %d: %s", self.dir, base, e)
                    needs_rebuild = True
            if needs_rebuild:
                if segment.recover(self.config.max_message_bytes, self._on_recovered_batch):
                    # Its .log had a corrupt tail: what follows it cannot be reached without
                    # a gap in the offsets, as after a recovery that truncates.
                    cut_at = min(cut_at, base)
            segments[base] = segment
        for base in [b for b in segments if b > cut_at]:
            log.warning("%s: dropping segment %d, after segment %d whose corrupt tail was "
                        "truncated", self.dir, base, cut_at)
            segments.pop(base).delete()
        for suffix_path in (*self.dir.glob(f"*{INDEX_SUFFIX}"),
                            *self.dir.glob(f"*{TIME_INDEX_SUFFIX}"),
                            *self.dir.glob(f"*{TXN_INDEX_SUFFIX}")):
            if not segment_file(self.dir, offset_from_file(suffix_path), LOG_SUFFIX).exists():
                suffix_path.unlink()  # an index without its log is garbage
        return segments

    def _complete_swaps(self, segments: dict[int, LogSegment], swap_files: list[Path]) -> None:
        for path in swap_files:
            if not path.name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                continue
            base = offset_from_file(path)
            swap = self.new_segment(base, SWAP_SUFFIX)
            swap.recover(self.config.max_message_bytes)
            next_offset = swap.read_next_offset()
            for old_base in [b for b in segments if base <= b < max(next_offset, base + 1)]:
                segments.pop(old_base).delete()
            swap.change_suffixes(SWAP_SUFFIX, "")
            segments[base] = swap
        for path in self.dir.glob(f"*{SWAP_SUFFIX}"):
            path.unlink()  # index swaps whose log swap was handled (or never written)

    def _check_segment_order(self, segments: LogSegments, gaps_allowed: bool) -> None:
        """A segment starts where the one before it ends, unless compaction removed records
        (not on this log): a segment that ends short lost its tail (a .log emptied or cut
        behind the broker's back), and the segments after it are dropped, as after a
        recovery that truncates, rather than served across a gap of offsets. One that ends
        past the next one's start has batches whose offsets (outside their CRC, as in
        Kafka's format) were changed: the log is not opened (KAFKA_STORAGE_ERROR)."""
        for i, (segment, following) in enumerate(segments.with_next()):
            if following is None:
                return
            end = segment.read_next_offset()
            if end > following.base_offset:
                raise KafkaStorageError(
                    f"Segment {segment.log.path} ends at offset {end}, past the start of the "
                    f"next segment ({following.base_offset}): the offsets of its batches are "
                    f"corrupt")
            if end < following.base_offset and not gaps_allowed:
                later = segments.remove_after(i)
                log.warning("%s: segment %d ends at offset %d, before the next one starts "
                            "(%d): its tail was lost; dropping the %d segments after it",
                            self.dir, segment.base_offset, end, following.base_offset,
                            len(later))
                for dropped in later:
                    dropped.delete()
                return

    def _on_recovered_batch(self, batch: RecordBatch) -> None:
        epoch = batch.partition_leader_epoch
        latest = self.leader_epoch_cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            self.leader_epoch_cache.assign(epoch, batch.base_offset)

    def _recover_from(self, segments: LogSegments, recovery_point: int) -> None:
        for i in range(max(0, segments.floor_index(recovery_point)), len(segments)):
            segment = segments[i]
            truncated = segment.recover(self.config.max_message_bytes, self._on_recovered_batch)
            if truncated > 0:
                log.warning("%s: found invalid bytes at the end of segment %d; truncated %d "
                            "bytes and dropped %d later segments", self.dir,
                            segment.base_offset, truncated, len(segments) - i - 1)
                for later in segments.remove_after(i):
                    later.delete()
                break
