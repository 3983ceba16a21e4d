"""Per-hop timestamps of records on their way through a cluster: a benchmark mode, off unless
a benchmark turns it on (``BrokerActor.hop_trace``), for finding where an end-to-end delay's
tail goes (``benchmarks/hops.py``).

Each mark is one line appended to ``<directory>/<pid>.hops``::

    <hop> <topic> <partition> <first offset> <last offset> <ns>

``ns`` is CLOCK_MONOTONIC (Python's ``time.monotonic_ns``; Java's ``System.nanoTime`` reads
the same clock on Linux), one clock for every process of the machine, so a client's send
time and a replica host's append time subtract. The hops, in a record's order:

- ``listener.received``: the Kafka listener read the Produce request holding it;
- ``listener.produce``: the listener began to handle it (a connection's requests for the
  same partitions are handled one after the other, as Kafka handles all of them);
- ``append``: its leader's host began to append it (at RF=1 the high watermark passes it
  within the append);
- ``listener.produced``: the listener had the host's answer (acks=all: the ISR has it);
- ``hw``: the leader's high watermark passed it (consumers may read it);
- ``fetch``: the host answered a consumer's fetch holding it;
- ``listener.fetch``: the listener had that answer from the host;
- ``written``: the listener began writing the Fetch response holding it to the client's
  socket (its first bytes may reach the client before a write returns).

A mark is one unbuffered ``write`` (about 2 us), so a process killed when the run ends loses
none; with tracing off a hop costs one check of ``ON``. The earliest mark of an offset at a
hop counts: a host's answer to a long poll the listener gave up on (a fetch spread over
several hosts of one broker) counts as the host's, though the listener dropped it. Replica
hosts started after tracing was turned on are not traced.
"""
from __future__ import annotations

import os
import struct
import time
from pathlib import Path

from protocols.file_region import FileRegion
from protocols.records import MAGIC, MIN_BATCH_LENGTH, iter_batches

ON = False
# A v2 batch header's baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes
# and lastOffsetDelta: up to the field ``span`` needs.
_HEADER = struct.Struct(">qiibIhi")
_fd: int | None = None
_pending: dict[int, list[tuple]] = {}   # a Fetch request's spans, until written
received: dict[int, int] = {}   # when each request was read (by id), until written


def start(directory: str | Path | None) -> None:
    """Trace this process's hops into ``directory``; None stops."""
    global ON, _fd
    if _fd is not None:
        os.close(_fd)
        _fd = None
    _pending.clear()
    received.clear()
    ON = directory is not None
    if ON:
        Path(directory).mkdir(parents=True, exist_ok=True)
        _fd = os.open(Path(directory) / f"{os.getpid()}.hops",
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def mark(hop: str, topic: str, partition: int, first: int, last: int,
         ns: int | None = None) -> None:
    if _fd is not None:
        os.write(_fd, f"{hop} {topic} {partition} {first} {last} "
                      f"{time.monotonic_ns() if ns is None else ns}\n".encode())


def span(records) -> tuple[int, int] | None:
    """The first and last offsets of the whole batches in ``records``: bytes, a segment's
    ``FileRegion`` (its file checked to be the one named, then its batch headers read), or
    the listener's open region (``file``, ``position``, ``size``). None when it holds none
    or cannot be read: tracing never fails a request."""
    try:
        if isinstance(records, FileRegion):
            with open(records.path, "rb") as f:
                stat = os.fstat(f.fileno())
                if (stat.st_dev, stat.st_ino) != (records.device, records.inode):
                    return None   # the segment was replaced since
                return _file_span(f.fileno(), records.position, records.size)
        if hasattr(records, "file"):
            return _file_span(records.file.fileno(), records.position, records.size)
        if not records:
            return None
        first = last = None
        for batch in iter_batches(records):
            if first is None:
                first = batch.base_offset
            last = batch.last_offset
        return None if first is None else (first, last)
    except Exception:   # noqa: BLE001 - a mark missed, never a request failed
        return None


def _file_span(fd: int, position: int, size: int) -> tuple[int, int] | None:
    """``span`` of a file's region from its batches' headers alone (a small read each)."""
    first = last = None
    end = position + size
    while end - position >= _HEADER.size:
        base_offset, length, _, magic, _, _, last_offset_delta = _HEADER.unpack(
            os.pread(fd, _HEADER.size, position))
        if length < MIN_BATCH_LENGTH or magic != MAGIC or position + 12 + length > end:
            break    # not a batch, or a partial batch at the end: not counted
        if first is None:
            first = base_offset
        last = base_offset + last_offset_delta
        position += 12 + length
    return None if first is None else (first, last)


def record_count(records) -> int:
    """How many records a producer's batches hold (their offsets are not yet assigned); 0
    for bytes that are not batches."""
    try:
        return sum(batch.last_offset_delta + 1 for batch in iter_batches(records or b""))
    except Exception:   # noqa: BLE001 - the host refuses them; tracing marks nothing
        return 0


def hold(request_id: int, hop: str, topic: str, partition: int, first: int, last: int,
         ns: int) -> None:
    """A mark of a response not yet written, made with ``written``'s when it is."""
    _pending.setdefault(request_id, []).append((hop, topic, partition, first, last, ns))


def forget(request_id: int) -> None:
    """A request done with, answered or not (acks=0, a handler's failure)."""
    received.pop(request_id, None)
    _pending.pop(request_id, None)


def written(request_id: int) -> None:
    """The response ``hold`` marks were held for is being written: mark them, and
    ``written`` for each of their spans now."""
    received.pop(request_id, None)
    held = _pending.pop(request_id, None)
    if held:
        now = time.monotonic_ns()
        for hop, topic, partition, first, last, ns in held:
            mark(hop, topic, partition, first, last, ns)
            mark("written", topic, partition, first, last, now)
