"""Kafka's transactional clients against rafka's listener (issue 41): confluent-kafka's
(librdkafka's), kafka-python's and aiokafka's transactional producers, commits and aborts
interleaved, and read_committed consumers that never see an aborted record while read_uncommitted ones see every record;
a second producer instance with the same transactional.id fences the first."""
from __future__ import annotations

import time

import confluent_kafka
import pytest

import rafka
from tests.runtime.conftest import cluster_with, collect

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

CONFIG = {"transaction.state.log.num.partitions": 3}


@pytest.fixture(scope="module")
def cluster(ray_session, tmp_path_factory):
    with cluster_with(tmp_path_factory.mktemp("transactions"), CONFIG) as c:
        yield c


def consume(cluster, topic: str, isolation: str, expected: int, timeout_s: float = 60,
            settle_s: float = 2.0) -> list:
    """(key, value) of every record a confluent-kafka consumer with ``isolation`` reads,
    waiting ``settle_s`` after the ``expected``-th for any more."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{topic}-{isolation}",
        "auto.offset.reset": "earliest", "isolation.level": isolation,
        "enable.auto.commit": False})
    consumer.subscribe([topic])

    def poll() -> list:
        message = consumer.poll(0.5)
        return [] if message is None or message.error() is not None \
            else [(message.key(), message.value())]
    try:
        return collect(poll, expected, timeout_s, settle_s)
    finally:
        consumer.close()


def test_confluent_kafka_transactions_commit_and_abort_and_read_committed_skips_aborts(
        cluster):
    cluster.admin().create_topics([rafka.NewTopic("txn-orders", 3, 3)])
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "transactional.id": "orders-app", "linger.ms": 5})
    producer.init_transactions(30)
    committed, aborted = [], []
    for round_ in range(6):
        producer.begin_transaction()
        keys = [f"r{round_}-{i}".encode() for i in range(50)]
        for key in keys:
            producer.produce("txn-orders", key=key, value=b"v-" + key)
        if round_ % 2 == 0:
            producer.commit_transaction(30)
            committed += keys
        else:
            producer.flush(30)
            producer.abort_transaction(30)
            aborted += keys
    producer.flush(30)
    read_committed = consume(cluster, "txn-orders", "read_committed", len(committed))
    assert sorted(k for k, _ in read_committed) == sorted(committed)
    read_uncommitted = consume(cluster, "txn-orders", "read_uncommitted",
                               len(committed) + len(aborted))
    assert sorted(k for k, _ in read_uncommitted) == sorted(committed + aborted)


def test_a_new_instance_of_a_transactional_id_fences_the_old_one(cluster):
    cluster.admin().create_topics([rafka.NewTopic("txn-fenced", 1, 3)])
    config = {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "fenced-app"}
    old = confluent_kafka.Producer(config)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("txn-fenced", key=b"old", value=b"never committed")
    old.flush(30)
    new = confluent_kafka.Producer(config)
    new.init_transactions(60)            # aborts the old instance's open transaction
    new.begin_transaction()
    new.produce("txn-fenced", key=b"new", value=b"committed")
    new.commit_transaction(30)
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        old.commit_transaction(30)
    assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower()
    assert consume(cluster, "txn-fenced", "read_committed", 1) == [(b"new", b"committed")]


def test_confluent_kafka_consume_transform_produce_commits_offsets_in_the_transaction(
        cluster):
    """Exactly-once's loop (KIP-98, KIP-447): read, write, and commit the read offsets in
    one transaction. The group's committed offsets move only when the transaction
    commits; an aborted round leaves them, and its output, as they were."""
    cluster.admin().create_topics([rafka.NewTopic("etl-in", 1, 3),
                                   rafka.NewTopic("etl-out", 1, 3)])
    plain = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(30):
        plain.produce("etl-in", key=str(i).encode(), value=f"in-{i}".encode())
    plain.flush(30)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": "etl",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed"})
    consumer.subscribe(["etl-in"])
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "transactional.id": "etl-app"})
    producer.init_transactions(30)
    tp = confluent_kafka.TopicPartition("etl-in", 0)

    def one_round(commit: bool) -> list:
        batch = []
        deadline = time.monotonic() + 30
        while len(batch) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                batch.append(message)
        assert len(batch) == 10
        producer.begin_transaction()
        for message in batch:
            producer.produce("etl-out", key=message.key(), value=message.value().upper())
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition("etl-in", 0, batch[-1].offset() + 1)],
            consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        return batch

    def committed_offset() -> int:
        return consumer.committed([tp], 30)[0].offset

    one_round(True)
    assert committed_offset() == 10
    one_round(False)
    assert committed_offset() == 10          # the aborted round's offsets are dropped
    consumer.seek(confluent_kafka.TopicPartition("etl-in", 0, 10))
    one_round(True)
    assert committed_offset() == 20
    # rafka's own consumer at read_committed asks for stable offsets (KIP-447): while a
    # transaction holds the group's offset pending it waits, then reads the settled one.
    from protocols.errors import KafkaTimeoutError
    stable = rafka.Consumer(cluster, {"group.id": "etl", "isolation.level": "read_committed"})
    plain = rafka.Consumer(cluster, {"group.id": "etl"})
    producer.begin_transaction()
    producer.produce("etl-out", key=b"x", value=b"X")
    producer.send_offsets_to_transaction([confluent_kafka.TopicPartition("etl-in", 0, 25)],
                                         consumer.consumer_group_metadata(), 30)
    with pytest.raises(KafkaTimeoutError, match="pending in a transaction"):
        stable.committed([("etl-in", 0)], timeout_ms=1000)
    assert plain.committed([("etl-in", 0)])[("etl-in", 0)].offset == 20
    producer.abort_transaction(30)
    assert stable.committed([("etl-in", 0)])[("etl-in", 0)].offset == 20
    stable.close()
    plain.close()
    consumer.close()
    out = consume(cluster, "etl-out", "read_committed", 20)
    assert sorted(k for k, _ in out) == sorted(str(i).encode() for i in range(20))
    assert all(v == f"IN-{int(k)}".encode() for k, v in out)


def test_kafka_python_and_aiokafka_transactions_read_back_at_read_committed(cluster):
    """kafka-python's and aiokafka's transactional producers, commits and aborts
    interleaved on one topic; each client's read_committed consumer reads exactly the
    committed records, its read_uncommitted consumer every record."""
    import asyncio

    import aiokafka
    import kafka
    cluster.admin().create_topics([rafka.NewTopic("txn-py", 3, 3)])
    committed, aborted = [], []
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                   transactional_id="kafka-python-app")
    producer.init_transactions()
    for round_ in range(4):
        keys = [f"kp{round_}-{i}".encode() for i in range(25)]
        producer.begin_transaction()
        for key in keys:
            producer.send("txn-py", key=key, value=b"v-" + key)
        producer.flush()
        if round_ % 2 == 0:
            producer.commit_transaction()
            committed += keys
        else:
            producer.abort_transaction()
            aborted += keys
    producer.close()

    async def aiokafka_rounds() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                             transactional_id="aiokafka-app")
        await producer.start()
        try:
            for round_ in range(4):
                keys = [f"ak{round_}-{i}".encode() for i in range(25)]
                await producer.begin_transaction()
                for key in keys:
                    await producer.send("txn-py", key=key, value=b"v-" + key)
                if round_ % 2 == 1:
                    await producer.commit_transaction()
                    committed.extend(keys)
                else:
                    await producer.abort_transaction()
                    aborted.extend(keys)
        finally:
            await producer.stop()
    asyncio.run(aiokafka_rounds())

    def kafka_python_reads(isolation: str, expected: int) -> list:
        consumer = kafka.KafkaConsumer("txn-py", bootstrap_servers=cluster.bootstrap_servers,
                                       group_id=f"kp-{isolation}", isolation_level=isolation,
                                       auto_offset_reset="earliest",
                                       enable_auto_commit=False)

        def poll() -> list:
            return [r.key for records in consumer.poll(timeout_ms=500).values()
                    for r in records]
        try:
            return collect(poll, expected, 60, 2.0)
        finally:
            consumer.close()

    async def aiokafka_reads(isolation: str, expected: int) -> list:
        consumer = aiokafka.AIOKafkaConsumer(
            "txn-py", bootstrap_servers=cluster.bootstrap_servers, group_id=f"ak-{isolation}",
            isolation_level=isolation, auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        keys: list = []
        try:
            deadline = time.monotonic() + 60
            settled = None
            while time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                keys += [r.key for records in batches.values() for r in records]
                if len(keys) >= expected:
                    settled = settled or time.monotonic() + 2.0
                    if time.monotonic() >= settled:
                        break
            return keys
        finally:
            await consumer.stop()

    assert sorted(kafka_python_reads("read_committed", len(committed))) == sorted(committed)
    assert sorted(asyncio.run(aiokafka_reads("read_committed", len(committed)))) \
        == sorted(committed)
    everything = sorted(committed + aborted)
    assert sorted(kafka_python_reads("read_uncommitted", len(everything))) == everything
    assert sorted(asyncio.run(aiokafka_reads("read_uncommitted", len(everything)))) \
        == everything
