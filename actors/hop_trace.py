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
none; with tracing off a hop costs one check of ``ON``.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from protocols.file_region import FileRegion
from protocols.records import iter_batches

ON = False
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
    """The first and last offsets of the whole batches in ``records`` (bytes, or a segment's
    ``FileRegion``, read here: tracing only), or None when it holds none."""
    if isinstance(records, FileRegion):
        try:
            with open(records.path, "rb") as f:
                records = os.pread(f.fileno(), records.size, records.position)
        except OSError:
            return None
    if not records:
        return None
    first = last = None
    for batch in iter_batches(records):
        if first is None:
            first = batch.base_offset
        last = batch.last_offset
    return None if first is None else (first, last)


def record_count(records) -> int:
    """How many records a producer's batches hold (their offsets are not yet assigned)."""
    return sum(batch.last_offset_delta + 1 for batch in iter_batches(records or b""))


def hold(request_id: int, hop: str, topic: str, partition: int, first: int, last: int,
         ns: int) -> None:
    """A mark of a response not yet written, made with ``written``'s when it is."""
    _pending.setdefault(request_id, []).append((hop, topic, partition, first, last, ns))


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
