"""The clients' produce- and fetch-throttle-time-avg / -max (rafka.client.throttle_sensor):
Kafka's two samples of 30 s, every answer counted (an unthrottled one as 0), NaN without
any, an old sample dropped."""
from __future__ import annotations

import math

from rafka.client.throttle_sensor import ThrottleSensor


def test_avg_and_max_over_two_samples_of_thirty_seconds():
    now = [100.0]
    sensor = ThrottleSensor(lambda: now[0])
    assert all(math.isnan(v) for v in sensor.measure())
    for ms in (0, 0, 300):
        sensor.record(ms)
    assert sensor.measure() == (100.0, 300.0)
    now[0] += 31            # a second sample
    sensor.record(100)
    assert sensor.measure() == (100.0, 300.0)
    now[0] += 31            # a third: the first is dropped
    sensor.record(0)
    assert sensor.measure() == (50.0, 100.0)
    now[0] += 61            # nothing recorded for two windows
    assert all(math.isnan(v) for v in sensor.measure())
