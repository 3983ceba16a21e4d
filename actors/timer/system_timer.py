"""Kafka's SystemTimer: a timing wheel driven by a delay queue of buckets.

Only non-empty buckets sit in the delay queue (a heap ordered by bucket expiration), so
advancing the clock costs work proportional to the buckets that expire, never to the
milliseconds that passed. ``SystemTimer`` reads an injected clock and never starts threads;
two drivers put it on a real monotonic clock:

- ``AsyncioTimer`` for actors: one ``loop.call_later`` handle armed for the earliest bucket,
  re-armed when an earlier task arrives. No fixed-interval polling.
- ``ThreadedTimer`` for clients: a daemon thread that waits on an event until the earliest
  bucket's expiration, woken early by an earlier task.

Expired tasks run on the thread that found them (the caller of ``add`` or of
``advance_clock``), always after the timer's lock has been released.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from typing import Callable, Optional

from protocols.errors import KafkaError

from actors.timer.wheel import TaskCounter, TimerTask, TimerTaskEntry, TimerTaskList, TimingWheel

__all__ = ["SystemTimer", "AsyncioTimer", "ThreadedTimer", "monotonic_ms"]

logger = logging.getLogger(__name__)

Clock = Callable[[], int]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class SystemTimer:
    """A hierarchical timing wheel plus a delay queue of its non-empty buckets.

    ``clock`` returns milliseconds. ``sleep(ms)``, if given, is how ``advance_clock`` waits
    when nothing has expired yet (a manual clock's ``sleep`` moves its time, like Kafka's
    MockTime); without it ``advance_clock`` only polls. ``wakeup(expiration_ms)`` is called,
    outside the lock, when ``add`` queues a bucket that expires before every queued one, so a
    driver sleeping until the old head can re-arm.
    """

    def __init__(self, clock: Clock, *, tick_ms: int = 1, wheel_size: int = 20,
                 start_ms: Optional[int] = None, sleep: Optional[Callable[[int], None]] = None,
                 wakeup: Optional[Callable[[int], None]] = None, name: str = "timer"):
        self.name = name
        self._clock = clock
        self._sleep = sleep
        self._wakeup = wakeup
        # Re-entrant: inside add, a re-added task's old entry leaves its list, which takes
        # this lock again.
        self._lock = threading.RLock()
        self._counter = TaskCounter()
        self._delay_queue: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self._new_head_ms: Optional[int] = None
        self._shut_down = False
        self.timing_wheel = TimingWheel(tick_ms, wheel_size,
                                        clock() if start_ms is None else start_ms,
                                        self._counter, self._offer, lock=self._lock)
        self._wheel_add = self.timing_wheel.add

    # -- the delay queue -------------------------------------------------------------------
    def _offer(self, bucket: TimerTaskList) -> None:
        expiration = bucket.expiration_ms
        queue = self._delay_queue
        if not queue or expiration < queue[0][0]:
            self._new_head_ms = expiration
        heapq.heappush(queue, (expiration, next(self._seq), bucket))

    @property
    def queued_buckets(self) -> int:
        """How many buckets wait in the delay queue (only non-empty ones are queued)."""
        return len(self._delay_queue)

    def next_expiration_ms(self) -> Optional[int]:
        """The expiration of the earliest queued bucket, or None."""
        with self._lock:
            queue = self._delay_queue
            return queue[0][0] if queue else None

    # -- tasks -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Tasks waiting in the wheel (cancelled ones leave at once)."""
        return self._counter.value

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now; run it now if already due."""
        lock = self._lock
        lock.acquire()  # not ``with``: this is the hot path and acquire/release is cheaper
        try:
            if self._shut_down:
                raise KafkaError(f"timer {self.name} is shut down")
            entry = TimerTaskEntry(task, task.delay_ms + self._clock(), lock)
            if self._wheel_add(entry):
                run_now = False
            else:
                run_now = task._timer_task_entry is entry
                if run_now:
                    task._timer_task_entry = None
            new_head = self._new_head_ms
            if new_head is not None:
                self._new_head_ms = None
        finally:
            lock.release()
        if run_now:
            self._run(task)
        elif new_head is not None and self._wakeup is not None:
            self._wakeup(new_head)

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Flush every bucket expired by the clock and run the tasks that are due.

        If none has expired, wait (through ``sleep``) up to ``timeout_ms`` or until the
        earliest bucket expires, then look again. True iff some bucket was flushed.
        """
        due: list[TimerTask] = []
        flushed = self._poll(due)
        if not flushed and timeout_ms > 0 and self._sleep is not None:
            with self._lock:
                now = self._clock()
                queue = self._delay_queue
                wait_ms = timeout_ms if not queue else max(0, min(timeout_ms, queue[0][0] - now))
            if wait_ms > 0:
                self._sleep(wait_ms)
            flushed = self._poll(due)
        for task in due:
            self._run(task)
        return flushed

    def _poll(self, due: list[TimerTask]) -> bool:
        flushed = False
        with self._lock:
            now = self._clock()
            queue = self._delay_queue
            wheel = self.timing_wheel

            def reinsert(entry: TimerTaskEntry) -> None:
                # Demote into a finer wheel, or collect it to run once the lock is released.
                if not wheel.add(entry):
                    task = entry.timer_task
                    if task._timer_task_entry is entry:
                        task._timer_task_entry = None  # fired: also breaks the task<->entry cycle
                        due.append(task)

            while queue and queue[0][0] <= now:
                expiration, _, bucket = heapq.heappop(queue)
                if bucket.expiration_ms != expiration:
                    continue  # stale: the bucket was flushed and reused since it was queued
                flushed = True
                wheel.advance_clock(expiration)
                bucket.flush(reinsert)
            self._new_head_ms = None
        return flushed

    def _run(self, task: TimerTask) -> None:
        try:
            task.run()
        except Exception:
            # One failing task must not stop the timer or the tasks queued behind it.
            logger.exception("timer %s: task %r failed", self.name, task)

    def shutdown(self) -> None:
        """Drop every pending task; later ``add`` calls raise."""
        with self._lock:
            self._shut_down = True
            for _, _, bucket in self._delay_queue:
                bucket.flush(_disown)
            self._delay_queue.clear()

    @property
    def is_shutdown(self) -> bool:
        return self._shut_down


def _disown(entry: TimerTaskEntry) -> None:
    task = entry.timer_task
    if task._timer_task_entry is entry:
        task._timer_task_entry = None


class _TimerDriver:
    """What both drivers of a ``SystemTimer`` on the monotonic clock offer: the timer's
    ``Timer`` protocol (for purgatories) and ``schedule`` (for callbacks). A driver wakes when
    the earliest task is due; ``advance_clock`` never blocks (the driver does the waiting)."""

    timer: SystemTimer

    @property
    def size(self) -> int:
        return self.timer.size

    def add(self, task: TimerTask) -> None:
        self.timer.add(task)

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        return self.timer.advance_clock(0)

    def schedule(self, delay_ms: int, callback: Callable[[], object]) -> TimerTask:
        task = TimerTask(delay_ms, callback)
        self.timer.add(task)
        return task


class AsyncioTimer(_TimerDriver):
    """A ``SystemTimer`` on the monotonic clock, driven by an asyncio event loop.

    Build it inside the loop (or pass ``loop``). Tasks run on the loop. ``add`` may be called
    from any thread; from another thread the re-arm is handed to the loop thread-safely.
    """

    def __init__(self, *, tick_ms: int = 1, wheel_size: int = 20,
                 loop: Optional[asyncio.AbstractEventLoop] = None, name: str = "asyncio-timer"):
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._handle: Optional[asyncio.TimerHandle] = None
        self._armed_for_ms: Optional[int] = None
        self._closed = False
        self.timer = SystemTimer(monotonic_ms, tick_ms=tick_ms, wheel_size=wheel_size,
                                 wakeup=self._on_new_head, name=name)

    def _on_new_head(self, expiration_ms: int) -> None:
        if self._closed:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._arm()
        else:
            self._loop.call_soon_threadsafe(self._arm)

    def _arm(self) -> None:
        if self._closed:
            return
        head = self.timer.next_expiration_ms()
        if head is None:
            return
        if self._handle is not None:
            if self._armed_for_ms is not None and self._armed_for_ms <= head:
                return
            self._handle.cancel()
        # Wake at the head's millisecond boundary on the same clock the timer reads.
        delay_s = max(0.0, (head * 1_000_000 - time.monotonic_ns()) / 1e9)
        self._handle = self._loop.call_later(delay_s, self._on_timer)
        self._armed_for_ms = head

    def _on_timer(self) -> None:
        self._handle = None
        self._armed_for_ms = None
        if self._closed:
            return
        self.timer.advance_clock(0)
        self._arm()

    def shutdown(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.timer.shutdown()


class ThreadedTimer(_TimerDriver):
    """A ``SystemTimer`` on the monotonic clock, driven by a daemon thread (for clients)."""

    def __init__(self, *, tick_ms: int = 1, wheel_size: int = 20, name: str = "rafka-timer"):
        self._wake = threading.Event()
        self._stopped = False
        self.timer = SystemTimer(monotonic_ms, tick_ms=tick_ms, wheel_size=wheel_size,
                                 wakeup=lambda _ms: self._wake.set(), name=name)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while not self._stopped:
            # Clear before looking at the head: a wakeup set after this point is not lost.
            self._wake.clear()
            self.timer.advance_clock(0)
            head = self.timer.next_expiration_ms()
            timeout = None if head is None else max(
                0.0, (head * 1_000_000 - time.monotonic_ns()) / 1e9)
            self._wake.wait(timeout)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        self._stopped = True
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        self.timer.shutdown()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()
