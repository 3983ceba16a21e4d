"""Kafka's broker metrics on Ray's Prometheus endpoints (issue 44, step 1): scraped from
every Ray node's metrics port (``ray.nodes()``' ``MetricsExportPort``) while records flow,
as Prometheus scrapes them; Ray prefixes each name with ``ray_``. The message counts equal
what was produced; killing a follower's broker raises the under-replicated count, which
returns to 0 once the broker is back."""
from __future__ import annotations

import urllib.request

import pytest
import ray

import rafka
from tests.runtime.conftest import FAST, cluster_with
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(400)]

PREFIX = "ray_"


def scrape() -> list[tuple[str, dict, float]]:
    """(name, labels, value) of every sample on every live Ray node's endpoint."""
    from prometheus_client.parser import text_string_to_metric_families
    samples = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort", -1)
        if not node["Alive"] or not port or port < 0:
            continue
        url = f"http://{node['NodeManagerAddress']}:{port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            samples += [(s.name, s.labels, s.value) for s in family.samples]
    return samples


def total(cluster, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples for ``cluster`` (over brokers and Ray workers)."""
    wanted = {"cluster": cluster.name, **labels}
    return sum(value for n, l, value in scrape() if n == PREFIX + name
               and all(l.get(k) == v for k, v in wanted.items()))


def read_commit_and_stop(cluster, group: str, topic: str, at_least: int,
                         config: dict | None = None) -> int:
    """A group member that reads ``at_least`` records of ``topic``, commits what it read
    and leaves: the records it read."""
    consumer = rafka.Consumer(cluster, {"group.id": group, "auto.offset.reset": "earliest",
                                        "enable.auto.commit": False, **(config or {})})
    consumer.subscribe([topic])
    read = 0
    while read < at_least:
        read += len(consumer.poll(1000))
    consumer.commit()
    consumer.close()
    return read


@pytest.fixture(scope="module")
def cluster(ray_session, tmp_path_factory):
    with cluster_with(tmp_path_factory.mktemp("metrics")) as c:
        yield c


def test_messages_and_bytes_in_and_out_equal_what_flowed(cluster):
    from confluent_kafka import Consumer, Producer
    cluster.admin().create_topics([rafka.NewTopic("metered", 3, 2)])
    with rafka.Producer(cluster) as producer:
        for i in range(1000):
            producer.send("metered", f"rafka-{i}".encode(), key=str(i).encode())
    kafka = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(500):
        kafka.produce("metered", f"kafka-{i}".encode(), key=str(i).encode())
    assert kafka.flush(30) == 0

    wait_until(lambda: total(cluster, "kafka_server_brokertopicmetrics_messagesin_total",
                             topic="metered") == 1500, 60,
               "MessagesInPerSec's count to reach the 1,500 records produced")
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesin_total",
                 topic="metered") > 1500 * len(b"rafka-0")
    # RF=2: the followers fetched every batch: replication traffic, not BytesOut.
    wait_until(lambda: total(cluster, "kafka_server_brokertopicmetrics_replicationbytesout"
                             "_total", topic="metered") > 0, 60, "ReplicationBytesOut")
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesout_total",
                 topic="metered") == 0

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "m",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["metered"])
    read = 0
    while read < 1500:
        message = consumer.poll(1.0)
        read += message is not None and message.error() is None
    consumer.close()
    wait_until(lambda: total(cluster, "kafka_server_brokertopicmetrics_bytesout_total",
                             topic="metered") > 1500 * len(b"rafka-0"), 60, "BytesOutPerSec")
    # The listener's request times: a histogram per Kafka request name.
    wait_until(lambda: total(cluster, "kafka_network_requestmetrics_totaltimems_count",
                             request="FetchConsumer") > 0, 60, "FetchConsumer's TotalTimeMs")
    assert total(cluster, "kafka_network_requestmetrics_totaltimems_count",
                 request="Produce") > 0
    assert total(cluster, "kafka_network_requestmetrics_totaltimems_count",
                 request="Metadata") > 0


def test_the_controller_and_the_brokers_gauges(cluster):
    wait_until(lambda: total(cluster, "kafka_controller_kafkacontroller_activecontrollercount")
               == 1, 60, "one active controller")
    assert total(cluster, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    topics = cluster.admin().list_topics(internal=True)
    wait_until(lambda: total(cluster, "kafka_controller_kafkacontroller_globaltopiccount")
               == len(topics), 30, "GlobalTopicCount")
    described = cluster.admin().describe_topics(topics)
    partitions = sum(len(d.partitions) for d in described.values())
    replicas = sum(len(p.replicas) for d in described.values() for p in d.partitions)
    wait_until(lambda: total(cluster, "kafka_server_replicamanager_leadercount")
               == partitions and total(cluster, "kafka_server_replicamanager_partitioncount")
               == replicas, 30, "every partition led once and every replica counted")
    wait_until(lambda: total(cluster, "kafka_log_log_logendoffset", topic="metered")
               >= 2 * 1500, 30, "the replicas' log end offsets (RF=2)")


def test_killing_a_followers_broker_raises_under_replicated_until_it_is_back(cluster):
    cluster.admin().create_topics([rafka.NewTopic("guarded", 3, 3)])
    controller_host = cluster.admin().describe_cluster().controller_id
    victim = next(b for b in sorted(cluster.broker_nodes) if b != controller_host)
    wait_until(lambda: total(cluster, "kafka_server_replicamanager_underreplicatedpartitions")
               == 0, 60, "no partition under-replicated before the kill")
    shrinks = total(cluster, "kafka_server_replicamanager_isrshrinks_total")
    # Its process killed (its replica hosts die with it), and not started again by Ray
    # until the test says so: a broker down for a while.
    ray.kill(cluster.broker(victim), no_restart=True)
    bound_s = (FAST["broker.session.timeout.ms"] + FAST["replica.lag.time.max.ms"]) / 1000
    wait_until(lambda: total(cluster, "kafka_server_replicamanager_underreplicatedpartitions")
               >= 3, bound_s + 30, "the partitions the killed broker followed to be "
               "under-replicated")
    assert total(cluster, "kafka_server_replicamanager_isrshrinks_total") > shrinks
    cluster.start_broker(victim)   # it catches up and rejoins every ISR
    wait_until(lambda: total(cluster, "kafka_server_replicamanager_underreplicatedpartitions")
               == 0, 120, "the under-replicated count to return to 0")
    assert total(cluster, "kafka_server_replicamanager_isrexpands_total") > 0


def test_a_paused_groups_lag_equals_the_records_behind_it(cluster):
    """kafka_consumergroup_lag (kafka-exporter's name), per partition and summed per topic,
    and rafka.Admin's consumer_group_lag: a group that read some records, committed and
    stopped is as far behind as the records produced after what it committed."""
    from protocols.topics import TopicPartition
    cluster.admin().create_topics([rafka.NewTopic("lagging", 2, 2)])
    with rafka.Producer(cluster) as producer:
        for i in range(300):
            producer.send("lagging", b"early", partition=i % 2)
    read = read_commit_and_stop(cluster, "paused", "lagging", 100, {"max.poll.records": 40})
    with rafka.Producer(cluster) as producer:
        for i in range(200):
            producer.send("lagging", b"late", partition=i % 2)
    admin = cluster.admin()
    committed = admin.list_consumer_group_offsets("paused")
    assert sum(c.offset for c in committed.values()) == read
    behind = 500 - read
    lags = admin.consumer_group_lag("paused")
    assert sum(p.lag for p in lags.values()) == behind
    assert {tp: p.log_end_offset for tp, p in lags.items()} == {
        TopicPartition("lagging", 0): 250, TopicPartition("lagging", 1): 250}
    wait_until(lambda: total(cluster, "kafka_consumergroup_lag", consumergroup="paused",
                             topic="lagging") == behind, 60,
               f"kafka_consumergroup_lag to sum to the {behind} records behind")
    assert total(cluster, "kafka_consumergroup_lag_sum", consumergroup="paused",
                 topic="lagging") == behind
    for tp, p in lags.items():
        assert total(cluster, "kafka_consumergroup_lag", consumergroup="paused",
                     topic=tp.topic, partition=str(tp.partition)) == p.lag
        assert total(cluster, "kafka_consumergroup_current_offset", consumergroup="paused",
                     topic=tp.topic, partition=str(tp.partition)) == p.committed


def test_a_groups_lag_in_time_grows_from_the_first_record_it_has_not_read(cluster):
    """kafka_consumergroup_lag_seconds: how long ago the first record a group has not
    consumed was appended, told from the log end's samples (every report): 0 while it is
    caught up; once records come that it does not read, about the time since they came."""
    import time
    cluster.admin().create_topics([rafka.NewTopic("timed", 1, 2)])
    with rafka.Producer(cluster) as producer:
        for _ in range(10):
            producer.send("timed", b"read", partition=0)
    read_commit_and_stop(cluster, "steady", "timed", 10)
    seconds = "kafka_consumergroup_lag_seconds"
    wait_until(lambda: any(n == PREFIX + seconds and l.get("consumergroup") == "steady"
                           for n, l, _ in scrape()) and
               total(cluster, seconds, consumergroup="steady") == 0, 60,
               "a caught-up group's lag in time, 0")
    appended = time.monotonic()
    with rafka.Producer(cluster) as producer:
        producer.send("timed", b"unread", partition=0)
    wait_until(lambda: total(cluster, seconds, consumergroup="steady") > 2, 60,
               "the lag in time to grow past 2 s")
    behind = total(cluster, seconds, consumergroup="steady")
    assert behind <= time.monotonic() - appended + 5   # a report interval's slack
