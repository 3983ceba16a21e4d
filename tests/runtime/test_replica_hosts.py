"""Replica hosts (issue 21, step 1): many partition replicas per Ray actor, placed by a stable
rule, each with its own state and order, none waiting on another's long poll."""
from __future__ import annotations

import itertools
import time

import pytest
import ray

import rafka
from actors.names import replica_host_name
from actors.replica.placement import host_index
from protocols.errors import NotLeaderOrFollowerError
from protocols.messages import FetchRequest
from protocols.records import Record, encode_batch
from protocols.wire import decode, encode
from tests.runtime.conftest import FAST
from tests.runtime.helpers import produce, read_all, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]

_names = itertools.count()


@pytest.fixture
def two_host_cluster(ray_session, tmp_path):
    c = rafka.Cluster.start(3, tmp_path / "data", dict(FAST, **{"num.replica.hosts": 2}),
                            name=f"hosts{next(_names)}")
    yield c
    c.shutdown()


def test_replicas_live_in_their_broker_s_hosts_by_the_placement_rule(two_host_cluster):
    cluster = two_host_cluster
    cluster.admin().create_topics([rafka.NewTopic("spread", 8, 3)])
    for b in range(3):
        assert ray.get(cluster.broker(b).describe.remote())["replica_hosts"] == 2
        host_pids = [ray.get(ray.get_actor(replica_host_name(b, i), namespace=cluster.namespace)
                             .host_pid.remote()) for i in range(2)]
        assert len(set(host_pids)) == 2                     # two processes, not eight
        for p in range(8):
            replica = cluster.replica("spread", p, b)
            assert ray.get(replica.pid.remote()) == host_pids[host_index("spread", p, 2)]
    # Every replica has its own log and state, served through the shared hosts.
    for p in range(8):
        assert produce(cluster, "spread", p, f"p{p}".encode()).base_offset == 0
    for p in range(8):
        _, leader = cluster.leader("spread", p)
        assert list(read_all(leader).values()) == [f"p{p}".encode()]


def test_a_host_answers_not_leader_or_follower_for_a_replica_it_does_not_hold(
        two_host_cluster):
    cluster = two_host_cluster
    host = ray.get_actor(replica_host_name(0, 0), namespace=cluster.namespace)
    result = decode(ray.get(host.produce.remote("nowhere", 0, encode_batch([Record(None, b"x")]),
                                                -1, 1000)))
    assert isinstance(result.error, NotLeaderOrFollowerError)
    fetched = decode(ray.get(host.fetch.remote("nowhere", 0, encode(FetchRequest(-1, 7)))))
    assert isinstance(fetched.error, NotLeaderOrFollowerError) and fetched.fetch_offset == 7
    with pytest.raises(NotLeaderOrFollowerError):
        ray.get(host.describe.remote("nowhere", 0))


def test_a_long_poll_on_one_replica_does_not_hold_up_another_in_the_same_host(
        two_host_cluster):
    cluster = two_host_cluster
    cluster.admin().create_topics([rafka.NewTopic(
        "quiet", replica_assignment={p: [0] for p in range(4)})])
    # Two partitions held by the same host of broker 0.
    pair = next((p, q) for p in range(4) for q in range(p + 1, 4)
                if host_index("quiet", p, 2) == host_index("quiet", q, 2))
    leaders = {p: cluster.leader("quiet", p) for p in pair}
    parked = leaders[pair[0]][1].fetch.remote(encode(FetchRequest(
        -1, 0, min_bytes=1000, max_wait_ms=20_000)))
    # acks=1: the other replica answers while the first one's fetch waits in its purgatory.
    assert produce(cluster, "quiet", pair[1], b"through", acks=1).base_offset == 0
    ready, _ = ray.wait([parked], timeout=0)
    assert ready == [], "the parked fetch returned early: nothing was holding it"
    # The parked fetch is answered by data arriving on its own partition.
    assert produce(cluster, "quiet", pair[0], b"x" * 2000, acks=1).error is None
    result = decode(ray.get(parked, timeout=30))
    assert result.error is None and result.records


def test_one_fetcher_per_leader_host_carries_every_shared_partition(ray_session, tmp_path):
    """Issue 21, step 2: with one host per broker, each host follows its partitions through
    one fetcher per other broker, and an idle fetcher sends about one request per
    replica.fetch.wait.max.ms however many partitions it carries."""
    config = dict(FAST, **{"num.replica.hosts": 1})
    cluster = rafka.Cluster.start(3, tmp_path / "data", config, name=f"hosts{next(_names)}")
    try:
        cluster.admin().create_topics([rafka.NewTopic("wide", 12, 3)])
        hosts = [ray.get_actor(replica_host_name(b, 0), namespace=cluster.namespace)
                 for b in range(3)]

        def fetchers():
            return [ray.get(h.describe_fetchers.remote()) for h in hosts]

        def settled():
            described = fetchers()
            return all(len(d) == 2 and sum(len(f["partitions"]) for f in d) == 8
                       for d in described) and described
        described = wait_until(settled, 30, "each host to fetch through two fetchers")
        for b, d in enumerate(described):
            led_elsewhere = {("wide", p) for p, info in
                             cluster.metadata()["topics"]["wide"].items() if info["leader"] != b}
            assert {tuple(tp) for f in d for tp in f["partitions"]} == led_elsewhere
        before = sum(f["requests_sent"] for d in described for f in d)
        time.sleep(3)
        after = sum(f["requests_sent"] for d in fetchers() for f in d)
        # 6 fetchers, a long poll of 500 ms each: ~36 requests in 3 s, not 24 x 6.
        assert after - before <= 6 * (3 / 0.5 + 2)
        # Replication through the fetchers: acks=all answers on every partition.
        for p in range(12):
            assert produce(cluster, "wide", p, b"v").error is None
    finally:
        cluster.shutdown()


def test_creating_a_topic_is_one_controller_request_per_broker(two_host_cluster):
    """Issue 21, step 3: LeaderAndIsr for every new partition reaches a broker as one
    request, and the broker gives each of its hosts its share in one call."""
    cluster = two_host_cluster

    def batches():
        return [ray.get(cluster.broker(b).describe.remote())["controller_batches"]
                for b in range(3)]
    before = batches()
    cluster.admin().create_topics([rafka.NewTopic("many", 60, 3)])
    assert [a - b for a, b in zip(batches(), before)] == [1, 1, 1]
    for b in range(3):
        hosts = [ray.get_actor(replica_host_name(b, i), namespace=cluster.namespace)
                 for i in range(2)]
        assert sum(ray.get(h.num_replicas.remote()) for h in hosts) == 60
    for p in (0, 59):
        assert produce(cluster, "many", p, b"v").error is None
    # Deleting it is one request per broker too, and every replica closes.
    before = batches()
    cluster.admin().delete_topics(["many"])
    wait_until(lambda: all(ray.get(ray.get_actor(replica_host_name(b, i),
                                                 namespace=cluster.namespace)
                                   .num_replicas.remote()) == 0
                           for b in range(3) for i in range(2)), 30, "the replicas to close")
    assert all(1 <= a - b <= 2 for a, b in zip(batches(), before))
