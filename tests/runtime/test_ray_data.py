"""Topics as Ray Datasets: read_topic / write_topic on a real cluster."""
from __future__ import annotations

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
