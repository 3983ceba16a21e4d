"""A real cluster on Ray: brokers, replicas and the controller as actors; faults are real
processes killed with SIGKILL (seed 000 §8, docs/architecture.md "Control")."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

import rafka
from protocols.errors import (InvalidConfigError, InvalidReplicationFactorError,
                              InvalidTopicError, StaleControllerEpochError,
                              TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from protocols.messages import UpdateMetadata
from protocols.wire import decode, encode
from tests.runtime.conftest import FAST, cluster_with
from tests.runtime.helpers import (controller_cannot_commit, produce, produce_retrying,
                                   read_all, wait_until)

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]


def isr_of(cluster, topic, partition):
    return cluster.metadata()["topics"][topic][partition]["isr"]


def test_topics_are_created_described_and_replicated(cluster):
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("orders", 3, 3, config={"min.insync.replicas": 2})])
    lines = admin.describe_topic_lines("orders")
    assert len(lines) == 3
    for p, line in enumerate(lines):
        assert line.startswith(f"\tTopic: orders\tPartition: {p}\tLeader: ")
        assert "\tReplicas: " in line and "\tIsr: " in line
    described = admin.describe_topics(["orders"])["orders"]
    assert described.config == {"min.insync.replicas": 2}
    for info in described.partitions:
        assert sorted(info.replicas) == [0, 1, 2] and info.leader == info.replicas[0]

    # acks=all: answered once the whole ISR has the record.
    offsets = [produce(cluster, "orders", 1, f"v{i}".encode()).base_offset for i in range(5)]
    assert offsets == [0, 1, 2, 3, 4]
    leader_id, leader = cluster.leader("orders", 1)
    assert list(read_all(leader).values()) == [f"v{i}".encode() for i in range(5)]
    for b in (0, 1, 2):
        state = ray.get(cluster.replica("orders", 1, b).describe.remote())
        assert state["log_end_offset"] == 5
        assert state["role"] == ("leader" if b == leader_id else "follower")

    # Kafka's errors for bad requests.
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([rafka.NewTopic("orders", 1, 1)])
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics([rafka.NewTopic("wide", 1, 4)])
    with pytest.raises(InvalidTopicError):
        admin.create_topics([rafka.NewTopic("../etc", 1, 1)])
    with pytest.raises(InvalidConfigError, match="retention.ms"):
        admin.create_topics([rafka.NewTopic("x", 1, 1, config={"retention.msec": 5})])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topics(["nope"])

    # Offsets by position and by time; records deleted up to an offset.
    listed = admin.list_offsets({("orders", 1): "earliest", ("orders", 0): "latest"})
    assert listed[("orders", 1)].offset == 0 and listed[("orders", 0)].offset == 0
    assert admin.list_offsets({("orders", 1): 0})[("orders", 1)].offset == 0
    assert admin.delete_records({("orders", 1): 2}) == {("orders", 1): 2}
    assert admin.list_offsets({("orders", 1): "earliest"})[("orders", 1)].offset == 2

    # Reassignment: a single-replica partition moves from broker 0 to broker 1 with its data.
    admin.create_topics([rafka.NewTopic("moving", replica_assignment={0: [0]})])
    for i in range(3):
        produce(cluster, "moving", 0, f"m{i}".encode(), acks=1)
    admin.alter_partition_reassignments({("moving", 0): [1]})
    wait_until(lambda: admin.describe_topics(["moving"])["moving"].partitions[0].replicas == [1]
               and admin.describe_topics(["moving"])["moving"].partitions[0].leader == 1, 60,
               "the reassignment to complete")
    _, handle = cluster.leader("moving", 0)
    assert list(read_all(handle).values()) == [b"m0", b"m1", b"m2"]
    wait_until(lambda: not (cluster_dir(cluster, 0) / "moving-0").exists(), 30,
               "the old replica's directory to be deleted")

    # Topic configs change at run time and partitions can be added.
    admin.alter_configs({"orders": {"retention.ms": 60_000}})
    assert admin.describe_configs(["orders"])["orders"]["retention.ms"] == 60_000
    admin.create_partitions({"orders": 4})
    assert len(admin.describe_topics(["orders"])["orders"].partitions) == 4
    admin.delete_topics(["orders"])
    assert "orders" not in admin.list_topics()
    wait_until(lambda: not any(p.name.startswith("orders-")
                               for p in (cluster_dir(cluster, 0)).iterdir()), 30,
               "the deleted topic's directories to go")


def cluster_dir(cluster, broker_id):
    from pathlib import Path
    return Path(cluster.data_dir) / f"broker-{broker_id}"


def test_killing_the_leaders_broker_elects_a_new_leader_and_loses_nothing(cluster):
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("t", 1, 3, config={"min.insync.replicas": 2})])
    acked = {produce_retrying(cluster, "t", 0, f"before-{i}".encode()): f"before-{i}".encode()
             for i in range(20)}
    old_leader, _ = cluster.leader("t", 0)
    epoch = cluster.metadata()["topics"]["t"][0]["leader_epoch"]

    os.kill(cluster.broker_pid(old_leader), signal.SIGKILL)   # the process, not a call
    killed_at = time.monotonic()
    bound_s = (FAST["replica.lag.time.max.ms"] + FAST["broker.session.timeout.ms"]) / 1000
    wait_until(lambda: (lambda p: p["leader"] not in (-1, old_leader)
                        and p["leader_epoch"] > epoch)(cluster.metadata()["topics"]["t"][0]),
               bound_s, "a new leader within replica.lag.time.max.ms + the session timeout")
    print(f"new leader elected {time.monotonic() - killed_at:.2f} s after the kill")

    for i in range(20):   # acks=all writes resume
        acked[produce_retrying(cluster, "t", 0, f"after-{i}".encode())] = f"after-{i}".encode()
    new_leader, handle = cluster.leader("t", 0)
    assert new_leader != old_leader
    records = read_all(handle)
    assert {o: records.get(o) for o in acked} == acked      # nothing acknowledged is lost

    # Ray restarted the killed broker on its node: it recovers its log, truncates by leader
    # epoch, catches up and rejoins the ISR.
    wait_until(lambda: sorted(isr_of(cluster, "t", 0)) == [0, 1, 2], 60,
               "the restarted broker to rejoin the ISR")
    back = cluster.replica("t", 0, old_leader)
    wait_until(lambda: ray.get(back.describe.remote())["log_end_offset"]
               == ray.get(handle.describe.remote())["log_end_offset"], 30, "catch-up")
    hw = ray.get(handle.describe.remote())["high_watermark"]
    assert ray.get(back.read_local.remote(0, 1 << 30, hw)) == \
        ray.get(handle.read_local.remote(0, 1 << 30, hw))       # byte-identical below the HW


def test_killing_the_controllers_owner_moves_the_controller_and_fences_the_old_epoch(cluster):
    before = cluster.admin().describe_cluster()
    os.kill(cluster.broker_pid(before.controller_id), signal.SIGKILL)
    # An idempotent producer started during the failover (its InitProducerId may reach the
    # dying controller) gets its id from the next one instead of failing.
    producer = rafka.Producer(cluster)
    after = wait_until(
        lambda: (lambda d: d if d.controller_epoch == before.controller_epoch + 1 else None)(
            cluster.admin().describe_cluster()), 60, "a new controller")
    assert after.controller_epoch == before.controller_epoch + 1
    # Everyone, including the restarted broker, is back under the new controller.
    wait_until(lambda: cluster.admin().describe_cluster().brokers == [0, 1, 2], 60,
               "every broker registered with the new controller")
    # A request from the old controller epoch is refused.
    survivor = next(b for b in (0, 1, 2) if b != before.controller_id)
    wait_until(lambda: ray.get(cluster.broker(survivor).describe.remote())["controller_epoch"]
               == after.controller_epoch, 30, "the survivor to hear from the new controller")
    stale = UpdateMetadata(before.controller_epoch, survivor, {})
    answer = decode(ray.get(cluster.broker(survivor).apply_controller_messages.remote(
        encode([stale]))))
    assert isinstance(answer, StaleControllerEpochError)
    # The new controller still works.
    cluster.admin().create_topics([rafka.NewTopic("after-failover", 1, 3)])
    assert producer.send("after-failover", b"x").result(30).offset == 0
    producer.close()


def test_every_change_the_controller_answered_survives_its_death(cluster):
    """The controller answers a change only once a checkpoint holds it. Changes arriving
    together share checkpoints (group commits, written off its event loop), and still each
    one answered is in the state the next controller loads after a SIGKILL."""
    before = cluster.admin().describe_cluster()
    controller = cluster.controller()
    names = [f"burst-{i}" for i in range(40)]
    answers = ray.get([controller.create_topic.remote(n, 1, 1, None, None) for n in names])
    assert [decode(a) for a in answers] == [None] * len(names)
    os.kill(cluster.broker_pid(before.controller_id), signal.SIGKILL)
    wait_until(lambda: cluster.admin().describe_cluster().controller_epoch
               == before.controller_epoch + 1, 60, "a new controller")
    assert set(names) <= set(cluster.metadata()["topics"])
    producer = rafka.Producer(cluster)
    assert producer.send(names[-1], b"x").result(30).offset == 0   # its leader serves
    producer.close()


def test_a_frozen_controller_is_fenced_and_replaced(cluster):
    """SIGSTOP keeps the process (and so the actor's name) alive but silent: the brokers must
    notice the missed answers within a session timeout, kill it and elect another."""
    before = cluster.admin().describe_cluster()
    pid = ray.get(cluster.controller().pid.remote())
    os.kill(pid, signal.SIGSTOP)
    try:
        handle = wait_until(
            lambda: (lambda h: h if ray.get(h.ping.remote(), timeout=2)[0]
                     > before.controller_epoch else None)(
                ray.get_actor("controller", namespace=cluster.namespace)),
            60, "a new controller after the frozen one")
    finally:
        try:
            os.kill(pid, signal.SIGCONT)   # if it is still there: it must then be fenced
        except ProcessLookupError:
            pass
    assert ray.get(handle.ping.remote())[0] == before.controller_epoch + 1
    cluster.admin().create_topics([rafka.NewTopic("after-freeze", 1, 3)])
    # Each broker's describe() says what it last heard from the controller: the frozen one
    # left calls unanswered, and the new one answers (its heartbeats).
    epoch = before.controller_epoch + 1
    channels = [ray.get(cluster.broker(b).describe.remote())["controller_channel"]
                for b in range(3)]
    assert all(c["last_error"] is not None and c["last_answer_s_ago"] < 10 for c in channels)
    assert all(ray.get(cluster.broker(b).describe.remote())["boot_step"] == "serving"
               for b in range(3))
    status = ray.get(handle.status.remote())
    assert status["controller_epoch"] == epoch and status["durable"] == status["changes"]
    assert {b: i["alive"] for b, i in status["brokers"].items()} == {0: True, 1: True, 2: True}


def test_a_broker_whose_registration_fails_finds_the_controller_again_and_registers(cluster):
    """Found by a long fault run: a broker started again after its disk was full registered
    just as another broker killed the controller as a zombie. The call failed
    (ActorDiedError), the broker's start ended there, and it stayed up unregistered and
    serving nothing. A registration that fails (the controller died, or answered an error)
    now looks the controller up again and asks again. Here the controller answers errors
    for a while: its checkpoint cannot be written (a file stands where its metadata
    directory was) until the test puts the directory back."""
    before = cluster.admin().describe_cluster()
    victim = next(b for b in (0, 1, 2) if b != before.controller_id)
    pid = cluster.broker_pid(victim)
    with controller_cannot_commit(cluster):
        os.kill(pid, signal.SIGKILL)
        failed = wait_until(
            lambda: (lambda d: d if d["pid"] != pid and d["boot_step"].startswith("registering")
                     and (d["controller_channel"]["last_error"] or "").startswith("register:")
                     else None)(ray.get(cluster.broker(victim).describe.remote(), timeout=5)),
            60, "the restarted broker's registration to fail")
        assert "FileExistsError" in failed["controller_channel"]["last_error"]
    wait_until(lambda: ray.get(cluster.broker(victim).describe.remote(), timeout=5)
               ["boot_step"] == "serving", 30, "the broker to register and serve")
    status = ray.get(cluster.controller().status.remote())
    assert {b: i["alive"] for b, i in status["brokers"].items()} == {0: True, 1: True, 2: True}
    cluster.admin().create_topics([rafka.NewTopic("after-registering", 1, 3)])
    assert produce_retrying(cluster, "after-registering", 0, b"x") == 0


def test_a_broker_whose_start_fails_exits_and_is_started_again_until_it_serves(
        ray_session, tmp_path):
    """Found by a long fault run: a broker started again by Ray stopped at its boot step
    "replica hosts" for the rest of the run, never registered, serving nothing: its start
    had failed, and nothing started it again. As Kafka's broker exits when its startup
    fails, a rafka broker now exits, and Ray starts it again. Here its start fails for
    real: when Ray starts it again after a SIGKILL, the port of its Kafka listener is
    taken (by the test), until the test lets it go."""
    from benchmarks.peers import free_port
    port = free_port()
    with cluster_with(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{port}"},
                      brokers=1) as c:
        pid = c.broker_pid(0)
        taker = socket.socket()
        taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while True:   # the port is free once the process is gone: take it before Ray
            try:      # has started the broker again
                taker.bind(("127.0.0.1", port))
                break
            except OSError:
                assert time.monotonic() < deadline, "the killed broker's port stayed taken"
        taker.listen()
        try:
            failed: dict[int, str] = {}   # by pid: each start that failed

            def failed_twice():
                d = ray.get(c.broker(0).describe.remote(), timeout=5)
                if d["boot_step"].startswith("failed at listeners"):
                    failed[d["pid"]] = d["boot_step"]
                return len(failed) >= 2
            wait_until(failed_twice, 60, "two starts of the broker to fail")
        finally:
            taker.close()
        assert pid not in failed and all("address already in use" in step
                                          for step in failed.values())
        described = wait_until(
            lambda: (lambda d: d if d["boot_step"] == "serving" else None)(
                ray.get(c.broker(0).describe.remote(), timeout=5)),
            60, "the broker to start once its port is free")
        assert described["endpoints"] == [["PLAINTEXT", "127.0.0.1", port]]
        c.admin().create_topics([rafka.NewTopic("after-failed-starts", 1, 1)])
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all"})
        producer.produce("after-failed-starts", b"served")
        assert producer.flush(60) == 0
        _, handle = c.leader("after-failed-starts", 0)
        assert list(read_all(handle).values()) == [b"served"]


def test_controlled_shutdown_moves_leadership_and_preferred_election_moves_it_back(cluster):
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("t", 3, 3, config={"min.insync.replicas": 2})])
    preferred = {p.partition: p.replicas[0] for p in admin.describe_topics(["t"])["t"].partitions}
    victim = preferred[0]
    cluster.stop_broker(victim)
    for p in admin.describe_topics(["t"])["t"].partitions:
        assert p.leader not in (victim, -1)          # moved before the broker stopped
        assert victim not in p.isr
    produce_retrying(cluster, "t", 0, b"while-down")

    cluster.start_broker(victim)
    wait_until(lambda: all(sorted(p.isr) == [0, 1, 2]
                           for p in admin.describe_topics(["t"])["t"].partitions), 60,
               "the broker to rejoin every ISR")
    admin.elect_leaders()
    wait_until(lambda: {p.partition: p.leader for p in
                        admin.describe_topics(["t"])["t"].partitions} == preferred, 30,
               "preferred leaders")
    _, handle = cluster.leader("t", 0)
    assert b"while-down" in read_all(handle).values()


def test_a_stopped_and_restarted_cluster_recovers_topics_and_records(ray_session, tmp_path):
    data = tmp_path / "data"
    c = rafka.Cluster.start(3, data, FAST, name="restart")
    c.admin().create_topics([rafka.NewTopic("keep", 2, 3)])
    for i in range(10):
        produce_retrying(c, "keep", i % 2, f"r{i}".encode())
    c.shutdown()

    c = rafka.Cluster.start(3, data, FAST, name="restart")
    try:
        described = c.admin().describe_topics(["keep"])["keep"]
        assert len(described.partitions) == 2
        values = set()
        for p in (0, 1):
            _, handle = c.leader("keep", p)
            values |= set(read_all(handle).values())
        assert values == {f"r{i}".encode() for i in range(10)}
        produce_retrying(c, "keep", 0, b"after-restart")
    finally:
        c.shutdown()


def test_the_first_retention_pass_comes_log_initial_task_delay_ms_after_the_start(
        ray_session, tmp_path):
    # Kafka's log.initial.task.delay.ms: a broker's first pass of retention (with the
    # deletions and flushes beside it) that long after it starts, then every
    # log.retention.check.interval.ms (its default here, 300 s: no second pass in this test).
    # Records stamped two hours ago under a one-hour retention.ms, written while retention
    # was ten minutes away, go at the first pass after a restart.
    data, tp = tmp_path / "data", ("aged", 0)
    c = rafka.Cluster.start(3, data, dict(FAST, **{"log.initial.task.delay.ms": 600_000}),
                            name="aged")
    try:
        c.admin().create_topics([rafka.NewTopic("aged", 1, 2,
                                                config={"retention.ms": 3_600_000})])
        with rafka.Producer(c, acks="all") as producer:
            two_hours_ago = int(time.time() * 1000) - 7_200_000
            for i in range(5):
                producer.send("aged", b"%d" % i, timestamp=two_hours_ago + i).result(30)
        with rafka.Consumer(c) as consumer:
            assert (consumer.beginning_offsets([tp]), consumer.end_offsets([tp])) == \
                ({tp: 0}, {tp: 5})
    finally:
        c.shutdown()
    c = rafka.Cluster.start(3, data, dict(FAST, **{"log.initial.task.delay.ms": 2000}),
                            name="aged")
    try:
        with rafka.Consumer(c) as consumer:
            wait_until(lambda: consumer.beginning_offsets([tp]) == {tp: 5}, timeout_s=60,
                       what="the first retention pass deleting the expired records")
    finally:
        c.shutdown()


def _write_keyed_to_a_compacted_topic(c, topic: str) -> dict[int, bytes]:
    """200 records over 5 keys, a batch each, in 1 KiB segments: due for cleaning at once
    (min.cleanable.dirty.ratio 0.01); what the leader holds then."""
    c.admin().create_topics([rafka.NewTopic(topic, 1, 2, config={
        "cleanup.policy": "compact", "segment.bytes": 1024,
        "min.cleanable.dirty.ratio": 0.01})])
    with rafka.Producer(c, {"batch.size": 64, "acks": "all"}) as producer:
        for f in [producer.send(topic, f"v{i}".encode(), key=f"k{i % 5}".encode())
                  for i in range(200)]:
            f.result(30)
    return read_all(c.leader(topic, 0)[1])


def test_the_cleaner_compacts_every_log_cleaner_backoff_ms_apart_from_retention(
        ray_session, tmp_path):
    # Kafka's cleaner threads look for a log to clean every log.cleaner.backoff.ms (15 s,
    # the default here) whatever retention does: here its first pass is ten minutes away.
    with cluster_with(tmp_path, {"log.initial.task.delay.ms": 600_000}) as c:
        _write_keyed_to_a_compacted_topic(c, "table")

        def compacted():
            values = read_all(c.leader("table", 0)[1])
            return values if len(values) < 200 else None
        values = wait_until(compacted, 60, "the cleaner's first look at the log")
        # Each key's last value is kept (here the last 5 records, in the active segment).
        assert set(values.values()) >= {f"v{i}".encode() for i in range(195, 200)}


def test_no_log_is_compacted_when_log_cleaner_enable_is_false(ray_session, tmp_path):
    # Retention passes run meanwhile (every 100 ms): they do not compact either.
    with cluster_with(tmp_path, {"log.cleaner.enable": False, "log.cleaner.backoff.ms": 100,
                                 "log.initial.task.delay.ms": 0,
                                 "log.retention.check.interval.ms": 100}) as c:
        _write_keyed_to_a_compacted_topic(c, "table")
        time.sleep(3)   # thirty of the cleaner's periods, were it running
        assert len(read_all(c.leader("table", 0)[1])) == 200


def test_connect_from_a_ray_task_and_bad_cluster_config(cluster):
    cluster.admin().create_topics([rafka.NewTopic("seen", 1, 1)])

    @ray.remote(num_cpus=0)
    def topics_from_a_task(name):
        return rafka.Cluster.connect(name).admin().list_topics()

    assert ray.get(topics_from_a_task.remote(cluster.name)) == ["seen"]

    # The CLI is another driver on the same Ray cluster.
    address = ray.get_runtime_context().gcs_address
    cli = [sys.executable, "-m", "rafka", "topics", "--cluster", cluster.name,
           "--address", address]
    out = subprocess.run(cli + ["--create", "--topic", "cli", "--partitions", "2",
                                "--replication-factor", "2", "--config", "retention.ms=1000"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    out = subprocess.run(cli + ["--describe", "--topic", "cli"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("Topic: cli\tPartitionCount: 2\tReplicationFactor: 2\t"
                        "Configs: retention.ms=1000")
    assert lines[1].startswith("\tTopic: cli\tPartition: 0\tLeader: ")
    out = subprocess.run(cli + ["--create", "--topic", "cli", "--partitions", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "TOPIC_ALREADY_EXISTS" in out.stderr
    with pytest.raises(InvalidConfigError, match="replica.lag.time.max.ms"):
        rafka.Cluster.start(1, "unused", {"replica.lag.time.max": 1}, name="bad")


def test_a_stray_log_of_a_deleted_topic_is_not_served_to_its_namesake(cluster):
    """KIP-516's case: a broker is away while a topic is deleted and created again under the
    same name. Its old directory holds the old topic's records; when the new topic's replica
    opens there, partition.metadata names the old topic id, so the directory is deleted
    (a stray log) and the replica copies the new topic from its leader. Without topic ids
    the follower would truncate to the new leader's end and keep old records beneath it."""
    from protocols.records import iter_batches
    from storage.partition_metadata import read_topic_id
    cluster.admin().create_topics([rafka.NewTopic("re", 1, 3)])
    for i in range(50):
        assert produce(cluster, "re", 0, b"old-%d" % i).error is None
    old_id = cluster.metadata()["topic_ids"]["re"]
    stray_dir = Path(cluster.data_dir) / "broker-2" / "re-0"
    wait_until(lambda: read_topic_id(stray_dir) == old_id, 30, "partition.metadata written")
    cluster.stop_broker(2)
    cluster.admin().delete_topics(["re"])
    wait_until(lambda: "re" not in cluster.metadata()["topics"], 30, "the topic deleted")
    cluster.admin().create_topics([rafka.NewTopic("re", 1, 2,
                                                  replica_assignment={0: [0, 1]})])
    for i in range(10):
        assert produce_retrying(cluster, "re", 0, b"new-%d" % i) == i
    new_id = cluster.metadata()["topic_ids"]["re"]
    cluster.start_broker(2)
    assert read_topic_id(stray_dir) == old_id          # not a replica: left alone so far
    cluster.admin().alter_partition_reassignments({("re", 0): [0, 1, 2]})
    wait_until(lambda: 2 in cluster.metadata()["topics"]["re"][0]["isr"], 60,
               "broker 2 in the new topic's ISR")
    wait_until(lambda: read_topic_id(stray_dir) == new_id, 30, "partition.metadata written")
    raw = ray.get(cluster.replica("re", 0, 2).read_local.remote(0, 1 << 20))
    assert [r.value for b in iter_batches(raw) for r in b.records()] == \
        [b"new-%d" % i for i in range(10)]
