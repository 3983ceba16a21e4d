"""A file mapped into memory that holds no file descriptor, as Java's MappedByteBuffer.

Python's ``mmap.mmap`` keeps a duplicate of the file's descriptor for as long as the map
lives (Python 3.13 adds ``trackfd=False`` to stop that). A segment maps two indexes, so
with Python's maps each segment held three descriptors (its ``.log`` and two duplicates),
and a replica host with 10,000 partitions ran into the open-files limit (20,000 on the
machine this was measured on) where Kafka, whose maps hold none, needs one per segment.
These maps are made with libc's ``mmap`` through ctypes, from a descriptor the caller closes
right after.

Python's map raises if it is used after it was closed; an unmapped page read here would kill
the process. So the pages are unmapped only when the last reference to the buffer goes (a
finalizer): ``close`` drops this object's, and a reader in another thread still inside
``struct.unpack_from`` keeps the pages until it returns. The finalizer does not run at
interpreter exit (a thread may still be reading then; the kernel unmaps at process exit).
A read-only map is a private one under a read-only view: a write that got past the view
would change this process's copy, never fault.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import weakref

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.msync.restype = ctypes.c_int
_libc.msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = 4  # <sys/mman.h> on Linux


def _unmap(address: int, length: int) -> None:
    _libc.munmap(address, length)


class MappedFile:
    """``length`` bytes of the file open as ``fd``: a writable map is shared with the file
    (writes reach the page cache at once), a read-only one is private under a read-only
    view. ``buffer`` is what ``struct.pack_into``/``unpack_from`` take."""

    def __init__(self, fd: int, length: int, writable: bool):
        if length <= 0:
            raise ValueError("cannot map an empty file")
        address = _libc.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE,
                             mmap.MAP_SHARED if writable else mmap.MAP_PRIVATE, fd, 0)
        if address in (None, _MAP_FAILED):
            errno = ctypes.get_errno()
            raise OSError(errno, f"mmap: {os.strerror(errno)}")
        self.address = address
        self.length = length
        pages = (ctypes.c_char * length).from_address(address)
        weakref.finalize(pages, _unmap, address, length).atexit = False
        view = memoryview(pages).cast("B")
        self.buffer: memoryview | None = view if writable else view.toreadonly()

    @property
    def closed(self) -> bool:
        return self.buffer is None

    def flush(self) -> None:
        """Write the dirty pages to the file (``msync(MS_SYNC)``, as MappedByteBuffer.force)."""
        held = self.buffer  # keeps the pages mapped while msync runs
        if held is not None and _libc.msync(self.address, self.length, _MS_SYNC) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"msync: {os.strerror(errno)}")

    def close(self) -> None:
        self.buffer = None
