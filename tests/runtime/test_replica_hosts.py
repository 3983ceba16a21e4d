"""Replica hosts (docs/architecture.md, "Actors"): many partition replicas per Ray actor,
placed by a stable rule, each with its own state and order, none waiting on another's long
poll."""
from __future__ import annotations

import itertools
import os
import signal
import time

import pytest
import ray

import rafka
from actors.names import dedicated_host_name, replica_host_name
from actors.replica.placement import host_index
from protocols.errors import InvalidConfigError, NotLeaderOrFollowerError
from protocols.messages import FetchRequest
from protocols.records import Record, encode_batch
from protocols.wire import decode, encode
from tests.runtime.conftest import FAST
from tests.runtime.helpers import (check_read_back_once_in_order, produce, read_all,
                                   send_through_fault, wait_until)

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]

_names = itertools.count()


# The tests share a cluster of two hosts per broker, each with its own topics; those that
# kill a host have one of their own.
SHARE_CLUSTER = True
CLUSTER_CONFIG = {"num.replica.hosts": 2}


def test_replicas_live_in_their_broker_s_hosts_by_the_placement_rule(cluster):
    cluster.admin().create_topics([rafka.NewTopic("spread", 8, 3)])
    for b in range(3):
        described = ray.get(cluster.broker(b).describe.remote())
        assert described["replica_hosts"] == 2
        # The tests' Ray is started with rafka's worker_niceness 0 (tests/conftest.py), as
        # every Ray instance rafka starts: brokers at the priority of the process that
        # started Ray (this one), not 15 below it.
        assert described["niceness"] == os.nice(0)
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
        cluster):
    host = ray.get_actor(replica_host_name(0, 0), namespace=cluster.namespace)
    result = decode(ray.get(host.produce.remote("nowhere", 0, encode_batch([Record(None, b"x")]),
                                                -1, 1000)))
    assert isinstance(result.error, NotLeaderOrFollowerError)
    fetched = decode(ray.get(host.fetch.remote("nowhere", 0, encode(FetchRequest(-1, 7)))))
    assert isinstance(fetched.error, NotLeaderOrFollowerError) and fetched.fetch_offset == 7
    with pytest.raises(NotLeaderOrFollowerError):
        ray.get(host.describe.remote("nowhere", 0))


def test_a_host_appends_a_channels_produce_frames_in_the_order_they_came(cluster):
    """What lets the Kafka listener begin a connection's next Produce for a partition once
    the earlier one's frames are written (``request_order``): the leader's host appends a
    channel's Produce frames in the order they came, each before its first wait, though the
    acks=all answers wait on the followers. 30 frames written at once, one partition."""
    import asyncio

    from actors.replica.channel import API_PRODUCE, connect
    from protocols.messages import (ProduceManyRequest, decode_produce_many_response,
                                    encode_produce_many_request)
    cluster.admin().create_topics([rafka.NewTopic("order", 1, 3)])
    _, leader = cluster.leader("order", 0)

    async def run() -> list[int]:
        connection = await connect(leader.host, 30)
        try:
            answers = [connection.send(API_PRODUCE, encode_produce_many_request(
                ProduceManyRequest(-1, 30_000, (("order", 0, encode_batch(
                    [Record(None, b"%d-%d" % (i, n)) for n in range(i % 3 + 1)])),), None)))
                for i in range(30)]
            return [decode_produce_many_response(a)[0][0][2].base_offset
                    for a in await asyncio.gather(*answers)]
        finally:
            connection.close()
    offsets = asyncio.run(run())
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert offsets[-1] == sum(i % 3 + 1 for i in range(29))
    values = list(read_all(leader).values())
    assert values == [b"%d-%d" % (i, n) for i in range(30) for n in range(i % 3 + 1)]


def test_a_long_poll_on_one_replica_does_not_hold_up_another_in_the_same_host(
        cluster):
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
    """Replication between hosts (docs/architecture.md): with one host per broker, each host
    follows its partitions through one fetcher per other broker, and an idle fetcher sends
    about one request per replica.fetch.wait.max.ms however many partitions it carries."""
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
        # Each fetcher fetches in a session (KIP-227); idle, its request
        # names no partition, so its size does not grow with the partitions it carries.
        assert all(f["session_id"] != 0 and f["last_request_bytes"] <= 64
                   for d in fetchers() for f in d), fetchers()
        assert [ray.get(h.describe_fetch_sessions.remote())["sessions"] for h in hosts] == \
            [2, 2, 2]
        assert sum(ray.get(h.describe_fetch_sessions.remote())["partitions_cached"]
                   for h in hosts) == 24
        # Each host's fetches name its broker's registration (KIP-903's broker epoch), one
        # per broker, so that a leader can refuse a fetch sent by an earlier start.
        epochs = [{f["replica_epoch"] for f in d} for d in fetchers()]
        assert all(len(e) == 1 and min(e) >= 0 for e in epochs), epochs
        assert len({e.pop() >> 16 for e in epochs}) == 3
        # Replication through the fetchers: acks=all answers on every partition.
        for p in range(12):
            assert produce(cluster, "wide", p, b"v").error is None
    finally:
        cluster.shutdown()


def test_creating_a_topic_is_one_controller_request_per_broker(cluster):
    """Control per broker: LeaderAndIsr for every new partition reaches a broker as one
    request, and the broker gives each of its hosts its share in one call."""

    def batches(kind: str):
        """Per broker, the controller batches that carried a request of this kind (ISR
        changes elsewhere send images alone, UpdateMetadata, at any time)."""
        return [ray.get(cluster.broker(b).describe.remote())["controller_requests"]
                .get(kind, 0) for b in range(3)]
    def replicas_per_broker():
        return [sum(ray.get(ray.get_actor(replica_host_name(b, i), namespace=cluster.namespace)
                            .num_replicas.remote()) for i in range(2)) for b in range(3)]
    held = replicas_per_broker()   # the other tests' topics
    before = batches("LeaderAndIsr")
    cluster.admin().create_topics([rafka.NewTopic("many", 60, 3)])
    assert [a - b for a, b in zip(batches("LeaderAndIsr"), before)] == [1, 1, 1]
    assert [n - h for n, h in zip(replicas_per_broker(), held)] == [60, 60, 60]
    for p in (0, 59):
        assert produce(cluster, "many", p, b"v").error is None
    # Deleting it is one request per broker too, and every replica closes.
    before = batches("StopReplica")
    cluster.admin().delete_topics(["many"])
    wait_until(lambda: replicas_per_broker() == held, 30, "the replicas to close")
    assert all(1 <= a - b <= 2 for a, b in zip(batches("StopReplica"), before))


def test_a_dedicated_topic_gets_a_ray_actor_per_replica(cluster):
    """replica.placement=dedicated gives each replica a host of its own,
    named replica-<topic>-<partition>-<broker> (the design card's literal shape); the same
    code path serves it, and the host goes when its replica does."""
    admin = cluster.admin()
    with pytest.raises(InvalidConfigError, match="replica.placement"):
        admin.create_topics([rafka.NewTopic("bad", 1, 1, config={"replica.placement": "own"})])
    admin.create_topics([rafka.NewTopic("solo", 2, 3, config={"replica.placement": "dedicated"}),
                         rafka.NewTopic("pooled", 2, 3)])
    assert admin.describe_configs(["solo", "pooled"])["solo"]["replica.placement"] == "dedicated"
    assert admin.describe_configs(["pooled"])["pooled"]["replica.placement"] == "shared"
    pids = set()
    for b in range(3):
        for p in range(2):
            # create_topics returns once the leaders serve; a follower's own host may still
            # be opening its log.
            host = wait_until(lambda: ray.get_actor(dedicated_host_name("solo", p, b),
                                                    namespace=cluster.namespace),
                              30, "the dedicated host")
            wait_until(lambda: ray.get(host.num_replicas.remote()) == 1, 30,
                       f"solo-{p} to open in its host on broker {b}")
            # ... and its broker records where it is once the host has answered the open.
            replica = wait_until(lambda: cluster.replica("solo", p, b), 30,
                                 f"broker {b} to know where solo-{p} is")
            pid = ray.get(replica.pid.remote())
            assert pid == ray.get(host.host_pid.remote())
            pids.add(pid)
            pooled = wait_until(lambda: cluster.replica("pooled", p, b), 30,
                                f"broker {b} to know where pooled-{p} is")
            assert ray.get(pooled.pid.remote()) not in pids
        assert ray.get(cluster.broker(b).describe.remote())["dedicated_hosts"] == 2
    assert len(pids) == 6
    for p in range(2):
        assert produce(cluster, "solo", p, b"alone").base_offset == 0
        _, leader = cluster.leader("solo", p)
        assert list(read_all(leader).values()) == [b"alone"]
    admin.delete_topics(["solo"])

    def gone():
        for b in range(3):
            for p in range(2):
                try:
                    ray.get_actor(dedicated_host_name("solo", p, b), namespace=cluster.namespace)
                    return False
                except ValueError:
                    pass
        return True
    wait_until(gone, 30, "the dedicated hosts to stop with their replicas")


@pytest.mark.own_cluster
@pytest.mark.parametrize("placement", ["shared", "dedicated"])
def test_a_host_killed_during_acks_all_produce_loses_nothing_acknowledged(
        cluster, placement):
    """SIGKILL the process of the host holding a leader while an
    idempotent acks=all producer sends. Only that host's replicas go down; the broker starts
    it again, the controller moves leadership off them, they recover from their files and
    rejoin the ISR; every acknowledged record is read back once, in order."""
    cluster.admin().create_topics([rafka.NewTopic(
        "t", 1, 3, config={"min.insync.replicas": 2, "replica.placement": placement})])
    killed = {}

    def kill_the_leader_s_host():
        leader_id, leader = cluster.leader("t", 0)
        killed.update(broker=leader_id, broker_pid=cluster.broker_pid(leader_id),
                      host_pid=ray.get(leader.pid.remote()))
        os.kill(killed["host_pid"], signal.SIGKILL)
    results = send_through_fault(cluster, "t", kill_the_leader_s_host)
    leader_id = killed["broker"]
    assert cluster.broker_pid(leader_id) == killed["broker_pid"]   # the broker lived on
    assert ray.get(cluster.broker(leader_id).describe.remote())["host_restarts"] == 1
    check_read_back_once_in_order(cluster, "t", results)
    wait_until(lambda: sorted(cluster.metadata()["topics"]["t"][0]["isr"]) == [0, 1, 2], 60,
               "the recovered replica to rejoin the ISR")
    assert ray.get(cluster.replica("t", 0, leader_id).pid.remote()) != killed["host_pid"]


def test_a_host_opens_many_replicas_and_one_that_fails_does_not_hold_up_the_rest(
        ray_session, tmp_path):
    """A broker's share of a new topic opens in one call (``open_many``: the logs opened by
    two worker threads, Kafka's num.recovery.threads.per.data.dir). A replica whose
    directory cannot be opened (here its partition.metadata does not parse) fails alone:
    the call raises its error after every other replica opened, and asking again opens
    nothing twice."""
    from actors.broker.config import ClusterConfig
    from actors.replica.replica_host import ReplicaHostActor
    from protocols.errors import KafkaStorageError
    from storage.partition_metadata import FILE_NAME, read_topic_id

    cfg = ClusterConfig.parse({})
    namespace = f"open-many-{next(_names)}"
    host = ReplicaHostActor.options(namespace=namespace).remote(
        namespace, 0, "host-0", cfg.log, cfg.broker)
    topic_id = "e5MQlNTRRyu1jDJsUpIpPw"
    broken = tmp_path / "t-7"
    broken.mkdir()
    (broken / FILE_NAME).write_text("not the file's format")
    specs = [("t", p, str(tmp_path / f"t-{p}"), {}, 0, 0, None, True, topic_id)
             for p in range(40)]
    with pytest.raises(KafkaStorageError, match=FILE_NAME):
        ray.get(host.open_many.remote(specs))
    assert ray.get(host.num_replicas.remote()) == 39
    (broken / FILE_NAME).unlink()
    ray.get(host.open_many.remote(specs))
    assert ray.get(host.num_replicas.remote()) == 40
    # Each new replica's partition.metadata is written soon after, off the opening path.
    wait_until(lambda: all(read_topic_id(tmp_path / f"t-{p}") == topic_id
                           for p in range(40)), 30, "partition.metadata written")
    ray.get(host.stop_all.remote())
    ray.kill(host)
