"""Kafka's hierarchical timing wheel: timer tasks, their entries, bucket lists and the wheel.

A wheel of ``wheel_size`` buckets, each ``tick_ms`` wide, covers ``interval_ms = tick_ms *
wheel_size`` from its ``current_time_ms``; a task due further out goes to a lazily created
overflow wheel whose tick is this wheel's interval. Buckets are doubly linked circular lists
(with a sentinel root), so inserting and cancelling a task are O(1). When a bucket of a higher
level expires, its entries are added again and fall (demote) into finer wheels, or run.

This module is pure (no threads started, no clock read, no Ray). Nothing here locks except
``TimerTaskEntry.remove`` (reached from ``TimerTask.cancel``, which may be called from any
thread): every other mutation happens while the caller - the ``SystemTimer`` - holds the
shared lock that all lists of one timer carry as ``TimerTaskList.lock``.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterator, Optional

from protocols.errors import InvalidConfigError

__all__ = ["TaskCounter", "TimerTask", "TimerTaskEntry", "TimerTaskList", "TimingWheel"]


class TaskCounter:
    """The number of entries held by all lists of one timer (Kafka's shared taskCounter)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTask:
    """Something to run ``delay_ms`` after it is added to a timer.

    Subclass it and override ``run``, or pass ``callback``. A task belongs to at most one
    entry at a time: adding it again (to any timer) removes the previous entry first.
    """

    __slots__ = ("delay_ms", "_timer_task_entry", "_callback")

    def __init__(self, delay_ms: int, callback: Optional[Callable[[], object]] = None):
        self.delay_ms = delay_ms
        self._timer_task_entry: Optional[TimerTaskEntry] = None
        self._callback = callback

    def run(self) -> None:
        if self._callback is None:
            raise NotImplementedError("override TimerTask.run or pass a callback")
        self._callback()

    def cancel(self) -> None:
        """Stop the task from firing; its entry leaves its bucket in O(1)."""
        entry = self._timer_task_entry
        if entry is not None:
            self._timer_task_entry = None
            entry.remove()

    @property
    def timer_task_entry(self) -> Optional[TimerTaskEntry]:
        return self._timer_task_entry


class TimerTaskEntry:
    """A task's place in a bucket: a node of a doubly linked circular list.

    ``lock`` is the lock of the timer the entry was made for (None for a bare wheel): removal
    takes it even before the entry is linked, so a cancel racing the add that is linking it
    waits for that add and then unlinks, instead of missing it.
    """

    __slots__ = ("timer_task", "expiration_ms", "list", "next", "prev", "lock")

    def __init__(self, timer_task: Optional[TimerTask], expiration_ms: int, lock=None):
        self.timer_task = timer_task
        self.expiration_ms = expiration_ms
        self.list: Optional[TimerTaskList] = None
        self.next: Optional[TimerTaskEntry] = None
        self.prev: Optional[TimerTaskEntry] = None
        self.lock = lock
        if timer_task is not None:
            # A task belongs to its newest entry; an older one leaves its list now.
            old = timer_task._timer_task_entry
            if old is not None:
                old.remove()
            timer_task._timer_task_entry = self

    def cancelled(self) -> bool:
        # A task that was cancelled, or re-added (which made a newer entry), disowns this one.
        return self.timer_task._timer_task_entry is not self

    def remove(self) -> None:
        lock = self.lock
        if lock is None:
            current = self.list
            if current is None:
                return
            # All lists of one timer share one lock, and an entry only ever moves between
            # lists of its own timer, so this lock still guards wherever it is now.
            lock = current.lock
        # acquire/release rather than ``with``: half the cost, and this is every cancel.
        lock.acquire()
        try:
            current = self.list
            if current is not None:
                # TimerTaskList.remove, inlined.
                self.next.prev = self.prev
                self.prev.next = self.next
                self.next = None
                self.prev = None
                self.list = None
                current._counter.value -= 1
        finally:
            lock.release()

    def __repr__(self) -> str:
        return f"TimerTaskEntry(expiration_ms={self.expiration_ms}, list={self.list!r})"


class TimerTaskList:
    """One bucket: a circular doubly linked list of entries behind a sentinel root.

    ``expiration_ms`` is the start of the time range the bucket holds in the current
    rotation (-1 while unused); ``level``, ``slot`` and ``tick_ms`` say where it sits.
    Callers hold ``lock`` while mutating.
    """

    __slots__ = ("_root", "expiration_ms", "lock", "_counter", "level", "slot", "tick_ms")

    def __init__(self, task_counter: TaskCounter, lock, *, level: int = 1, slot: int = 0,
                 tick_ms: int = 1):
        self._counter = task_counter
        self.lock = lock
        self.expiration_ms = -1
        self.level = level
        self.slot = slot
        self.tick_ms = tick_ms
        root = TimerTaskEntry(None, -1)
        root.next = root
        root.prev = root
        self._root = root

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True iff it changed (the bucket must be queued)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    @property
    def range_ms(self) -> tuple[int, int]:
        """The half-open range [start, end) of expirations this bucket holds now."""
        return (self.expiration_ms, self.expiration_ms + self.tick_ms)

    def add(self, entry: TimerTaskEntry) -> None:
        if entry.list is not None:
            entry.list.remove(entry)
        root = self._root
        tail = root.prev
        entry.next = root
        entry.prev = tail
        entry.list = self
        tail.next = entry
        root.prev = entry
        self._counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.list is self:
            entry.next.prev = entry.prev
            entry.prev.next = entry.next
            entry.next = None
            entry.prev = None
            entry.list = None
            self._counter.value -= 1

    def flush(self, f: Callable[[TimerTaskEntry], None]) -> None:
        """Empty the bucket, handing each entry (already unlinked) to ``f``; reset expiration."""
        root = self._root
        entry = root.next
        # Detach the whole chain first so ``f`` may add entries back into this very bucket.
        root.next = root
        root.prev = root
        while entry is not root:
            following = entry.next
            entry.next = None
            entry.prev = None
            entry.list = None
            self._counter.value -= 1
            f(entry)
            entry = following
        self.expiration_ms = -1

    def entries(self) -> Iterator[TimerTaskEntry]:
        entry = self._root.next
        while entry is not self._root:
            following = entry.next
            yield entry
            entry = following

    def tasks(self) -> list[TimerTask]:
        """The live (not cancelled) tasks in this bucket, in insertion order."""
        return [e.timer_task for e in self.entries() if not e.cancelled()]

    def __len__(self) -> int:
        return sum(1 for _ in self.entries())

    def __repr__(self) -> str:
        return (f"TimerTaskList(level={self.level}, slot={self.slot}, "
                f"range_ms={self.range_ms if self.expiration_ms >= 0 else None})")


class TimingWheel:
    """One level of the hierarchy; ``add`` walks up to overflow wheels as needed.

    ``queue`` receives a bucket whenever its expiration changes, i.e. when an unused or
    already expired bucket starts a new rotation; the ``SystemTimer`` keeps those buckets in
    its delay queue. Not thread-safe: the caller serialises ``add`` and ``advance_clock``.
    """

    __slots__ = ("tick_ms", "wheel_size", "interval_ms", "current_time_ms", "buckets",
                 "overflow_wheel", "level", "_counter", "_queue", "_lock")

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int,
                 task_counter: Optional[TaskCounter] = None,
                 queue: Optional[Callable[[TimerTaskList], None]] = None, *,
                 lock=None, level: int = 1):
        if tick_ms < 1 or wheel_size < 1:
            raise InvalidConfigError(
                f"tick_ms and wheel_size must be >= 1, got {tick_ms}, {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - (start_ms % tick_ms)
        self.level = level
        self._counter = task_counter if task_counter is not None else TaskCounter()
        self._queue = queue if queue is not None else (lambda bucket: None)
        self._lock = lock if lock is not None else threading.RLock()
        self.buckets = [TimerTaskList(self._counter, self._lock, level=level, slot=i,
                                      tick_ms=tick_ms) for i in range(wheel_size)]
        self.overflow_wheel: Optional[TimingWheel] = None

    @property
    def size(self) -> int:
        """Entries held by this wheel and every wheel above it."""
        return self._counter.value

    def _add_overflow_wheel(self) -> TimingWheel:
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel(self.interval_ms, self.wheel_size,
                                              self.current_time_ms, self._counter, self._queue,
                                              lock=self._lock, level=self.level + 1)
        return self.overflow_wheel

    def add(self, entry: TimerTaskEntry) -> bool:
        """Put ``entry`` in its bucket; False if it is cancelled or already expired.

        A False for a live entry means the caller must run its task now.
        """
        if entry.timer_task._timer_task_entry is not entry:
            return False
        expiration = entry.expiration_ms
        wheel = self
        if expiration < wheel.current_time_ms + wheel.tick_ms:
            return False
        # Climb to the first level whose interval covers it. Only level 1 can find it
        # expired: a higher level is reached with expiration >= current + interval of the
        # level below = current + tick of this one, and higher levels' current times never
        # run ahead of lower ones'. A loop, not Kafka's recursion: one frame for all levels.
        while expiration >= wheel.current_time_ms + wheel.interval_ms:
            wheel = wheel.overflow_wheel or wheel._add_overflow_wheel()
        tick = wheel.tick_ms
        virtual_id = expiration // tick
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        # TimerTaskList.add, inlined: link at the tail (root.prev).
        if entry.list is not None:
            entry.list.remove(entry)
        root = bucket._root
        tail = root.prev
        entry.next = root
        entry.prev = tail
        entry.list = bucket
        tail.next = entry
        root.prev = entry
        bucket._counter.value += 1
        bucket_expiration = virtual_id * tick
        if bucket.expiration_ms != bucket_expiration:
            # The bucket starts a new rotation (it was unused or already flushed): queue it
            # once; later adds in this rotation see the same value and do not queue it again.
            bucket.expiration_ms = bucket_expiration
            wheel._queue(bucket)
        return True

    def advance_clock(self, time_ms: int) -> None:
        """Move current time to ``time_ms`` (rounded down to the tick), cascading upwards."""
        wheel: Optional[TimingWheel] = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            wheel.current_time_ms = time_ms - (time_ms % wheel.tick_ms)
            time_ms = wheel.current_time_ms
            wheel = wheel.overflow_wheel

    def wheel_at_level(self, level: int) -> Optional[TimingWheel]:
        wheel: Optional[TimingWheel] = self
        while wheel is not None and wheel.level < level:
            wheel = wheel.overflow_wheel
        return wheel

    def __repr__(self) -> str:
        return (f"TimingWheel(level={self.level}, tick_ms={self.tick_ms}, "
                f"wheel_size={self.wheel_size}, current_time_ms={self.current_time_ms})")
