"""SystemTimer (injected clock) and its two real-clock drivers."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.timer.system_timer import AsyncioTimer, SystemTimer, ThreadedTimer, monotonic_ms
from actors.timer.wheel import TimerTask
from protocols.errors import KafkaError
from tests.clock import ManualClock

pytestmark = pytest.mark.timeout(30)



def recording_task(clock, fired: list, name, delay_ms: int) -> TimerTask:
    return TimerTask(delay_ms, lambda: fired.append((name, clock())))


# -- SystemTimer with an injected clock -------------------------------------------------------

def test_a_task_already_due_runs_inside_add():
    clock = ManualClock(1000)
    timer = SystemTimer(clock)
    fired = []
    timer.add(recording_task(clock, fired, "now", 0))
    assert fired == [("now", 1000)]
    assert timer.size == 0 and timer.queued_buckets == 0


def test_tasks_fire_at_their_expiration_not_before():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    fired = []
    for delay in (1, 5, 19, 20, 21, 399, 400, 401, 8000, 8001, 160_000):
        timer.add(recording_task(clock, fired, delay, delay))
    assert timer.size == 11
    for now in range(1, 160_001):
        clock.now_ms = now
        timer.advance_clock(0)
    assert fired == [(d, d) for d in (1, 5, 19, 20, 21, 399, 400, 401, 8000, 8001, 160_000)]
    assert timer.size == 0


@settings(max_examples=60, deadline=None)
@given(start=st.integers(0, 10**12),
       delays=st.lists(st.integers(0, 200_000), min_size=1, max_size=40),
       steps=st.lists(st.integers(1, 30_000), min_size=1, max_size=40))
def test_each_task_fires_at_the_first_poll_at_or_after_its_expiration(start, delays, steps):
    clock = ManualClock(start)
    timer = SystemTimer(clock, tick_ms=1, wheel_size=20)
    fired: dict[int, int] = {}

    def make(i: int):
        def run():
            assert i not in fired
            fired[i] = clock()
        return run

    for i, delay in enumerate(delays):
        timer.add(TimerTask(delay, make(i)))
    polls = [start]
    for step in steps + [200_000]:
        clock.now_ms += step
        polls.append(clock.now_ms)
        timer.advance_clock(0)
    for i, delay in enumerate(delays):
        expected = start if delay == 0 else next(p for p in polls if p >= start + delay)
        assert fired[i] == expected
    assert timer.size == 0


def test_coarse_ticks_fire_within_one_tick_of_the_expiration():
    # With tick_ms > 1 a bucket holds [start, start + tick): its tasks fire when it expires.
    clock = ManualClock(0)
    timer = SystemTimer(clock, tick_ms=10, wheel_size=8)
    fired = []
    for delay in (15, 19, 20, 95, 1234):
        timer.add(recording_task(clock, fired, delay, delay))
    for now in range(1, 1300):
        clock.now_ms = now
        timer.advance_clock(0)
    assert fired == [(15, 10), (19, 10), (20, 20), (95, 90), (1234, 1230)]


def test_cancelled_tasks_never_fire_and_leave_the_count():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    fired = []
    keep = recording_task(clock, fired, "keep", 30)
    drop = recording_task(clock, fired, "drop", 30)
    far = recording_task(clock, fired, "far", 50_000)
    for t in (keep, drop, far):
        timer.add(t)
    assert timer.size == 3
    drop.cancel()
    far.cancel()
    assert timer.size == 1
    clock.now_ms = 60_000
    timer.advance_clock(0)
    assert fired == [("keep", 60_000)]
    keep.cancel()  # after firing: harmless
    assert timer.size == 0


def test_re_adding_a_task_replaces_its_previous_schedule():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    fired = []
    task = recording_task(clock, fired, "t", 10)
    timer.add(task)
    task.delay_ms = 500
    timer.add(task)
    assert timer.size == 1
    for now in range(1, 600):
        clock.now_ms = now
        timer.advance_clock(0)
    assert fired == [("t", 500)]


def test_only_non_empty_buckets_are_queued_and_work_follows_buckets_not_time():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    fired = []
    for i in range(1000):
        timer.add(recording_task(clock, fired, i, 7))
    assert timer.queued_buckets == 1  # a thousand tasks, one bucket
    timer.add(recording_task(clock, fired, "hour", 3_600_000))
    assert timer.queued_buckets == 2
    # Jump an hour in one poll: the hour-long task cascades down four levels, touching a
    # handful of buckets instead of 3.6 million ticks.
    clock.now_ms = 3_600_000
    started = time.perf_counter()
    assert timer.advance_clock(0)
    assert time.perf_counter() - started < 0.5
    assert len(fired) == 1001 and fired[-1] == ("hour", 3_600_000)
    assert timer.queued_buckets == 0


def test_advance_clock_reports_whether_a_bucket_expired():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    fired = []
    timer.add(recording_task(clock, fired, "a", 10))
    clock.now_ms = 9
    assert timer.advance_clock(0) is False
    clock.now_ms = 10
    assert timer.advance_clock(0) is True
    assert timer.advance_clock(0) is False


def test_advance_clock_waits_until_the_earliest_bucket_or_the_timeout():
    clock = ManualClock(0)
    timer = SystemTimer(clock, sleep=clock.sleep)
    fired = []
    timer.add(recording_task(clock, fired, "a", 150))
    # Nothing due yet: wait up to 200 ms, but the head bucket - level 2, [140, 160) -
    # expires at 140: like Kafka's DelayQueue.poll(timeout) the wait ends there, and the
    # flushed task demotes to level 1 instead of firing.
    assert timer.advance_clock(200) is True
    assert clock() == 140 and fired == []
    assert timer.advance_clock(200) is True
    assert clock() == 150 and fired == [("a", 150)]
    # Empty queue: the whole timeout passes and nothing expires.
    assert timer.advance_clock(200) is False
    assert clock() == 350


def test_task_callbacks_run_outside_the_timer_lock():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    added_from_other_thread = threading.Event()

    def callback():
        # Another thread must be able to use the timer while this callback runs.
        t = threading.Thread(target=lambda: (timer.add(TimerTask(5, lambda: None)),
                                             added_from_other_thread.set()))
        t.start()
        t.join(2)

    timer.add(TimerTask(10, callback))
    clock.now_ms = 10
    timer.advance_clock(0)
    assert added_from_other_thread.is_set()
    assert timer.size == 1


def test_a_failing_task_does_not_stop_the_others():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    fired = []

    def boom():
        raise RuntimeError("boom")

    timer.add(TimerTask(5, boom))
    timer.add(recording_task(clock, fired, "after", 5))
    clock.now_ms = 5
    timer.advance_clock(0)
    assert fired == [("after", 5)]


def test_a_task_can_reschedule_itself_from_its_callback():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    times = []

    class Periodic(TimerTask):
        def run(self):
            times.append(clock())
            if len(times) < 4:
                timer.add(self)

    timer.add(Periodic(100))
    for now in range(1, 1000):
        clock.now_ms = now
        timer.advance_clock(0)
    assert times == [100, 200, 300, 400]


def test_shutdown_drops_pending_tasks_and_refuses_new_ones():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    fired = []
    timer.add(recording_task(clock, fired, "a", 10))
    timer.add(recording_task(clock, fired, "b", 100_000))
    timer.shutdown()
    assert timer.size == 0 and timer.queued_buckets == 0 and timer.is_shutdown
    clock.now_ms = 200_000
    assert timer.advance_clock(0) is False
    assert fired == []
    with pytest.raises(KafkaError):
        timer.add(recording_task(clock, fired, "c", 1))


def test_concurrent_adds_and_cancels_keep_the_count_exact():
    clock = ManualClock(0)
    timer = SystemTimer(clock)
    fired = []
    tasks_per_thread = 3000
    kept: list[list[TimerTask]] = [[] for _ in range(4)]

    def worker(n: int):
        for i in range(tasks_per_thread):
            task = TimerTask(1 + (i * 37) % 90_000, lambda: fired.append(1))
            timer.add(task)
            if i % 2:
                task.cancel()
            else:
                kept[n].append(task)

    def ticker(stop: threading.Event):
        while not stop.is_set():
            timer.advance_clock(0)

    stop = threading.Event()
    tick = threading.Thread(target=ticker, args=(stop,))
    tick.start()
    workers = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    tick.join()
    assert timer.size == 4 * tasks_per_thread // 2
    clock.now_ms = 100_000
    timer.advance_clock(0)
    assert len(fired) == 4 * tasks_per_thread // 2 and timer.size == 0


# -- real-clock drivers ---------------------------------------------------------------------

def test_threaded_timer_fires_on_time_and_wakes_for_an_earlier_task():
    timer = ThreadedTimer(name="test-threaded-timer")
    try:
        fired: dict[str, float] = {}
        done = threading.Event()
        start = time.monotonic()
        timer.schedule(5_000, lambda: fired.setdefault("late", time.monotonic()))
        # The thread now sleeps until the 5 s bucket; a 50 ms task must wake it early.
        timer.schedule(50, lambda: (fired.setdefault("early", time.monotonic()), done.set()))
        assert done.wait(2)
        elapsed = fired["early"] - start
        assert 0.049 <= elapsed < 1.0
        assert "late" not in fired and timer.size == 1
    finally:
        timer.shutdown()
    assert not timer.is_alive and timer.size == 0


def test_threaded_timer_runs_many_tasks_in_expiration_order():
    timer = ThreadedTimer(name="test-threaded-order")
    try:
        order = []
        done = threading.Event()
        for delay in (90, 30, 60, 10):
            timer.schedule(delay, lambda d=delay: (order.append(d),
                                                   len(order) == 4 and done.set()))
        assert done.wait(2)
        assert order == [10, 30, 60, 90]
    finally:
        timer.shutdown()


def test_asyncio_timer_fires_on_time_and_wakes_for_an_earlier_task():
    async def scenario():
        timer = AsyncioTimer(name="test-asyncio-timer")
        loop = asyncio.get_running_loop()
        early = loop.create_future()
        start_ms = monotonic_ms()
        start = time.monotonic()
        timer.schedule(5_000, lambda: None)
        timer.schedule(40, lambda: early.set_result(time.monotonic()))
        fired_at = await asyncio.wait_for(early, 2)
        assert 0.039 <= fired_at - start < 1.0
        assert monotonic_ms() >= start_ms + 40
        assert timer.size == 1
        timer.shutdown()
        assert timer.size == 0

    asyncio.run(scenario())


def test_asyncio_timer_accepts_tasks_from_other_threads():
    async def scenario():
        timer = AsyncioTimer(name="test-asyncio-threads")
        loop = asyncio.get_running_loop()
        fired = loop.create_future()
        on_loop = []

        def callback():
            on_loop.append(asyncio.get_running_loop() is loop)
            fired.set_result(True)

        # Arm the loop's handle far away first, then add an earlier task from a thread.
        timer.schedule(10_000, lambda: None)
        await asyncio.sleep(0.01)
        start = time.monotonic()
        thread = threading.Thread(target=lambda: timer.schedule(30, callback))
        thread.start()
        thread.join()
        await asyncio.wait_for(fired, 2)
        assert time.monotonic() - start < 1.0
        assert on_loop == [True]
        timer.shutdown()

    asyncio.run(scenario())


def test_asyncio_timer_does_not_poll_while_idle():
    async def scenario():
        timer = AsyncioTimer(name="test-asyncio-idle")
        calls = 0
        advance = timer.timer.advance_clock

        def counting_advance(timeout_ms=0):
            nonlocal calls
            calls += 1
            return advance(timeout_ms)

        timer.timer.advance_clock = counting_advance
        timer.schedule(300, lambda: None)
        await asyncio.sleep(0.35)
        # One wakeup for the one bucket (allow one early wakeup), not one per millisecond.
        assert 1 <= calls <= 2 and timer.size == 0
        timer.shutdown()

    asyncio.run(scenario())
