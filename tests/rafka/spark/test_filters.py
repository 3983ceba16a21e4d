"""Filters pushed down to the rafka batch source: which it takes, and the partitions and
offset ranges they leave (pure: no Spark session, no cluster)."""
from __future__ import annotations

import datetime as dt

from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                    LessThan, LessThanOrEqual, Not, StringStartsWith)

from protocols.topics import TopicPartition as TP
from rafka.spark.filters import (Pushed, narrow, narrow_ranges, offset_bounds, push,
                                 timestamp_floor_ms)

PARTS = [TP("t", p) for p in range(4)]


def test_partition_and_offset_filters_are_applied_exactly_the_rest_stay_with_spark():
    f = [EqualTo(("partition",), 2), GreaterThanOrEqual(("offset",), 10),
         In(("offset",), (3, 7)), GreaterThan(("timestamp",), 5), LessThan(("timestamp",), 9),
         EqualTo(("key",), b"k"), Not(EqualTo(("partition",), 1)),
         StringStartsWith(("topic",), "t"), IsNotNull(("offset",))]
    pushed, residual = push(f)
    assert pushed.partition == [f[0]] and pushed.offset == [f[1], f[2]]
    assert pushed.timestamp == [f[3]]
    # IN on offsets is read as a range; timestamps only bound where a read starts.
    assert residual == [f[2], f[3], f[4], f[5], f[6], f[7], f[8]]
    assert not Pushed() and Pushed(offset=[f[1]])


def test_partition_filters_pick_partitions():
    assert narrow(push([EqualTo(("partition",), 2)])[0], PARTS) == [TP("t", 2)]
    assert narrow(push([In(("partition",), (0, 3, 9))])[0], PARTS) == [TP("t", 0), TP("t", 3)]
    assert narrow(push([GreaterThan(("partition",), 0), LessThanOrEqual(("partition",), 2)])[0],
                  PARTS) == [TP("t", 1), TP("t", 2)]
    assert narrow(Pushed(), PARTS) == PARTS


def test_offset_bounds_of_each_comparison():
    assert offset_bounds([]) == (0, None)
    assert offset_bounds([EqualTo(("offset",), 5)]) == (5, 6)
    assert offset_bounds([GreaterThan(("offset",), 5), LessThan(("offset",), 9)]) == (6, 9)
    assert offset_bounds([GreaterThanOrEqual(("offset",), 5),
                          LessThanOrEqual(("offset",), 9)]) == (5, 10)
    assert offset_bounds([In(("offset",), (8, 3, None))]) == (3, 9)
    assert offset_bounds([In(("offset",), ())]) == (0, 0)


def test_timestamp_lower_bound_in_milliseconds_from_spark_microseconds():
    at = dt.datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=dt.timezone.utc)   # +1.5 ms
    ms = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert timestamp_floor_ms([GreaterThanOrEqual(("timestamp",), at)]) == ms + 2
    assert timestamp_floor_ms([GreaterThan(("timestamp",), at)]) == ms + 2
    exact = at.replace(microsecond=1000)
    assert timestamp_floor_ms([GreaterThanOrEqual(("timestamp",), exact)]) == ms + 1
    assert timestamp_floor_ms([GreaterThan(("timestamp",), exact)]) == ms + 2
    # A naive datetime is UTC (local_session's time zone); the tighter bound wins.
    assert timestamp_floor_ms([EqualTo(("timestamp",), exact.replace(tzinfo=None)),
                               GreaterThan(("timestamp",), at)]) == ms + 2
    assert timestamp_floor_ms([In(("timestamp",), (exact, at))]) == ms + 1
    assert timestamp_floor_ms([]) is None


def test_ranges_cut_by_offsets_and_by_the_time_index():
    start = {TP("t", 0): 0, TP("t", 1): 4}
    end = {TP("t", 0): 100, TP("t", 1): 50}
    asked = []

    def by_time(times):
        asked.append(dict(times))
        return {TP("t", 0): 30, TP("t", 1): -1}   # partition 1: nothing at or after
    pushed, _ = push([GreaterThanOrEqual(("offset",), 10), LessThan(("offset",), 60),
                      GreaterThan(("timestamp",), 1_000_000)])
    s, e = narrow_ranges(pushed, start, end, by_time)
    assert asked == [{TP("t", 0): 1001, TP("t", 1): 1001}]
    assert (s, e) == ({TP("t", 0): 30, TP("t", 1): 50}, {TP("t", 0): 60, TP("t", 1): 50})
    # A bound before the epoch (-1 ms would be ListOffsets' LATEST_TIMESTAMP) narrows nothing.
    asked.clear()
    before = dt.datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=dt.timezone.utc)
    pushed, _ = push([GreaterThanOrEqual(("timestamp",), before)])
    assert timestamp_floor_ms(pushed.timestamp) == -1
    assert narrow_ranges(pushed, start, end, by_time) == (start, end) and asked == []
    # Bounds outside what is there leave empty ranges, and the time index is not asked.
    asked.clear()
    pushed, _ = push([GreaterThan(("offset",), 200), GreaterThan(("timestamp",), 5)])
    s, e = narrow_ranges(pushed, start, end, by_time)
    assert all(s[tp] == e[tp] for tp in start) and asked == []
