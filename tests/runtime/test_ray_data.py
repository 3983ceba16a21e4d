"""Topics as Ray Datasets: read_topic / write_topic on a real cluster."""
from __future__ import annotations

import time

import pyarrow as pa
import pytest

import rafka
import rafka.ray

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]


def test_read_topic_and_write_topic_round_trip(cluster):
    cluster.admin().create_topics([rafka.NewTopic("ev", 3, 2), rafka.NewTopic("up", 2, 2),
                                   rafka.NewTopic("pinned", 2, 2)])
    with rafka.Producer(cluster) as producer:
        acked = [producer.send("ev", f"v{i}".encode(), key=f"k{i}".encode()) for i in range(45)]
    acked = [f.result(10) for f in acked]
    ds = rafka.ray.read_topic(cluster, "ev")
    assert ds.schema().names == ["key", "value", "topic", "partition", "offset", "timestamp",
                                 "timestampType"]
    rows = ds.take_all()
    assert sorted((r["partition"], r["offset"]) for r in rows) == \
        sorted((m.partition, m.offset) for m in acked)
    by_position = {(m.partition, m.offset): (i, m) for i, m in enumerate(acked)}
    for r in rows:
        i, m = by_position[(r["partition"], r["offset"])]
        assert (r["key"], r["value"], r["topic"], r["timestampType"]) == \
            (f"k{i}".encode(), f"v{i}".encode(), "ev", 0)
        assert round(r["timestamp"].timestamp() * 1000) == m.timestamp
    # A range: from offset 5 of partition 0 to the end; the rest untouched by start.
    part = rafka.ray.read_topic(cluster, "ev", start={0: 5}, end="latest").take_all()
    ends = {p: max(m.offset for m in acked if m.partition == p) + 1 for p in range(3)}
    assert len(part) == 45 - min(5, ends[0])
    # Transform and write back with the producer; read the result.
    upper = ds.map(lambda r: {"key": r["key"], "value": r["value"].upper()})
    assert rafka.ray.write_topic(upper, cluster, "up") == 45
    back = rafka.ray.read_topic(cluster, "up").take_all()
    assert sorted(r["value"] for r in back) == sorted(f"V{i}".encode() for i in range(45))
    # Arrow end to end: a pyarrow batch transform, its rows routed by a partition column.
    pinned = ds.map_batches(lambda t: pa.table({
        "value": t["value"], "key": t["key"],
        "partition": pa.array([1] * len(t), pa.int32())}), batch_format="pyarrow")
    assert rafka.ray.write_topic(pinned, cluster, "pinned") == 45
    back = rafka.ray.read_topic(cluster, "pinned").take_all()
    assert {r["partition"] for r in back} == {1}
    assert sorted(r["value"] for r in back) == sorted(f"v{i}".encode() for i in range(45))



def test_a_compacted_topic_is_read_to_its_end_and_counted_as_the_records_left(ray_session,
                                                                              tmp_path):
    """The cleaner keeps a batch's last offset but may leave no record in it (Kafka's
    cleaner does the same): a consumer moves past such batches (Kafka's fetcher goes to the
    batch's nextOffset), so a read of [earliest, latest) ends, by poll and by poll_arrow; and
    read_topic().count(), which answers from the planned offset ranges where every offset
    holds a record, reads to count once offsets have gaps. Both hung or over-counted before."""
    from protocols.topics import TopicPartition
    from tests.runtime.conftest import cluster_with
    from tests.runtime.helpers import wait_until

    with cluster_with(tmp_path, {"log.cleaner.backoff.ms": 300}) as cluster:
        cluster.admin().create_topics([rafka.NewTopic("table", 1, 2, config={
            "cleanup.policy": "compact", "segment.bytes": 1024,
            "min.cleanable.dirty.ratio": 0.01})])
        with rafka.Producer(cluster, {"batch.size": 64}) as producer:   # a batch a record
            for f in [producer.send("table", f"v{i}".encode(), key=f"k{i % 5}".encode())
                      for i in range(200)]:
                f.result(10)
        tp = TopicPartition("table", 0)

        def polled() -> list:
            """Every record from offset 0 by poll, once the position reaches the end."""
            with rafka.Consumer(cluster, {"enable.auto.commit": False}) as consumer:
                consumer.assign([tp])
                consumer.seek(tp, 0)
                records = []
                while consumer.position(tp) < 200:
                    records += consumer.poll(10_000) or pytest.fail(
                        f"no records at position {consumer.position(tp)} within 10 s")
                return records
        def cleaned() -> list | None:
            """The records once the cleaner has removed some and has nothing left to do (it
            looks every 300 ms): the same before and after a pause."""
            before = polled()
            time.sleep(1.5)
            after = polled()
            return after if len(after) < 200 and after == before else None
        # The first batches hold no record once the cleaner has been.
        records = wait_until(cleaned, 90, "the cleaner to remove superseded records")
        latest = {f"k{i % 5}".encode(): f"v{i}".encode() for i in range(200)}
        assert {r.key: r.value for r in records} == latest    # each key's last value is kept
        count = rafka.ray.read_topic(cluster, "table").count()   # before any read of it
        rows = rafka.ray.read_topic(cluster, "table").take_all()
        assert count == len(rows) < 200
        assert {r["key"]: r["value"] for r in rows} == latest
