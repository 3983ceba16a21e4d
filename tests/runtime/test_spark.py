"""The ``rafka`` Spark format on a real local Spark session and a real 3-broker cluster:
batch and streaming reads and writes, as Spark's Kafka source behaves."""
from __future__ import annotations

import json

import pytest

import rafka
from protocols.partitioner import partition_for_key
from protocols.topics import TopicPartition
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]
SHARE_CLUSTER = True   # each test its own topics, groups and transactional ids


@pytest.fixture
def spark(spark_session, cluster):
    """The session's Spark; each test reads its own cluster (the ``cluster`` option)."""
    return spark_session


def produce(cluster, topic: str, n: int, start: int = 0, partitions: int | None = None):
    """n keyed records with a header; their RecordMetadata, acknowledged."""
    with rafka.Producer(cluster, acks="all") as producer:
        futures = [producer.send(topic, f"v{i}".encode(), key=f"k{i % 7}".encode(),
                                 headers=[("n", str(i).encode())],
                                 partition=None if partitions is None else i % partitions)
                   for i in range(start, start + n)]
        producer.flush()
        return [f.result(10) for f in futures]


def reader(spark, cluster, **options):
    r = spark.read.format("rafka").option("cluster", cluster.name)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_returns_every_acknowledged_record_with_kafkas_schema(spark, cluster):
    cluster.admin().create_topics([rafka.NewTopic("clicks", 3, 2)])
    acked = produce(cluster, "clicks", 60)
    df = reader(spark, cluster, subscribe="clicks", includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition",
                                                  "offset", "timestamp", "timestampType",
                                                  "headers"]
    rows = df.collect()
    assert sorted((r.partition, r.offset) for r in rows) == \
        sorted((m.partition, m.offset) for m in acked)
    by_offset = {(r.partition, r.offset): r for r in rows}
    for i, m in enumerate(acked):
        r = by_offset[(m.partition, m.offset)]
        assert (r.key, r.value, r.topic, r.timestampType) == (f"k{i % 7}".encode(),
                                                              f"v{i}".encode(), "clicks", 0)
        assert [(h.key, h.value) for h in r.headers] == [("n", str(i).encode())]
        assert abs(r.timestamp.timestamp() * 1000 - m.timestamp) < 1
    # assign + offsets per partition (-2 earliest, -1 latest), and minPartitions
    ends = {m.partition: m.offset + 1 for m in acked}
    some = reader(spark, cluster, assign=json.dumps({"clicks": [0, 2]}),
                  startingOffsets=json.dumps({"clicks": {"0": 3, "2": -2}}),
                  endingOffsets=json.dumps({"clicks": {"0": -1, "2": 4}}))
    got = sorted((r.partition, r.offset) for r in some.collect())
    assert got == [(0, o) for o in range(3, ends[0])] + [(2, o) for o in range(4)]
    split = reader(spark, cluster, subscribe="clicks", minPartitions="9")
    assert split.rdd.getNumPartitions() >= 6 and split.count() == 60
    # startingTimestamp: from the first record at or after the time, per partition (the
    # time index); a time after every record reads nothing.
    cut = sorted(m.timestamp for m in acked)[30]
    later = reader(spark, cluster, subscribe="clicks", startingTimestamp=str(cut)).collect()
    assert sorted((r.partition, r.offset) for r in later) == \
        sorted((m.partition, m.offset) for m in acked if m.timestamp >= cut)
    assert reader(spark, cluster, subscribe="clicks",
                  startingTimestamp=str(max(m.timestamp for m in acked) + 1)).count() == 0
    # kafka.* options are consumer configs: an unknown one fails the query on the driver;
    # kafka.bootstrap.servers (a Kafka job's) and kafka.group.id are taken.
    assert reader(spark, cluster, subscribe="clicks", **{
        "kafka.bootstrap.servers": "localhost:9092", "kafka.group.id": "g",
        "kafka.max.partition.fetch.bytes": "1024"}).count() == 60
    with pytest.raises(Exception, match="Unknown configuration 'ssl.truststore.location'"):
        reader(spark, cluster, subscribe="clicks",
               **{"kafka.ssl.truststore.location": "/etc/ca.jks"}).count()


def test_write_then_read_back_with_keys_partitions_and_headers(spark, cluster):
    cluster.admin().create_topics([rafka.NewTopic("out", 2, 2)])
    rows = [(f"k{i}", f"value {i}", i % 2, [("source", b"spark")]) for i in range(20)]
    df = spark.createDataFrame(rows, "key string, value string, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("rafka").option("cluster", cluster.name).option("topic", "out") \
        .mode("append").save()
    back = reader(spark, cluster, subscribe="out", includeHeaders="true").collect()
    assert sorted((r.key.decode(), r.value.decode(), r.partition) for r in back) == \
        sorted((k, v, p) for k, v, p, _ in rows)
    assert all([(h.key, h.value) for h in r.headers] == [("source", b"spark")] for r in back)
    with pytest.raises(Exception, match="Overwrite not allowed"):
        df.write.format("rafka").option("cluster", cluster.name).option("topic", "out") \
            .mode("overwrite").save()
    with pytest.raises(Exception, match="topic option required"):
        spark.createDataFrame([("x",)], "value string").write.format("rafka") \
            .option("cluster", cluster.name).mode("append").save()


def test_write_goes_through_arrow_by_topic_column_and_partition_as_sparks_kafka_sink(spark,
                                                                                    cluster):
    # Spark's Arrow writer hands each task whole record batches; rows are routed by their
    # topic column and given partition, the rest by their key's murmur2 (as send does).
    cluster.admin().create_topics([rafka.NewTopic("w1", 3, 2), rafka.NewTopic("w2", 2, 2)])
    df = spark.range(0, 5000, 1, 2).selectExpr(   # two tasks: ids below 2500, the rest
        "CAST(id AS STRING) AS value", "CAST(id % 11 AS STRING) AS key",
        "IF(id % 2 = 0, 'w1', 'w2') AS topic",
        "IF(id % 5 = 0, 1, CAST(NULL AS INT)) AS partition", "id * 2 AS ignored")
    df.write.format("rafka").option("cluster", cluster.name).mode("append").save()
    back = reader(spark, cluster, subscribe="w1,w2").collect()
    assert sorted(int(r.value) for r in back) == list(range(5000))
    counts = {"w1": 3, "w2": 2}
    for r in back:
        i = int(r.value)
        assert r.topic == ("w1" if i % 2 == 0 else "w2")
        assert r.key == str(i % 11).encode()
        assert r.partition == (1 if i % 5 == 0 else partition_for_key(r.key, counts[r.topic]))
    # Per partition, each task's rows keep the order it wrote them in.
    for topic in counts:
        for p in range(counts[topic]):
            ids = [int(r.value) for r in sorted(back, key=lambda r: r.offset)
                   if (r.topic, r.partition) == (topic, p)]
            for task in ([i for i in ids if i < 2500], [i for i in ids if i >= 2500]):
                assert task == sorted(task)
    with pytest.raises(Exception, match="value attribute unsupported type int"):
        spark.createDataFrame([(1,)], "value int").write.format("rafka") \
            .option("cluster", cluster.name).option("topic", "w1").mode("append").save()


def test_filters_on_partition_offset_and_timestamp_narrow_what_is_read(spark, cluster):
    # Pushed down (spark.sql.python.filterPushdown.enabled, set by local_session): a
    # partition or offset filter leaves out the ranges it excludes, and a timestamp lower
    # bound starts each partition where the time index says; the planned input partitions
    # show it. Spark's own Kafka source reads everything and filters after.
    import datetime as dt
    # Timestamps from 1970: kept (retention.ms -1) past the brokers' retention passes.
    cluster.admin().create_topics([rafka.NewTopic("tsf", 3, 2, config={"retention.ms": -1})])
    sizes, base = {0: 5, 1: 20, 2: 20}, {0: 1_000_000, 1: 2_000_000, 2: 3_000_000}
    with rafka.Producer(cluster, acks="all") as producer:
        for p, n in sizes.items():
            for i in range(n):
                producer.send("tsf", f"{p}-{i}".encode(), partition=p, timestamp=base[p] + i)
    df = reader(spark, cluster, subscribe="tsf")
    one = df.where("partition = 1")
    assert one.rdd.getNumPartitions() == 1
    assert sorted(r.offset for r in one.collect()) == list(range(20))
    middle = df.where("offset >= 10 AND offset < 15")     # partition 0 has none of them
    assert middle.rdd.getNumPartitions() == 2
    assert sorted((r.partition, r.offset) for r in middle.collect()) == \
        [(p, o) for p in (1, 2) for o in range(10, 15)]
    since = dt.datetime.fromtimestamp((base[1] + 5) / 1000, dt.timezone.utc)
    late = df.where(df.timestamp >= since)                 # partition 0 is all earlier
    assert late.rdd.getNumPartitions() == 2
    assert sorted((r.partition, r.offset) for r in late.collect()) == \
        [(1, o) for o in range(5, 20)] + [(2, o) for o in range(20)]
    picked = df.where("offset IN (2, 4)")                  # read as [2, 5), Spark drops 3
    assert sorted((r.partition, r.offset) for r in picked.collect()) == \
        [(p, o) for p in range(3) for o in (2, 4)]


def test_streaming_available_now_honours_max_offsets_per_trigger_and_resumes_from_its_checkpoint(
        spark, cluster, tmp_path):
    cluster.admin().create_topics([rafka.NewTopic("events", 3, 2)])
    produce(cluster, "events", 40)

    def run_once():
        query = (spark.readStream.format("rafka").option("cluster", cluster.name)
                 .option("subscribe", "events").option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "15").load()
                 .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
                 .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180)
        return [p for p in query.recentProgress if p["numInputRows"] > 0]

    first = run_once()
    assert len(first) >= 3 and all(p["numInputRows"] <= 15 for p in first)
    produce(cluster, "events", 25, start=40)
    second = run_once()                              # the same checkpoint: only the new 25
    assert sum(p["numInputRows"] for p in second) == 25
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert len(rows) == 65 and len({(r.partition, r.offset) for r in rows}) == 65
    assert {r.value for r in rows} == {f"v{i}" for i in range(65)}


def test_a_processing_time_query_picks_up_records_produced_while_it_runs(spark, cluster,
                                                                        tmp_path):
    cluster.admin().create_topics([rafka.NewTopic("live", 2, 2)])
    produce(cluster, "live", 5)
    query = (spark.readStream.format("rafka").option("cluster", cluster.name)
             .option("subscribe", "live").option("startingOffsets", "earliest").load()
             .selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("memory").queryName("live_values")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        wait_until(lambda: spark.sql("SELECT count(*) AS n FROM live_values").first().n == 5,
                   120, "the first records")
        produce(cluster, "live", 10, start=5)      # while the query runs
        wait_until(lambda: spark.sql("SELECT count(*) AS n FROM live_values").first().n == 15,
                   120, "the records produced while it ran")
        values = {r.value for r in spark.sql("SELECT value FROM live_values").collect()}
        assert values == {f"v{i}" for i in range(15)}
    finally:
        query.stop()


def test_a_stream_readers_triggers_reuse_one_admin_and_report_what_they_found(cluster,
                                                                           monkeypatch):
    """Spark asks a streaming source for its latest offsets at every trigger (every 10 ms
    while no record comes: its polling delay), then for the latest to report in the query's
    progress. As Spark's Kafka source does, a trigger asks ListOffsets once, for the
    latest offsets only (the earliest only of partitions new to it), through one admin
    client whose leaders are looked up once; reportLatestOffset reports what that
    trigger's latestOffset found (KafkaMicroBatchStream's latestPartitionOffsets), beyond
    the end a maxOffsetsPerTrigger limit gave."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    import actors.replica.locate as locate
    from rafka.admin import Admin
    from rafka.spark.source import RafkaStreamReader
    cluster.admin().create_topics([rafka.NewTopic("idle", 3, 1)])
    lookups, asked = [], []
    locate_replicas, list_offsets = locate.locate_replicas, Admin.list_offsets
    monkeypatch.setattr(locate, "locate_replicas",
                        lambda *a, **k: lookups.append(a[1]) or locate_replicas(*a, **k))
    monkeypatch.setattr(Admin, "list_offsets", lambda self, specs, *a, **k: asked.append(
        sorted(set(specs.values()))) or list_offsets(self, specs, *a, **k))
    stream = RafkaStreamReader({"cluster": cluster.name, "subscribe": "idle",
                                "startingOffsets": "earliest"})
    start = stream.initialOffset()
    assert start == {"idle": {"0": 0, "1": 0, "2": 0}}
    asked.clear()
    for _ in range(20):     # idle triggers
        assert stream.latestOffset(start, ReadAllAvailable()) == start
        assert stream.reportLatestOffset() == start
    assert asked == [["latest"]] * 20
    assert len(lookups) == 1
    produce(cluster, "idle", 5, partitions=1)
    latest = stream.latestOffset(start, ReadAllAvailable())
    assert latest == {"idle": {"0": 5, "1": 0, "2": 0}}
    produce(cluster, "idle", 3, start=5, partitions=1)
    assert stream.reportLatestOffset() == latest     # this trigger's, not a later one
    assert stream.latestOffset(start, ReadMaxRows(2)) == {"idle": {"0": 2, "1": 0, "2": 0}}
    assert stream.reportLatestOffset() == {"idle": {"0": 8, "1": 0, "2": 0}}
    assert len(lookups) == 1


def test_an_idle_trigger_planned_over_the_listener_asks_its_topics_latest_offsets(cluster,
                                                                                 monkeypatch):
    """Given only kafka.bootstrap.servers, a trigger asks over the Kafka listener what
    Spark's Kafka source asks: Metadata of the subscribed topic (not of every topic), then
    ListOffsets of the latest to each leader, on connections kept across triggers."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from protocols.kafka.api_keys import ApiKey
    from protocols.topics import TopicPartition
    from rafka.client.listener_admin import ListenerAdmin
    from rafka.spark.connection import planning
    from rafka.spark.source import RafkaStreamReader
    cluster.admin().create_topics([rafka.NewTopic("idle-by-listener", 3, 1),
                                   rafka.NewTopic("not-read", 1, 1)])
    sent = []
    send = ListenerAdmin._send
    monkeypatch.setattr(ListenerAdmin, "_send", lambda self, address, api_key, version, values,
                        deadline: sent.append((api_key, values)) or
                        send(self, address, api_key, version, values, deadline))
    options = {"kafka.bootstrap.servers": cluster.bootstrap_servers,
               "subscribe": "idle-by-listener", "startingOffsets": "earliest"}
    stream = RafkaStreamReader(options)
    start = stream.initialOffset()
    assert start == {"idle-by-listener": {"0": 0, "1": 0, "2": 0}}
    admin = planning(options)
    connections = dict(admin._sockets)
    leaders = {admin._leaders[TopicPartition("idle-by-listener", p)] for p in range(3)}
    sent.clear()
    for _ in range(10):
        assert stream.latestOffset(start, ReadAllAvailable()) == start
    assert [values for key, values in sent if key == ApiKey.METADATA] == [
        {"topics": [{"name": "idle-by-listener"}], "allow_auto_topic_creation": False}] * 10
    asked = [values for key, values in sent if key == ApiKey.LIST_OFFSETS]
    assert len(asked) == 10 * len(leaders)
    assert {p["timestamp"] for values in asked for t in values["topics"]
            for p in t["partitions"]} == {-1}   # the latest only
    assert admin._sockets == connections


def test_a_stream_over_a_topic_deleted_and_recreated_reports_the_data_lost(cluster):
    """As Spark's Kafka source (KafkaMicroBatchStream): when the topic a query reads is
    recreated with fewer records than were read, the trigger's end is below its start and
    planning the batch reports the data lost (the query fails), where the end used to be
    held at the start and the query waited, silently, until the new topic passed the old
    offsets; with failOnDataLoss=false the batch drops that range and the query goes on
    from what the new topic holds. A deleted topic's partitions are gone, the same way."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from rafka.spark.offsets import SparkSourceError
    from rafka.spark.source import RafkaStreamReader
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("recreated", 1, 1)])
    produce(cluster, "recreated", 10)
    options = {"cluster": cluster.name, "subscribe": "recreated",
               "startingOffsets": "earliest", "fetchOffset.retryIntervalMs": "0"}
    strict = RafkaStreamReader(options)
    lenient = RafkaStreamReader({**options, "failOnDataLoss": "false"})
    start = strict.latestOffset(strict.initialOffset(), ReadAllAvailable())
    assert start == {"recreated": {"0": 10}}
    admin.delete_topics(["recreated"])
    wait_until(lambda: "recreated" not in cluster.metadata()["topics"], 60, "deleted")
    assert strict.latestOffset(start, ReadAllAvailable()) == {}
    with pytest.raises(SparkSourceError, match=r"\['recreated-0'\] are gone"):
        strict.partitions(start, {})
    admin.create_topics([rafka.NewTopic("recreated", 1, 1)])
    produce(cluster, "recreated", 3)
    end = strict.latestOffset(start, ReadAllAvailable())
    assert end == {"recreated": {"0": 3}}
    with pytest.raises(SparkSourceError, match="Partition recreated-0's offset was changed "
                                               "from 10 to 3.*failOnDataLoss"):
        strict.partitions(start, end)
    assert lenient.partitions(start, end) == []
    produce(cluster, "recreated", 2, start=3)
    later = lenient.latestOffset(end, ReadAllAvailable())
    (part,) = lenient.partitions(end, later)
    assert (part.range.from_offset, part.range.until_offset) == (3, 5)


def test_streaming_write_copies_a_topic_and_data_loss_fails_unless_allowed(spark, cluster,
                                                                           tmp_path):
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("src", 2, 2), rafka.NewTopic("dst", 2, 2)])
    produce(cluster, "src", 30, partitions=2)
    query = (spark.readStream.format("rafka").option("cluster", cluster.name)
             .option("subscribe", "src").option("startingOffsets", "earliest").load()
             .selectExpr("key", "value", "partition")
             .writeStream.format("rafka").option("cluster", cluster.name)
             .option("topic", "dst").option("checkpointLocation", str(tmp_path / "c1"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    copied = reader(spark, cluster, subscribe="dst").collect()
    assert sorted(r.value for r in copied) == sorted(f"v{i}".encode() for i in range(30))
    # Records deleted below where a read starts: Spark's failOnDataLoss semantics.
    admin.delete_records({("src", 0): 10})
    from_zero = json.dumps({"src": {"0": 0, "1": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, cluster, subscribe="src", startingOffsets=from_zero).collect()
    rest = reader(spark, cluster, subscribe="src", startingOffsets=from_zero,
                  failOnDataLoss="false").collect()
    assert min(r.offset for r in rest if r.partition == 0) == 10 and len(rest) == 20


def test_read_committed_reads_what_transactions_committed(spark, cluster):
    """kafka.isolation.level=read_committed, as Spark's Kafka source takes it: a read ends
    at the last stable offset (an open transaction's records wait), aborted records are
    never returned, and a range that ends in an aborted transaction and its marker is read
    to its end."""
    cluster.admin().create_topics([rafka.NewTopic("txn-read", 1, 3)])
    producer = rafka.Producer(cluster, {"transactional.id": "spark-read-app"})
    producer.init_transactions()
    for round_, commit in enumerate([True, False, True, False]):
        producer.begin_transaction()
        for i in range(10):
            producer.send("txn-read", f"r{round_}-{i}".encode())
        producer.flush()         # in the log, aborted or not
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.begin_transaction()
    producer.send("txn-read", b"still open").result(30)
    committed = reader(spark, cluster, subscribe="txn-read",
                       **{"kafka.isolation.level": "read_committed"}).collect()
    assert sorted(r.value.decode() for r in committed) == sorted(
        f"r{n}-{i}" for n in (0, 2) for i in range(10))
    everything = reader(spark, cluster, subscribe="txn-read").collect()
    assert len(everything) == 41
    producer.abort_transaction()
    producer.close()


# What a Spark Python worker forked by rafka's daemon runs at its first task of the format:
# it connects to Ray, reads with a consumer, writes keyed records with headers, and in a
# transaction as the exactly-once sink does. It prints the modules of these packages it had
# to import for that beyond what the daemon preloaded.
_FIRST_TASK = """
import sys
from rafka.spark.daemon import preload
preload()
before = set(sys.modules)
import rafka
from protocols.topics import TopicPartition
from rafka.connectors.offset_ranges import OffsetRange
from rafka.spark.connection import connect
from rafka.spark.source import read_range
# A read task of a job naming the cluster by kafka.bootstrap.servers (over the listener).
assert sum(b.num_rows for b in read_range({"kafka.bootstrap.servers": sys.argv[3]},
                                          OffsetRange(sys.argv[2], 0, 0, 20), True)) == 20
# and a write task's (Produce over the listener)
import pyarrow as pa
from rafka.spark.sink import write_batches
assert write_batches({"kafka.bootstrap.servers": sys.argv[3], "topic": sys.argv[2]},
                     iter([pa.record_batch({"value": pa.array([b"w"])})])).records == 1
cluster = connect({"cluster": sys.argv[1]})
consumer = rafka.Consumer(cluster, {"auto.offset.reset": "none", "enable.auto.commit": False})
tp = TopicPartition(sys.argv[2], 0)
consumer.assign([tp])
consumer.seek(tp, 0)
assert len(consumer.poll_arrow(10_000, headers=True)) == 21   # and the one written
consumer.close()
with rafka.Producer(cluster) as producer:
    producer.send_batch(sys.argv[2], [b"v"] * 5, keys=[b"k"] * 5,
                        headers=[[("h", b"1")]] * 5).result(30)
with rafka.Producer(cluster, {"transactional.id": "first-task"}) as producer:
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_batch(sys.argv[2], [b"t"] * 5, keys=[b"k"] * 5)
    producer.commit_transaction()
watched = ("rafka", "actors", "storage", "protocols", "ray", "pydantic", "pyarrow", "pandas",
           "kio")
print(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in watched))
"""


def test_the_daemon_preloads_everything_a_first_task_of_the_format_imports(cluster):
    """Each module a worker imports at its first task is read (or compiled) and executed in
    that worker, in every worker a job starts: ~160 of them (~0.3-0.6 s of CPU) before
    PRELOAD listed what Ray imports on connecting and what the actors' classes import."""
    import ast
    import os
    import subprocess
    import sys
    from pathlib import Path

    import ray
    cluster.admin().create_topics([rafka.NewTopic("first-task", 1, 1)])
    produce(cluster, "first-task", 20, partitions=1)
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address,
               PYTHONPATH=str(repo))
    run = subprocess.run([sys.executable, "-c", _FIRST_TASK, cluster.name, "first-task",
                          cluster.bootstrap_servers],
                         env=env, cwd=str(repo), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    from rafka.spark.daemon import AFTER_FORK
    imported = set(ast.literal_eval(run.stdout.strip().splitlines()[-1]))
    # Only the modules of the actor classes the task held handles on (and their importers),
    # which must not be imported before the fork (tests/rafka/spark/test_daemon.py). Strict
    # on purpose, Ray's and pyarrow's modules too: a new version importing one more module
    # lazily costs every worker again, and belongs in the daemon's PRELOAD.
    assert imported <= set(AFTER_FORK), sorted(imported - set(AFTER_FORK))


# What Spark's planner processes run for a read given only a Kafka job's
# kafka.bootstrap.servers: a batch read's partitions, a stream's first offsets and a trigger's.
_PLAN_BY_LISTENER = """
import json, sys
from pyspark.sql.streaming.datasource import ReadAllAvailable
from rafka.spark.source import RafkaFilteringDataSource, RafkaStreamReader
options = {"kafka.bootstrap.servers": sys.argv[1], "subscribe": sys.argv[2],
           "startingOffsets": json.dumps({sys.argv[2]: {"0": 1, "1": -2, "2": -2}})}
source = RafkaFilteringDataSource(options)
reader = source.reader(source.schema())
partitions = reader.partitions()
print(json.dumps(sorted((r.range.partition, r.range.from_offset, r.range.until_offset)
                        for r in partitions)))
stream = RafkaStreamReader({**options, "startingOffsets": "earliest"})
start = stream.initialOffset()
print(json.dumps([start, stream.latestOffset(start, ReadAllAvailable())]))
# What Spark's tasks then do with the planned partitions, in this process too.
print(json.dumps(sorted([p.range.partition, offset, value.decode()] for p in partitions
                        for batch in reader.read(p) for offset, value in zip(
                            batch.column("offset").to_pylist(),
                            batch.column("value").to_pylist()))))
# And what a write task does with its rows (Spark's Arrow writer hands it record batches).
import pyarrow as pa
from rafka.spark.sink import write_batches
rows = pa.record_batch({"key": pa.array([b"k1", None]), "value": pa.array([b"w1", b"w2"])})
print(write_batches({**options, "topic": sys.argv[2]}, iter([rows])).records)
# An exactlyOnce write: its transaction over the listener too (Spark's TaskContext, which
# names the task, is not there outside a Spark task: the task given instead).
import rafka.spark.sink
from rafka.connectors.exactly_once import ExactlyOnceTask
rafka.spark.sink._task = lambda options, prefix: ExactlyOnceTask(f"{sys.argv[2]}-eo", 0, 1)
print(write_batches({**options, "topic": f"{sys.argv[2]}-eo", "exactlyOnce": "true"},
                    iter([rows])).records)
print("ray" in sys.modules)
"""


def test_a_job_given_only_kafka_bootstrap_servers_plans_reads_and_writes_over_the_listener(
        spark, cluster):
    """A job moved from format("kafka") keeps its kafka.bootstrap.servers and names no
    cluster: the rafka cluster is the one listening there, and a read is planned as
    Spark's Kafka source plans it, with Metadata and ListOffsets over the listener, and
    read and written as its tasks read and write, with Fetch and Produce to each leader.
    Spark starts its planner processes cold for a session's first job of each kind;
    planned this way they never import Ray (~0.6 s of each: the import, the connection, the
    controller's actor class), and the tasks need no Ray connection."""
    import subprocess
    import sys
    from pathlib import Path

    cluster.admin().create_topics([rafka.NewTopic("by-listener", 3, 2),
                                   rafka.NewTopic("by-listener-eo", 1, 2)])
    acked = produce(cluster, "by-listener", 30, partitions=3)
    planned = subprocess.run(
        [sys.executable, "-c", _PLAN_BY_LISTENER, cluster.bootstrap_servers, "by-listener"],
        capture_output=True, text=True, timeout=120, cwd=str(Path(__file__).parents[2]))
    assert planned.returncode == 0, planned.stderr[-3000:]
    ranges, offsets, rows, written, written_once, ray_imported = \
        planned.stdout.strip().splitlines()
    assert json.loads(ranges) == [[0, 1, 10], [1, 0, 10], [2, 0, 10]]
    assert json.loads(offsets) == [{"by-listener": {"0": 0, "1": 0, "2": 0}},
                                   {"by-listener": {"0": 10, "1": 10, "2": 10}}]
    assert json.loads(rows) == sorted([m.partition, m.offset, f"v{i}"]
                                      for i, m in enumerate(acked)
                                      if (m.partition, m.offset) != (0, 0))
    assert written == written_once == "2"
    assert ray_imported == "False"
    # The transaction committed: its records and its commit marker.
    assert cluster.admin().list_offsets({("by-listener-eo", 0): "latest"}, "read_committed")[
        TopicPartition("by-listener-eo", 0)].offset == 3
    df = (spark.read.format("rafka")
          .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
          .option("subscribe", "by-listener").load())
    got = sorted((r.partition, r.offset, r.value) for r in df.collect())
    assert [r for r in got if r[2].startswith(b"v")] == sorted(
        (m.partition, m.offset, f"v{i}".encode()) for i, m in enumerate(acked))
    assert sorted(r[2] for r in got if r[2].startswith(b"w")) == [b"w1", b"w2"]
    # Written the same way, by Spark's tasks.
    (df.select("key", "value").write.format("rafka")
     .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
     .option("topic", "by-listener").mode("append").save())
    assert sum(r.offset for r in cluster.admin().list_offsets(
        {("by-listener", p): "latest" for p in range(3)}).values()) == 64
