"""Kafka's broker metrics as an operator reads them (issue 44): a real Prometheus server
(Debian's) scrapes every Ray node's metrics endpoint (``ray.nodes()``' ``MetricsExportPort``)
with ``examples/prometheus.yml``'s relabelling (Ray's ``ray_`` prefix taken off) while records
flow, and the tests ask it. The message counts equal what was produced; killing a follower's
broker raises the under-replicated count, which returns to 0 once the broker is back; a
paused group's lag equals the records behind it; every query of the Grafana dashboard in
``examples/grafana`` is one Prometheus takes, and its panels show data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray

import rafka
from tests.runtime.conftest import FAST
from tests.runtime.helpers import wait_until
from tests.runtime.prometheus import PrometheusServer, node_targets

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(400)]


def selector(cluster, **labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in {"cluster": cluster.name,
                                                     **labels}.items()) + "}"


def total(prometheus: PrometheusServer, cluster, name: str, **labels: str) -> float:
    """The sum of ``name``'s series for ``cluster`` in Prometheus (over brokers and Ray
    workers); 0 without any."""
    found = prometheus.query(f"sum({name}{selector(cluster, **labels)})")
    return found[0][1] if found else 0.0


def kafka_consume(cluster, topic: str, group: str, count: int) -> None:
    """confluent-kafka reads ``count`` records of ``topic`` through the Kafka listener."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read = 0
    while read < count:
        message = consumer.poll(1.0)
        read += message is not None and message.error() is None
    consumer.close()


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


SHARE_CLUSTER = True   # one cluster for the module's tests (module_cluster)


@pytest.fixture(scope="module")
def prom(ray_session, tmp_path_factory):
    """A Prometheus server scraping every Ray node (``tests.runtime.prometheus``)."""
    with PrometheusServer(tmp_path_factory.mktemp("prometheus")) as server:
        wait_until(lambda: server.targets_up() == len(node_targets()), 60,
                   "Prometheus scraping every Ray node")
        yield server


def test_messages_and_bytes_in_and_out_equal_what_flowed(cluster, prom):
    from confluent_kafka import Producer
    cluster.admin().create_topics([rafka.NewTopic("metered", 3, 2)])
    with rafka.Producer(cluster) as producer:
        for i in range(1000):
            producer.send("metered", f"rafka-{i}".encode(), key=str(i).encode())
    kafka = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(500):
        kafka.produce("metered", f"kafka-{i}".encode(), key=str(i).encode())
    assert kafka.flush(30) == 0

    wait_until(lambda: total(prom, cluster, "kafka_server_brokertopicmetrics_messagesin_total",
                             topic="metered") == 1500, 60,
               "MessagesInPerSec's count to reach the 1,500 records produced")
    assert total(prom, cluster, "kafka_server_brokertopicmetrics_bytesin_total",
                 topic="metered") > 1500 * len(b"rafka-0")
    # RF=2: the followers fetched every batch: replication traffic, not BytesOut.
    wait_until(lambda: total(prom, cluster, "kafka_server_brokertopicmetrics_replicationbytesout"
                             "_total", topic="metered") > 0, 60, "ReplicationBytesOut")
    assert total(prom, cluster, "kafka_server_brokertopicmetrics_bytesout_total",
                 topic="metered") == 0

    kafka_consume(cluster, "metered", "m", 1500)
    wait_until(lambda: total(prom, cluster, "kafka_server_brokertopicmetrics_bytesout_total",
                             topic="metered") > 1500 * len(b"rafka-0"), 60, "BytesOutPerSec")
    # The listener's request times: a histogram per Kafka request name.
    wait_until(lambda: total(prom, cluster, "kafka_network_requestmetrics_totaltimems_count",
                             request="FetchConsumer") > 0, 60, "FetchConsumer's TotalTimeMs")
    assert total(prom, cluster, "kafka_network_requestmetrics_totaltimems_count",
                 request="Produce") > 0
    assert total(prom, cluster, "kafka_network_requestmetrics_totaltimems_count",
                 request="Metadata") > 0


def test_the_controller_and_the_brokers_gauges(cluster, prom):
    wait_until(lambda: total(prom, cluster,
                             "kafka_controller_kafkacontroller_activecontrollercount") == 1,
               60, "one active controller")
    assert total(prom, cluster, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    topics = cluster.admin().list_topics(internal=True)
    wait_until(lambda: total(prom, cluster, "kafka_controller_kafkacontroller_globaltopiccount")
               == len(topics), 30, "GlobalTopicCount")
    described = cluster.admin().describe_topics(topics)
    partitions = sum(len(d.partitions) for d in described.values())
    replicas = sum(len(p.replicas) for d in described.values() for p in d.partitions)
    wait_until(lambda: total(prom, cluster, "kafka_server_replicamanager_leadercount")
               == partitions and total(prom, cluster, "kafka_server_replicamanager_partitioncount")
               == replicas, 30, "every partition led once and every replica counted")
    wait_until(lambda: total(prom, cluster, "kafka_log_log_logendoffset", topic="metered")
               >= 2 * 1500, 30, "the replicas' log end offsets (RF=2)")


def test_killing_a_followers_broker_raises_under_replicated_until_it_is_back(cluster, prom):
    cluster.admin().create_topics([rafka.NewTopic("guarded", 3, 3)])
    controller_host = cluster.admin().describe_cluster().controller_id
    victim = next(b for b in sorted(cluster.broker_nodes) if b != controller_host)
    wait_until(lambda: total(prom, cluster, "kafka_server_replicamanager_underreplicatedpartitions")
               == 0, 60, "no partition under-replicated before the kill")
    shrinks = total(prom, cluster, "kafka_server_replicamanager_isrshrinks_total")
    expands = total(prom, cluster, "kafka_server_replicamanager_isrexpands_total")
    # Its process killed (its replica hosts die with it), and not started again by Ray
    # until the test says so: a broker down for a while.
    ray.kill(cluster.broker(victim), no_restart=True)
    bound_s = (FAST["broker.session.timeout.ms"] + FAST["replica.lag.time.max.ms"]) / 1000
    wait_until(lambda: total(prom, cluster, "kafka_server_replicamanager_underreplicatedpartitions")
               >= 3, bound_s + 30, "the partitions the killed broker followed to be "
               "under-replicated")
    # The leaders' shrinks are counted by their replica hosts, the under-replicated count by
    # their brokers: two processes whose metrics reach Prometheus each in its own report.
    wait_until(lambda: total(prom, cluster, "kafka_server_replicamanager_isrshrinks_total")
               > shrinks, 30, "the leaders' ISR shrinks to be counted")
    cluster.start_broker(victim)   # it catches up and rejoins every ISR
    wait_until(lambda: total(prom, cluster, "kafka_server_replicamanager_underreplicatedpartitions")
               == 0, 120, "the under-replicated count to return to 0")
    # As with the shrinks: the leaders' replica hosts report the expands on their own clock.
    wait_until(lambda: total(prom, cluster, "kafka_server_replicamanager_isrexpands_total")
               > expands, 30, "the leaders' ISR expands to be counted")


def test_a_paused_groups_lag_equals_the_records_behind_it(cluster, prom):
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
    wait_until(lambda: total(prom, cluster, "kafka_consumergroup_lag", consumergroup="paused",
                             topic="lagging") == behind, 60,
               f"kafka_consumergroup_lag to sum to the {behind} records behind")
    assert total(prom, cluster, "kafka_consumergroup_lag_sum", consumergroup="paused",
                 topic="lagging") == behind
    for tp, p in lags.items():
        assert total(prom, cluster, "kafka_consumergroup_lag", consumergroup="paused",
                     topic=tp.topic, partition=str(tp.partition)) == p.lag
        assert total(prom, cluster, "kafka_consumergroup_current_offset", consumergroup="paused",
                     topic=tp.topic, partition=str(tp.partition)) == p.committed


def test_a_groups_lag_in_time_grows_from_the_first_record_it_has_not_read(cluster, prom):
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
    wait_until(lambda: prom.query(seconds + selector(cluster, consumergroup="steady"))
               and total(prom, cluster, seconds, consumergroup="steady") == 0, 60,
               "a caught-up group's lag in time, 0")
    appended = time.monotonic()
    with rafka.Producer(cluster) as producer:
        producer.send("timed", b"unread", partition=0)
    wait_until(lambda: total(prom, cluster, seconds, consumergroup="steady") > 2, 60,
               "the lag in time to grow past 2 s")
    behind = total(prom, cluster, seconds, consumergroup="steady")
    assert behind <= time.monotonic() - appended + 5   # a report interval's slack


DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "rafka-dashboard.json"
# Panels that show nothing until something happens: an ISR change, a partition under its
# min.insync.replicas, samples of the log end reaching back to a group's committed offset.
QUIET_UNTIL_SOMETHING_HAPPENS = {"ISR shrinks and expands / s", "Partitions under min ISR",
                                 "Lag by group (seconds behind)"}


def test_every_dashboard_query_is_taken_by_prometheus_and_shows_data(cluster, prom):
    """examples/grafana/rafka-dashboard.json: its cluster variable lists this cluster, and
    each panel's query, the dashboard's variables set ($cluster this cluster,
    $__rate_interval 1m), is one Prometheus takes; once records flow through a Kafka
    client (Produce, FetchConsumer) and a group lags, every panel but those waiting for an
    event shows data."""
    from confluent_kafka import Producer
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("charted", 2, 2)])
    kafka = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(400):
        kafka.produce("charted", f"v{i}".encode(), key=str(i).encode())
    assert kafka.flush(30) == 0
    kafka_consume(cluster, "charted", "chart", 400)
    admin.alter_consumer_group_offsets("charted-behind", {("charted", 0): 10})
    wait_until(lambda: total(prom, cluster, "kafka_consumergroup_lag",
                             consumergroup="charted-behind") > 0, 60, "the group's lag")
    wait_until(lambda: total(prom, cluster, "kafka_network_requestmetrics_totaltimems"
                             "_count", request="FetchConsumer") > 0, 60, "fetch times")

    dashboard = json.loads(DASHBOARD.read_text())
    [variable] = [v for v in dashboard["templating"]["list"] if v["name"] == "cluster"]
    assert variable["definition"] == \
        "label_values(kafka_server_replicamanager_partitioncount, cluster)"
    assert cluster.name in prom.api(
        "label/cluster/values", **{"match[]": "kafka_server_replicamanager_partitioncount"})
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20

    def empty() -> set[str]:
        """The panels a query of which answers nothing (one Prometheus refuses raises)."""
        return {panel["title"] for panel in panels for target in panel["targets"]
                if not prom.query(target["expr"].replace("$cluster", cluster.name)
                                        .replace("$__rate_interval", "1m"))}
    # A rate needs two scrapes of its series: the newest series' come within seconds.
    wait_until(lambda: empty() <= QUIET_UNTIL_SOMETHING_HAPPENS, 60,
               "every panel but the quiet ones to show data")
