"""Kafka's broker metrics, counted and read off the image (actors.metrics: pure, no Ray):
BrokerTopicStats' BytesIn / MessagesIn / BytesOut / ReplicationBytesOut, counted per
request from the batches' headers; RequestMetrics' TotalTimeMs buckets; ReplicaManager's
and KafkaController's gauges."""
from __future__ import annotations

import pytest

from actors.metrics.broker_topic_stats import BrokerTopicStats, TopicDeltas, record_count
from actors.metrics.gauges import controller_gauges, replica_manager_gauges
from actors.metrics.request_metrics import (BOUNDARIES_MS, RequestMetrics, bucket_value,
                                            request_name)
from protocols.kafka.api_keys import ApiKey
from protocols.records import Record, encode_batch


def batch(count: int, compression: str = "none") -> bytes:
    return encode_batch([Record(b"k", b"v" * i, 0) for i in range(count)],
                        compression=compression)


def test_record_count_reads_each_batch_header_of_a_buffer():
    assert record_count(b"") == 0
    assert record_count(batch(1)) == 1
    # Several batches in one partition's records, compressed or not: the sum of their counts.
    assert record_count(batch(3) + batch(5, "gzip") + batch(7, "zstd")) == 15
    assert record_count(memoryview(batch(4))) == 4


def test_bytes_and_messages_in_are_counted_per_topic_and_taken_once():
    stats = BrokerTopicStats()
    stats.appended("orders", batch(3))
    stats.appended("orders", batch(2))
    stats.appended("clicks", batch(10))
    taken = stats.take()
    assert taken.messages_in == {"orders": 5, "clicks": 10}
    assert taken.bytes_in == {"orders": len(batch(3)) + len(batch(2)),
                              "clicks": len(batch(10))}
    assert stats.take() == TopicDeltas()   # counts since the last take


def test_bytes_out_to_consumers_and_to_followers_are_apart():
    """Kafka's BytesOutPerSec leaves out followers' fetches: ReplicationBytesOutPerSec
    counts them."""
    stats = BrokerTopicStats()
    stats.read("orders", 1000, from_follower=False)
    stats.read("orders", 300, from_follower=True)
    stats.read("orders", 0, from_follower=False)   # an empty answer: nothing counted
    taken = stats.take()
    assert taken.bytes_out == {"orders": 1000}
    assert taken.replication_bytes_out == {"orders": 300}


def test_isr_shrinks_and_expands_are_counted_by_direction():
    stats = BrokerTopicStats()
    stats.isr_changed(3, 2)
    stats.isr_changed(2, 1)
    stats.isr_changed(1, 3)
    stats.isr_changed(2, 2)   # the same size (a reassignment's swap): neither
    taken = stats.take()
    assert (taken.isr_shrinks, taken.isr_expands) == (2, 1)


def test_deltas_travel_as_plain_values_and_add_up():
    stats = BrokerTopicStats()
    stats.appended("t", batch(2))
    stats.isr_changed(2, 1)
    one = TopicDeltas.from_tuple(stats.take().as_tuple())
    total = TopicDeltas()
    total.add(one)
    total.add(one)
    assert total.messages_in == {"t": 4} and total.isr_shrinks == 2


@pytest.mark.parametrize("api_key, name", [
    (ApiKey.PRODUCE, "Produce"), (ApiKey.OFFSET_COMMIT, "OffsetCommit"),
    (ApiKey.API_VERSIONS, "ApiVersions"), (ApiKey.LIST_OFFSETS, "ListOffsets"),
    (ApiKey.FETCH, "FetchConsumer"), (999, "999")])
def test_request_names_are_kafkas(api_key, name):
    assert request_name(api_key) == name


def test_a_followers_fetch_is_fetch_follower():
    assert request_name(ApiKey.FETCH, from_follower=True) == "FetchFollower"


@pytest.mark.parametrize("ms, bucket", [(0.0, 0), (0.5, 0), (0.51, 1), (3, 3), (30000, 14),
                                        (30001, 15)])
def test_request_times_fall_in_prometheus_buckets(ms, bucket):
    """A bucket holds the times up to its bound, inclusive (Prometheus' ``le``)."""
    metrics = RequestMetrics()
    metrics.observe("Produce", ms)
    assert metrics.take() == {("Produce", bucket): 1}
    assert metrics.take() == {}


def test_a_buckets_reported_value_lies_in_that_bucket():
    for index in range(len(BOUNDARIES_MS) + 1):
        value = bucket_value(index)
        low = BOUNDARIES_MS[index - 1] if index else 0
        high = BOUNDARIES_MS[index] if index < len(BOUNDARIES_MS) else float("inf")
        assert low < value <= high


def partition(leader: int, replicas: list[int], isr: list[int]) -> dict:
    return {"leader": leader, "leader_epoch": 0, "replicas": replicas, "isr": isr,
            "offline_replicas": []}


IMAGE = {
    "topics": {
        "orders": {0: partition(1, [1, 2, 3], [1, 2, 3]),     # healthy, led by 1
                   1: partition(1, [1, 2, 3], [1]),           # under-replicated, under min
                   2: partition(2, [2, 1, 3], [2, 1])},       # led by 2
        "clicks": {0: partition(1, [1, 2], [1, 2]),
                   1: partition(-1, [3], [3])},               # offline; not on broker 1
    },
    "configs": {"orders": {"min.insync.replicas": "2"}},
}


def test_a_brokers_replica_manager_gauges():
    g = replica_manager_gauges(IMAGE, broker_id=1, default_min_isr=1)
    assert g.partition_count == 4          # orders 0-2, clicks 0
    assert g.leader_count == 3             # orders 0, 1; clicks 0
    assert g.under_replicated == 1         # orders 1
    assert g.under_min_isr == 1            # orders 1: 1 < min.insync.replicas 2
    assert g.at_min_isr == 0               # clicks 0 has ISR 2 against its default 1
    assert g.under_min_isr_by_partition == {("orders", 0): 0, ("orders", 1): 1,
                                            ("clicks", 0): 0}
    g2 = replica_manager_gauges(IMAGE, broker_id=2, default_min_isr=1)
    assert (g2.leader_count, g2.under_replicated, g2.at_min_isr) == (1, 1, 1)


def test_the_active_controllers_gauges_and_a_standbys():
    parts = [(st["leader"], st["replicas"]) for ps in IMAGE["topics"].values()
             for st in ps.values()]
    g = controller_gauges(True, len(IMAGE["topics"]), parts)
    assert (g.active_controller_count, g.offline_partitions_count, g.global_partition_count,
            g.global_topic_count) == (1, 1, 5, 2)
    # orders 2 is led by its preferred replica (2); clicks 1 has no leader.
    assert g.preferred_replica_imbalance_count == 1
    standby = controller_gauges(False, 2, parts)
    assert (standby.active_controller_count, standby.offline_partitions_count) == (0, 0)


def test_replicas_a_reassignment_is_adding_are_not_missing_from_the_isr():
    """Kafka's OngoingReassignmentState: the replication factor is the replicas but those
    being added, so a partition whose original replicas are all in sync is not
    under-replicated while the new ones catch up; one of those falling out is."""
    moving = dict(partition(1, [1, 2, 3, 4], [1, 2]), adding_replicas=[3, 4])
    g = replica_manager_gauges({"topics": {"moving": {0: moving}}}, 1, 1)
    assert g.under_replicated == 0
    lagging = dict(partition(1, [1, 2, 3, 4], [1, 3]), adding_replicas=[3, 4])
    g = replica_manager_gauges({"topics": {"moving": {0: lagging}}}, 1, 1)
    assert g.under_replicated == 0     # ISR 2 of a replication factor of 2
    short = dict(partition(1, [1, 2, 3, 4], [1]), adding_replicas=[3, 4])
    assert replica_manager_gauges({"topics": {"moving": {0: short}}}, 1, 1
                                  ).under_replicated == 1


def test_min_isr_is_at_most_the_replicas_there_are():
    """Kafka's Partition: an RF=1 partition under min.insync.replicas=2 is at its minimum,
    not under it."""
    image = {"topics": {"single": {0: partition(1, [1], [1])}},
             "configs": {"single": {"min.insync.replicas": "2"}}}
    g = replica_manager_gauges(image, broker_id=1, default_min_isr=1)
    assert (g.under_min_isr, g.at_min_isr) == (0, 1)


def test_record_count_stops_at_bytes_that_are_no_batch():
    import struct
    bogus = bytes(8) + struct.pack(">i", -12) + bytes(60)
    assert record_count(batch(2) + bogus) == 2
