"""FileRecords: the ``.log`` file of one segment, a sequence of v2 record batches.

Appends go to the end with positional writes; reads return byte slices without decoding any
record. Batch headers are scanned in large chunks so that a scan costs a few system calls,
not one per batch.
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from protocols.errors import CorruptRecordError, UnsupportedVersionError
from protocols.file_region import FileRegion
from protocols.records import LOG_OVERHEAD, RecordBatch, iter_batches, read_batch_header

SCAN_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class BatchLocation:
    """Where a batch sits in the file, with the header fields the log needs."""

    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


class FileRecords:
    def __init__(self, path: Path, *, create: bool = True, read_only: bool = False):
        self.path = Path(path)
        # Tools that only read (the dump tool) must work on files they may not write.
        flags = os.O_RDONLY if read_only else os.O_RDWR | (os.O_CREAT if create else 0)
        self._fd = os.open(self.path, flags, 0o644)
        # A raw descriptor is not closed by the garbage collector as a file object is: a
        # log dropped without close() (a replica deleted, a test's) would keep it forever.
        self._closer = weakref.finalize(self, os.close, self._fd)
        stat = os.fstat(self._fd)
        self._size = stat.st_size
        self._identity = (stat.st_dev, stat.st_ino)   # what a FileRegion names

    # ---- state --------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return self._size

    # ---- writing ------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end; on a short or failed write the file is cut back so a
        failed append leaves the file exactly as before."""
        start = self._size
        total = len(data)
        try:
            written = os.pwrite(self._fd, data, start)
            if written < total:  # rare: a short write; finish it
                view = memoryview(data)
                while written < total:
                    written += os.pwrite(self._fd, view[written:], start + written)
        except BaseException:
            os.ftruncate(self._fd, start)
            raise
        self._size = start + written
        return written

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; returns how many bytes were removed."""
        if size < 0 or size > self._size:
            raise ValueError(f"cannot truncate {self.path} of {self._size} bytes to {size}")
        removed = self._size - size
        if removed:
            os.ftruncate(self._fd, size)
            self._size = size
        return removed

    def flush(self) -> None:
        os.fsync(self._fd)

    # ---- reading ------------------------------------------------------------------------
    def read(self, position: int, size: int) -> bytes:
        size = max(0, min(size, self._size - position))
        return os.pread(self._fd, size, position) if size else b""

    def region(self, position: int, size: int) -> FileRegion:
        """``size`` bytes from ``position`` (cut at the end of the file), named, not read."""
        size = max(0, min(size, self._size - position))
        return FileRegion(os.path.abspath(self.path), *self._identity, position, size)

    def batches(self, start_position: int = 0, end_position: int | None = None,
                *, strict: bool = False,
                chunk_bytes: int = SCAN_CHUNK_BYTES) -> Iterator[tuple[int, RecordBatch]]:
        """Yield ``(position, batch)`` for every complete batch from ``start_position``.

        A torn or invalid tail ends the iteration silently unless ``strict`` is true, in
        which case an incomplete tail raises CorruptRecordError (used by recovery, which
        wants to know where the valid prefix ends: see ``valid_prefix``)."""
        end = self._size if end_position is None else min(end_position, self._size)
        pos = start_position
        while pos < end:
            header = read_batch_header(os.pread(self._fd, LOG_OVERHEAD, pos), 0)
            if header is None:
                if strict:
                    raise CorruptRecordError(f"{self.path}: torn batch header at position {pos}")
                return
            need = LOG_OVERHEAD + header[1]
            chunk = os.pread(self._fd, max(chunk_bytes, need), pos)
            limit = min(len(chunk), end - pos)
            view = memoryview(chunk)[:limit]
            consumed = 0
            for batch in iter_batches(view):
                yield pos + batch.position, batch
                consumed = batch.position + batch.size_in_bytes
            if consumed == 0:
                if strict:
                    raise CorruptRecordError(
                        f"{self.path}: incomplete batch at position {pos} "
                        f"(needs {need} bytes, {end - pos} remain)")
                return
            pos += consumed

    def locations(self, start_position: int = 0, end_position: int | None = None,
                  chunk_bytes: int = SCAN_CHUNK_BYTES) -> Iterator[BatchLocation]:
        for pos, batch in self.batches(start_position, end_position, chunk_bytes=chunk_bytes):
            yield BatchLocation(pos, batch.base_offset, batch.last_offset,
                                batch.size_in_bytes, batch.max_timestamp)

    def search_for_offset(self, target_offset: int, start_position: int) -> BatchLocation | None:
        """The first batch at or after ``start_position`` whose last offset is >= target
        (Kafka's searchForOffsetWithSize)."""
        # The index puts the target within about index.interval.bytes of start_position.
        for loc in self.locations(start_position, chunk_bytes=64 * 1024):
            if loc.last_offset >= target_offset:
                return loc
        return None

    def valid_prefix(self, start_position: int, max_batch_bytes: int,
                     on_batch=None) -> int:
        """Validate batches from ``start_position`` (magic, size limits, CRC) and return the
        position where the valid prefix ends. ``on_batch(position, batch)`` sees each valid
        batch, so the caller can rebuild indexes in the same pass; it returns False to reject
        the batch (for instance offsets going backwards), which ends the valid prefix there."""
        pos = start_position
        try:
            for p, batch in self.batches(start_position, strict=True):
                if batch.size_in_bytes > max_batch_bytes or not batch.is_valid():
                    return p
                if on_batch is not None and on_batch(p, batch) is False:
                    return p
                pos = p + batch.size_in_bytes
        except (CorruptRecordError, UnsupportedVersionError):
            pass
        return pos

    # ---- lifecycle ----------------------------------------------------------------------
    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = Path(path)

    def close(self) -> None:
        if self._fd >= 0:
            self._closer()  # closes once, and never again from the finalizer
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def __repr__(self) -> str:
        return f"FileRecords({self.path}, size={self._size})"
