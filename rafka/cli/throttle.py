"""Kafka's ThroughputThrottler (the perf tools' ``--throughput``): hold a sender to a target
rate by sleeping only once it is at least ``MIN_SLEEP_S`` ahead, so a rate of 10,000
records/s costs ~500 sleeps a second rather than 10,000 (each a wake-up on a busy machine)."""
from __future__ import annotations

import time
from typing import Callable

MIN_SLEEP_S = 0.002   # Kafka's MIN_SLEEP_NS


class ThroughputThrottler:
    def __init__(self, target_per_s: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        if target_per_s <= 0:
            raise ValueError(f"target throughput must be positive, got {target_per_s}")
        self.target_per_s = target_per_s
        self._clock = clock
        self._sleep = sleep
        self._started = clock()

    def throttle(self, sent_so_far: int) -> float:
        """Called after each send with the count so far; sleeps if that many are ahead of
        the target by MIN_SLEEP_S or more. Returns the seconds slept."""
        ahead = sent_so_far / self.target_per_s - (self._clock() - self._started)
        if ahead < MIN_SLEEP_S:
            return 0.0
        self._sleep(ahead)
        return ahead
