"""How long the brokers have throttled a client for being over its quota: Kafka's client
metrics ``produce-throttle-time-avg`` / ``-max`` (producer) and ``fetch-throttle-time-avg``
/ ``-max`` (consumer), over Kafka's metric window (``metrics.num.samples`` 2 samples of
``metrics.sample.window.ms`` 30 s). Every answer counts, throttled or not (0), as Kafka
records each response's throttle_time_ms."""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

WINDOW_S = 2 * 30.0


class ThrottleSensor:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()   # recorded by the client's thread, read by any

    def record(self, throttle_ms: int) -> None:
        now = self._clock()
        with self._lock:
            self._samples.append((now, throttle_ms))
            self._expire(now)

    def _expire(self, now: float) -> None:
        while self._samples and now - self._samples[0][0] > WINDOW_S:
            self._samples.popleft()

    def measure(self) -> tuple[float, float]:
        """(avg, max) of the throttle times in the window; Kafka's NaN with none, as its
        Avg and Max of no samples."""
        with self._lock:
            self._expire(self._clock())
            values = [ms for _, ms in self._samples]
        if not values:
            return float("nan"), float("nan")
        return sum(values) / len(values), float(max(values))
