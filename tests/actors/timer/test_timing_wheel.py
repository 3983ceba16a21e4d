"""The hierarchical timing wheel (Kafka's TimingWheel, TimerTaskList, TimerTaskEntry)."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.timer.system_timer import SystemTimer
from actors.timer.wheel import TaskCounter, TimerTask, TimerTaskEntry, TimerTaskList, TimingWheel
from protocols.errors import InvalidConfigError
from tests.clock import ManualClock

pytestmark = pytest.mark.timeout(30)



class Recorder:
    """Tasks that note the clock time at which they fired."""

    def __init__(self, clock: ManualClock):
        self.clock = clock
        self.fired: dict[str, int] = {}

    def task(self, name: str, delay_ms: int) -> TimerTask:
        def fire() -> None:
            assert name not in self.fired, f"{name} fired twice"
            self.fired[name] = self.clock()
        return TimerTask(delay_ms, fire)


def place(task: TimerTask) -> tuple[int, int, tuple[int, int]]:
    """(level, slot, [start, end)) of the bucket holding ``task``."""
    bucket = task.timer_task_entry.list
    return bucket.level, bucket.slot, bucket.range_ms


def wheel_with_queue(tick_ms: int, wheel_size: int, start_ms: int):
    queued: list[TimerTaskList] = []
    return TimingWheel(tick_ms, wheel_size, start_ms, TaskCounter(), queued.append), queued


def entry(delay_or_expiration: int) -> TimerTaskEntry:
    return TimerTaskEntry(TimerTask(0, lambda: None), delay_or_expiration)


# -- the seeds' worked example ----------------------------------------------------------------

def test_seed_example_tick_1ms_wheel_size_20():
    """Seed 000 §6: tickMs=1, wheelSize=20, interval 20 ms; level 2 ticks 20 ms (interval
    400 ms), level 3 ticks 400 ms (interval 8000 ms)."""
    clock = ManualClock(0)
    timer = SystemTimer(clock, tick_ms=1, wheel_size=20, start_ms=0)
    rec = Recorder(clock)
    wheel = timer.timing_wheel
    assert (wheel.tick_ms, wheel.wheel_size, wheel.interval_ms) == (1, 20, 20)

    # At time 0 a 2 ms task goes to slot 2.
    t2 = rec.task("2ms", 2)
    timer.add(t2)
    assert place(t2) == (1, 2, (2, 3))

    # At time 0, 350 ms exceeds level 1: level 2 (tick 20) slot 17, bucket [340, 360).
    t350 = rec.task("350ms", 350)
    timer.add(t350)
    assert place(t350) == (2, 17, (340, 360))
    level2 = wheel.overflow_wheel
    assert (level2.tick_ms, level2.interval_ms, level2.current_time_ms) == (20, 400, 0)

    # 450 ms exceeds level 2 as well: level 3 (tick 400) slot 1, whose bucket expires at
    # 400 ms and holds [400, 800) (446, 455 or 473 ms tasks would share it).
    t450 = rec.task("450ms", 450)
    timer.add(t450)
    assert place(t450) == (3, 1, (400, 800))
    level3 = level2.overflow_wheel
    assert (level3.tick_ms, level3.interval_ms) == (400, 8000)
    for other in (446, 455, 473):
        probe = rec.task(f"probe{other}", other)
        timer.add(probe)
        assert place(probe) == (3, 1, (400, 800))
        probe.cancel()

    # The pointer reaches slot 2 after 2 ms: the 2 ms task fires, not before.
    clock.now_ms = 1
    timer.advance_clock(0)
    assert "2ms" not in rec.fired
    clock.now_ms = 2
    assert timer.advance_clock(0)
    assert rec.fired["2ms"] == 2
    assert wheel.current_time_ms == 2

    # At time 2, an 8 ms task goes to slot 10, and a 19 ms task (due at 21) reuses the
    # already expired slot 1, now holding [21, 22).
    t8 = rec.task("8ms", 8)
    timer.add(t8)
    assert place(t8) == (1, 10, (10, 11))
    t19 = rec.task("19ms", 19)
    timer.add(t19)
    assert place(t19) == (1, 1, (21, 22))

    # Step the clock one millisecond at a time up to 399.
    for now in range(3, 400):
        clock.now_ms = now
        timer.advance_clock(0)
    assert rec.fired == {"2ms": 2, "8ms": 10, "19ms": 21, "350ms": 350}
    assert place(t450) == (3, 1, (400, 800))

    # At 400 ms the level-3 bucket expires; 50 ms remain: the task demotes to level 2,
    # bucket [440, 460) ("[40ms, 60ms)" after 400).
    clock.now_ms = 400
    assert timer.advance_clock(0)
    assert "450ms" not in rec.fired
    assert place(t450) == (2, 2, (440, 460))

    for now in range(401, 440):
        clock.now_ms = now
        timer.advance_clock(0)
        assert place(t450) == (2, 2, (440, 460))

    # At 440 ms, 10 ms remain: it demotes to level 1, bucket [450, 451) ("[10ms, 11ms)").
    clock.now_ms = 440
    assert timer.advance_clock(0)
    assert place(t450) == (1, 10, (450, 451))

    for now in range(441, 450):
        clock.now_ms = now
        timer.advance_clock(0)
        assert "450ms" not in rec.fired

    clock.now_ms = 450
    assert timer.advance_clock(0)
    assert rec.fired["450ms"] == 450
    assert timer.size == 0


# -- placement ------------------------------------------------------------------------------------

def test_current_time_is_rounded_down_to_the_tick():
    wheel, _ = wheel_with_queue(10, 8, 1234)
    assert wheel.current_time_ms == 1230
    assert wheel.interval_ms == 80


def test_expiration_before_current_time_plus_tick_is_expired():
    wheel, queued = wheel_with_queue(10, 8, 1230)
    for expiration in (0, 1229, 1230, 1239):
        assert wheel.add(entry(expiration)) is False
    assert wheel.size == 0 and queued == []
    assert wheel.add(entry(1240)) is True


def test_virtual_id_and_bucket_index():
    wheel, queued = wheel_with_queue(10, 8, 1230)
    e = entry(1297)  # virtual id 129 -> slot 129 % 8 = 1, bucket expiration 1290
    assert wheel.add(e)
    assert (e.list.level, e.list.slot, e.list.expiration_ms) == (1, 1, 1290)
    assert queued == [e.list]


def test_bucket_is_queued_only_when_its_expiration_changes():
    wheel, queued = wheel_with_queue(1, 20, 0)
    a, b = entry(5), entry(5)
    wheel.add(a)
    wheel.add(b)
    assert a.list is b.list
    assert queued == [a.list]  # the second add kept the same expiration
    bucket = a.list
    # Expire the bucket, move on one rotation and reuse the slot: it is queued again.
    wheel.advance_clock(5)
    bucket.flush(lambda e: None)
    assert bucket.expiration_ms == -1
    wheel.advance_clock(6)
    c = entry(25)
    wheel.add(c)
    assert c.list is bucket and bucket.expiration_ms == 25
    assert queued == [bucket, bucket]


def test_overflow_wheel_is_created_lazily_with_tick_equal_to_the_interval():
    wheel, queued = wheel_with_queue(1, 20, 7)
    assert wheel.overflow_wheel is None
    wheel.add(entry(26))  # 7 + 19 still fits level 1
    assert wheel.overflow_wheel is None
    wheel.advance_clock(13)
    wheel.add(entry(13 + 20))
    overflow = wheel.overflow_wheel
    assert overflow is not None
    assert (overflow.level, overflow.tick_ms, overflow.wheel_size) == (2, 20, 20)
    assert overflow.current_time_ms == 0  # start = the lower wheel's current time (13), rounded
    assert overflow.overflow_wheel is None


def test_advance_clock_cascades_to_overflow_wheels():
    wheel, _ = wheel_with_queue(1, 20, 0)
    wheel.add(entry(5000))  # creates levels 2 and 3
    wheel.advance_clock(19)
    assert [w.current_time_ms for w in (wheel, wheel.overflow_wheel,
                                        wheel.wheel_at_level(3))] == [19, 0, 0]
    wheel.advance_clock(845)
    assert [w.current_time_ms for w in (wheel, wheel.overflow_wheel,
                                        wheel.wheel_at_level(3))] == [845, 840, 800]
    wheel.advance_clock(844)  # never backwards
    assert wheel.current_time_ms == 845


@settings(max_examples=300, deadline=None)
@given(tick_ms=st.integers(1, 50), wheel_size=st.integers(2, 64),
       start_ms=st.integers(0, 10**9), delay=st.integers(0, 10**8))
def test_every_entry_lands_in_the_bucket_whose_range_holds_its_expiration(
        tick_ms, wheel_size, start_ms, delay):
    wheel, queued = wheel_with_queue(tick_ms, wheel_size, start_ms)
    current = wheel.current_time_ms
    e = entry(current + delay)
    added = wheel.add(e)
    assert added == (delay >= tick_ms)
    if not added:
        return
    bucket = e.list
    start, end = bucket.range_ms
    assert start <= e.expiration_ms < end
    level_wheel = wheel.wheel_at_level(bucket.level)
    assert level_wheel.tick_ms == tick_ms * wheel_size ** (bucket.level - 1)
    assert bucket.tick_ms == level_wheel.tick_ms
    # The lowest level that can hold it: it did not fit the level below.
    if bucket.level > 1:
        below = wheel.wheel_at_level(bucket.level - 1)
        assert e.expiration_ms >= below.current_time_ms + below.interval_ms
    assert queued[-1] is bucket


# -- lists and entries ----------------------------------------------------------------------

def test_cancel_unlinks_the_entry_in_place():
    wheel, _ = wheel_with_queue(1, 20, 0)
    tasks = [TimerTask(0, lambda: None) for _ in range(3)]
    entries = [TimerTaskEntry(t, 5) for t in tasks]
    for e in entries:
        wheel.add(e)
    bucket = entries[0].list
    assert bucket.tasks() == tasks and wheel.size == 3
    tasks[1].cancel()
    assert entries[1].list is None and entries[1].next is None and entries[1].prev is None
    assert entries[0].next is entries[2] and entries[2].prev is entries[0]
    assert bucket.tasks() == [tasks[0], tasks[2]] and wheel.size == 2
    tasks[1].cancel()  # twice is harmless
    assert wheel.size == 2


def test_a_cancelled_entry_is_not_added():
    wheel, _ = wheel_with_queue(1, 20, 0)
    task = TimerTask(0, lambda: None)
    e = TimerTaskEntry(task, 5)
    task.cancel()
    assert e.cancelled()
    assert wheel.add(e) is False and wheel.size == 0


def test_re_adding_a_task_moves_it_out_of_its_old_list():
    wheel, _ = wheel_with_queue(1, 20, 0)
    task = TimerTask(0, lambda: None)
    first = TimerTaskEntry(task, 5)
    wheel.add(first)
    old_bucket = first.list
    second = TimerTaskEntry(task, 9)  # the task now belongs to the newer entry
    assert first.list is None and first.cancelled()
    wheel.add(second)
    assert old_bucket.tasks() == [] and second.list.slot == 9 and wheel.size == 1


def test_list_add_moves_an_entry_between_lists():
    counter, lock = TaskCounter(), threading.RLock()
    a, b = TimerTaskList(counter, lock), TimerTaskList(counter, lock)
    e = entry(1)
    a.add(e)
    b.add(e)
    assert e.list is b and len(a) == 0 and len(b) == 1 and counter.value == 1


def test_flush_hands_over_every_entry_and_resets_the_expiration():
    wheel, _ = wheel_with_queue(1, 20, 0)
    entries = [entry(7) for _ in range(4)]
    for e in entries:
        wheel.add(e)
    bucket = entries[0].list
    seen = []
    bucket.flush(seen.append)
    assert seen == entries
    assert all(e.list is None for e in entries)
    assert len(bucket) == 0 and bucket.expiration_ms == -1 and wheel.size == 0


def test_flush_callback_may_add_back_into_the_same_bucket():
    wheel, _ = wheel_with_queue(1, 20, 0)
    e = entry(7)
    wheel.add(e)
    bucket = e.list
    bucket.flush(bucket.add)
    assert e.list is bucket and len(bucket) == 1


def test_invalid_geometry_is_rejected():
    with pytest.raises(InvalidConfigError):
        TimingWheel(0, 20, 0)
    with pytest.raises(InvalidConfigError):
        TimingWheel(1, 0, 0)


def test_the_pure_timer_modules_do_not_import_ray():
    code = ("import sys, actors.timer, actors.timer.wheel, actors.timer.system_timer, "
            "actors.timer.purgatory; sys.exit('ray' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[3])
    assert result.returncode == 0
