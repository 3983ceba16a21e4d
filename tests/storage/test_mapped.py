"""Index maps that hold no file descriptor (``storage.mapped``): a segment costs one
descriptor, its ``.log``, as in Kafka, so a replica host's thousands of partitions fit
under the open-files limit."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from protocols.records import Record, encode_batch
from storage import Log
from storage.index import OffsetIndex
from storage.mapped import MappedFile
from storage.segment import LogSegment


def open_descriptors(under: Path) -> int:
    """This process's descriptors open on files under ``under``: only the test's own, not
    the sockets and pipes other threads of the test session open and close meanwhile."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:   # closed since the listing
            continue
        count += target.startswith(f"{Path(under).resolve()}/")
    return count


def test_a_map_outlives_the_descriptor_it_was_made_from(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(bytes(8192))
    before = open_descriptors(tmp_path)
    fd = os.open(path, os.O_RDWR)
    mapped = MappedFile(fd, 8192, writable=True)
    os.close(fd)
    assert open_descriptors(tmp_path) == before
    struct.pack_into(">qI", mapped.buffer, 4096, 1_700_000_000_000, 42)
    mapped.flush()
    assert struct.unpack_from(">qI", path.read_bytes(), 4096) == (1_700_000_000_000, 42)
    mapped.close()
    assert mapped.closed and mapped.buffer is None


def test_a_read_only_map_refuses_a_write_instead_of_faulting(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"\x01" * 4096)
    fd = os.open(path, os.O_RDONLY)
    mapped = MappedFile(fd, 4096, writable=False)
    os.close(fd)
    assert mapped.buffer[0] == 1
    with pytest.raises(TypeError):
        struct.pack_into(">I", mapped.buffer, 0, 7)
    # Past the view, the pages are the process's private copy: no fault, the file unchanged.
    memoryview(mapped.buffer.obj).cast("B")[0] = 9
    assert path.read_bytes()[0] == 1


def test_a_thread_reading_a_map_while_the_interpreter_exits_does_not_fault(tmp_path):
    """The finalizer does not unmap at exit under a reader (a daemon thread, an actor's
    event loop thread): the process ends with its status, not SIGSEGV."""
    path = tmp_path / "f"
    path.write_bytes(bytes(1 << 20))
    program = (
        "import os, struct, threading\n"
        "from storage.mapped import MappedFile\n"
        f"fd = os.open({str(path)!r}, os.O_RDONLY)\n"
        "m = MappedFile(fd, 1 << 20, writable=False)\n"
        "os.close(fd)\n"
        "buf = m.buffer\n"
        "def read():\n"
        "    while True:\n"
        "        for i in range(0, 1 << 20, 4096):\n"
        "            struct.unpack_from('>q', buf, i)\n"
        "threading.Thread(target=read, daemon=True).start()\n")
    root = Path(__file__).resolve().parents[2]
    for _ in range(10):
        done = subprocess.run([sys.executable, "-c", program], cwd=root, timeout=60)
        assert done.returncode == 0


def test_pages_stay_mapped_while_a_reader_holds_them_after_close(tmp_path):
    """A reader that took the buffer before ``close`` (another thread, mid-lookup) reads
    the file's bytes, not an unmapped page."""
    path = tmp_path / "f"
    path.write_bytes(struct.pack(">I", 99) + bytes(4092))
    fd = os.open(path, os.O_RDWR)
    mapped = MappedFile(fd, 4096, writable=True)
    os.close(fd)
    held = mapped.buffer
    mapped.close()
    assert struct.unpack_from(">I", held, 0) == (99,)


def test_an_empty_file_cannot_be_mapped(tmp_path):
    path = tmp_path / "f"
    path.touch()
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError):
            MappedFile(fd, 0, writable=False)
    finally:
        os.close(fd)


def test_an_index_holds_no_descriptor(tmp_path):
    before = open_descriptors(tmp_path)
    indexes = [OffsetIndex(tmp_path / f"{i:020d}.index", i) for i in range(50)]
    assert open_descriptors(tmp_path) == before
    for i, index in enumerate(indexes):
        index.append(i + 10, 4096)
        assert index.lookup(i + 10).position == 4096
        index.close()


def test_a_segment_holds_one_descriptor_its_log(tmp_path):
    before = open_descriptors(tmp_path)
    segments = []
    for i in range(20):
        (tmp_path / f"p{i}").mkdir()
        segments.append(LogSegment.open(tmp_path / f"p{i}", 0, index_interval_bytes=4096,
                                        max_index_size=10 * 1024 * 1024, now_ms=0))
    assert open_descriptors(tmp_path) - before == len(segments)
    for segment in segments:
        segment.close()
    assert open_descriptors(tmp_path) == before


def test_a_log_of_many_segments_holds_a_descriptor_for_each(tmp_path):
    """Kafka's count: one per segment's .log (its FileChannel), none for the indexes."""
    before = open_descriptors(tmp_path)
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 1024})
    for i in range(40):
        log.append_as_leader(encode_batch([Record(b"k", bytes(200), 0)]), leader_epoch=0)
    assert len(log.segments) > 5
    assert open_descriptors(tmp_path) - before == len(log.segments)
    log.close()
    assert open_descriptors(tmp_path) == before
