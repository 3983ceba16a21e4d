"""Exactly-once writes (issue 41, step 5) on a real cluster: a write task run again after
it committed writes nothing, a new attempt fences a zombie one (through Ray, and over the
Kafka listener as a job named by kafka.bootstrap.servers alone writes), a Spark micro-batch
run again from its checkpoint after a driver restart writes nothing twice (and, as the
control, does without the option), and Ray Data's write_topic given the same prefix
twice."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import rafka
from protocols.errors import ProducerFencedError
from protocols.topics import TopicPartition
from rafka.connectors.exactly_once import (ExactlyOnceTask, write_exactly_once,
                                           write_over_listener)
from tests.runtime.conftest import collect

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
SHARE_CLUSTER = True   # each test its own topics, groups and transactional ids


def committed_values(cluster, topic: str, partitions: int, expected: int) -> list[bytes]:
    consumer = rafka.Consumer(cluster, {"isolation.level": "read_committed",
                                        "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    try:
        return collect(lambda: [r.value for r in consumer.poll(200)], expected, 60, 1.5)
    finally:
        consumer.close()


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"key": [f"k{i}".encode() for i in range(start, start + n)],
                     "value": [f"v{i}".encode() for i in range(start, start + n)]})


def _writer(how: str, cluster):
    """``write_exactly_once`` through Ray, or the same over the Kafka listener."""
    if how == "ray":
        return lambda *args: write_exactly_once(cluster, *args)
    return lambda *args: write_over_listener(cluster.bootstrap_servers, *args)


@pytest.mark.parametrize("how", ["ray", "listener"])
def test_a_task_run_again_after_its_commit_writes_nothing(cluster, how):
    topic = f"eo-retry-{how}"
    cluster.admin().create_topics([rafka.NewTopic(topic, 2, 3)])
    write = _writer(how, cluster)
    task = ExactlyOnceTask(f"{topic}-sink", 0, 1)
    assert write({}, task, [rows(0, 50), rows(50, 50)], topic) == 100
    # The executor died after the commit, before Spark or Ray heard of it: run again.
    assert write({}, task, [rows(0, 50), rows(50, 50)], topic) == 0
    # The next micro-batch of the same task writes.
    later = ExactlyOnceTask(f"{topic}-sink", 0, 2)
    assert write({}, later, [rows(100, 10)], topic) == 10
    values = committed_values(cluster, topic, 2, 110)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(110))


@pytest.mark.parametrize("how", ["ray", "listener"])
def test_a_new_attempt_fences_a_zombie_attempt(cluster, how):
    topic = f"eo-zombie-{how}"
    cluster.admin().create_topics([rafka.NewTopic(topic, 1, 3)])
    task = ExactlyOnceTask(f"{topic}-sink", 3, 1)
    zombie = rafka.Producer(cluster, {"transactional.id": task.transactional_id})
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send(topic, b"zombie").result(30)
    # Spark gave up on the slow attempt and started another.
    assert _writer(how, cluster)({}, task, [rows(0, 20)], topic) == 20
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    zombie.close()
    assert sorted(committed_values(cluster, topic, 1, 20)) == \
        sorted(f"v{i}".encode() for i in range(20))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("exactly_once,by", [(True, "cluster"), (False, "cluster"),
                                              (True, "bootstrap")])
def test_spark_micro_batch_run_again_from_its_checkpoint(spark_session, cluster, tmp_path,
                                                        exactly_once, by):
    """The driver dies after the batch's tasks committed and before the batch's commit
    reached the checkpoint (its commits/ file removed): on restart Spark runs the batch
    again. With exactlyOnce nothing is written twice; without, everything is (the control:
    Spark's own Kafka sink duplicates the same way). A job naming the cluster by
    kafka.bootstrap.servers alone writes its transactions over the Kafka listener."""
    suffix = ("eo" if exactly_once else "alo") + ("" if by == "cluster" else "-bs")
    options = ({"cluster": cluster.name} if by == "cluster" else
               {"kafka.bootstrap.servers": cluster.bootstrap_servers})
    src, dst = f"spark-{suffix}-src", f"spark-{suffix}-dst"
    cluster.admin().create_topics([rafka.NewTopic(src, 3, 3), rafka.NewTopic(dst, 3, 3)])
    with rafka.Producer(cluster) as producer:
        for i in range(300):
            producer.send(src, f"v{i}".encode(), key=f"k{i % 13}".encode())
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (spark_session.readStream.format("rafka").options(**options)
                 .option("subscribe", src).option("startingOffsets", "earliest").load()
                 .selectExpr("key", "value")
                 .writeStream.format("rafka").options(**options)
                 .option("topic", dst).option("exactlyOnce", str(exactly_once).lower())
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180)
        assert query.exception() is None

    run()
    commits = sorted(Path(checkpoint, "commits").iterdir(), key=lambda p: p.name)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    Path(last.parent, f".{last.name}.crc").unlink(missing_ok=True)
    run()
    values = committed_values(cluster, dst, 3, 600 if not exactly_once else 300)
    if exactly_once:
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(300))
    else:
        assert len(values) == 600


@pytest.mark.spark
@pytest.mark.slow
def test_spark_batch_write_exactly_once(spark_session, cluster):
    cluster.admin().create_topics([rafka.NewTopic("spark-eo-batch", 2, 3)])
    df = spark_session.createDataFrame([(f"k{i}", f"v{i}") for i in range(100)],
                                       "key string, value string")
    (df.write.format("rafka").option("cluster", cluster.name)
     .option("topic", "spark-eo-batch").option("exactlyOnce", "true").mode("append").save())
    assert sorted(committed_values(cluster, "spark-eo-batch", 2, 100)) == \
        sorted(f"v{i}".encode() for i in range(100))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_spark_exactly_once_sink_after_a_killed_executor(cluster, tmp_path):
    """Spark in local-cluster mode (its executor a JVM process of its own, with its Python
    workers) copies a topic with exactlyOnce; its executor is SIGKILLed while the sink
    writes, twice. Spark's worker starts another and the lost tasks run again: every
    record once in the copy (``tests/spark_executor_kill.py``)."""
    import os
    import subprocess
    import sys

    import ray
    cluster.admin().create_topics([rafka.NewTopic("ek-src", 3, 3),
                                   rafka.NewTopic("ek-dst", 3, 3)])
    with rafka.Producer(cluster) as producer:
        for i in range(12_000):
            producer.send("ek-src", f"v{i}".encode(), key=f"k{i % 101}".encode())
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address,
               PYTHONPATH=str(repo))
    run = subprocess.run([sys.executable, "-m", "tests.spark_executor_kill", cluster.name,
                          "ek-src", "ek-dst", str(tmp_path / "checkpoint")], env=env,
                         cwd=str(repo), capture_output=True, text=True, timeout=800)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    summary = json.loads(lines[-1])
    assert summary["finished"] and summary["error"] is None, summary
    assert summary["killed"], f"no executor was killed: {summary}"
    values = committed_values(cluster, "ek-dst", 3, 12_000)
    assert len(values) == 12_000 and sorted(values) == sorted(
        f"v{i}".encode() for i in range(12_000))


def test_ray_data_write_topic_exactly_once(cluster):
    import ray.data

    import rafka.ray
    cluster.admin().create_topics([rafka.NewTopic("eo-ray", 2, 3)])
    ds = ray.data.from_items([{"key": f"k{i}".encode(), "value": f"v{i}".encode()}
                              for i in range(200)], override_num_blocks=4)
    assert rafka.ray.write_topic(ds, cluster, "eo-ray", exactly_once=True,
                                 transactional_id_prefix="eo-ray-job") == 200
    # The same pipeline run again under the same prefix: every task finds its marker.
    assert rafka.ray.write_topic(ds, cluster, "eo-ray", exactly_once=True,
                                 transactional_id_prefix="eo-ray-job") == 0
    assert sorted(committed_values(cluster, "eo-ray", 2, 200)) == \
        sorted(f"v{i}".encode() for i in range(200))
    markers = cluster.admin().list_consumer_group_offsets("eo-ray-job")
    assert sorted(tp.partition for tp in markers) == [0, 1, 2, 3]
    assert all(json.loads(om.metadata)["sequence"] == 1 for om in markers.values())
