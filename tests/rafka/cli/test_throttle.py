"""The perf tools' --throughput: Kafka's ThroughputThrottler semantics."""
import pytest

from rafka.cli.throttle import MIN_SLEEP_S, ThroughputThrottler


class SecondsClock:
    def __init__(self):
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_sleeps_only_when_two_ms_ahead_and_holds_the_rate():
    clock = SecondsClock()
    throttler = ThroughputThrottler(10_000, clock=clock, sleep=clock.sleep)
    for sent in range(1, 10_001):
        clock.now += 0.00001          # sending costs 10 us a record: far ahead of 10,000/s
        throttler.throttle(sent)
    # 10,000 records at 10,000/s take one second, however fast they are sent ...
    assert clock.now - 100.0 == pytest.approx(1.0, abs=MIN_SLEEP_S)
    # ... and are held back by sleeps of at least 2 ms, not one sleep per record.
    assert all(s >= MIN_SLEEP_S for s in clock.sleeps)
    assert 400 <= len(clock.sleeps) <= 550


def test_a_sender_slower_than_the_target_never_sleeps():
    clock = SecondsClock()
    throttler = ThroughputThrottler(1_000, clock=clock, sleep=clock.sleep)
    for sent in range(1, 100):
        clock.now += 0.002            # 500 records/s: behind a 1,000/s target
        assert throttler.throttle(sent) == 0.0
    assert clock.sleeps == []


def test_the_target_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        ThroughputThrottler(0)
