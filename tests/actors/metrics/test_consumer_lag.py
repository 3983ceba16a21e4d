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


def test_a_partition_without_a_known_end_is_left_out():
    lags = partition_lags([("g", "t", 0, 1), ("g", "t", 1, 1)], {("t", 0): 3})
    assert lags == [PartitionLag("g", "t", 0, 1, 3)]
