"""Consumer lag as kafka-exporter and kafka-consumer-groups.sh tell it (actors.metrics.
consumer_lag: pure): log end offset minus committed offset, never below 0, summed per group
and topic; a partition whose end is not known is left out rather than reported as 0."""
from __future__ import annotations

from actors.metrics.consumer_lag import (PartitionLag, committed_rows, lag_sums,
                                         partition_lags)
from protocols.messages import OffsetAndMetadata
from protocols.topics import TopicPartition


def test_committed_rows_are_every_groups_committed_offsets():
    offsets = {"billing": {TopicPartition("orders", 0): OffsetAndMetadata(40),
                           TopicPartition("orders", 1): OffsetAndMetadata(-1)},
               "audit": {TopicPartition("clicks", 3): OffsetAndMetadata(7, 2, "meta")}}
    assert sorted(committed_rows(offsets)) == [("audit", "clicks", 3, 7),
                                               ("billing", "orders", 0, 40)]


def test_lag_is_the_log_end_minus_the_committed_offset_never_below_zero():
    rows = [("g", "t", 0, 40), ("g", "t", 1, 100), ("g", "t", 2, 5), ("h", "t", 0, 50)]
    lags = partition_lags(rows, {("t", 0): 100, ("t", 1): 90, ("t", 2): 5})
    assert [(p.group, p.partition, p.lag) for p in lags] == [
        ("g", 0, 60),
        ("g", 1, 0),     # committed past the end (a truncated log): 0, as Kafka's tool
        ("g", 2, 0),
        ("h", 0, 50)]
    assert lag_sums(lags) == {("g", "t"): 60, ("h", "t"): 50}


def test_a_topics_lag_sum_is_left_out_when_a_partitions_lag_is_not_known():
    rows = [("g", "t", 0, 1), ("g", "t", 1, 1), ("g", "u", 0, 1)]
    lags = partition_lags(rows, {("t", 0): 3, ("u", 0): 5})
    assert lag_sums(lags, rows) == {("g", "u"): 4}


def test_a_partition_without_a_known_end_is_left_out():
    lags = partition_lags([("g", "t", 0, 1), ("g", "t", 1, 1)], {("t", 0): 3})
    assert lags == [PartitionLag("g", "t", 0, 1, 3)]


def test_lag_in_time_is_interpolated_between_the_log_ends_samples():
    from actors.metrics.consumer_lag import OffsetTimeline
    timeline = OffsetTimeline()
    tp = ("t", 0)
    timeline.record({tp: 100}, now_ms=1_000)
    timeline.record({tp: 200}, now_ms=2_000)
    timeline.record({tp: 200}, now_ms=3_000)    # nothing appended: still 200 at 3 s
    timeline.record({tp: 400}, now_ms=5_000)
    # Offset 150 was appended halfway between 1 s (end 100) and 2 s (end 200).
    assert timeline.lag_ms(tp, 150, now_ms=6_000) == 4_500
    # Offset 300: after 3 s (end still 200), by 5 s (end 400): at 4 s.
    assert timeline.lag_ms(tp, 300, now_ms=6_000) == 2_000
    # An hour without a record, then one the group has not read: seconds, not an hour.
    timeline.record({tp: 400}, now_ms=3_605_000)
    timeline.record({tp: 401}, now_ms=3_610_000)
    # (appended after 3,605 s, when the end was last seen at 400: 6 s ago at the most)
    assert timeline.lag_ms(tp, 400, now_ms=3_611_000) == 6_000
    assert timeline.lag_ms(tp, 400, now_ms=6_000) == 0      # caught up
    assert timeline.lag_ms(tp, 50, now_ms=6_000) is None    # before the first sample
    assert timeline.lag_ms(("t", 1), 0, now_ms=6_000) is None


def test_a_truncated_log_or_a_partition_no_longer_read_starts_afresh():
    from actors.metrics.consumer_lag import OffsetTimeline
    timeline = OffsetTimeline(keep=2)
    tp = ("t", 0)
    timeline.record({tp: 100}, now_ms=1_000)
    timeline.record({tp: 50}, now_ms=2_000)     # below the last end: truncated
    assert timeline.lag_ms(tp, 10, now_ms=3_000) is None
    timeline.record({tp: 60}, now_ms=3_000)
    timeline.record({tp: 70}, now_ms=4_000)     # keep=2: the 2 s sample goes
    assert timeline.lag_ms(tp, 55, now_ms=5_000) is None
    assert timeline.lag_ms(tp, 65, now_ms=5_000) == 1_500
    timeline.record({}, now_ms=5_000)
    assert timeline.lag_ms(tp, 65, now_ms=5_000) is None
