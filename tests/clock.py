"""The injected clock every pure component's tests drive by hand."""
from __future__ import annotations


class ManualClock:
    """Milliseconds that move only when told; ``sleep`` moves them too (Kafka's MockTime)."""

    def __init__(self, now_ms: int = 0):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    sleep = advance
