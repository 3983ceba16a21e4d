"""Per-hop timestamps (``actors.hop_trace``, the benchmark mode of issue 42's step 3) and
their reading by ``benchmarks/hops.py``: marks are lines on one clock, spans are read from
whole batches in bytes or in a segment file, and a record is followed through the marks."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from actors import hop_trace
from benchmarks.hops import PATH, follow, read_marks, report
from protocols.file_region import FileRegion
from protocols.records import Record, encode_batch


@pytest.fixture
def tracing(tmp_path):
    hop_trace.start(tmp_path)
    yield tmp_path
    hop_trace.start(None)


def batch(base_offset: int, count: int) -> bytes:
    return encode_batch([Record(None, b"v%d" % i) for i in range(count)],
                        base_offset=base_offset)


def test_spans_are_the_whole_batches_first_and_last_offsets():
    assert hop_trace.span(batch(10, 3) + batch(13, 2)) == (10, 14)
    assert hop_trace.span(b"") is None
    # An incomplete batch at the end (a fetch's byte limit) is not counted.
    assert hop_trace.span(batch(10, 3) + batch(13, 2)[:20]) == (10, 12)
    assert hop_trace.record_count(batch(0, 3) + batch(0, 4)) == 7


def test_a_span_is_read_from_a_segments_file_region(tmp_path):
    log = tmp_path / "00000000000000000000.log"
    data = batch(0, 5) + batch(5, 2) + batch(7, 1)
    log.write_bytes(data)
    start = len(batch(0, 5))
    stat = log.stat()
    region = FileRegion(str(log), stat.st_dev, stat.st_ino, start, len(data) - start)
    assert hop_trace.span(region) == (5, 7)
    os.unlink(log)   # gone before tracing read it: no span, no error
    assert hop_trace.span(region) is None


def test_a_span_or_count_of_bytes_that_are_not_batches_is_none_never_an_error(tmp_path):
    """Tracing runs inside the request paths: a client's bad bytes or a replaced segment
    must not fail a request there."""
    assert hop_trace.span(b"\0" * 12) is None            # a batch length below the minimum
    bad_magic = bytearray(batch(0, 2))
    bad_magic[16] = 7
    assert hop_trace.span(bytes(bad_magic)) is None
    assert hop_trace.record_count(bytes(bad_magic)) == 0
    assert hop_trace.record_count(b"\0" * 12) == 0
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"\xff" * 200)
    stat = log.stat()
    assert hop_trace.span(FileRegion(str(log), stat.st_dev, stat.st_ino, 0, 200)) is None
    # A segment replaced under the same name (compaction's swap) is not read.
    log.write_bytes(batch(0, 3))
    old = FileRegion(str(log), stat.st_dev, stat.st_ino + 1, 0, len(batch(0, 3)))
    assert hop_trace.span(old) is None


def test_a_span_of_the_listeners_open_region_reads_its_file(tmp_path):
    from actors.broker.listener.file_regions import OpenRegion
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(batch(0, 2) + batch(2, 4))
    with open(log, "rb") as f:
        assert hop_trace.span(OpenRegion(f, 0, log.stat().st_size)) == (0, 5)
        assert hop_trace.span(OpenRegion(f, 0, log.stat().st_size - 1)) == (0, 1)


def test_a_produce_refused_for_its_bytes_is_traced_as_nothing(tracing):
    """The listener's Produce marks: only appended batches, and bad bytes skipped."""
    from actors.broker.listener.kafka_apis import _trace_produced
    parts = [(("t", 0), "t", b"\0" * 12), (("t", 1), "t", batch(0, 3)),
             (("t", 2), "t", batch(0, 2))]
    answers = {("t", 0): {"error_code": 0, "base_offset": 5},
               ("t", 1): {"error_code": 0, "base_offset": 40},
               ("t", 2): {"error_code": 2}}
    _trace_produced(100, 200, parts, answers)
    lines = (tracing / f"{os.getpid()}.hops").read_text().splitlines()
    assert [line.rsplit(" ", 1)[0] for line in lines] == [
        "listener.received t 1 40 42", "listener.produce t 1 40 42",
        "listener.produced t 1 40 42"]


def test_marks_are_lines_on_the_monotonic_clock_and_stop_with_tracing(tracing):
    before = time.monotonic_ns()
    hop_trace.mark("append", "t", 0, 5, 7)
    hop_trace.mark("hw", "t", 0, 8, 8, ns=123)
    hop_trace.start(None)
    hop_trace.mark("append", "t", 0, 8, 9)   # off: nothing written
    lines = (tracing / f"{os.getpid()}.hops").read_text().splitlines()
    assert lines[1] == "hw t 0 8 8 123"
    hop, topic, partition, first, last, ns = lines[0].split()
    assert (hop, topic, partition, first, last) == ("append", "t", "0", "5", "7")
    assert before <= int(ns) <= time.monotonic_ns()
    assert len(lines) == 2
    assert not hop_trace.ON


def test_held_marks_are_made_when_their_response_is_written(tracing):
    hop_trace.received[7] = 1
    hop_trace.hold(7, "listener.fetch", "t", 1, 0, 4, 100)
    assert not (tracing / f"{os.getpid()}.hops").exists() or \
        not (tracing / f"{os.getpid()}.hops").read_text()
    hop_trace.written(7)
    hop_trace.written(7)   # once only
    hop_trace.received[8] = 2   # an acks=0 Produce: no answer written, forgotten
    hop_trace.hold(8, "listener.fetch", "t", 1, 5, 6, 100)
    hop_trace.forget(8)
    hop_trace.written(8)
    lines = (tracing / f"{os.getpid()}.hops").read_text().splitlines()
    assert lines[0] == "listener.fetch t 1 0 4 100"
    assert lines[1].startswith("written t 1 0 4 ")
    assert len(lines) == 2 and not hop_trace.received


def write_marks(directory, lines: list[str], name: str = "1.hops") -> None:
    (directory / name).write_text("".join(line + "\n" for line in lines))


def test_a_record_is_followed_through_every_hop_by_its_offset(tmp_path):
    write_marks(tmp_path, ["listener.received t 0 0 1 1000", "listener.produce t 0 0 1 1100",
                           "append t 0 0 1 1200", "listener.produced t 0 0 1 1900"])
    write_marks(tmp_path, [
        "hw t 0 1 1 1500",   # offset 0 visible
        "hw t 0 2 2 1800",   # offset 1 visible
        "fetch t 0 0 0 1600", "fetch t 0 0 1 2000",   # offset 0 fetched twice: the first
        "listener.fetch t 0 0 0 1700", "listener.fetch t 0 0 1 2100",
        "written t 0 0 0 1750", "written t 0 0 1 2150"], name="2.hops")
    marks = read_marks(tmp_path)
    times, missed = follow([(0, 0, 900, 1800), (0, 1, 950, 2200), (0, 2, 990, 3000)], "t",
                           marks)
    assert missed == 1   # offset 2 was never appended
    assert times.tolist() == [[900, 1000, 1100, 1200, 1500, 1600, 1700, 1750, 1800],
                              [950, 1000, 1100, 1200, 1800, 2000, 2100, 2150, 2200]]
    assert len(PATH) == times.shape[1]


def test_the_high_watermarks_first_pass_counts_after_a_leader_change(tmp_path):
    # A new leader's first HW (5) marked after the old leader's (9): offset 3 passed at 100.
    write_marks(tmp_path, ["hw t 0 9 9 100", "hw t 0 5 5 200", "hw t 0 12 12 300"])
    from benchmarks.hops import hw_time
    hws = read_marks(tmp_path)[("t", 0)]["hw"]
    cache: dict = {}
    assert [hw_time(hws, o, cache) for o in (3, 8, 9, 11, 12)] == [100, 100, 300, 300, None]


def test_the_report_gives_each_step_and_the_tails_make_up():
    # 100 records: 99 take 1 ms at each step, one 50 ms at its append.
    times = np.cumsum(np.full((100, len(PATH)), 1_000_000, dtype=np.int64), axis=1)
    times[99, 3:] += 49_000_000
    lines = report(times)
    assert len(lines) == len(PATH)   # a line per step and the whole
    append = next(line for line in lines if "host's append" in line)
    assert "slowest 1%: mean   50.00 ms" in append
    assert "p50    1.00 ms" in append
    assert "slowest 1%: mean   57.00 ms" in lines[-1]
