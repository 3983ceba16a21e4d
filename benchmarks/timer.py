"""Timing wheel vs a heapq timer: insert+cancel cost and fire accuracy.

Usage: .venv/bin/python benchmarks/timer.py [--sizes 10000,100000,1000000] [--ops 200000]

1. Insert + cancel cost per task with N tasks outstanding. The clock is injected and frozen,
   so nothing fires and N stays constant; each operation adds a new task (delay uniform in
   1..30000 ms, Kafka's request.timeout.ms range) and cancels a random outstanding one, as a
   purgatory does when requests complete before their timeout. The heapq timer cancels by
   lazy deletion and compacts its heap when cancelled entries pass half of it (asyncio's
   policy), the fair comparison: eager removal from a heap is O(n). It is measured with a
   lock, like the thread-safe SystemTimer, and without one, like asyncio's single-threaded
   scheduler.
2. Fire accuracy: tasks spread uniformly over a window on the real monotonic clock; lateness
   is the firing time minus the millisecond each timer was asked for. The wheel runs in its
   own drivers (ThreadedTimer, AsyncioTimer); the heapq timer runs in an identical thread
   driver, and asyncio's loop.call_at (itself a heapq timer) is the asyncio baseline.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import itertools
import os
import platform
import random
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.timer.system_timer import (  # noqa: E402
    AsyncioTimer, SystemTimer, ThreadedTimer, monotonic_ms)
from actors.timer.wheel import TimerTask  # noqa: E402
from benchmarks.machine import cpu_model  # noqa: E402

DELAY_MIN_MS, DELAY_MAX_MS = 1, 30_000
FROZEN_NOW_MS = 1_000_000_000


# -- the heapq baseline -------------------------------------------------------------------------

class HeapqTask:
    __slots__ = ("delay_ms", "callback", "cancelled", "timer", "expiration_ms")

    def __init__(self, delay_ms: int, callback: Callable[[], object]):
        self.delay_ms = delay_ms
        self.callback = callback
        self.cancelled = False
        self.timer: Optional[HeapqTimer] = None
        self.expiration_ms = -1

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if self.timer is not None:
                self.timer._on_cancel()


class _NoLock:
    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        pass


class HeapqTimer:
    """A binary-heap timer with lazy-deletion cancel and asyncio's compaction rule."""

    def __init__(self, clock: Callable[[], int], *, locked: bool = True,
                 wakeup: Optional[Callable[[int], None]] = None):
        self._clock = clock
        self._heap: list[tuple[int, int, HeapqTask]] = []
        self._seq = itertools.count()
        self._cancelled = 0
        self._lock = threading.Lock() if locked else _NoLock()
        self._wakeup = wakeup

    @property
    def size(self) -> int:
        return len(self._heap) - self._cancelled

    def add(self, task: HeapqTask) -> None:
        lock = self._lock
        lock.acquire()
        try:
            task.timer = self
            expiration = task.expiration_ms = self._clock() + task.delay_ms
            heap = self._heap
            new_head = not heap or expiration < heap[0][0]
            heapq.heappush(heap, (expiration, next(self._seq), task))
        finally:
            lock.release()
        if new_head and self._wakeup is not None:
            self._wakeup(expiration)

    def _on_cancel(self) -> None:
        lock = self._lock
        lock.acquire()
        try:
            self._cancelled += 1
            if self._cancelled > 100 and self._cancelled * 2 > len(self._heap):
                live = [item for item in self._heap if not item[2].cancelled]
                heapq.heapify(live)
                self._heap = live
                self._cancelled = 0
        finally:
            lock.release()

    def next_expiration_ms(self) -> Optional[int]:
        heap = self._heap
        return heap[0][0] if heap else None

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        due = []
        lock = self._lock
        lock.acquire()
        try:
            now = self._clock()
            heap = self._heap
            while heap and heap[0][0] <= now:
                task = heapq.heappop(heap)[2]
                if task.cancelled:
                    self._cancelled -= 1
                else:
                    task.timer = None
                    due.append(task)
        finally:
            lock.release()
        for task in due:
            task.callback()
        return bool(due)


class HeapqThreadedTimer:
    """The heapq timer in the same thread driver as ThreadedTimer."""

    def __init__(self):
        self._wake = threading.Event()
        self._stopped = False
        self.timer = HeapqTimer(monotonic_ms, wakeup=lambda _ms: self._wake.set())
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while not self._stopped:
            self._wake.clear()
            self.timer.advance_clock(0)
            head = self.timer.next_expiration_ms()
            timeout = None if head is None else max(
                0.0, (head * 1_000_000 - time.monotonic_ns()) / 1e9)
            self._wake.wait(timeout)

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(5)


# -- machine and formatting ---------------------------------------------------------------------

def machine_line(gc_in_loops: bool) -> str:
    return (f"machine: cpu=\"{cpu_model()}\" cores={os.cpu_count()} "
            f"python={platform.python_implementation()} {platform.python_version()} "
            f"os={platform.system()} {platform.release()} "
            f"gc={'enabled' if gc_in_loops else 'disabled in timed insert+cancel loops'}")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- 1. insert + cancel -------------------------------------------------------------------------

def _noop() -> None:
    pass


def insert_cancel_us(kind: str, outstanding: int, ops: int, trials: int, seed: int,
                     gc_in_loops: bool = True) -> tuple[int, list[float]]:
    rng = random.Random(seed)
    clock = lambda: FROZEN_NOW_MS  # noqa: E731 - frozen: nothing fires, N stays constant
    if kind == "timing-wheel":
        timer = SystemTimer(clock, tick_ms=1, wheel_size=20)
        make = TimerTask
    else:
        timer = HeapqTimer(clock, locked=(kind == "heapq+lock"))
        make = HeapqTask
    add = timer.add
    live = [make(rng.randint(DELAY_MIN_MS, DELAY_MAX_MS), _noop) for _ in range(outstanding)]
    for task in live:
        add(task)
    results = []
    # At least two operations per outstanding task, so the heapq timer goes through a full
    # lazy-deletion compaction cycle inside every trial and pays its amortised cost.
    ops = max(ops, 2 * outstanding)
    for _ in range(trials):
        delays = [rng.randint(DELAY_MIN_MS, DELAY_MAX_MS) for _ in range(ops)]
        victims = [rng.randrange(outstanding) for _ in range(ops)]
        if not gc_in_loops:
            gc.disable()
        started = time.perf_counter()
        for delay, victim in zip(delays, victims):
            task = make(delay, _noop)
            add(task)
            live[victim].cancel()
            live[victim] = task
        elapsed = time.perf_counter() - started
        gc.enable()
        assert timer.size == outstanding, (kind, timer.size)
        results.append(elapsed / ops * 1e6)
    del live, timer
    gc.collect()
    return ops, results


def run_insert_cancel(sizes: list[int], ops: int, trials: int,
                      gc_in_loops: bool = True) -> dict[tuple[str, int], float]:
    print(f"# insert+cancel: ops=max({ops}, 2*outstanding) per trial, trials={trials} "
          f"(median reported), "
          f"delay.ms={DELAY_MIN_MS}..{DELAY_MAX_MS} uniform, tick.ms=1 wheel.size=20, "
          f"clock=injected (frozen)")
    medians = {}
    for n in sizes:
        for kind in ("timing-wheel", "heapq+lock", "heapq-nolock"):
            done_ops, per_op = insert_cancel_us(kind, n, ops, trials, seed=n,
                                                gc_in_loops=gc_in_loops)
            med = statistics.median(per_op)
            medians[(kind, n)] = med
            print(f"{done_ops} ops, {med:.3f} us/op (insert+cancel), {1e6 / med:,.1f} ops/sec, "
                  f"trials={'/'.join(f'{x:.3f}' for x in per_op)} us, timer={kind}, "
                  f"outstanding={n}, peak.rss={peak_rss_mb():.0f} MB", flush=True)
    return medians


# -- 2. fire accuracy ---------------------------------------------------------------------------

def lateness_line(label: str, lateness_ms: list[float], spread_ms: int, lead_ms: int) -> str:
    data = sorted(lateness_ms)
    n = len(data)

    def pct(p: float) -> float:
        return data[min(n - 1, int(p * n))]

    early = sum(1 for x in data if x < 0)
    return (f"{n} tasks fired, spread.ms={spread_ms} lead.ms={lead_ms}, "
            f"{statistics.fmean(data):.3f} ms avg late, {data[-1]:.3f} ms max late, "
            f"{pct(0.5):.3f} ms 50th, {pct(0.99):.3f} ms 99th, {pct(0.999):.3f} ms 99.9th, "
            f"{early} early (min {data[0]:.3f} ms), {label}")


def _targets(count: int, spread_ms: int, lead_ms: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(spread_ms) for _ in range(count)]


def fire_threaded(kind: str, count: int, spread_ms: int, lead_ms: int) -> list[float]:
    offsets = _targets(count, spread_ms, lead_ms, seed=7)
    fired = [0] * count
    remaining = [count]
    done = threading.Event()
    counter_lock = threading.Lock()

    def on_fire(i: int) -> None:
        fired[i] = time.monotonic_ns()
        with counter_lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    if kind == "timing-wheel":
        driver = ThreadedTimer(name="bench-wheel")
        make = TimerTask
    else:
        driver = HeapqThreadedTimer()
        make = HeapqTask
    timer = driver.timer
    expirations = [0] * count
    start_ms = monotonic_ms() + lead_ms
    for i, offset in enumerate(offsets):
        task = make(start_ms + offset - monotonic_ms(), lambda i=i: on_fire(i))
        timer.add(task)
        expirations[i] = (task.timer_task_entry.expiration_ms if kind == "timing-wheel"
                          else task.expiration_ms)
    assert done.wait(spread_ms / 1000 + lead_ms / 1000 + 30), "tasks did not all fire"
    driver.shutdown()
    return [(fired[i] - expirations[i] * 1_000_000) / 1e6 for i in range(count)]


def fire_asyncio(kind: str, count: int, spread_ms: int, lead_ms: int) -> list[float]:
    offsets = _targets(count, spread_ms, lead_ms, seed=7)
    fired = [0] * count
    expirations = [0] * count

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        remaining = [count]

        def on_fire(i: int) -> None:
            fired[i] = time.monotonic_ns()
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set_result(None)

        start_ms = monotonic_ms() + lead_ms
        if kind == "timing-wheel":
            timer = AsyncioTimer(name="bench-asyncio")
            for i, offset in enumerate(offsets):
                task = TimerTask(start_ms + offset - monotonic_ms(), lambda i=i: on_fire(i))
                timer.add(task)
                expirations[i] = task.timer_task_entry.expiration_ms
        else:
            # asyncio's own scheduler: loop.time() is time.monotonic() on the default loop.
            for i, offset in enumerate(offsets):
                expirations[i] = start_ms + offset
                loop.call_at((start_ms + offset) / 1000, on_fire, i)
        await asyncio.wait_for(done, spread_ms / 1000 + lead_ms / 1000 + 30)
        if kind == "timing-wheel":
            timer.shutdown()

    asyncio.run(scenario())
    return [(fired[i] - expirations[i] * 1_000_000) / 1e6 for i in range(count)]


def run_fire_accuracy(count: int, spread_ms: int, lead_ms: int) -> None:
    print(f"# fire accuracy: real monotonic clock, {count} tasks uniform over {spread_ms} ms "
          f"starting {lead_ms} ms after insertion began; late = fired - requested ms")
    for label, fn, kind in (
            ("timer=timing-wheel driver=ThreadedTimer", fire_threaded, "timing-wheel"),
            ("timer=heapq driver=thread (same loop)", fire_threaded, "heapq"),
            ("timer=timing-wheel driver=AsyncioTimer", fire_asyncio, "timing-wheel"),
            ("timer=heapq driver=asyncio loop.call_at", fire_asyncio, "asyncio")):
        gc.collect()
        print(lateness_line(label, fn(kind, count, spread_ms, lead_ms), spread_ms, lead_ms),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000",
                        help="outstanding task counts, comma separated")
    parser.add_argument("--ops", type=int, default=200_000, help="insert+cancel ops per trial")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--fire-tasks", type=int, default=100_000)
    parser.add_argument("--spread-ms", type=int, default=10_000)
    parser.add_argument("--lead-ms", type=int, default=1_000,
                        help="gap between the start of insertion and the first possible fire")
    parser.add_argument("--skip-fire", action="store_true")
    parser.add_argument("--no-gc", action="store_true",
                        help="disable the cyclic GC inside the timed insert+cancel loops, to "
                             "see the data structures without CPython's collector")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    print(machine_line(not args.no_gc))
    medians = run_insert_cancel(sizes, args.ops, args.trials, gc_in_loops=not args.no_gc)
    lo, hi = min(sizes), max(sizes)
    wheel_lo, wheel_hi = medians[("timing-wheel", lo)], medians[("timing-wheel", hi)]
    heap_hi = medians[("heapq+lock", hi)]
    heap_nolock_hi = medians[("heapq-nolock", hi)]
    print(f"# target: wheel cost flat within 2x from {lo} to {hi}: "
          f"{wheel_hi / wheel_lo:.2f}x -> {'PASS' if wheel_hi <= 2 * wheel_lo else 'FAIL'}; "
          f"wheel below heapq at {hi}: {wheel_hi:.3f} vs {heap_hi:.3f} us/op (with lock) -> "
          f"{'PASS' if wheel_hi < heap_hi else 'FAIL'}; "
          f"vs {heap_nolock_hi:.3f} us/op (heapq without lock) -> "
          f"{'below' if wheel_hi < heap_nolock_hi else 'NOT below'}")
    if not args.skip_fire:
        run_fire_accuracy(args.fire_tasks, args.spread_ms, args.lead_ms)


if __name__ == "__main__":
    main()
