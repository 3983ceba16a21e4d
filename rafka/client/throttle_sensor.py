"""How long the brokers have throttled a client for being over its quota: Kafka's client
metrics ``produce-throttle-time-avg`` / ``-max`` (producer) and ``fetch-throttle-time-avg``
/ ``-max`` (consumer), over Kafka's metric window (``metrics.num.samples`` 2 samples of
``metrics.sample.window.ms`` 30 s). Every answer counts, throttled or not (0), as Kafka
records each response's throttle_time_ms. Kept as Kafka's SampledStat keeps it: a count, a
sum and a maximum per sample window, so recording is O(1) whatever the request rate."""
from __future__ import annotations

import threading
import time
from typing import Callable

SAMPLES = 2
SAMPLE_WINDOW_S = 30.0


class ThrottleSensor:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        # [window start, count, sum, max] per sample, the newest last.
        self._windows: list[list[float]] = []
        self._lock = threading.Lock()   # recorded by the client's thread, read by any

    def record(self, throttle_ms: int) -> None:
        now = self._clock()
        with self._lock:
            if not self._windows or now - self._windows[-1][0] >= SAMPLE_WINDOW_S:
                self._windows.append([now, 0, 0.0, 0.0])
                del self._windows[:-SAMPLES]
            window = self._windows[-1]
            window[1] += 1
            window[2] += throttle_ms
            window[3] = max(window[3], throttle_ms)

    def measure(self) -> tuple[float, float]:
        """(avg, max) of the throttle times in the live samples; Kafka's NaN with none, as
        its Avg and Max of no samples."""
        now = self._clock()
        with self._lock:
            live = [w for w in self._windows if now - w[0] < SAMPLES * SAMPLE_WINDOW_S]
        count = sum(w[1] for w in live)
        if not count:
            return float("nan"), float("nan")
        return sum(w[2] for w in live) / count, max(w[3] for w in live)
