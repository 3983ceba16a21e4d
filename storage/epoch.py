"""The leader-epoch cache (Kafka's LeaderEpochFileCache, KIP-101 / KIP-279).

An ordered list of (epoch, start offset): the first offset each leader epoch wrote. A new
follower asks the leader where its latest epoch ends and truncates there, which replaces
"truncate to the high watermark" and closes both failure cases of KIP-101.

Writing the checkpoint: truncations write it at once. A new epoch (``assign``) does too,
unless the owner takes the write (``on_dirty``: a replica host writes thousands of new
leaders' checkpoints in a worker thread instead of one fsync each on its event loop, when a
topic's partitions all become leaders at once). A checkpoint not yet written is then
written before the log's recovery point passes the new epoch's start (``Log.flush``) and
when the log closes: until then a crash loses nothing, since recovery re-reads every batch
after the recovery point and assigns the epochs it finds (``LogLoader``), as Kafka's does.
"""
from __future__ import annotations

import bisect
import logging
import threading
from typing import Callable

from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None):
        self.checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        # Changes made, and how many of them the file holds; writes one at a time, each of
        # the entries as they are when it starts (a change meanwhile leaves it dirty).
        self._version = 0
        self._written = 0
        self._write_lock = threading.Lock()
        # Takes the write of a new epoch (called with this cache); None: written at once.
        self.on_dirty: Callable[["LeaderEpochFileCache"], None] | None = None
        stored = list(checkpoint.read()) if checkpoint else []
        for entry in stored:
            # As Kafka loads it: each entry assigned in turn, so a later one replaces those
            # it contradicts and the cache holds epochs and offsets that both grow.
            if entry.epoch >= 0 and entry.start_offset >= 0:
                self._assign(entry.epoch, entry.start_offset)
        if self._entries != stored:
            log.warning("%s held leader epochs out of order: %s; kept %s",
                        checkpoint.path, stored, self._entries)

    def _flush(self) -> None:
        with self._write_lock:
            version, entries = self._version, self._entries
            if self.checkpoint is not None:
                self.checkpoint.write(entries)
            self._written = max(self._written, version)

    @property
    def dirty(self) -> bool:
        """A change the checkpoint file does not hold yet."""
        return self._written != self._version

    def flush_if_dirty(self) -> None:
        if self.dirty:
            self._flush()

    # ---- reads ---------------------------------------------------------------------------
    def epoch_entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def previous_epoch(self) -> int | None:
        return self._entries[-2].epoch if len(self._entries) > 1 else None

    def epoch_for_offset(self, offset: int) -> int | None:
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self._entries[i].epoch if i >= 0 else None

    def end_offset_for(self, requested_epoch: int,
                       log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetsForLeaderEpoch: the end of the largest epoch
        <= ``requested_epoch``, i.e. the start offset of the next higher epoch, or the log
        end offset when the requested epoch is the latest."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            # Requested epoch is newer than anything we know.
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_entry = self._entries[higher]
        if higher == 0:
            # Older than our first epoch: answer the requested epoch, ending where ours start.
            return requested_epoch, higher_entry.start_offset
        return self._entries[higher - 1].epoch, higher_entry.start_offset

    # ---- changes -------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"Cannot assign epoch {epoch} at offset {start_offset}")
        if self._assign(epoch, start_offset):
            self._version += 1
            if self.on_dirty is None:
                self._flush()
            else:
                self.on_dirty(self)

    def _assign(self, epoch: int, start_offset: int) -> bool:
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False  # the epoch is already known to start at or before this offset
        # Entries that conflict with the new one (a later epoch, or one starting at or after
        # the new start) are stale: a divergent history is being replaced.
        kept = [e for e in self._entries
                if e.epoch < epoch and e.start_offset < start_offset]
        if len(kept) != len(self._entries):
            log.debug("leader epoch cache: %s replaces %s", (epoch, start_offset),
                      self._entries[len(kept):])
        self._entries = kept + [EpochEntry(epoch, start_offset)]
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there)."""
        if end_offset >= 0 and self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries = [e for e in self._entries if e.start_offset < end_offset]
            self._version += 1
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop epochs that ended before it and move
        the start of the epoch holding it up to it."""
        if not self._entries or self._entries[0].start_offset >= start_offset:
            return
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, start_offset) - 1
        holder = self._entries[i]
        self._entries = [EpochEntry(holder.epoch, start_offset)] + self._entries[i + 1:]
        self._version += 1
        self._flush()

    def clear_and_flush(self) -> None:
        self._entries = []
        self._version += 1
        self._flush()
