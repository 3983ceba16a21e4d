"""A Kafka Streams application with ``processing.guarantee=exactly_once_v2`` (Kafka Streams
4.3.1, unmodified, ``tests/kafka_streams/EosCopy.java``) against rafka's Kafka listener,
with the broker hosting its transaction coordinator SIGKILLed mid-run: its output, read at
read_committed, holds every input record exactly once (issue 41's proof)."""
from __future__ import annotations

import os
import signal
import time

import pytest

import rafka
from protocols.topics import TopicPartition
from tests.kafka_streams import start_app
from tests.runtime.conftest import cluster_with, collect
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

PARTITIONS = 6
BATCH = 10_000


def produce(cluster, start: int, count: int) -> None:
    with rafka.Producer(cluster, {"linger.ms": 20}) as producer:
        for i in range(start, start + count):
            producer.send("streams-in", f"v{i}".encode(), key=f"k{i % 97}".encode())


def committed_output(cluster) -> int:
    """How many output records a read_committed consumer can reach (offsets to the LSO,
    markers included: an upper bound that only grows)."""
    admin = cluster.admin()
    tps = [("streams-out", p) for p in range(PARTITIONS)]
    ends = admin.list_offsets({tp: "latest" for tp in tps}, "read_committed")
    return sum(r.offset for r in ends.values())


def streams_coordinator(cluster, application_id: str) -> int:
    """The broker hosting the transaction coordinator of one of the application's
    producers (EOS v2: one transactional id per stream thread)."""
    admin = cluster.admin()
    ids = [t.transactional_id for t in admin.list_transactions()
           if t.transactional_id.startswith(application_id)]
    assert ids, "the application has no transactional producer yet"
    return admin.describe_transactions(ids[:1])[ids[0]].coordinator_id


def test_exactly_once_v2_through_a_broker_sigkill(ray_session, tmp_path):
    with cluster_with(tmp_path, {}) as cluster:
        cluster.admin().create_topics([rafka.NewTopic("streams-in", PARTITIONS, 3),
                                       rafka.NewTopic("streams-out", PARTITIONS, 3)])
        produce(cluster, 0, BATCH)
        log = tmp_path / "streams-app.log"
        app = start_app(cluster.bootstrap_servers, "eos-copy", "streams-in", "streams-out",
                        tmp_path / "streams", log)
        try:
            wait_until(lambda: committed_output(cluster) >= BATCH // 4, 240,
                       "the application's first committed output")
            victim = streams_coordinator(cluster, "eos-copy")
            os.kill(cluster.broker_pid(victim), signal.SIGKILL)
            produce(cluster, BATCH, BATCH)     # while the broker is gone and comes back
            wait_until(lambda: committed_output(cluster) >= 2 * BATCH, 300,
                       "every input processed")
            time.sleep(3)           # anything written twice would show by now
            assert app.poll() is None, log.read_text()[-3000:]
        finally:
            app.terminate()
            try:
                app.wait(30)
            except Exception:
                app.kill()
        consumer = rafka.Consumer(cluster, {"isolation.level": "read_committed",
                                            "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition("streams-out", p) for p in range(PARTITIONS)])
        try:
            out = collect(lambda: [r.value.decode() for r in consumer.poll(500)],
                          2 * BATCH, 120, 2.0)
        finally:
            consumer.close()
        values = sorted(v.split("@")[0] for v in out)
        sources = [v.split("@")[1] for v in out]
        assert len(sources) == len(set(sources)), "an input record was written twice"
        assert values == sorted(f"v{i}" for i in range(2 * BATCH))
