"""A hypothesis state machine drives the Log against a simple in-memory model.

Random appends, reads, rolls, follower truncations, retention by log start offset, and
reopening after a clean close or a crash (with a torn write at the tail) must leave the log
agreeing with the model: same log start and end offsets, and the same records in order.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocols.errors import OffsetOutOfRangeError
from protocols.records import Record, encode_batch, iter_batches
from storage import Log

CONFIG = {"segment.bytes": 2500, "index.interval.bytes": 200}


def read_all(log: Log, start: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = start
    while offset < log.log_end_offset:
        info = log.read_info(offset, 700)
        if not info.records:
            break
        for b in iter_batches(info.records):
            out.extend((r.offset, r.value) for r in b.records() if r.offset >= offset)
        offset = info.next_offset
    return out


class LogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="rafka-model-"))
        self.dir = self.tmp / "model-0"
        self.now = 1_700_000_000_000
        self.log = Log.open(self.dir, CONFIG, clock=lambda: self.now)
        self.batches: list[tuple[int, list[bytes]]] = []  # (base offset, values)
        self.start = 0
        self.end = 0
        self.counter = 0

    def teardown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- model helpers ---------------------------------------------------------------------
    def expected(self) -> list[tuple[int, bytes]]:
        return [(base + i, v) for base, vs in self.batches for i, v in enumerate(vs)
                if base + i >= self.start]

    # ---- rules -----------------------------------------------------------------------------
    @rule(n=st.integers(1, 6), size=st.integers(0, 300))
    def append(self, n, size):
        values = []
        for _ in range(n):
            self.counter += 1
            values.append(f"{self.counter}:".encode().ljust(size, b"x"))
        self.now += 7
        data = encode_batch([Record(None, v, self.now) for v in values])
        info = self.log.append_as_leader(data, leader_epoch=0)
        assert info.first_offset == self.end
        self.batches.append((self.end, values))
        self.end += n
        self.log.update_high_watermark(self.end)

    @rule()
    def roll(self):
        self.log.roll()

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def read_from_random_offset(self, data):
        offset = data.draw(st.integers(self.start, self.end - 1))
        got = read_all(self.log, offset)
        assert got == [r for r in self.expected() if r[0] >= offset]

    @rule(data=st.data())
    def read_out_of_range(self, data):
        offset = data.draw(st.sampled_from([self.end + 1, self.end + 100] +
                                           ([self.start - 1] if self.start > 0 else [])))
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(offset, 100)

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def truncate(self, data):
        target = data.draw(st.integers(self.start, self.end))
        self.log.truncate_to(target)
        if target >= self.end:
            return
        # A batch holding the target goes whole: the log then ends at that batch's base.
        straddler = next((b for b, vs in self.batches if b < target < b + len(vs)), None)
        new_end = target if straddler is None else straddler
        self.batches = [(b, vs) for b, vs in self.batches if b + len(vs) <= new_end]
        self.end = new_end
        self.start = min(self.start, new_end)

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def delete_records_and_retention(self, data):
        new_start = data.draw(st.integers(self.start, self.end))
        self.log.delete_records(new_start)
        self.log.delete_old_segments()
        self.start = new_start

    @rule()
    def reopen_after_clean_close(self):
        self.log.close()
        self.log = Log.open(self.dir, CONFIG, clock=lambda: self.now, clean_shutdown=True,
                            log_start_offset=self.start, high_watermark=self.end)

    @rule(torn=st.integers(0, 60))
    def reopen_after_crash(self, torn):
        # The process dies (no close); a write in flight left ``torn`` bytes at the tail.
        if torn:
            garbage = encode_batch([Record(None, b"lost" * 20, self.now)])[:torn]
            with open(self.log.active_segment.log.path, "ab") as f:
                f.write(garbage)
        self.log = Log.open(self.dir, CONFIG, clock=lambda: self.now,
                            log_start_offset=self.start, high_watermark=self.end)

    # ---- invariants ------------------------------------------------------------------------
    @invariant()
    def offsets_agree(self):
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.start

    @invariant()
    def segments_are_ordered_and_named_by_base_offset(self):
        bases = [s.base_offset for s in self.log.segments]
        assert bases == sorted(set(bases))
        for s in self.log.segments:
            assert s.log.path.name == f"{s.base_offset:020d}.log"


LogModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
test_log_against_model = pytest.mark.timeout(240)(LogModel.TestCase)


def test_model_reads_everything_after_a_crash_mid_segment(tmp_path):
    """A hand-written case the machine also covers: crash, torn tail, reopen, append."""
    log = Log.open(tmp_path / "t-0", CONFIG)
    for i in range(20):
        log.append_as_leader(encode_batch([Record(None, b"%d" % i)]), 0)
    with open(log.active_segment.log.path, "ab") as f:
        f.write(b"\x00\x00\x00")
    again = Log.open(tmp_path / "t-0", CONFIG)
    again.append_as_leader(encode_batch([Record(None, b"20")]), 0)
    assert [v for _, v in read_all(again, 0)] == [b"%d" % i for i in range(21)]
