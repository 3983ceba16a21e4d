"""Kafka's sparse segment indexes, memory-mapped (``storage.mapped``: no descriptor held).

``.index``: 8-byte entries (relativeOffset u32, position u32), offsets strictly increasing.
``.timeindex``: 12-byte entries (timestamp i64, relativeOffset u32), timestamps increasing.
A new index file is preallocated to ``max_index_size`` rounded down to whole entries; the file
is trimmed to its entries when the segment rolls or closes, so on reopen an existing file's
length tells how many entries it has. Lookups are binary searches for the largest entry at or
below the target.

A new index's file is made when its segment first takes records (``ensure_on_disk``), as
Kafka's LazyIndex is loaded, and its file made, by the first append's roll check: a new
partition costs a directory and its ``.log``, not three files (creating a file is most of
what opening a replica costs, and a topic of thousands of partitions opens thousands at
once). So an empty segment may have no index files; the log loader knows that
(``storage.log_loader``).

The preallocated file is sparse (a 10 MiB index per segment would otherwise take 10 MiB of
disk each). Storing into an unbacked page of the map on a full filesystem is not an error
Python can catch: the kernel sends SIGBUS and the process dies. So each page is allocated
(``posix_fallocate``) before the first entry stored in it: a full disk is then an OSError
on the append, which takes the log directory offline (``storage.log_dir_failure``).
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

from protocols.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from storage.mapped import MappedFile

U32_MAX = 2**32 - 1
PAGE = mmap.PAGESIZE


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class _Index:
    entry_size = 0
    _entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int = 10485760,
                 writable: bool = True):
        self.path = Path(path)
        self.base_offset = base_offset
        self.writable = writable
        self.max_index_size = max_index_size
        self._closed = False
        self._mapping = self._pages = None
        # Whether the file exists: a new index's is made when needed (module doc).
        self.on_disk = self.path.exists()
        if not self.on_disk:
            if not writable:
                raise FileNotFoundError(self.path)
            self.entries = 0
            self._length = self._round(max_index_size)   # what the file will be made with
            self._backed = 0
            return
        fd = os.open(self.path, os.O_RDWR if writable else os.O_RDONLY)
        try:
            self._length = os.fstat(fd).st_size
            self.entries = self._length // self.entry_size
            self._map(fd, self._length)
        finally:
            os.close(fd)
        # Bytes from the start known to be backed by disk: the pages holding entries.
        self._backed = -(-self.entries * self.entry_size // PAGE) * PAGE

    # ---- mapping -------------------------------------------------------------------------
    def _round(self, size: int) -> int:
        return size - size % self.entry_size

    def _map(self, fd: int, length: int) -> None:
        # ``_pages``: the mapped bytes, None for an empty file (which cannot be mapped).
        self._mapping = MappedFile(fd, length, self.writable) if length else None
        self._pages = None if self._mapping is None else self._mapping.buffer

    def _unmap(self) -> None:
        if self._mapping is not None:
            self._mapping.close()
        self._mapping = self._pages = None

    def ensure_on_disk(self) -> None:
        """Make the file of a new index (preallocated, mapped) if not yet."""
        if not self.on_disk:
            self._create()

    def _create(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, self._length)
            self._map(fd, self._length)
        finally:
            os.close(fd)
        self.on_disk = True

    def _remap(self, length: int) -> None:
        if not self.on_disk:
            self._length = length
            return
        self._unmap()
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, length)
            self._length = length
            self._backed = min(self._backed, length)
            self._map(fd, length)
        finally:
            os.close(fd)

    def _back(self, n: int) -> None:
        """Allocate the page entry ``n`` is stored in, if not yet (see the module doc)."""
        end = (n + 1) * self.entry_size
        if end <= self._backed:
            return
        self.ensure_on_disk()
        start = self._backed
        length = min(-(-end // PAGE) * PAGE, self._length) - start
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, start, length)
        finally:
            os.close(fd)
        self._backed = start + length

    # ---- facts ---------------------------------------------------------------------------
    @property
    def max_entries(self) -> int:
        return self._length // self.entry_size

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    @property
    def file_size(self) -> int:
        return self._length

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _raw(self, n: int) -> tuple[int, ...]:
        return self._entry.unpack_from(self._pages, n * self.entry_size)

    def _key(self, n: int) -> int:
        return self._raw(n)[0]  # the offset or the timestamp: both lead their entry

    def _largest_lower_bound(self, target: int) -> int:
        """Slot of the largest entry whose key <= target, or -1."""
        lo, hi = 0, self.entries - 1
        if hi < 0 or self._key(0) > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._key(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > U32_MAX:
            raise InvalidOffsetError(f"Offset {offset} cannot be stored relative to base "
                                     f"offset {self.base_offset} in {self.path}")
        return rel

    # ---- changes -------------------------------------------------------------------------
    def _truncate_to_entries(self, n: int) -> None:
        self.entries = n

    def truncate(self) -> None:
        self._truncate_to_entries(0)

    def resize(self, new_size: int) -> bool:
        length = self._round(new_size)
        length = max(length, self.entries * self.entry_size)
        if length == self._length:
            return False
        self._remap(length)
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(self.entries * self.entry_size)

    def flush(self) -> None:
        if self._mapping is not None and self.writable:
            self._mapping.flush()

    def close(self) -> None:
        if self._closed:
            return
        if self.writable:
            self.trim_to_valid_size()
        self.close_handler()

    def close_handler(self) -> None:
        self._closed = True
        self._unmap()

    def rename_to(self, new_path: Path) -> None:
        if self.on_disk:
            os.replace(self.path, new_path)
        self.path = Path(new_path)

    def delete(self) -> None:
        self.close_handler()
        self.path.unlink(missing_ok=True)
        self.on_disk = False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return self.entries


class OffsetIndex(_Index):
    entry_size = 8
    _entry = struct.Struct(">II")

    def entry(self, n: int) -> OffsetPosition:
        if not 0 <= n < self.entries:
            raise IndexError(f"Attempt to fetch entry {n} of {self.entries} in {self.path}")
        rel, pos = self._raw(n)
        return OffsetPosition(self.base_offset + rel, pos)

    @property
    def last_offset(self) -> int:
        return self.entry(self.entries - 1).offset if self.entries else self.base_offset

    def append(self, offset: int, position: int) -> None:
        if self.entries and offset <= self.last_offset:
            raise InvalidOffsetError(
                f"Attempt to append an offset ({offset}) to position {self.entries} no larger "
                f"than the last offset appended ({self.last_offset}) to {self.path}.")
        if self.is_full():
            raise KafkaStorageError(f"Attempt to append to a full index (size = "
                                    f"{self.entries}) {self.path}")
        self._back(self.entries)
        self._entry.pack_into(self._pages, self.entries * 8, self._relative(offset), position)
        self.entries += 1

    def lookup(self, target_offset: int) -> OffsetPosition:
        slot = self._largest_lower_bound(target_offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def fetch_upper_bound_offset(self, end_position: int) -> int | None:
        """Kafka's fetchUpperBoundOffset: the offset of the first entry whose batch starts at
        or after ``end_position`` (every record before that position is at or below it), or
        None when no entry does."""
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) // 2
            if self._raw(mid)[1] >= end_position:
                hi = mid
            else:
                lo = mid + 1
        return None if lo == self.entries else self.base_offset + self._raw(lo)[0]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        slot = self._largest_lower_bound(offset - self.base_offset)
        if slot < 0:
            keep = 0
        elif self._key(slot) == offset - self.base_offset:
            keep = slot
        else:
            keep = slot + 1
        self._truncate_to_entries(keep)

    def sanity_check(self) -> None:
        if self._length % self.entry_size:
            raise CorruptIndexError(f"Index file {self.path} is corrupt, found "
                                    f"{self._length} bytes which is neither positive nor a "
                                    f"multiple of {self.entry_size}.")
        if self.entries and self.last_offset < self.base_offset:
            raise CorruptIndexError(f"Corrupt index found, index file ({self.path}) has "
                                    f"non-zero size but the last offset is "
                                    f"{self.last_offset} which is less than the base offset "
                                    f"{self.base_offset}.")


class TimeIndex(_Index):
    entry_size = 12
    _entry = struct.Struct(">qI")

    def entry(self, n: int) -> TimestampOffset:
        if not 0 <= n < self.entries:
            raise IndexError(f"Attempt to fetch entry {n} of {self.entries} in {self.path}")
        ts, rel = self._raw(n)
        return TimestampOffset(ts, self.base_offset + rel)

    def is_full(self) -> bool:
        # One slot stays free for the final entry written when the segment rolls.
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        if not self.entries:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(self.entries - 1)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        if not skip_full_check and self.is_full():
            raise KafkaStorageError(f"Attempt to append to a full time index (size = "
                                    f"{self.entries}) {self.path}")
        last = self.last_entry
        if self.entries and offset < last.offset:
            raise InvalidOffsetError(f"Attempt to append an offset ({offset}) to slot "
                                     f"{self.entries} no larger than the last offset appended "
                                     f"({last.offset}) to {self.path}.")
        if self.entries and timestamp < last.timestamp:
            raise InvalidOffsetError(f"Attempt to append a timestamp ({timestamp}) to slot "
                                     f"{self.entries} no larger than the last timestamp "
                                     f"appended ({last.timestamp}) to {self.path}.")
        if timestamp > last.timestamp:
            if self.entries >= self.max_entries:
                return  # no room even for the final entry (the file was trimmed)
            self._back(self.entries)
            self._entry.pack_into(self._pages, self.entries * 12, timestamp,
                                  self._relative(offset))
            self.entries += 1

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        slot = self._largest_lower_bound(target_timestamp)
        if slot < 0:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        keep = self.entries
        while keep and self.entry(keep - 1).offset >= offset:
            keep -= 1
        self._truncate_to_entries(keep)

    def sanity_check(self) -> None:
        if self._length % self.entry_size:
            raise CorruptIndexError(f"Time index file {self.path} is corrupt, found "
                                    f"{self._length} bytes which is not a multiple of "
                                    f"{self.entry_size}.")
        if self.entries:
            last = self.last_entry
            if last.offset < self.base_offset:
                raise CorruptIndexError(f"Corrupt time index found, time index file "
                                        f"({self.path}) has non-zero size but the last offset "
                                        f"is {last.offset} which is less than the first "
                                        f"offset {self.base_offset}")
