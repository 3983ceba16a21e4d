"""Kafka's request shapes from clients (docs/architecture.md, "Request paths"): a producer's
ready batches travel in one request per leader replica host, answered per partition."""
from __future__ import annotations

import time

import pytest
import ray

import rafka
from actors.names import replica_host_name
from protocols.errors import NotEnoughReplicasError, NotLeaderOrFollowerError
from protocols.messages import (ProduceManyRequest, decode_produce_many_response,
                                encode_produce_many_request)
from protocols.records import Record, encode_batch
from tests.runtime.helpers import read_all, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]

# The tests share a cluster of one host per broker, each with its own topics; the one that
# counts the hosts' fetch sessions has one of its own.
SHARE_CLUSTER = True
CLUSTER_CONFIG = {"num.replica.hosts": 1}


def hosts(cluster):
    return [ray.get_actor(replica_host_name(b, 0), namespace=cluster.namespace)
            for b in range(3)]


def produce_requests(cluster) -> int:
    return sum(ray.get(h.describe_requests.remote()).get("Produce", 0) for h in hosts(cluster))


@pytest.mark.parametrize("acks", ["all", "1"])
def test_a_producer_sends_one_request_per_leader_host_for_all_its_ready_partitions(
        cluster, acks):
    topic = f"spread-{acks}"
    cluster.admin().create_topics([rafka.NewTopic(topic, 12, 3)])
    leaders = {cluster.leader(topic, p)[0] for p in range(12)}
    before = produce_requests(cluster)
    # A long linger: every partition's batch is ready together when flush() comes.
    with rafka.Producer(cluster, {"acks": acks, "linger.ms": 10_000}) as producer:
        futures = [producer.send(topic, f"v{p}".encode(), partition=p) for p in range(12)]
        producer.flush(timeout=30)
        assert [f.result(timeout=5).offset for f in futures] == [0] * 12
    assert produce_requests(cluster) - before == len(leaders)   # not 12
    for p in range(12):
        # acks=1 answers before the followers have it; a consumer reads once the HW moves.
        wait_until(lambda: list(read_all(cluster.leader(topic, p)[1]).values())
                   == [f"v{p}".encode()], 30, f"{topic}-{p} readable below the HW")


def test_each_partition_of_a_produce_request_is_answered_on_its_own(cluster):
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("ok", 3, 3),
                         rafka.NewTopic("strict", 3, 3, {"min.insync.replicas": "4"})])
    broker = cluster.leader("ok", 0)[0]
    host = hosts(cluster)[broker]
    led = [(t, p) for t in ("ok", "strict") for p in range(3)
           if cluster.leader(t, p)[0] == broker]
    assert {t for t, _ in led} == {"ok", "strict"}, "one broker leads partitions of both"
    batch = encode_batch([Record(None, b"x")])
    request = ProduceManyRequest(-1, 10_000, tuple((t, p, batch) for t, p in led)
                                 + (("nowhere", 0, batch),))
    results, _ = decode_produce_many_response(
        ray.get(host.produce_many.remote(encode_produce_many_request(request)), timeout=30))
    assert [(t, p) for t, p, _ in results] == led + [("nowhere", 0)]
    for topic, _, result in results:
        if topic == "ok":            # acks=all answered once its own ISR has it
            assert result.error is None and result.base_offset == 0
        elif topic == "strict":      # min.insync.replicas=4 > RF: refused, alone
            assert isinstance(result.error, NotEnoughReplicasError)
        else:
            assert isinstance(result.error, NotLeaderOrFollowerError)


def fetch_requests(cluster) -> int:
    return sum(ray.get(h.describe_requests.remote()).get("Fetch", 0) for h in hosts(cluster))


@pytest.mark.own_cluster
def test_a_consumer_fetches_once_per_leader_host_in_a_fetch_session(cluster):
    """One long-polled fetch per leader host for all its partitions, in a fetch session
    (KIP-227): idle, each names no partition (the session remembers them)."""
    cluster.admin().create_topics([rafka.NewTopic("wide", 12, 1)])  # RF=1: no followers
    with rafka.Producer(cluster, {"linger.ms": 20}) as producer:
        for p in range(12):
            producer.send("wide", f"v{p}".encode(), partition=p)
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest",
                                        "fetch.max.wait.ms": 500})
    consumer.assign([("wide", p) for p in range(12)])
    got = {}
    deadline = time.monotonic() + 30
    while len(got) < 12 and time.monotonic() < deadline:
        for r in consumer.poll(500):
            got[r.partition] = r.value
    assert got == {p: f"v{p}".encode() for p in range(12)}
    before = fetch_requests(cluster)
    idle_until = time.monotonic() + 3
    while time.monotonic() < idle_until:
        assert consumer.poll(200) == []
    sent = fetch_requests(cluster) - before
    # 3 hosts, a long poll of 500 ms each: ~18 requests in 3 s, not 12 partitions x 6.
    assert 3 <= sent <= 3 * (3 / 0.5 + 2)
    sessions = [ray.get(h.describe_fetch_sessions.remote()) for h in hosts(cluster)]
    assert [s["sessions"] for s in sessions] == [1, 1, 1]
    assert sum(s["partitions_cached"] for s in sessions) == 12
    sizes = consumer.fetch_request_sizes()
    assert len(sizes) == 3 and max(sizes.values()) <= 64, sizes
    consumer.close()
    # Closing ends its sessions (a fetch with FINAL_EPOCH): the slots are free at once.
    assert [ray.get(h.describe_fetch_sessions.remote())["sessions"] for h in hosts(cluster)] \
        == [0, 0, 0]


def test_clients_send_produce_and_fetch_over_the_hosts_listeners_and_reconnect(
        cluster):
    """Producers and consumers reach leader hosts over their listeners
    (rafka.client.network_client), as Kafka's clients reach a broker's: a broken connection fails
    what is in flight on it, the client sends again on a new one, and nothing is lost or
    read twice."""
    cluster.admin().create_topics([rafka.NewTopic("door", 3, 3)])
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest",
                                        "fetch.max.wait.ms": 5_000})
    consumer.assign([("door", p) for p in range(3)])
    got: list[tuple[int, bytes]] = []

    def read(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            got.extend((r.partition, r.value) for r in consumer.poll(200))
    before = produce_requests(cluster)
    with rafka.Producer(cluster, {"acks": "all", "linger.ms": 0}) as producer:
        for i in range(30):
            producer.send("door", f"a{i}".encode(), partition=i % 3).result(timeout=30)
        leaders = {cluster.leader("door", p)[1].host_id for p in range(3)}
        assert set(producer._sender.network.connected_hosts()) == leaders
        read(30)
        assert consumer._fetcher.network.connected_hosts() == leaders
        assert consumer.poll(100) == []   # a long poll is in flight on each connection now
        consumer._fetcher.network.disconnect()    # the consumer's thread is the one polling: safe
        assert not consumer._fetcher.network.connected_hosts()
        for i in range(30):
            producer.send("door", f"b{i}".encode(), partition=i % 3)
        read(60)
        assert consumer._fetcher.network.connected_hosts() == leaders
    assert produce_requests(cluster) - before > 30   # one per send of a, and some for b
    consumer.close()
    for p in range(3):
        values = [v for partition, v in got if partition == p]
        assert values == [f"{x}{i}".encode() for x in "ab" for i in range(p, 30, 3)]
