"""Spark's own Kafka source and sink (``spark-sql-kafka-0-10``, unmodified, from Maven
Central) reading and writing rafka topics through the brokers' Kafka listeners (issue 16):
a batch read, a batch write whose keys land where rafka's partitioner puts them, and a
structured-streaming read; each crossed with rafka's own producer and Spark's ``rafka``
format in the same session."""
from __future__ import annotations

import pytest

import rafka
from protocols.partitioner import partition_for_key

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]


def test_spark_kafka_format_reads_and_writes_rafka_topics(cluster, spark_session):
    spark = spark_session
    servers = cluster.bootstrap_servers
    cluster.admin().create_topics([rafka.NewTopic("sk-in", 3, 2),
                                   rafka.NewTopic("sk-out", 3, 2)])
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        futures = [producer.send("sk-in", b"v%d" % i, key=b"k%d" % i,
                                 headers=[("h", b"%d" % i)]) for i in range(1000)]
        producer.flush()
        written = {(m.partition, m.offset): i for i, m in
                   enumerate(f.result(10) for f in futures)}

    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", servers)
             .option("subscribe", "sk-in").option("startingOffsets", "earliest")
             .option("includeHeaders", "true").load())
    rows = frame.select("key", "value", "topic", "partition", "offset", "headers").collect()
    assert {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in rows} == {
        k: (b"k%d" % i, b"v%d" % i) for k, i in written.items()}
    assert all(r.topic == "sk-in" and [(h.key, bytes(h.value)) for h in r.headers]
               == [("h", b"%d" % written[(r.partition, r.offset)])] for r in rows)

    (frame.selectExpr("key", "value").write.format("kafka")
     .option("kafka.bootstrap.servers", servers).option("topic", "sk-out").save())
    back = (spark.read.format("rafka").option("cluster", cluster.name)
            .option("subscribe", "sk-out").load()
            .select("key", "value", "partition").collect())
    assert sorted((bytes(r.key), bytes(r.value)) for r in back) == sorted(
        (b"k%d" % i, b"v%d" % i) for i in range(1000))
    assert all(r.partition == partition_for_key(bytes(r.key), 3) for r in back)

    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
             .option("subscribe", "sk-out").option("startingOffsets", "earliest").load()
             .writeStream.format("memory").queryName("sk_stream")
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert spark.sql("select count(*) as n, count(distinct value) as d from sk_stream"
                     ).collect()[0].asDict() == {"n": 1000, "d": 1000}
