"""Producer and consumer against a real cluster (SPEC §5-6, issue 6)."""
from __future__ import annotations

import os
import signal
import threading
import time
from collections import defaultdict

import pytest
import ray

import rafka
from protocols.errors import InvalidConfigError, RecordTooLargeError
from protocols.partitioner import partition_for_key
from protocols.topics import TopicPartition
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]


def consume_all(consumer, expected: int, timeout_s: float = 60) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        got += consumer.poll(500)
    return got


def test_keys_go_where_kafka_puts_them_and_come_back_in_order(cluster):
    cluster.admin().create_topics([rafka.NewTopic("t", 3, 2)])
    with rafka.Producer(cluster, {"linger.ms": 2}, key_serializer="string",
                        value_serializer="string") as producer:
        futures = [producer.send("t", f"v{i}", key=f"user-{i % 7}") for i in range(300)]
        producer.flush()
        metas = [f.result(10) for f in futures]
    for i, m in enumerate(metas):
        assert m.partition == partition_for_key(f"user-{i % 7}".encode(), 3)
    per_partition = defaultdict(list)
    for i, m in enumerate(metas):
        per_partition[m.partition].append((m.offset, i))
    for entries in per_partition.values():   # offsets follow send order within a partition
        assert [o for o, _ in entries] == list(range(len(entries)))

    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest", "max.poll.records": 50},
                              value_deserializer="string", key_deserializer="string")
    consumer.assign([("t", p) for p in range(3)])
    records = consume_all(consumer, 300)
    assert len(records) == 300 and max(len(b) for b in [records]) == 300
    by_partition = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r)
    for p, rs in by_partition.items():
        assert [r.offset for r in rs] == list(range(len(rs)))
        assert [r.value for r in rs] == [f"v{i}" for _, i in per_partition[p]]
    assert all(r.key == f"user-{int(r.value[1:]) % 7}" for r in records)

    big, other = sorted(by_partition, key=lambda p: -len(by_partition[p]))[:2]
    tp0, tp1 = TopicPartition("t", big), TopicPartition("t", other)
    n0 = len(by_partition[big])
    assert consumer.position(tp0) == n0
    assert consumer.end_offsets([tp0]) == {tp0: n0}
    assert consumer.beginning_offsets([tp0]) == {tp0: 0}
    consumer.seek(tp0, n0 - 2)
    consumer.pause([tp for tp in consumer.assignment() if tp != tp0])
    again = consume_all(consumer, 2, 10)
    assert [r.offset for r in again] == [n0 - 2, n0 - 1]
    assert consumer.paused() == consumer.assignment() - {tp0}
    consumer.resume([tp1])
    consumer.seek_to_beginning([tp1])
    assert len(consume_all(consumer, len(by_partition[other]), 10)) == len(by_partition[other])
    first_ts = by_partition[big][0].timestamp
    found = consumer.offsets_for_times({tp0: first_ts, tp1: 2**62})
    assert found[tp0].offset == 0 and found[tp1] is None
    consumer.close()


def test_bad_client_input_is_refused_clearly(cluster):
    cluster.admin().create_topics([rafka.NewTopic("small", 1, 1)])
    with pytest.raises(InvalidConfigError, match="linger.ms"):
        rafka.Producer(cluster, {"linger.msec": 5})
    with pytest.raises(InvalidConfigError, match="acks"):
        rafka.Producer(cluster, acks="2")
    with pytest.raises(InvalidConfigError, match="idempotent"):
        rafka.Producer(cluster, {"acks": "1", "enable.idempotence": True})
    with rafka.Producer(cluster, {"max.request.size": 100}) as producer:
        with pytest.raises(RecordTooLargeError):
            producer.send("small", b"x" * 200).result(5)
    with pytest.raises(InvalidConfigError, match="auto.offset.reset"):
        rafka.Consumer(cluster, {"auto.offset.reset": "smallest"})


def test_idempotent_producer_through_a_leader_kill_writes_each_record_once_in_order(cluster):
    cluster.admin().create_topics([rafka.NewTopic("t", 1, 3, config={"min.insync.replicas": 2})])
    producer = rafka.Producer(cluster, {"linger.ms": 1, "batch.size": 512,
                                        "retry.backoff.ms": 50})
    futures, stop = [], threading.Event()

    def keep_sending():
        i = 0
        while not stop.is_set():
            futures.append(producer.send("t", f"{i:06d}".encode()))
            i += 1
            time.sleep(0.0005)
    sender = threading.Thread(target=keep_sending)
    sender.start()
    time.sleep(1.5)
    leader, _ = cluster.leader("t", 0)
    os.kill(cluster.broker_pid(leader), signal.SIGKILL)
    time.sleep(4)
    stop.set()
    sender.join()
    producer.flush(60)
    results = [f.result(60) for f in futures]        # every send acknowledged
    producer.close()
    assert len({m.offset for m in results}) == len(results)

    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("t", 0)])
    records = consume_all(consumer, len(futures))
    values = [r.value for r in records]
    assert values == [f"{i:06d}".encode() for i in range(len(futures))]   # once each, in order
    assert [r.offset for r in records] == [m.offset for m in results]
    wait_until(lambda: sorted(cluster.metadata()["topics"]["t"][0]["isr"]) == [0, 1, 2], 60,
               "the killed broker to rejoin")
