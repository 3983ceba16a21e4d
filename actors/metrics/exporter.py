"""The Ray metric objects for Kafka's broker and controller metrics, and their export: every
Ray node's Prometheus endpoint (``ray.nodes()``' ``MetricsExportPort``) and Ray's dashboard
show them, prefixed ``ray_`` by Ray (``docs/operating.md``'s scrape config takes it off).

Names are those Kafka's JMX exporter gives (kafka.server:type=ReplicaManager,
name=UnderReplicatedPartitions -> ``kafka_server_replicamanager_underreplicatedpartitions``;
a counter gets Prometheus' ``_total``), each labelled with the cluster and the broker.
Counters are handed their increase since the last report, gauges set on every report (Ray
forgets a gauge not set for two report intervals), request times as the histogram's
observations, bucket by bucket."""
from __future__ import annotations

import functools
from typing import Iterable

from actors.metrics.broker_topic_stats import TopicDeltas
from actors.metrics.consumer_lag import PartitionLag
from actors.metrics.gauges import ControllerGauges, ReplicaManagerGauges
from actors.metrics.request_metrics import BOUNDARIES_MS, bucket_value

BROKER = ("cluster", "broker")
# Observations of one request name's time a report hands Ray's histogram, at most.
MAX_OBSERVATIONS = 1000
TOPIC = BROKER + ("topic",)
PARTITION = TOPIC + ("partition",)
# Consumer lag, labelled as kafka-exporter labels it.
GROUP_TOPIC = BROKER + ("consumergroup", "topic")
GROUP_PARTITION = GROUP_TOPIC + ("partition",)


def report_interval_ms() -> int:
    """How often a broker reports: half Ray's own export interval
    (``RAY_metrics_report_interval_ms``, 10 s by default), so that no gauge lapses."""
    try:
        import ray
        ray_ms = int(ray._config.metrics_report_interval_ms())
    except Exception:   # an older Ray without the setting: its default
        ray_ms = 10_000
    return max(500, ray_ms // 2)


@functools.cache
def _metrics() -> dict:
    from ray.util.metrics import Counter, Gauge, Histogram

    def counter(name: str, doc: str, tags=TOPIC):
        return Counter(name, doc, tag_keys=tags)

    def gauge(name: str, doc: str, tags=BROKER):
        return Gauge(name, doc, tag_keys=tags)
    rm, kc = "kafka_server_replicamanager_", "kafka_controller_kafkacontroller_"
    topic_metrics = "kafka_server_brokertopicmetrics_"
    return {
        "bytes_in": counter(topic_metrics + "bytesin", "Bytes produced to the topic's "
                            "leaders on this broker (BytesInPerSec)"),
        "messages_in": counter(topic_metrics + "messagesin", "Records produced to the "
                               "topic's leaders on this broker (MessagesInPerSec)"),
        "bytes_out": counter(topic_metrics + "bytesout", "Bytes of the topic fetched by "
                             "consumers from this broker (BytesOutPerSec)"),
        "replication_bytes_out": counter(topic_metrics + "replicationbytesout", "Bytes of "
                                         "the topic fetched by followers from this broker "
                                         "(ReplicationBytesOutPerSec)"),
        "isr_shrinks": counter(rm + "isrshrinks", "ISR shrinks of partitions led here",
                               BROKER),
        "isr_expands": counter(rm + "isrexpands", "ISR expansions of partitions led here",
                               BROKER),
        "under_replicated": gauge(rm + "underreplicatedpartitions", "Partitions led here "
                                  "whose ISR is smaller than their replicas"),
        "under_min_isr": gauge(rm + "underminisrpartitioncount", "Partitions led here whose "
                               "ISR is below min.insync.replicas"),
        "at_min_isr": gauge(rm + "atminisrpartitioncount", "Partitions led here whose ISR "
                            "is at min.insync.replicas"),
        "partition_count": gauge(rm + "partitioncount", "Replicas on this broker"),
        "leader_count": gauge(rm + "leadercount", "Partitions led by this broker"),
        "under_min_isr_partition": gauge("kafka_cluster_partition_underminisr", "1 when the "
                                         "partition's ISR is below min.insync.replicas",
                                         PARTITION),
        "log_size": gauge("kafka_log_log_size", "Bytes of the replica's log", PARTITION),
        "log_end_offset": gauge("kafka_log_log_logendoffset", "The replica's log end "
                                "offset", PARTITION),
        "requests": counter("kafka_network_requestmetrics_requests", "Requests answered "
                            "(RequestsPerSec)", BROKER + ("request",)),
        "request_time": Histogram("kafka_network_requestmetrics_totaltimems", "Time from "
                                  "a request's arrival to its answer written, in ms",
                                  boundaries=list(BOUNDARIES_MS),
                                  tag_keys=BROKER + ("request",)),
        "consumer_lag": gauge("kafka_consumergroup_lag", "The partition's log end offset "
                              "minus the group's committed offset", GROUP_PARTITION),
        "consumer_offset": gauge("kafka_consumergroup_current_offset", "The group's "
                                 "committed offset", GROUP_PARTITION),
        "consumer_lag_seconds": gauge("kafka_consumergroup_lag_seconds", "How long ago the "
                                      "first record the group has not consumed was "
                                      "appended (from the log end's samples)",
                                      GROUP_PARTITION),
        "consumer_lag_sum": gauge("kafka_consumergroup_lag_sum", "The group's lag summed "
                                  "over the topic's partitions", GROUP_TOPIC),
        "active_controller": gauge(kc + "activecontrollercount", "1 on the active "
                                   "controller"),
        "offline_partitions": gauge(kc + "offlinepartitionscount", "Partitions without a "
                                    "leader"),
        "global_partitions": gauge(kc + "globalpartitioncount", "Partitions in the cluster"),
        "global_topics": gauge(kc + "globaltopiccount", "Topics in the cluster"),
        "imbalance": gauge(kc + "preferredreplicaimbalancecount", "Partitions not led by "
                           "their preferred replica"),
    }


class MetricsExporter:
    def __init__(self, cluster: str, broker_id: int):
        self.tags = {"cluster": cluster, "broker": str(broker_id)}

    def topic_deltas(self, deltas: TopicDeltas) -> None:
        m = _metrics()
        for name in ("bytes_in", "messages_in", "bytes_out", "replication_bytes_out"):
            metric = m[name]
            for topic, count in getattr(deltas, name).items():
                if count > 0:   # Ray's counter takes only increases
                    metric.inc(count, {**self.tags, "topic": topic})
        if deltas.isr_shrinks:
            m["isr_shrinks"].inc(deltas.isr_shrinks, self.tags)
        if deltas.isr_expands:
            m["isr_expands"].inc(deltas.isr_expands, self.tags)

    def replica_manager(self, g: ReplicaManagerGauges) -> None:
        m = _metrics()
        m["under_replicated"].set(g.under_replicated, self.tags)
        m["under_min_isr"].set(g.under_min_isr, self.tags)
        m["at_min_isr"].set(g.at_min_isr, self.tags)
        m["partition_count"].set(g.partition_count, self.tags)
        m["leader_count"].set(g.leader_count, self.tags)
        under = m["under_min_isr_partition"]
        for (topic, partition), value in g.under_min_isr_by_partition.items():
            under.set(value, {**self.tags, "topic": topic, "partition": str(partition)})

    def logs(self, rows: Iterable[tuple[str, int, int, int]]) -> None:
        m = _metrics()
        size, end = m["log_size"], m["log_end_offset"]
        for topic, partition, log_size, log_end_offset in rows:
            tags = {**self.tags, "topic": topic, "partition": str(partition)}
            size.set(log_size, tags)
            end.set(log_end_offset, tags)

    def request_times(self, counts: dict[tuple[str, int], int]) -> None:
        """Each request name's count, exactly (RequestsPerSec), and its time histogram.
        Ray's histogram takes one observation per call, and its agent replays each: past
        ``MAX_OBSERVATIONS`` requests of a name in a report, its buckets are observed in
        proportion (the percentiles hold; the histogram's count and sum are then a
        sample's: the counter has the number)."""
        m = _metrics()
        histogram, requests = m["request_time"], m["requests"]
        totals: dict[str, int] = {}
        for (request, _), count in counts.items():
            totals[request] = totals.get(request, 0) + count
        for request, total in totals.items():
            requests.inc(total, {**self.tags, "request": request})
        for (request, bucket), count in counts.items():
            total = totals[request]
            if total > MAX_OBSERVATIONS:
                count = max(1, round(count * MAX_OBSERVATIONS / total))
            tags, value = {**self.tags, "request": request}, bucket_value(bucket)
            for _ in range(count):
                histogram.observe(value, tags)

    def consumer_lag(self, lags: Iterable[PartitionLag], sums: dict[tuple[str, str], int],
                     lag_ms: dict[tuple[str, str, int], int | None]) -> None:
        m = _metrics()
        lag, offset, total = m["consumer_lag"], m["consumer_offset"], m["consumer_lag_sum"]
        seconds = m["consumer_lag_seconds"]
        for p in lags:
            tags = {**self.tags, "consumergroup": p.group, "topic": p.topic,
                    "partition": str(p.partition)}
            lag.set(p.lag, tags)
            offset.set(p.committed, tags)
            behind_ms = lag_ms.get((p.group, p.topic, p.partition))
            if behind_ms is not None:   # where it can be told
                seconds.set(behind_ms / 1000, tags)
        for (group, topic), value in sums.items():
            total.set(value, {**self.tags, "consumergroup": group, "topic": topic})

    def controller(self, g: ControllerGauges) -> None:
        m = _metrics()
        m["active_controller"].set(g.active_controller_count, self.tags)
        m["offline_partitions"].set(g.offline_partitions_count, self.tags)
        m["global_partitions"].set(g.global_partition_count, self.tags)
        m["global_topics"].set(g.global_topic_count, self.tags)
        m["imbalance"].set(g.preferred_replica_imbalance_count, self.tags)
