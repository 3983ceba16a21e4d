"""``ListenerAdmin``: a cluster's partitions and offsets asked over its Kafka listener
(Metadata, then ListOffsets to each leader), as Kafka's admin client asks them, answering
what ``rafka.Admin`` answers through Ray; what Spark's planners use given only
``kafka.bootstrap.servers``."""
from __future__ import annotations

import socket
import time

import pytest

import rafka
from protocols.errors import InvalidConfigError, NetworkError, UnknownTopicOrPartitionError
from protocols.topics import TopicPartition
from rafka.client.listener_admin import ListenerAdmin, parse_bootstrap

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]
SHARE_CLUSTER = True   # each test its own topics


def _produce(cluster, topic: str, n: int):
    with rafka.Producer(cluster, acks="all") as producer:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 5)) for i in range(n)]
        producer.flush()
        return [f.result(10) for f in futures]


def test_offsets_and_partition_counts_are_rafka_admins(cluster):
    cluster.admin().create_topics([rafka.NewTopic("la-offsets", 4, 2)])
    acked = _produce(cluster, "la-offsets", 50)
    cluster.admin().delete_records({("la-offsets", 0): 2})
    with ListenerAdmin(cluster.bootstrap_servers) as admin:
        counts = admin.partition_counts()
        assert counts["la-offsets"] == 4
        assert admin.partition_counts(["la-offsets", "no-such-topic"]) == {"la-offsets": 4}
        cut = sorted(m.timestamp for m in acked)[25]
        for specs in ({("la-offsets", p): "earliest" for p in range(4)},
                      {("la-offsets", p): "latest" for p in range(4)},
                      {("la-offsets", p): cut for p in range(4)},
                      {("la-offsets", p): max(m.timestamp for m in acked) + 1
                       for p in range(4)}):
            assert admin.list_offsets(specs) == cluster.admin().list_offsets(specs)
        latest = admin.list_offsets({("la-offsets", p): "latest" for p in range(4)})
        assert {tp.partition: r.offset for tp, r in latest.items()} == {
            p: 1 + max((m.offset for m in acked if m.partition == p), default=-1)
            for p in range(4)}
        assert admin.list_offsets({("la-offsets", 0): "earliest"})[
            TopicPartition("la-offsets", 0)].offset == 2


def test_read_committed_ends_at_the_last_stable_offset(cluster):
    cluster.admin().create_topics([rafka.NewTopic("la-txn", 1, 3)])
    producer = rafka.Producer(cluster, {"transactional.id": "la-txn-app"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("la-txn", b"committed").result(30)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("la-txn", b"open").result(30)
    tp = TopicPartition("la-txn", 0)
    with ListenerAdmin(cluster.bootstrap_servers) as admin:
        # The committed record and its marker are stable; the open one is not.
        assert admin.list_offsets({tp: "latest"}, "read_committed")[tp].offset == 2
        assert admin.list_offsets({tp: "latest"})[tp].offset == 3
    producer.abort_transaction()
    producer.close()


def test_a_leader_it_has_wrong_is_learnt_again(cluster):
    """NOT_LEADER_OR_FOLLOWER from the broker it asked (a leader that moved): the metadata
    is read again and the new leader asked, as Kafka's admin client retries."""
    cluster.admin().create_topics([rafka.NewTopic("la-moved", 1, 1)])
    _produce(cluster, "la-moved", 7)
    tp = TopicPartition("la-moved", 0)
    with ListenerAdmin(cluster.bootstrap_servers) as admin:
        assert admin.list_offsets({tp: "latest"})[tp].offset == 7
        leader = admin._leaders[tp]
        admin._leaders[tp] = next(b for b in admin._brokers if b != leader)
        assert admin.list_offsets({tp: "latest"})[tp].offset == 7
        assert admin._leaders[tp] == leader
        # A leader among no brokers it knows (one that left): the metadata again.
        del admin._brokers[leader]
        assert admin.list_offsets({tp: "latest"})[tp].offset == 7
        # Correlation ids wrap within int32, as Kafka's clients wrap them.
        admin._correlation_id = 2**31 - 2
        for _ in range(3):
            assert admin.list_offsets({tp: "latest"})[tp].offset == 7
        assert admin._correlation_id < 10


def test_unknown_partitions_fail_at_once_and_an_unreachable_listener_says_where(cluster):
    cluster.admin().create_topics([rafka.NewTopic("la-known", 2, 1)])
    with ListenerAdmin(cluster.bootstrap_servers, timeout_s=60) as admin:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError, match="la-known', partition=2"):
            admin.list_offsets({("la-known", 2): "latest"})
        with pytest.raises(UnknownTopicOrPartitionError, match="no-such"):
            admin.list_offsets({("no-such", 0): "earliest"})
        # At once, not retried until the timeout as a consumer waits for a partition.
        assert time.monotonic() - started < 30
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with ListenerAdmin(f"127.0.0.1:{port}", timeout_s=0.5) as admin, \
            pytest.raises(NetworkError, match=f"127.0.0.1:{port}"):
        admin.partition_counts()


def test_bootstrap_servers_are_read_as_kafka_reads_them():
    assert parse_bootstrap(" a:1, [::1]:2,") == [("a", 1), ("::1", 2)]
    for bad in ("", "host", "host:x", ":9092"):
        with pytest.raises(InvalidConfigError, match="bootstrap"):
            parse_bootstrap(bad)
