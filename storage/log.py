"""Log: a partition's ordered list of segments on one broker's disk (Kafka's UnifiedLog).

Kafka's split: ``log_loader`` opens the segments (and recovers them after a crash),
``log_validator`` checks appends and assigns the leader's offsets, ``log_segments`` keeps the
segments in order; the log holds the offsets (log start, log end, HW, recovery point) and
does appends, reads, truncation, retention, flushes and delayed deletion with them.

The log never decodes records on its hot paths: appends read batch headers, check CRC-32C and
sizes, patch baseOffset / partitionLeaderEpoch in place, and write; reads return whole batches
as bytes. Time comes from an injected clock; delayed file deletion is a list of due
deletions that the caller's scheduler runs (``delete_pending_segments``), so every decision
here is deterministic under test.
"""
from __future__ import annotations


import functools
import logging
import random
import shutil
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from protocols.compression import CODEC_NAMES
from protocols.control_records import (ABORT, COMMIT, EndTransactionMarker,
                                       end_txn_marker_batch)
from protocols.errors import InvalidOffsetError, KafkaStorageError, OffsetOutOfRangeError
from protocols.file_region import FileRegion
from protocols.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from protocols.records import LOG_OVERHEAD, iter_batches
from storage.checkpoint import LeaderEpochCheckpointFile
from storage.config import LogConfig
from storage.epoch import LeaderEpochFileCache
from storage.files import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LEADER_EPOCH_CHECKPOINT,
                           LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
                           segment_file)
from storage.log_dir_failure import LogDirFailureChannel
from storage.log_loader import LogLoader
from storage.log_segments import LogSegments
from storage.log_validator import assign_offsets, validate_as_leader, validate_batches
from storage.producer_state import CompletedTxn, ProducerStateManager, snapshot_path
from storage.segment import BatchInfo, FetchDataInfo, LogSegment
from storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)

Clock = Callable[[], int]
# schedule(delay_ms, fn): run fn later (a timer actor, a thread timer, or a test's fake).
Scheduler = Callable[[int, Callable[[], Any]], Any]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    shallow_count: int
    valid_bytes: int
    last_leader_epoch: int
    source_compression: str = "none"
    batch_infos: list = field(default_factory=list, repr=False)
    # A retried idempotent batch that was already in the log: nothing was appended.
    duplicate: bool = False


def _as_config(config: LogConfig | Mapping[str, Any] | None,
               broker: Mapping[str, Any] | None) -> LogConfig:
    if isinstance(config, LogConfig):
        return config
    return LogConfig.from_props(config or {}, broker=broker)



def _writes(action: str):
    """A log operation that writes. With a failure channel (a broker's logs): refused with
    KAFKA_STORAGE_ERROR once the log's directory is offline, and its first OSError takes
    the directory offline (``storage.log_dir_failure``), so nothing is appended after a
    torn write. Without one (tools, tests) errors pass as they are."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(self: "Log", *args, **kwargs):
            channel = self.failure_channel
            if channel is None:
                return fn(self, *args, **kwargs)
            log_dir = self.log_dir
            channel.check(log_dir)
            try:
                return fn(self, *args, **kwargs)
            except OSError as e:
                message = f"Error while {action} {self.name} in dir {log_dir}: {e}"
                channel.mark_offline(log_dir, message)
                raise KafkaStorageError(message) from e
        return run
    return wrap


class Log:
    """Open with ``Log.open(directory, config)``; see the module docstring."""

    def __init__(self, directory: Path, config: LogConfig, clock: Clock,
                 scheduler: Scheduler | None):
        self.dir = Path(directory)
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self._lock = threading.RLock()
        self._segments = LogSegments()
        self._pending_deletions: list[tuple[int, list[Path]]] = []
        # Truncations so far: a clean begun before one must not swap its copy in.
        self.truncations = 0
        self._random = random.Random()
        self.log_start_offset = 0
        self._log_end_offset = 0
        self.recovery_point = 0
        self._high_watermark = 0
        self.unflushed_messages = 0
        self.last_flush_ms = clock()
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT))
        self.producer_state = ProducerStateManager(self.dir)
        # Tests set this to raise at a named step and so simulate a crash there.
        self.fault_injector: Callable[[str], None] | None = None
        # The broker's: an I/O error takes the log directory offline (``_writes``). The
        # directory's name is kept as text: it is looked up on every append.
        self.failure_channel: LogDirFailureChannel | None = None
        self.log_dir = str(self.dir.parent)

    # ==== opening and recovery ============================================================
    @classmethod
    def open(cls, directory: Path | str, config: LogConfig | Mapping[str, Any] | None = None,
             *, broker_config: Mapping[str, Any] | None = None, recovery_point: int = 0,
             log_start_offset: int = 0, high_watermark: int | None = None,
             clean_shutdown: bool = False, clock: Clock | None = None,
             scheduler: Scheduler | None = None,
             failure_channel: LogDirFailureChannel | None = None) -> "Log":
        """Open (creating if needed) the log in ``directory``.

        After an unclean shutdown (the default, unless the caller knows better) every segment
        from the one holding ``recovery_point`` is re-validated and a torn tail cut off.
        ``failure_channel``: see ``_writes``; opening counts as writing (recovery does)."""
        directory = Path(directory)
        self = cls(directory, _as_config(config, broker_config), clock or wall_clock_ms,
                   scheduler)
        self.failure_channel = failure_channel
        self._create_and_load(recovery_point, log_start_offset, clean_shutdown)
        hw = self.log_start_offset if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, self.log_start_offset), self._log_end_offset)
        self.producer_state.on_high_watermark_updated(self._high_watermark)
        return self

    def _new_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        jitter = (self._random.randrange(self.config.segment_jitter_ms)
                  if self.config.segment_jitter_ms > 0 else 0)
        return LogSegment.open(self.dir, base_offset,
                               index_interval_bytes=self.config.index_interval_bytes,
                               max_index_size=self.config.segment_index_bytes,
                               rolling_jitter_ms=jitter, now_ms=self.clock(), suffix=suffix)

    @_writes("loading")
    def _create_and_load(self, recovery_point: int, log_start_offset: int,
                         clean_shutdown: bool) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._load(recovery_point, log_start_offset, clean_shutdown)

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        loaded = LogLoader(self.dir, self.config, self._new_segment,
                           self.leader_epoch_cache).load(recovery_point, log_start_offset,
                                                         clean_shutdown)
        self._segments = loaded.segments
        self._log_end_offset = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self.log_start_offset = loaded.log_start_offset
        self._rebuild_producer_state(self._log_end_offset)

    def _rebuild_producer_state(self, end_offset: int) -> None:
        """The newest producer-state snapshot at or below ``end_offset``, then the batches
        after it (headers only)."""
        state = self.producer_state
        offset = max(state.load(end_offset), self.log_start_offset)
        while offset < end_offset:
            info = self.read_info(offset, 1 << 20, max_offset=end_offset)
            if not info.records:
                break
            for batch in iter_batches(info.records):
                self._complete_txn(state.update_from_batch(batch), replay=True)
            offset = info.next_offset
        state.map_end_offset = end_offset
        state.on_high_watermark_updated(self._high_watermark)

    def _complete_txn(self, completed: CompletedTxn | None, replay: bool = False) -> None:
        """A transaction a marker just ended: an aborted one is indexed in the segment
        holding its marker, with the LSO it leaves (Kafka's UnifiedLog: lastStableOffset,
        updateTxnIndex, completeTxn). A replay indexes only what is not indexed yet."""
        if completed is None:
            return
        state = self.producer_state
        if completed.is_aborted:
            segment = self.segment_for(completed.last_offset)
            index = segment.txn_index if segment is not None else None
            if index is not None and not (replay and index.last_offset is not None
                                          and index.last_offset >= completed.last_offset):
                index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                        completed.last_offset,
                                        state.last_stable_offset(completed)))
        state.complete_txn(completed)

    # ==== facts ===========================================================================
    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction still open here (None: none)."""
        return self.producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """The LSO (the seeds' 最后稳定偏移量): the first unstable offset when it is below the
        high watermark, else the high watermark. read_committed reads stop here."""
        first = self.producer_state.first_unstable_offset()
        return first if first is not None and first < self._high_watermark \
            else self._high_watermark

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int
                                     ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, what
        a read_committed fetch answers with (Kafka's LocalLog.collectAbortedTransactions):
        from the segment holding ``start_offset`` on, until one's index says no later
        segment can hold more."""
        found: list[AbortedTxn] = []
        with self._lock:
            segments = self._segments.from_floor(start_offset)
        # Every later segment too: a transaction's marker, and so its entry, may lie well
        # past the range (the search ends at an entry whose LSO reaches the bound).
        for segment in segments:
            result = segment.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
            found += result.aborted_transactions
            if result.is_complete:
                break
        return found

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def segments(self) -> list[LogSegment]:
        return self._segments.values()

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size(self) -> int:
        return self._segments.size_in_bytes

    @property
    def name(self) -> str:
        return self.dir.name

    def update_config(self, props: LogConfig | Mapping[str, Any]) -> None:
        self.config = _as_config(props, None)

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW (kept within [log start, LEO]); the replica layer decides its value."""
        with self._lock:
            self._high_watermark = min(max(offset, self.log_start_offset), self._log_end_offset)
            self.producer_state.on_high_watermark_updated(self._high_watermark)
            return self._high_watermark

    def segment_for(self, offset: int) -> LogSegment | None:
        return self._segments.floor(offset)

    # ==== appends =========================================================================
    @_writes("appending records to")
    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int,
                         *, now_ms: int | None = None) -> LogAppendInfo:
        """Validate producer batches, assign offsets from the log end offset, stamp the
        leader epoch (and LogAppendTime if configured), and append."""
        now = self.clock() if now_ms is None else now_ms
        buf = bytearray(records)  # patched in place; the caller's bytes stay untouched
        buf, batches = validate_as_leader(buf, self.config, self.name)
        append_time = now if self.config.log_append_time else -1
        with self._lock:
            duplicate = self.producer_state.check_append(h for _, h in batches)
            if duplicate is not None:
                # A retry of a batch we already have: answer its original offsets.
                return LogAppendInfo(duplicate.first_offset, duplicate.last_offset,
                                     duplicate.timestamp, duplicate.last_offset,
                                     -1, self.log_start_offset, 0, 0, 0,
                                     leader_epoch, duplicate=True)
            first = self._log_end_offset
            infos, records = assign_offsets(buf, batches, first, leader_epoch, append_time)
            return self._append(buf, infos, first, ((leader_epoch, first),), records, now,
                                append_time, batches[0][1].attributes)

    @_writes("appending a transaction marker to")
    def append_end_txn_marker(self, producer_id: int, producer_epoch: int,
                              coordinator_epoch: int, commit: bool, leader_epoch: int,
                              *, now_ms: int | None = None) -> LogAppendInfo:
        """End the producer's transaction here with a COMMIT or ABORT marker: what the
        leader writes at the transaction coordinator's request (Kafka's WriteTxnMarkers),
        never a client. A marker of an older producer epoch is refused
        (INVALID_PRODUCER_EPOCH), as is one from an older coordinator
        (TRANSACTION_COORDINATOR_FENCED)."""
        now = self.clock() if now_ms is None else now_ms
        marker = EndTransactionMarker(COMMIT if commit else ABORT, coordinator_epoch)
        buf = bytearray(end_txn_marker_batch(marker, producer_id, producer_epoch,
                                             timestamp_ms=now))
        batches = validate_batches(buf, self.config, self.name, leader=False)
        append_time = now if self.config.log_append_time else -1
        with self._lock:
            self.producer_state.check_end_txn_marker(producer_id, producer_epoch,
                                                     coordinator_epoch)
            first = self._log_end_offset
            infos, records = assign_offsets(buf, batches, first, leader_epoch, append_time)
            return self._append(buf, infos, first, ((leader_epoch, first),), records, now,
                                append_time, batches[0][1].attributes)

    @_writes("appending records to")
    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches fetched from the leader verbatim, keeping the leader's offsets."""
        buf = records if isinstance(records, (bytes, bytearray)) else bytes(records)
        batches = validate_batches(buf, self.config, self.name, leader=False)
        with self._lock:
            if not batches:
                return self._empty_info()
            expected = self._log_end_offset
            infos: list[BatchInfo] = []
            epochs: list[tuple[int, int]] = []
            records = 0
            for _, h in batches:
                last = h.base_offset + h.last_offset_delta
                if h.base_offset < expected or last < h.base_offset:
                    raise InvalidOffsetError(
                        f"Out of order offsets in append to {self.name}: batch "
                        f"[{h.base_offset}, {last}] where the next offset must be at least "
                        f"{expected}")
                expected = last + 1
                infos.append(BatchInfo(last, h.max_timestamp, h.batch_length + LOG_OVERHEAD))
                epochs.append((h.partition_leader_epoch, h.base_offset))
                records += h.record_count
            return self._append(buf, infos, batches[0][1].base_offset, epochs, records,
                                self.clock(), -1, batches[0][1].attributes)

    def _empty_info(self) -> LogAppendInfo:
        return LogAppendInfo(-1, -1, -1, -1, -1, self.log_start_offset, 0, 0, 0, -1)

    def _append(self, buf: bytes | bytearray, infos: list[BatchInfo], first_offset: int,
                epoch_starts, records: int, now: int, log_append_time: int,
                first_attributes: int) -> LogAppendInfo:
        max_ts, offset_of_max_ts = -1, -1
        for info in infos:
            if info.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = info.max_timestamp, info.last_offset
        last_offset = infos[-1].last_offset
        segment = self._maybe_roll(len(buf), max_ts, first_offset, last_offset, now)
        segment.append(buf, infos)
        self._log_end_offset = last_offset + 1
        for batch in iter_batches(buf):
            self._complete_txn(self.producer_state.update_from_batch(batch))
        cache = self.leader_epoch_cache
        for epoch, start in epoch_starts:
            if epoch >= 0:
                latest = cache.latest_epoch
                if latest is None or epoch > latest:
                    cache.assign(epoch, start)
        self.unflushed_messages += records
        if (self.unflushed_messages >= self.config.flush_messages
                or now - self.last_flush_ms >= self.config.flush_ms):
            self.flush()
        return LogAppendInfo(first_offset, last_offset, max_ts, offset_of_max_ts,
                             log_append_time, self.log_start_offset, records, len(infos),
                             len(buf), epoch_starts[-1][0],
                             CODEC_NAMES[first_attributes & 0x07], infos)

    # ==== rolling =========================================================================
    def _maybe_roll(self, messages_size: int, max_timestamp: int, first_offset: int,
                    last_offset: int, now: int) -> LogSegment:
        segment = self.active_segment
        if segment.should_roll(segment_bytes=self.config.segment_bytes,
                               segment_ms=self.config.segment_ms, messages_size=messages_size,
                               max_timestamp_in_messages=max_timestamp,
                               max_offset_in_messages=last_offset, now_ms=now):
            return self.roll(first_offset)
        return segment

    @_writes("rolling a segment of")
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        with self._lock:
            new_offset = max(expected_next_offset or 0, self._log_end_offset)
            active = self.active_segment
            if active.base_offset == new_offset:
                if active.size == 0:
                    # An empty active segment already starts there: nothing to roll.
                    return active
                raise InvalidOffsetError(_roll_error(self.name, new_offset))
            if new_offset < active.base_offset:
                raise InvalidOffsetError(_roll_error(self.name, new_offset))
            active.on_become_inactive()
            self.producer_state.map_end_offset = self._log_end_offset
            self.producer_state.take_snapshot()
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                stale = segment_file(self.dir, new_offset, suffix)
                if stale.exists():
                    log.warning("%s: removing stale file %s before roll", self.dir, stale)
                    stale.unlink()
            segment = self._new_segment(new_offset)
            self._segments.add(segment)
            return segment

    # ==== reads ===========================================================================
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> bytes:
        """Whole batches from the one holding ``offset``: at most ``max_bytes`` (at least
        one batch if ``min_one_message``), none reaching ``max_offset`` (the HW for
        consumers)."""
        return self.read_info(offset, max_bytes, max_offset, min_one_message).records

    def read_info(self, offset: int, max_bytes: int, max_offset: int | None = None,
                  min_one_message: bool = True, as_region: bool = False) -> FetchDataInfo:
        """``read``'s answer with where it was read; ``as_region``: named, not read, as
        ``LogSegment.read`` says, its ``next_offset`` an offset at or past the region's end
        (the offset index's bound, else the next segment's base offset or the log end)."""
        segments = self._segments
        leo = self._log_end_offset
        if offset == leo or (max_offset is not None and offset >= max_offset
                             and offset <= leo and offset >= self.log_start_offset):
            return FetchDataInfo(offset, segments.active.base_offset, -1, b"", offset, offset)
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"Received request for offset {offset} for partition {self.name}, but we only "
                f"have log segments in the range {self.log_start_offset} to {leo}.")
        following = segments.from_floor(offset)
        for i, segment in enumerate(following):
            info = segment.read(offset, max_bytes, max_offset, min_one_message, as_region)
            if info is not None and isinstance(info.records, FileRegion):
                # Where the segment ends: past the region's end offset, which is not known
                # without reading (it bounds a read_committed fetch's aborted transactions
                # where the offset index does not).
                upper = following[i + 1].base_offset if i + 1 < len(following) else leo
                region = info.records
                if (max_offset is not None and max_offset < upper
                        and region.position + region.size == segment.log.size):
                    # The limit is inside this segment, yet the region runs to its end: the
                    # scan for the limit's batch stopped short (a damaged header). A read
                    # stops at the damage; so must what is sent.
                    return segment.read(offset, max_bytes, max_offset, min_one_message)
                if info.next_offset < 0:
                    info = replace(info, next_offset=upper)
            if info is not None:
                return info
        return FetchDataInfo(offset, segments.active.base_offset, -1, b"", offset, offset)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp`` (ListOffsets by time);
        the sentinels of ``protocols.messages`` mean earliest, latest (the log end here) and
        the largest timestamp, as in Kafka's ListOffsets. None if no such record."""
        found = self.fetch_offset_by_timestamp(timestamp)
        return None if found is None else found[1]

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        if timestamp == EARLIEST_TIMESTAMP:
            return (-1, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return (-1, self._log_end_offset)
        if timestamp == MAX_TIMESTAMP:
            best = None
            for s in self._segments:
                if s.max_timestamp_so_far >= 0 and (best is None or
                                                    s.max_timestamp_so_far > best[0]):
                    best = (s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far)
            return best
        for segment in self._segments:
            if segment.largest_timestamp < timestamp or segment.max_timestamp_so_far < 0:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
        return None

    # ==== truncation (follower) ===========================================================
    @_writes("truncating")
    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at and after ``target_offset``. Returns False if there was
        nothing to remove."""
        if target_offset < 0:
            raise ValueError(f"Cannot truncate {self.name} to a negative offset "
                             f"({target_offset})")
        with self._lock:
            if target_offset >= self._log_end_offset:
                return False
            if target_offset < self._segments[0].base_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            self.truncations += 1
            doomed = [s for s in self._segments if s.base_offset > target_offset]
            for s in doomed:
                self._segments.remove(s)
            self._schedule_deletion(doomed)
            active = self.active_segment
            loc = active.translate_offset(target_offset)
            active.truncate_to(target_offset)
            active.resize_indexes(self.config.segment_index_bytes)
            # A batch straddling the target is removed whole; the log then ends before it.
            new_end = target_offset if loc is None or loc.base_offset >= target_offset \
                else loc.base_offset
            new_end = max(new_end, active.base_offset)
            self._log_end_offset = new_end
            self.leader_epoch_cache.truncate_from_end(new_end)
            self.log_start_offset = min(self.log_start_offset, new_end)
            self.recovery_point = min(self.recovery_point, new_end)
            self._high_watermark = min(self._high_watermark, new_end)
            self._rebuild_producer_state(new_end)
            return True

    @_writes("truncating")
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Drop every segment and restart the log, empty, at ``new_offset``."""
        with self._lock:
            self.truncations += 1
            self._schedule_deletion(self._segments.clear())
            self._segments.add(self._new_segment(new_offset))
            self.leader_epoch_cache.clear_and_flush()
            self.log_start_offset = self._log_end_offset = new_offset
            self.recovery_point = self._high_watermark = new_offset
            for o in self.producer_state.snapshot_offsets():
                snapshot_path(self.dir, o).unlink(missing_ok=True)
            self.producer_state.clear(new_offset)

    # ==== retention =======================================================================
    @_writes("deleting segments of")
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention: by time and size when ``cleanup.policy`` includes delete, and
        always by log start offset. Returns the number of segments deleted."""
        now = self.clock() if now_ms is None else now_ms
        deleted = 0
        cfg = self.config
        if cfg.delete:
            if cfg.retention_ms >= 0:
                deleted += self._delete_matching(
                    lambda seg, nxt: now - seg.largest_timestamp > cfg.retention_ms,
                    "retention time")
            if cfg.retention_bytes >= 0:
                deleted += self._delete_retention_size_breached()
        deleted += self._delete_matching(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
            "log start offset")
        self.delete_pending_segments(now)
        return deleted

    def _delete_retention_size_breached(self) -> int:
        diff = self.size - self.config.retention_bytes
        if diff <= 0:
            return 0
        remaining = [diff]

        def breached(seg: LogSegment, nxt: LogSegment | None) -> bool:
            if remaining[0] - seg.size >= 0:
                remaining[0] -= seg.size
                return True
            return False

        return self._delete_matching(breached, "retention size")

    def _delete_matching(self, predicate: Callable[[LogSegment, LogSegment | None], bool],
                         reason: str) -> int:
        with self._lock:
            deletable: list[LogSegment] = []
            for seg, nxt in self._segments.with_next():
                upper = nxt.base_offset if nxt is not None else self._log_end_offset
                last_and_empty = nxt is None and seg.size == 0
                if self._high_watermark >= upper and not last_and_empty and predicate(seg, nxt):
                    deletable.append(seg)
                else:
                    break
            if not deletable:
                return 0
            if len(deletable) == len(self._segments):
                # Every segment expired: roll a fresh active segment first (Kafka).
                self.roll()
            for seg in deletable:
                self._segments.remove(seg)
            log.info("%s: deleting %d segment(s) due to %s: %s", self.dir, len(deletable),
                     reason, [s.base_offset for s in deletable])
            self._schedule_deletion(deletable)
            self._increment_log_start_offset(self._segments[0].base_offset)
            return len(deletable)

    @_writes("deleting records of")
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the HW)."""
        with self._lock:
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"Cannot increment the log start offset to {offset} of partition "
                    f"{self.name} since it is larger than the high watermark "
                    f"{self._high_watermark}")
            self._increment_log_start_offset(offset)
            return self.log_start_offset

    def _increment_log_start_offset(self, new_start: int) -> None:
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self.recovery_point = max(self.recovery_point, new_start)
            self.producer_state.delete_snapshots_below(self._segments[0].base_offset)

    # ==== delayed file deletion ===========================================================
    def _schedule_deletion(self, segments: Iterable[LogSegment]) -> None:
        """Rename to ``.deleted`` now; remove from disk file.delete.delay.ms later."""
        paths: list[Path] = []
        for seg in segments:
            seg.change_suffixes("", DELETED_SUFFIX)
            seg.close_handlers()
            paths.extend(seg.files())
        if not paths:
            return
        if self.fault_injector:
            self.fault_injector("segments.renamed-deleted")
        delay = self.config.file_delete_delay_ms
        self._pending_deletions.append((self.clock() + delay, paths))
        if self.scheduler is not None:
            self.scheduler(delay, self.delete_pending_segments)

    @_writes("deleting segments of")
    def delete_pending_segments(self, now_ms: int | None = None) -> int:
        """Remove the ``.deleted`` files whose delay has passed; returns files removed."""
        now = self.clock() if now_ms is None else now_ms
        removed = 0
        keep = []
        for due, paths in self._pending_deletions:
            if due <= now:
                for p in paths:
                    if p.exists():
                        p.unlink()
                        removed += 1
            else:
                keep.append((due, paths))
        self._pending_deletions = keep
        return removed

    @property
    def pending_deletions(self) -> list[Path]:
        return [p for _, paths in self._pending_deletions for p in paths]

    # ==== compaction support ==============================================================
    @_writes("cleaning")
    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty segment whose files carry the ``.cleaned`` suffix (compaction output)."""
        return self._new_segment(base_offset, suffix=CLEANED_SUFFIX)

    @_writes("replacing segments of")
    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment],
                         truncations: int) -> bool:
        """Swap cleaned segments (files suffixed ``.cleaned``) in for ``old_segments``,
        crash-safely: .cleaned -> .swap, old -> .deleted, .swap -> final name. A crash
        between any two steps is completed or rolled back by ``_load``. ``truncations``:
        the log's count when the cleaner began; if it was truncated since (a follower's
        truncation can reach below the high watermark), the copy is deleted instead, as
        it may hold records the truncation removed (Kafka aborts such a clean). Whether
        it was swapped in."""
        with self._lock:
            if truncations != self.truncations:
                for seg in new_segments:
                    seg.delete()
                return False
            new_segments = sorted(new_segments, key=lambda s: s.base_offset)
            for seg in new_segments:
                seg.change_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            if self.fault_injector:
                self.fault_injector("replace.swap-renamed")
            live = [s for s in old_segments if self.segment_for(s.base_offset) is s]
            for s in live:
                self._segments.remove(s)
            self._schedule_deletion(live)
            if self.fault_injector:
                self.fault_injector("replace.old-deleted")
            for seg in new_segments:
                seg.change_suffixes(SWAP_SUFFIX, "")
                self._segments.add(seg)
            return True

    # ==== flushing ========================================================================
    @_writes("flushing")
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding data below ``offset`` (default: everything) and move
        the recovery point there."""
        with self._lock:
            upto = self._log_end_offset if offset is None else min(offset,
                                                                    self._log_end_offset)
            if upto <= self.recovery_point and offset is not None:
                return
            for seg, nxt in self._segments.with_next():
                if nxt is not None and nxt.base_offset <= self.recovery_point:
                    continue  # already flushed before the recovery point
                if seg.base_offset >= upto:
                    break
                seg.flush()
            # Recovery re-reads only what follows the recovery point: a new epoch's entry
            # must be on disk before the point passes its start (``storage.epoch``).
            self.leader_epoch_cache.flush_if_dirty()
            self.recovery_point = max(self.recovery_point, upto)
            self.unflushed_messages = 0
            self.last_flush_ms = self.clock()

    @_writes("flushing")
    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """The periodic flusher's check (flush.ms)."""
        now = self.clock() if now_ms is None else now_ms
        if self.unflushed_messages and now - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # ==== lifecycle =======================================================================
    @_writes("closing")
    def close(self) -> None:
        with self._lock:
            for seg in self._segments:
                seg.flush()
                seg.close()
            self.leader_epoch_cache.flush_if_dirty()
            self.recovery_point = self._log_end_offset
            self.producer_state.map_end_offset = self._log_end_offset
            self.producer_state.take_snapshot()

    @_writes("deleting")
    def delete(self) -> None:
        """Remove the whole partition directory (topic deletion)."""
        with self._lock:
            for seg in self._segments.clear():
                seg.close_handlers()
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log({self.dir}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self._log_end_offset}, segments={len(self._segments)})")


def _roll_error(name: str, offset: int) -> str:
    return (f"Trying to roll a new log segment for {name} at offset {offset} which is not "
            "after the active segment")
