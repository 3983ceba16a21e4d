"""Consumer groups end to end on a real 3-broker cluster: the coordinator actor, offsets in
``__consumer_offsets``, rebalances driven by real consumers (seed 000 §10, docs/architecture.md
"Consumer groups")."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import ray

import rafka
from protocols.topics import OFFSETS_TOPIC
from protocols.java_hash import coordinator_partition_for
from protocols.errors import GroupIdNotFoundError, InvalidTopicError, NonEmptyGroupError
from protocols.topics import TopicPartition
from rafka.consumer.coordinator import CommitFailedError, ConsumerRebalanceListener
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]
SHARE_CLUSTER = True   # each test its own topics and groups; own_cluster for kills

GROUP = {"auto.offset.reset": "earliest", "session.timeout.ms": 6000,
         "heartbeat.interval.ms": 500, "metadata.max.age.ms": 1000}


def consumer(cluster, group: str, **extra) -> rafka.Consumer:
    return rafka.Consumer(cluster, dict(GROUP, **{"group.id": group}), **extra)


def fill(cluster, topic: str, partitions: int, records: int, prefix: str = "v") -> None:
    cluster.admin().create_topics([rafka.NewTopic(topic, partitions, 2)])
    with rafka.Producer(cluster, linger_ms=5) as producer:
        for i in range(records):
            producer.send(topic, f"{prefix}{i}".encode(), partition=i % partitions)


def poll_all(consumers, until, timeout_s: float = 60, seen: dict | None = None):
    """Poll every consumer in turn from this one thread (a rebalance in progress does not
    block a poll) until ``until()``; records go to ``seen[(partition, offset)]`` as the
    list of consumer indexes that got them."""
    seen = {} if seen is None else seen
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, \
            f"timed out; assignments {[sorted(c.assignment()) for c in consumers]}"
        for i, c in enumerate(consumers):
            for r in c.poll(50):
                seen.setdefault((r.partition, r.offset), []).append(i)
    return seen


class Recorder(ConsumerRebalanceListener):
    def __init__(self):
        self.events: list[tuple[str, set]] = []

    def on_partitions_revoked(self, partitions):
        self.events.append(("revoked", set(partitions)))

    def on_partitions_assigned(self, partitions):
        self.events.append(("assigned", set(partitions)))

    def on_partitions_lost(self, partitions):
        self.events.append(("lost", set(partitions)))


def test_three_consumers_share_six_partitions_and_a_leaver_hands_its_two_on(cluster):
    fill(cluster, "shared-six", 6, 600)
    members = [consumer(cluster, "g-share", client_id=f"c{i}", enable_auto_commit=False)
               for i in range(3)]
    for c in members:
        c.subscribe(["shared-six"])
    seen = poll_all(members, lambda: all(len(c.assignment()) == 2 for c in members))
    parts = [c.assignment() for c in members]
    assert set().union(*parts) == {TopicPartition("shared-six", p) for p in range(6)}
    poll_all(members, lambda: len(seen) == 600, seen=seen)
    assert all(len(who) == 1 for who in seen.values())
    for c in members:
        c.commit()                                   # sync: every position is committed
    leaver_parts = members[2].assignment()
    members[2].close()
    rest = members[:2]
    poll_all(rest, lambda: sum(len(c.assignment()) for c in rest) == 6, seen=seen)
    assert leaver_parts <= rest[0].assignment() | rest[1].assignment()
    with rafka.Producer(cluster) as producer:        # more records after the move
        for i in range(60):
            producer.send("shared-six", f"w{i}".encode(), partition=i % 6)
    poll_all(rest, lambda: len(seen) == 660, seen=seen)
    time.sleep(1)                                    # anything read twice would show up now
    poll_all(rest, lambda: True, seen=seen)
    for c in rest:
        c.poll(300)
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    assert not twice, f"read twice after a sync commit: {sorted(twice)[:5]}"
    assert len(seen) == 660
    for c in rest:
        c.close()


def test_a_consumer_killed_without_leaving_is_expelled_after_the_session_timeout(cluster):
    fill(cluster, "expelled", 4, 40)
    survivor = consumer(cluster, "g-expel", client_id="survivor")
    survivor.subscribe(["expelled"])
    address = ray.get_runtime_context().gcs_address
    script = textwrap.dedent(f"""
        import sys, time, rafka
        cluster = rafka.Cluster.connect({cluster.name!r}, address={address!r})
        c = rafka.Consumer(cluster, {dict(GROUP, **{"group.id": "g-expel"})!r}, client_id="victim")
        c.subscribe(["expelled"])
        last = 0
        while True:
            c.poll(100)
            if len(c.assignment()) != last:   # each assignment it gets, in turn
                last = len(c.assignment())
                print("assigned", last, flush=True)
    """)
    victim = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True, cwd=os.getcwd())
    try:
        deadline = time.monotonic() + 90
        while len(survivor.assignment()) != 2:
            assert time.monotonic() < deadline, "the group never split the partitions"
            survivor.poll(100)
        # The victim may have had all four first (it joined before the survivor polled).
        while not victim.stdout.readline().startswith("assigned 2"):
            assert time.monotonic() < deadline, "the victim never held two partitions"
        os.kill(victim.pid, signal.SIGKILL)          # no LeaveGroup: only the session ends
        victim.wait(10)
        killed = time.monotonic()
        while len(survivor.assignment()) != 4:
            assert time.monotonic() - killed < 60, "the dead member was never expelled"
            survivor.poll(100)
        took = time.monotonic() - killed
        print(f"expelled and reassigned {took:.1f} s after the kill")
        assert took >= 5.0                           # not before session.timeout.ms (6 s)
    finally:
        if victim.poll() is None:
            victim.kill()
        survivor.close()


def test_cooperative_sticky_keeps_unmoved_partitions_through_the_rebalance(cluster):
    fill(cluster, "coop-topic", 6, 60)
    strategy = {"partition.assignment.strategy": ["cooperative-sticky"]}
    listeners = [Recorder(), Recorder(), Recorder()]
    first = [consumer(cluster, "coop", client_id=f"c{i}", **{k.replace(".", "_"): v
                                                              for k, v in strategy.items()})
             for i in range(2)]
    for c, listener in zip(first, listeners):
        c.subscribe(["coop-topic"], listener=listener)
    poll_all(first, lambda: all(len(c.assignment()) == 3 for c in first))
    before = [set(c.assignment()) for c in first]
    positions = [{tp: c.position(tp) for tp in c.assignment()} for c in first]
    for listener in listeners[:2]:
        listener.events.clear()

    third = consumer(cluster, "coop", client_id="c2",
                     partition_assignment_strategy=["cooperative-sticky"])
    third.subscribe(["coop-topic"], listener=listeners[2])
    everyone = first + [third]
    poll_all(everyone, lambda: [len(c.assignment()) for c in everyone] == [2, 2, 2])
    for c, had, listener, pos in zip(first, before, listeners, positions):
        revoked = set().union(*[p for kind, p in listener.events if kind == "revoked"])
        kept = c.assignment()
        assert kept <= had and len(revoked) == 1 and revoked == had - kept
        assert not any(kind == "lost" for kind, _ in listener.events)
        # The kept partitions were never revoked or reassigned: consumption went on from
        # the same positions, with no reset to the committed offset.
        assigned = set().union(*[p for kind, p in listener.events if kind == "assigned"])
        assert not (assigned & kept)
        assert all(c.position(tp) >= pos[tp] for tp in kept)
    moved = set().union(*before) - first[0].assignment() - first[1].assignment()
    assert third.assignment() == moved
    for c in everyone:
        c.close()


@pytest.mark.own_cluster
def test_committed_offsets_survive_killing_the_coordinators_broker(cluster):
    fill(cluster, "ev", 2, 20)
    c = consumer(cluster, "durable", enable_auto_commit=False)
    c.subscribe(["ev"])
    seen = poll_all([c], lambda: len(seen) == 20, seen=(seen := {}))
    c.commit({("ev", 0): 7, ("ev", 1): rafka.OffsetAndMetadata(9, -1, "note")})
    partition = coordinator_partition_for("durable", 3)
    before, _ = cluster.leader(OFFSETS_TOPIC, partition)
    os.kill(cluster.broker_pid(before), signal.SIGKILL)    # the coordinator's process too
    wait_until(lambda: cluster.metadata()["topics"][OFFSETS_TOPIC][partition]["leader"]
               not in (-1, before), 60, "a new leader for the group's partition")
    # Another process's view, from the new coordinator (loaded from the log).
    committed = cluster.admin().list_consumer_group_offsets("durable")
    assert committed[TopicPartition("ev", 0)].offset == 7
    assert committed[TopicPartition("ev", 1)].offset == 9
    assert committed[TopicPartition("ev", 1)].metadata == "note"
    # The member carries on with the new coordinator: new records arrive, none twice.
    with rafka.Producer(cluster) as producer:
        for i in range(10):
            producer.send("ev", f"after{i}".encode(), partition=i % 2)
    poll_all([c], lambda: len(seen) == 30, seen=seen)
    assert all(len(who) == 1 for who in seen.values())
    c.commit()
    assert sum(om.offset for om in c.committed([("ev", 0), ("ev", 1)]).values()) == 30
    c.close()
    # A consumer that assign()s with the group id starts at the committed offsets.
    fresh = consumer(cluster, "durable")
    fresh.assign([("ev", 0), ("ev", 1)])
    assert fresh.position(("ev", 0)) + fresh.position(("ev", 1)) == 30
    fresh.close()


def test_subscribe_refuses_an_illegal_topic_name_with_kafkas_invalid_topic_exception(cluster):
    """Kafka's Topic.validate rules: only ASCII alphanumerics, '.', '_' and '-'. Refused
    before the group is joined; the consumer stays unsubscribed."""
    c = consumer(cluster, "group-illegal")
    for names in (["ev", "bad name!/.."], [""], ["x" * 250]):
        with pytest.raises(InvalidTopicError) as refused:
            c.subscribe(names)
        assert refused.value.code == 17 and refused.value.name == "INVALID_TOPIC_EXCEPTION"
    assert c.subscription() == set()
    c.close()


def test_two_groups_read_the_same_topic_independently(cluster):
    fill(cluster, "two-groups", 3, 90)
    a, b = consumer(cluster, "group-a"), consumer(cluster, "group-b", max_poll_records=10)
    a.subscribe(["two-groups"])
    b.subscribe(["two-groups"])
    seen_a = poll_all([a], lambda: len(seen_a) == 90, seen=(seen_a := {}))
    a.commit()
    seen_b = poll_all([b], lambda: len(seen_b) >= 30, seen=(seen_b := {}))
    # b stopped early; a's commits do not move b's offsets, nor b's a's
    b.commit()
    committed_a = a.committed([("two-groups", p) for p in range(3)])
    committed_b = b.committed([("two-groups", p) for p in range(3)])
    assert sum(om.offset for om in committed_a.values()) == 90
    assert sum(om.offset for om in committed_b.values() if om) == \
        sum(b.position(tp) for tp in b.assignment())
    a.close()
    b.close()
    again = consumer(cluster, "group-b")
    again.subscribe(["two-groups"])
    rest = poll_all([again], lambda: len(rest) + len(seen_b) >= 90, seen=(rest := {}))
    assert not set(rest) & set(seen_b) and len(rest) + len(seen_b) == 90
    again.close()


def test_admin_lists_describes_and_deletes_groups_and_commits_fail_after_a_rebalance(
        cluster):
    fill(cluster, "watched-topic", 2, 10)
    admin = cluster.admin()
    c = consumer(cluster, "watched", client_id="only", enable_auto_commit=False)
    c.subscribe(["watched-topic"])
    poll_all([c], lambda: len(c.assignment()) == 2)
    listing = {g.group_id: g for g in admin.list_consumer_groups()}
    assert listing["watched"].state == "Stable"
    d = admin.describe_consumer_groups(["watched"])["watched"]
    assert d.state == "Stable" and d.partition_assignor == "range"
    # The coordinator is the leader of partition abs(hashCode("watched")) % 3, as in Kafka.
    offsets_topic = cluster.metadata()["topics"][OFFSETS_TOPIC]
    assert len(offsets_topic) == 3
    assert d.coordinator == offsets_topic[coordinator_partition_for("watched", 3)]["leader"]
    assert admin.describe_configs([OFFSETS_TOPIC])[OFFSETS_TOPIC]["cleanup.policy"] == \
        ("compact",)
    assert [m.client_id for m in d.members] == ["only"]
    assert d.members[0].assignment == {TopicPartition("watched-topic", p) for p in (0, 1)}
    with pytest.raises(NonEmptyGroupError):
        admin.delete_consumer_groups(["watched"])
    # max.poll.interval.ms: a member that stops polling leaves the group; its commit then
    # fails, and its next poll finds its partitions lost and joins again.
    other = consumer(cluster, "watched", client_id="slow", max_poll_interval_ms=2000,
                     enable_auto_commit=False)
    recorder = Recorder()
    other.subscribe(["watched-topic"], listener=recorder)
    poll_all([c, other], lambda: len(other.assignment()) == 1)

    def slow_member_gone():
        c.poll(50)                                   # only c keeps polling
        members = admin.describe_consumer_groups(["watched"])["watched"].members
        return [m.client_id for m in members] == ["only"]
    wait_until(slow_member_gone, 30, "the slow member to leave")
    with pytest.raises(CommitFailedError):
        other.commit({tp: 1 for tp in other.assignment()})
    poll_all([c, other], lambda: len(other.assignment()) == 1 and
             any(kind == "lost" for kind, _ in recorder.events))
    other.close()
    c.close()
    admin.delete_consumer_groups(["watched"])
    assert "watched" not in {g.group_id for g in admin.list_consumer_groups()}
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_consumer_groups(["watched"])


def test_new_partitions_and_new_matching_topics_start_a_rebalance(cluster):
    fill(cluster, "ev-a", 2, 20)
    c = consumer(cluster, "pattern")
    c.subscribe(pattern="ev-.*")
    poll_all([c], lambda: len(c.assignment()) == 2)
    cluster.admin().create_partitions({"ev-a": 4})
    poll_all([c], lambda: len(c.assignment()) == 4)         # within metadata.max.age.ms
    fill(cluster, "ev-b", 2, 10)
    fill(cluster, "other", 1, 1)
    poll_all([c], lambda: {tp.topic for tp in c.assignment()} == {"ev-a", "ev-b"})
    assert c.subscription() == {"ev-a", "ev-b"}
    c.close()


def test_auto_commit_on_poll_and_close_and_async_commit_callbacks(cluster):
    fill(cluster, "auto-commit", 2, 40)
    c = consumer(cluster, "auto", auto_commit_interval_ms=300)
    c.subscribe(["auto-commit"])
    seen = poll_all([c], lambda: len(seen) == 40, seen=(seen := {}))

    def auto_committed():
        c.poll(50)
        committed = c.committed(list(c.assignment()))
        return all(om is not None and om.offset == c.position(tp)
                   for tp, om in committed.items())
    wait_until(auto_committed, 20, "the auto-commit of the positions")
    c.close()                                   # commits (nothing new) and leaves
    assert sum(om.offset for om in cluster.admin().list_consumer_group_offsets("auto")
               .values()) == 40

    manual = consumer(cluster, "async", enable_auto_commit=False)
    manual.assign([("auto-commit", 0)])
    answers = []
    manual.commit_async({("auto-commit", 0): 5}, callback=lambda offsets, error:
                        answers.append((dict(offsets), error)))
    wait_until(lambda: (manual.poll(50), answers)[1], 20, "the async commit's callback")
    assert answers == [({TopicPartition("auto-commit", 0): rafka.OffsetAndMetadata(5)}, None)]
    assert manual.committed(("auto-commit", 0)).offset == 5
    manual.close()


def test_a_static_member_that_restarts_within_its_session_keeps_its_partitions(cluster):
    fill(cluster, "static-topic", 4, 8)
    admin = cluster.admin()
    recorder = Recorder()
    a = consumer(cluster, "static", group_instance_id="a")
    b = consumer(cluster, "static", group_instance_id="b")
    a.subscribe(["static-topic"], listener=recorder)
    b.subscribe(["static-topic"])
    poll_all([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 2)
    generation = admin.describe_consumer_groups(["static"])["static"].generation_id
    mine = b.assignment()
    recorder.events.clear()
    b.close()                      # a static member sends no LeaveGroup (KIP-345)
    again = consumer(cluster, "static", group_instance_id="b")
    again.subscribe(["static-topic"])
    poll_all([a, again], lambda: again.assignment() == mine)
    after = admin.describe_consumer_groups(["static"])["static"]
    assert after.generation_id == generation and after.state == "Stable"
    assert sorted(m.group_instance_id for m in after.members) == ["a", "b"]
    assert recorder.events == []   # a never noticed
    a.close()
    again.close()
