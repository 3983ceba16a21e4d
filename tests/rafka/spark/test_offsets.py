"""The Spark source's decisions, as Spark's Kafka source makes them (pure: no Spark)."""
from __future__ import annotations

import logging

import pytest

from protocols.errors import InvalidTopicError
from protocols.topics import TopicPartition as TP
from rafka.connectors.offset_ranges import OffsetRange, plan_ranges
from rafka.spark.offsets import (SparkSourceError, check_data_loss, consumer_options,
                                 from_json, kafka_options, micro_batch_offsets, parse_offsets,
                                 parse_subscription, rate_limit, resolve, to_json)

COUNTS = {"clicks": 3, "clicks-eu": 2, "orders": 1, "__consumer_offsets": 3}


def test_exactly_one_of_subscribe_pattern_assign():
    assert parse_subscription({"subscribe": "clicks, orders"}).select(COUNTS) == [
        TP("clicks", 0), TP("clicks", 1), TP("clicks", 2), TP("orders", 0)]
    assert parse_subscription({"subscribePattern": "clicks.*"}).select(COUNTS) == [
        TP("clicks", 0), TP("clicks", 1), TP("clicks", 2), TP("clicks-eu", 0),
        TP("clicks-eu", 1)]
    assert parse_subscription({"subscribePattern": ".*"}).select(COUNTS)[-1] == TP("orders", 0)
    assert parse_subscription({"assign": '{"clicks": [2, 0]}'}).select(COUNTS) == [
        TP("clicks", 0), TP("clicks", 2)]
    with pytest.raises(SparkSourceError, match="must be specified"):
        parse_subscription({})
    with pytest.raises(SparkSourceError, match="Only one"):
        parse_subscription({"subscribe": "a", "assign": '{"a": [0]}'})
    with pytest.raises(SparkSourceError, match="Expected e.g."):
        parse_subscription({"assign": "clicks-0"})


def test_the_topics_described_are_the_subscriptions_own():
    """Spark's Kafka source describes the topics it subscribes or is assigned, every topic
    only for a pattern (a trigger's Metadata stays small on a cluster of many topics)."""
    assert parse_subscription({"subscribe": "b,a"}).named_topics() == ["a", "b"]
    assert parse_subscription({"assign": '{"t": [0, 1], "u": [2]}'}).named_topics() == \
        ["t", "u"]
    assert parse_subscription({"subscribePattern": "a.*"}).named_topics() is None


def test_an_illegal_topic_name_is_kafkas_invalid_topic_exception():
    for options in ({"subscribe": "clicks, bad name!/.."}, {"assign": '{"bad name!/..": [0]}'},
                    {"subscribe": ".."}):
        with pytest.raises(InvalidTopicError) as refused:
            parse_subscription(options)
        assert refused.value.code == 17


def test_starting_and_ending_offsets_with_minus_two_and_minus_one():
    parts = [TP("clicks", 0), TP("clicks", 1)]
    earliest = {parts[0]: 5, parts[1]: 0}
    latest = {parts[0]: 50, parts[1]: 40}
    spec = parse_offsets('{"clicks": {"0": -2, "1": 17}}', "latest", option="startingOffsets")
    assert resolve(spec, parts, earliest, latest, option="startingOffsets") == {
        parts[0]: 5, parts[1]: 17}
    end = parse_offsets('{"clicks": {"0": 30, "1": -1}}', "latest", option="endingOffsets",
                        allow_earliest=False)
    assert resolve(end, parts, earliest, latest, option="endingOffsets") == {
        parts[0]: 30, parts[1]: 40}
    assert resolve("earliest", parts, earliest, latest, option="s") == earliest
    with pytest.raises(SparkSourceError, match="not allowed"):
        parse_offsets('{"clicks": {"0": -2}}', "latest", option="endingOffsets",
                      allow_earliest=False)
    with pytest.raises(SparkSourceError, match="is not specified"):
        resolve({parts[0]: 3}, parts, earliest, latest, option="startingOffsets")


def test_min_partitions_cuts_ranges_in_proportion():
    start = {TP("t", 0): 0, TP("t", 1): 10, TP("t", 2): 7}
    end = {TP("t", 0): 100, TP("t", 1): 30, TP("t", 2): 7}          # t-2 has nothing new
    assert plan_ranges(start, end) == [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 10, 30)]
    ranges = plan_ranges(start, end, min_partitions=6)
    assert len(ranges) >= 6
    for p, (lo, hi) in {0: (0, 100), 1: (10, 30)}.items():
        mine = [r for r in ranges if r.partition == p]
        assert mine[0].from_offset == lo and mine[-1].until_offset == hi
        assert all(a.until_offset == b.from_offset for a, b in zip(mine, mine[1:]))


def test_max_offsets_per_trigger_is_shared_by_lag():
    start = {TP("t", 0): 0, TP("t", 1): 0, TP("t", 2): 0}
    latest = {TP("t", 0): 900, TP("t", 1): 90, TP("t", 2): 10}
    assert rate_limit(start, latest, None) == latest
    assert rate_limit(start, latest, 10_000) == latest
    limited = rate_limit(start, latest, 100)
    assert limited == {TP("t", 0): 90, TP("t", 1): 9, TP("t", 2): 1}   # a share below 1 rounds up


def test_data_lost_to_retention_fails_unless_told_otherwise():
    start = {TP("t", 0): 3, TP("t", 1): 8}
    earliest = {TP("t", 0): 5, TP("t", 1): 0}
    with pytest.raises(SparkSourceError, match="failOnDataLoss"):
        check_data_loss(start, earliest, True)
    assert check_data_loss(start, earliest, False) == {TP("t", 0): 5, TP("t", 1): 8}


def test_a_micro_batch_reads_new_partitions_from_their_start(caplog):
    """KafkaMicroBatchStream's getOffsetRangesFromResolvedOffsets: partitions added since
    the batch's start (new partitions, a new topic matching the pattern) from their earliest
    offset, which is 0 unless records were lost."""
    start = {TP("t", 0): 4}
    end = {TP("t", 0): 9, TP("t", 1): 3, TP("u", 0): 2}
    earliest = {TP("t", 0): 0, TP("t", 1): 0, TP("u", 0): 0}
    assert micro_batch_offsets(start, end, earliest, True) == (
        {TP("t", 0): 4, TP("t", 1): 0, TP("u", 0): 0}, end)
    later = {**earliest, TP("t", 1): 2}
    with pytest.raises(SparkSourceError, match="Added partition t-1 starts from 2 instead of "
                                               "0.*failOnDataLoss"):
        micro_batch_offsets(start, end, later, True)
    with caplog.at_level(logging.WARNING, logger="rafka.spark.offsets"):
        assert micro_batch_offsets(start, end, later, False)[0][TP("t", 1)] == 2
    assert "set the source option \"failOnDataLoss\" to \"true\"" in caplog.text
    # Gone again before the batch was planned: no earliest offset to start from.
    with pytest.raises(SparkSourceError, match=r"Cannot find earliest offsets of \['u-0'\]"):
        micro_batch_offsets(start, end, {TP("t", 0): 0, TP("t", 1): 0}, True)
    assert micro_batch_offsets(start, end, {TP("t", 0): 0, TP("t", 1): 0}, False) == (
        {TP("t", 0): 4, TP("t", 1): 0}, {TP("t", 0): 9, TP("t", 1): 3})


def test_a_micro_batch_reports_deleted_partitions_and_offsets_that_went_back():
    """A partition in the start but not the end is gone (its topic deleted); an end below
    the start is a partition truncated or its topic recreated. Both are data loss: the
    query fails unless failOnDataLoss=false, which reads the rest and drops those ranges
    (the next batch starts at the end: what the recreated topic holds beyond it)."""
    start = {TP("t", 0): 4, TP("t", 1): 8, TP("gone", 0): 5}
    end = {TP("t", 0): 9, TP("t", 1): 3}
    earliest = {TP("t", 0): 0, TP("t", 1): 0}
    with pytest.raises(SparkSourceError, match=r"\['gone-0'\] are gone"):
        micro_batch_offsets(start, end, earliest, True)
    with pytest.raises(SparkSourceError, match="Partition t-1's offset was changed from 8 to "
                                               "3, some data may have been missed"):
        micro_batch_offsets({TP("t", 0): 4, TP("t", 1): 8}, end, earliest, True)
    assert micro_batch_offsets(start, end, earliest, False) == ({TP("t", 0): 4},
                                                                {TP("t", 0): 9})
    # Deleted after the trigger's end was found: no earliest offset now, gone as well.
    with pytest.raises(SparkSourceError, match=r"\['t-1'\] are gone"):
        micro_batch_offsets({TP("t", 0): 4, TP("t", 1): 1}, end, {TP("t", 0): 0}, True)


def test_offsets_round_trip_through_sparks_json_shape():
    offsets = {TP("a", 0): 3, TP("a", 10): 4, TP("b", 1): 0}
    assert to_json(offsets) == {"a": {"0": 3, "10": 4}, "b": {"1": 0}}
    assert from_json(to_json(offsets)) == offsets


def test_kafka_prefixed_options_are_client_configs_as_sparks_kafka_source_takes_them():
    options = {"kafka.max.partition.fetch.bytes": "100", "kafka.bootstrap.servers": "b:9092",
               "subscribe": "t"}
    # bootstrap.servers names a Kafka cluster; the cluster option names rafka's.
    assert kafka_options(options) == {"max.partition.fetch.bytes": "100"}
    assert consumer_options(options) == {"max.partition.fetch.bytes": "100"}
    # Spark 3.0+ takes a group id (SPARK-26350); nothing is committed under it.
    assert consumer_options({"kafka.group.id": "g"}) == {"group.id": "g"}
    with pytest.raises(SparkSourceError, match="'auto.offset.reset' is not supported. Instead "
                                               "set the source option 'startingoffsets'"):
        consumer_options({"kafka.auto.offset.reset": "earliest"})
    for name in ("key.deserializer", "value.deserializer", "enable.auto.commit"):
        with pytest.raises(SparkSourceError, match=f"'{name}' is not supported as"):
            consumer_options({f"kafka.{name}": "x"})
