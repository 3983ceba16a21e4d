"""The assignors, with the seeds' worked examples as cases (their numbers, Kafka's results)."""
from __future__ import annotations

import random

import pytest

from protocols.assignors import Subscription, TopicPartition, assignor_for
from protocols.errors import InvalidConfigError


def tps(spec: str) -> list[TopicPartition]:
    """"A-0 A-1 B-2" -> [TopicPartition("A", 0), ...]"""
    return [TopicPartition(t, int(p)) for t, p in (x.rsplit("-", 1) for x in spec.split())]


def same(topics, *members):
    return {m: Subscription(topics) for m in members}


# ---- range --------------------------------------------------------------------------------

def test_range_seed_001_example_1_five_partitions_three_consumers():
    got = assignor_for("range").assign({"TOPIC_A": 5}, same(["TOPIC_A"], "C1", "C2", "C3"))
    assert got == {"C1": tps("TOPIC_A-0 TOPIC_A-1"), "C2": tps("TOPIC_A-2 TOPIC_A-3"),
                   "C3": tps("TOPIC_A-4")}


def test_range_seed_001_example_2_two_topics_two_consumers():
    got = assignor_for("range").assign({"TOPIC_A": 5, "TOPIC_B": 3},
                                       same(["TOPIC_A", "TOPIC_B"], "C1", "C2"))
    assert got == {"C1": tps("TOPIC_A-0 TOPIC_A-1 TOPIC_A-2 TOPIC_B-0 TOPIC_B-1"),
                   "C2": tps("TOPIC_A-3 TOPIC_A-4 TOPIC_B-2")}


def test_range_seed_000_two_topics_of_four_then_of_three():
    sub = same(["t0", "t1"], "C0", "C1")
    assert assignor_for("range").assign({"t0": 4, "t1": 4}, sub) == {
        "C0": tps("t0-0 t0-1 t1-0 t1-1"), "C1": tps("t0-2 t0-3 t1-2 t1-3")}
    assert assignor_for("range").assign({"t0": 3, "t1": 3}, sub) == {
        "C0": tps("t0-0 t0-1 t1-0 t1-1"), "C1": tps("t0-2 t1-2")}


@pytest.mark.parametrize("partitions, expected", [
    (10, ["T1-0 T1-1 T1-2 T1-3", "T1-4 T1-5 T1-6", "T1-7 T1-8 T1-9"]),
    (11, ["T1-0 T1-1 T1-2 T1-3", "T1-4 T1-5 T1-6 T1-7", "T1-8 T1-9 T1-10"]),
])
def test_range_seed_004_ten_and_eleven_partitions_over_three(partitions, expected):
    got = assignor_for("range").assign({"T1": partitions}, same(["T1"], "C1-0", "C2-0", "C3-0"))
    assert got == {"C1-0": tps(expected[0]), "C2-0": tps(expected[1]), "C3-0": tps(expected[2])}


def test_range_seed_004_two_topics_of_ten_overload_the_first_consumer():
    got = assignor_for("range").assign({"T1": 10, "T2": 10},
                                       same(["T1", "T2"], "C1-0", "C2-0", "C3-0"))
    assert got == {"C1-0": tps("T1-0 T1-1 T1-2 T1-3 T2-0 T2-1 T2-2 T2-3"),
                   "C2-0": tps("T1-4 T1-5 T1-6 T2-4 T2-5 T2-6"),
                   "C3-0": tps("T1-7 T1-8 T1-9 T2-7 T2-8 T2-9")}
    assert len(got["C1-0"]) - len(got["C3-0"]) == 2   # the drawback the seed points out


# ---- roundrobin ---------------------------------------------------------------------------

def test_roundrobin_seed_001_example_2_deals_in_kafkas_order():
    # The seed sorts by hashCode (the old Scala consumer) and says its order is an example;
    # Kafka's RoundRobinAssignor sorts by topic, then partition, and deals them out in turn.
    got = assignor_for("roundrobin").assign({"TOPIC_A": 5, "TOPIC_B": 3},
                                            same(["TOPIC_A", "TOPIC_B"], "C1", "C2"))
    assert got == {"C1": tps("TOPIC_A-0 TOPIC_A-2 TOPIC_A-4 TOPIC_B-1"),
                   "C2": tps("TOPIC_A-1 TOPIC_A-3 TOPIC_B-0 TOPIC_B-2")}


def test_roundrobin_seed_004_ten_partitions_over_four_threads():
    got = assignor_for("roundrobin").assign({"T1": 10},
                                            same(["T1"], "C1-0", "C1-1", "C2-0", "C2-1"))
    assert [len(got[m]) for m in ("C1-0", "C1-1", "C2-0", "C2-1")] == [3, 3, 2, 2]
    assert got["C1-0"] == tps("T1-0 T1-4 T1-8")


def test_roundrobin_skips_members_not_subscribed_to_the_topic():
    subs = {"a": Subscription(["x", "y"]), "b": Subscription(["y"])}
    got = assignor_for("roundrobin").assign({"x": 2, "y": 2}, subs)
    assert got == {"a": tps("x-0 x-1 y-1"), "b": tps("y-0")}


def test_static_members_are_ordered_by_instance_id_before_dynamic_ones():
    subs = {"zzz": Subscription(["t"], group_instance_id="i-1"),
            "aaa": Subscription(["t"], group_instance_id="i-2"),
            "bbb": Subscription(["t"])}
    got = assignor_for("range").assign({"t": 3}, subs)
    assert got == {"zzz": tps("t-0"), "aaa": tps("t-1"), "bbb": tps("t-2")}


# ---- sticky and cooperative-sticky -------------------------------------------------------

def test_sticky_keeps_owned_partitions_when_a_member_joins():
    first = assignor_for("sticky").assign({"t": 6}, same(["t"], "c1", "c2"))
    assert sorted(len(v) for v in first.values()) == [3, 3]
    subs = {m: Subscription(["t"], owned) for m, owned in first.items()}
    subs["c3"] = Subscription(["t"])
    second = assignor_for("sticky").assign({"t": 6}, subs)
    assert sorted(len(v) for v in second.values()) == [2, 2, 2]
    for m in ("c1", "c2"):   # each old member kept two of its three
        assert set(second[m]) <= set(first[m])


def test_sticky_hands_a_leaving_members_partitions_to_the_others_only():
    three = {"c1": tps("t-0 t-1"), "c2": tps("t-2 t-3"), "c3": tps("t-4 t-5")}
    subs = {m: Subscription(["t"], three[m]) for m in ("c1", "c2")}
    got = assignor_for("sticky").assign({"t": 6}, subs)
    assert set(three["c1"]) <= set(got["c1"]) and set(three["c2"]) <= set(got["c2"])
    assert sorted(got["c1"] + got["c2"]) == tps("t-0 t-1 t-2 t-3 t-4 t-5")


def test_sticky_balances_where_round_robin_would_not():
    # Kafka's StickyAssignor example: c1 subscribes to t0 only, c2 to t0 and t1, c3 to all.
    subs = {"c1": Subscription(["t0"]), "c2": Subscription(["t0", "t1"]),
            "c3": Subscription(["t0", "t1", "t2"])}
    got = assignor_for("sticky").assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    assert got == {"c1": tps("t0-0"), "c2": tps("t1-0 t1-1"), "c3": tps("t2-0 t2-1 t2-2")}


@pytest.mark.parametrize("seed", range(30))
def test_sticky_properties_under_random_membership_changes(seed):
    rng = random.Random(seed)
    topics = {"a": rng.randint(1, 8), "b": rng.randint(0, 5)}
    owned: dict[str, list] = {}
    for _ in range(6):
        members = sorted(rng.sample([f"m{i}" for i in range(6)], rng.randint(1, 5)))
        subs = {m: Subscription(["a", "b"], owned.get(m, ())) for m in members}
        got = assignor_for("sticky").assign(topics, subs)
        flat = [tp for v in got.values() for tp in v]
        assert sorted(flat) == sorted(TopicPartition(t, p) for t, n in topics.items()
                                      for p in range(n))             # each once
        counts = [len(v) for v in got.values()]
        assert max(counts) - min(counts) <= 1                        # balanced
        total, n = len(flat), len(members)
        for m in members:   # a member keeps what it owned, up to its fair share
            kept = set(got[m]) & set(owned.get(m, ()))
            assert len(kept) >= min(len(set(owned.get(m, ()))), total // n)
        owned = got


def test_cooperative_sticky_leaves_moving_partitions_for_the_follow_up_rebalance():
    owned = {"c1": tps("t-0 t-1 t-2"), "c2": tps("t-3 t-4 t-5")}
    subs = {m: Subscription(["t"], owned[m]) for m in owned}
    subs["c3"] = Subscription(["t"])
    first = assignor_for("cooperative-sticky").assign({"t": 6}, subs)
    # Nothing is taken from a member that still owns it: c3 waits; c1 and c2 keep two each.
    assert first["c3"] == [] and len(first["c1"]) == len(first["c2"]) == 2
    assert set(first["c1"]) <= set(owned["c1"]) and set(first["c2"]) <= set(owned["c2"])
    # The follow-up rebalance, after c1 and c2 revoked one each, hands them to c3.
    subs = {m: Subscription(["t"], first[m]) for m in first}
    second = assignor_for("cooperative-sticky").assign({"t": 6}, subs)
    assert second["c1"] == first["c1"] and second["c2"] == first["c2"]
    assert sorted(second["c3"]) == sorted(set(tps("t-0 t-1 t-2 t-3 t-4 t-5"))
                                          - set(first["c1"]) - set(first["c2"]))


def test_assignors_are_found_by_kafkas_class_names_and_unknown_ones_are_refused():
    assert assignor_for("org.apache.kafka.clients.consumer.RoundRobinAssignor").name == \
        "roundrobin"
    with pytest.raises(InvalidConfigError, match="known: range"):
        assignor_for("fair")
