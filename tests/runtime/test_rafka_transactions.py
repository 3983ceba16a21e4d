"""rafka's own transactional producer on a real cluster (issue 41, step 4), read by rafka's
read_committed consumer and by confluent-kafka's: commits and aborts interleaved (aborted
records never seen), the consume-transform-produce loop with the group's offsets committed
in the transaction (each input exactly once in the output), a second instance of the
transactional id fencing the first, unsent records dropped by an abort, and an open
transaction aborted by close."""
from __future__ import annotations

import time

import confluent_kafka
import pytest

import rafka
from protocols.errors import (IllegalStateError, InvalidConfigError, KafkaError,
                              ProducerFencedError)
from protocols.topics import TopicPartition
from rafka.producer.transaction_manager import TransactionAbortedError
from tests.runtime.conftest import collect

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


SHARE_CLUSTER = True   # one cluster for the module's tests (module_cluster)


def read_all(cluster, topic: str, isolation: str, expected: int, timeout_s: float = 60,
             settle_s: float = 1.5, partitions: int = 1) -> list:
    """(key, value) of every record rafka's consumer at ``isolation`` reads from the start,
    waiting ``settle_s`` after the ``expected``-th for any more."""
    consumer = rafka.Consumer(cluster, {"isolation.level": isolation,
                                        "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    try:
        return collect(lambda: [(r.key, r.value) for r in consumer.poll(200)], expected,
                       timeout_s, settle_s)
    finally:
        consumer.close()


def test_configuration_errors_are_kafkas():
    with pytest.raises(InvalidConfigError, match="without also enabling idempotence"):
        rafka.Producer(None, {"transactional.id": "x", "enable.idempotence": False})


def test_commits_and_aborts_interleaved_read_committed_sees_only_commits(cluster):
    cluster.admin().create_topics([rafka.NewTopic("rt-orders", 3, 3)])
    committed, aborted = [], []
    with rafka.Producer(cluster, {"transactional.id": "rafka-orders"}) as producer:
        with pytest.raises(IllegalStateError, match="initTransactions"):
            producer.send("rt-orders", b"too early")
        producer.init_transactions()
        for round_ in range(6):
            producer.begin_transaction()
            keys = [f"r{round_}-{i}".encode() for i in range(40)]
            futures = [producer.send("rt-orders", b"v-" + k, key=k) for k in keys[:20]]
            producer.send_batch("rt-orders", [b"v-" + k for k in keys[20:]], keys=keys[20:])
            if round_ % 2 == 0:
                producer.commit_transaction()
                committed += keys
                assert all(f.result(10).offset >= 0 for f in futures)
            else:
                producer.flush()
                producer.abort_transaction()
                aborted += keys
    assert sorted(k for k, _ in read_all(cluster, "rt-orders", "read_committed",
                                         len(committed), partitions=3)) == sorted(committed)
    assert sorted(k for k, _ in read_all(cluster, "rt-orders", "read_uncommitted",
                                         len(committed) + len(aborted), partitions=3)) == \
        sorted(committed + aborted)
    # Kafka's own read_committed consumer agrees.
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": "rt-orders-check",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["rt-orders"])
    seen: list = []
    deadline = time.monotonic() + 60
    while len(seen) < len(committed) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.key())
    extra = consumer.poll(1.0)
    consumer.close()
    assert sorted(seen) == sorted(committed)
    assert extra is None or extra.error() is not None


def test_consume_transform_produce_holds_each_input_exactly_once(cluster):
    """The loop Kafka's EOS examples run: poll, produce the results and commit the
    consumer's positions in one transaction. An aborted round is read again."""
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("rt-in", 2, 3), rafka.NewTopic("rt-out", 2, 3)])
    with rafka.Producer(cluster, {"acks": "all"}) as plain:
        for i in range(300):
            plain.send("rt-in", f"{i}".encode(), key=f"k{i}".encode())
    consumer = rafka.Consumer(cluster, {"group.id": "rt-ctp", "enable.auto.commit": False,
                                        "auto.offset.reset": "earliest",
                                        "isolation.level": "read_committed"})
    consumer.subscribe(["rt-in"])
    producer = rafka.Producer(cluster, {"transactional.id": "rt-ctp-app"})
    producer.init_transactions()
    done, rounds, aborted_once = 0, 0, False
    deadline = time.monotonic() + 120
    while done < 300 and time.monotonic() < deadline:
        records = consumer.poll(500)
        if not records:
            continue
        rounds += 1
        producer.begin_transaction()
        for r in records:
            producer.send("rt-out", b"out-" + r.value, key=r.key)
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
        producer.send_offsets_to_transaction(positions, consumer.group_metadata())
        if not aborted_once:
            # A failure after producing: the round is aborted and its input read again.
            aborted_once = True
            producer.abort_transaction()
            for tp in consumer.assignment():
                committed = consumer.committed(tp)
                consumer.seek(tp, 0 if committed is None else committed.offset)
            continue
        producer.commit_transaction()
        done += len(records)
    producer.close()
    consumer.close()
    assert done == 300 and rounds >= 2
    out = read_all(cluster, "rt-out", "read_committed", 300, partitions=2)
    assert sorted(v for _, v in out) == sorted(f"out-{i}".encode() for i in range(300))
    ends = {TopicPartition("rt-in", p): 0 for p in range(2)}
    checker = rafka.Consumer(cluster, {"group.id": "rt-ctp",
                                       "isolation.level": "read_committed"})
    committed = checker.committed(list(ends))
    checker.close()
    assert sum(om.offset for om in committed.values()) == 300


def test_a_second_instance_fences_the_first(cluster):
    """Kafka's zombie fencing: the newer instance's init_transactions aborts the older
    one's open transaction, whose commit then fails with ProducerFencedError."""
    cluster.admin().create_topics([rafka.NewTopic("rt-fenced", 1, 3)])
    old = rafka.Producer(cluster, {"transactional.id": "rt-zombie"})
    old.init_transactions()
    old.begin_transaction()
    old.send("rt-fenced", b"zombie").result(30)
    new = rafka.Producer(cluster, {"transactional.id": "rt-zombie"})
    new.init_transactions()
    with pytest.raises(ProducerFencedError):
        old.commit_transaction()
    with pytest.raises(KafkaError):
        old.begin_transaction()
    new.begin_transaction()
    new.send("rt-fenced", b"alive")
    new.commit_transaction()
    new.close()
    old.close()
    assert [v for _, v in read_all(cluster, "rt-fenced", "read_committed", 1)] == [b"alive"]


def test_abort_drops_unsent_records_and_close_aborts_an_open_transaction(cluster):
    cluster.admin().create_topics([rafka.NewTopic("rt-abort", 1, 3)])
    producer = rafka.Producer(cluster, {"transactional.id": "rt-abort-app",
                                        "linger.ms": 60_000, "batch.size": 1 << 20})
    producer.init_transactions()
    producer.begin_transaction()
    unsent = producer.send("rt-abort", b"never sent")
    producer.abort_transaction()
    with pytest.raises(TransactionAbortedError):
        unsent.result(10)
    producer.begin_transaction()
    producer.send("rt-abort", b"open at close")
    producer.flush()
    producer.close()          # aborts: the LSO moves on without transaction.timeout.ms
    with rafka.Producer(cluster, {"transactional.id": "rt-abort-next"}) as next_producer:
        next_producer.init_transactions()
        next_producer.begin_transaction()
        next_producer.send("rt-abort", b"committed")
        next_producer.commit_transaction()
    assert [v for _, v in read_all(cluster, "rt-abort", "read_committed", 1,
                                   timeout_s=20)] == [b"committed"]
