"""Apache Kafka's sticky assignor tests, ported: AbstractStickyAssignorTest (run, as in Kafka,
for both StickyAssignor and CooperativeStickyAssignor), StickyAssignorTest and
CooperativeStickyAssignorTest (clients/src/test/java/org/apache/kafka/clients/consumer/...).

Kafka's owned partitions (the StickyAssignor's user data, the CooperativeStickyAssignor's
``ownedPartitions``) are rafka's ``Subscription.owned_partitions``. rafka carries no rack and
no generation, so only the tests' non-rack-aware runs are ported, and only those where every
member is in the same generation (or where the generations decide nothing). Kafka compares
lists in its own order; rafka returns each member's partitions sorted, so they are compared
sorted here.
"""
from __future__ import annotations

import random

import pytest

from protocols.assignors import Subscription, TopicPartition, assignor_for
from protocols.sticky_assignor import java_map_order, sticky_assign

BOTH = ["sticky", "cooperative-sticky"]
topic, topic1, topic2, topic3 = "topic", "topic1", "topic2", "topic3"
consumer1, consumer2, consumer3, consumer4 = "consumer1", "consumer2", "consumer3", "consumer4"
consumer_id = "consumer"


def tp(t: str, p: int) -> TopicPartition:
    return TopicPartition(t, p)


def parts(*tps: TopicPartition) -> list[TopicPartition]:
    return sorted(tps)


def parse(spec: str) -> list[TopicPartition]:
    """"t1-0, t2-3" -> [TopicPartition("t1", 0), TopicPartition("t2", 3)] (Kafka's toString)."""
    return sorted(TopicPartition(t, int(p))
                  for t, p in (x.rsplit("-", 1) for x in spec.split(", ") if x))


def sub(topics, owned=()) -> Subscription:
    return Subscription(list(topics), owned)


def assign(name, partitions_per_topic, subscriptions):
    return assignor_for(name).assign(dict(partitions_per_topic), subscriptions)


def transferring(partitions_per_topic, subscriptions):
    """Kafka's ``assignor.partitionsTransferringOwnership`` after this assignment."""
    return sticky_assign(partitions_per_topic, subscriptions).transferring


def is_sticky(partitions_per_topic, subscriptions) -> bool:
    """Kafka's ``assignor.isSticky()`` after this assignment."""
    return sticky_assign(partitions_per_topic, subscriptions).is_sticky


def is_fully_balanced(assignment) -> bool:
    sizes = [len(v) for v in assignment.values()]
    return not sizes or max(sizes) - min(sizes) <= 1


def verify(name, partitions_per_topic, subscriptions, assignment):
    """Kafka's verifyValidityAndBalance; for the cooperative assignor first
    CooperativeStickyAssignorTest's override: no partition is revoked and assigned in the same
    rebalance, and while partitions are revoked the members rebalance again, each owning what
    it was given (at most four times). Returns the final assignment (Kafka updates the map it
    was given, and the subscriptions, in place; the subscriptions are updated here too)."""
    if name == "cooperative-sticky":
        rebalances = 0
        while True:
            added, revoked = set(), set()
            for member, assigned in assignment.items():
                owned = set(subscriptions[member].owned_partitions)
                added |= set(assigned) - owned
                revoked |= owned - set(assigned)
            assert not added & revoked, f"revoked and reassigned at once: {added & revoked}"
            if not revoked:
                break
            for member, assigned in assignment.items():
                subscriptions[member] = sub(subscriptions[member].topics, assigned)
            assignment = assign(name, partitions_per_topic, subscriptions)
            rebalances += 1
            assert rebalances <= 4
    _validity_and_balance(subscriptions, assignment, partitions_per_topic)
    return assignment


def _validity_and_balance(subscriptions, assignment, partitions_per_topic):
    assert len(subscriptions) == len(assignment)
    consumers = sorted(assignment)
    for i, consumer in enumerate(consumers):
        mine = assignment[consumer]
        for p in mine:
            assert p.topic in subscriptions[consumer].topics, (consumer, p, assignment)
        for other in consumers[i + 1:]:
            theirs = assignment[other]
            assert not set(mine) & set(theirs), (consumer, other, assignment)
            if abs(len(mine) - len(theirs)) <= 1:
                continue
            # With two or more between them, they must not share a topic (else one could move).
            assert not {p.topic for p in mine} & {p.topic for p in theirs}, \
                (consumer, other, assignment)
    # rafka's own addition: every partition of a subscribed topic is assigned.
    subscribed = {t for s in subscriptions.values() for t in s.topics}
    assert sorted(p for v in assignment.values() for p in v) == sorted(
        TopicPartition(t, p) for t, n in partitions_per_topic.items() if t in subscribed
        for p in range(n))


def name_of(prefix: str, i: int, max_num: int) -> str:
    """Kafka's getTopicName / getConsumerName: prefix and i zero-padded to max_num's width."""
    return f"{prefix}{i:0{len(str(max_num))}d}"


# ---- Java's iteration order, which Kafka's constrained algorithm depends on ---------------

def test_java_map_order_of_the_tests_member_ids():
    """Kafka's HashMap of consumer1..consumer4 iterates them backwards (String.hashCode
    buckets 12, 11, 10, 9), which decides testMaxQuotaConsumerMoreThanNumExpectedMaxCapacity-
    Members below."""
    assert java_map_order([consumer1, consumer2, consumer3, consumer4]) == \
        [consumer4, consumer3, consumer2, consumer1]


# ---- AbstractStickyAssignorTest ------------------------------------------------------------

@pytest.mark.parametrize("name", BOTH)
def test_one_consumer_no_topic(name):
    """AbstractStickyAssignorTest.testOneConsumerNoTopic"""
    ppt, subs = {}, {consumer_id: sub([])}
    assignment = assign(name, ppt, subs)
    assert assignment == {consumer_id: []}
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_one_consumer_nonexistent_topic(name):
    """AbstractStickyAssignorTest.testOneConsumerNonexistentTopic"""
    ppt, subs = {topic: 0}, {consumer_id: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert assignment == {consumer_id: []}
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_one_consumer_one_topic(name):
    """AbstractStickyAssignorTest.testOneConsumerOneTopic"""
    ppt, subs = {topic: 3}, {consumer_id: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer_id] == parts(tp(topic, 0), tp(topic, 1), tp(topic, 2))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_only_assigns_partitions_from_subscribed_topics(name):
    """AbstractStickyAssignorTest.testOnlyAssignsPartitionsFromSubscribedTopics"""
    other = "other"
    ppt = {topic: 2}
    subs = {consumer_id: sub([topic], [tp(topic, 0), tp(topic, 1), tp(other, 0), tp(other, 1)])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer_id] == parts(tp(topic, 0), tp(topic, 1))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_one_consumer_multiple_topics(name):
    """AbstractStickyAssignorTest.testOneConsumerMultipleTopics"""
    ppt, subs = {topic1: 1, topic2: 2}, {consumer_id: sub([topic1, topic2])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer_id] == parts(tp(topic1, 0), tp(topic2, 0), tp(topic2, 1))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_two_consumers_one_topic_one_partition(name):
    """AbstractStickyAssignorTest.testTwoConsumersOneTopicOnePartition"""
    ppt = {topic: 1}
    subs = {consumer1: sub([topic]), consumer2: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_two_consumers_one_topic_two_partitions(name):
    """AbstractStickyAssignorTest.testTwoConsumersOneTopicTwoPartitions"""
    ppt = {topic: 2}
    subs = {consumer1: sub([topic]), consumer2: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic, 0))
    assert assignment[consumer2] == parts(tp(topic, 1))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_multiple_consumers_mixed_topic_subscriptions(name):
    """AbstractStickyAssignorTest.testMultipleConsumersMixedTopicSubscriptions"""
    ppt = {topic1: 3, topic2: 2}
    subs = {consumer1: sub([topic1]), consumer2: sub([topic1, topic2]),
            consumer3: sub([topic1])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic1, 0), tp(topic1, 2))
    assert assignment[consumer2] == parts(tp(topic2, 0), tp(topic2, 1))
    assert assignment[consumer3] == parts(tp(topic1, 1))
    assert transferring(ppt, subs) is None
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_two_consumers_two_topics_six_partitions(name):
    """AbstractStickyAssignorTest.testTwoConsumersTwoTopicsSixPartitions"""
    ppt = {topic1: 3, topic2: 3}
    subs = {consumer1: sub([topic1, topic2]), consumer2: sub([topic1, topic2])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic1, 0), tp(topic1, 2), tp(topic2, 1))
    assert assignment[consumer2] == parts(tp(topic1, 1), tp(topic2, 0), tp(topic2, 2))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_consumer_owning_min_quota_expected_max_quota(name):
    """AbstractStickyAssignorTest.testConsumerOwningMinQuotaExpectedMaxQuota"""
    ppt = {topic1: 2, topic2: 3}
    both = [topic1, topic2]
    subs = {consumer1: sub(both, [tp(topic1, 0), tp(topic2, 1)]),
            consumer2: sub(both, [tp(topic1, 1), tp(topic2, 2)])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic1, 0), tp(topic2, 1), tp(topic2, 0))
    assert assignment[consumer2] == parts(tp(topic1, 1), tp(topic2, 2))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_max_quota_consumer_more_than_num_expected_max_capacity_members(name):
    """AbstractStickyAssignorTest.testMaxQuotaConsumerMoreThanNumExpectedMaxCapacityMembers
    (consumer2 comes before consumer1 in Kafka's HashMap, so consumer2 keeps two)"""
    ppt = {topic1: 2, topic2: 2}
    both = [topic1, topic2]
    subs = {consumer1: sub(both, [tp(topic1, 0), tp(topic2, 0)]),
            consumer2: sub(both, [tp(topic1, 1), tp(topic2, 1)]),
            consumer3: sub(both)}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {tp(topic2, 0): consumer3}
    assignment = verify(name, ppt, subs, assignment)
    assert assignment[consumer1] == parts(tp(topic1, 0))
    assert assignment[consumer2] == parts(tp(topic1, 1), tp(topic2, 1))
    assert assignment[consumer3] == parts(tp(topic2, 0))
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_all_consumers_are_under_min_quota(name):
    """AbstractStickyAssignorTest.testAllConsumersAreUnderMinQuota"""
    ppt = {topic1: 2, topic2: 3}
    both = [topic1, topic2]
    subs = {consumer1: sub(both, [tp(topic1, 0)]), consumer2: sub(both, [tp(topic1, 1)]),
            consumer3: sub(both)}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert assignment[consumer1] == parts(tp(topic1, 0), tp(topic2, 1))
    assert assignment[consumer2] == parts(tp(topic1, 1), tp(topic2, 2))
    assert assignment[consumer3] == parts(tp(topic2, 0))
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_add_remove_consumer_one_topic(name):
    """AbstractStickyAssignorTest.testAddRemoveConsumerOneTopic"""
    ppt = {topic: 3}
    subs = {consumer1: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic, 0), tp(topic, 1), tp(topic, 2))
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)

    subs[consumer1] = sub([topic], assignment[consumer1])
    subs[consumer2] = sub([topic])
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {tp(topic, 2): consumer2}
    assignment = verify(name, ppt, subs, assignment)
    assert assignment[consumer1] == parts(tp(topic, 0), tp(topic, 1))
    assert assignment[consumer2] == parts(tp(topic, 2))
    assert is_fully_balanced(assignment)

    del subs[consumer1]
    subs[consumer2] = sub([topic], assignment[consumer2])
    assignment = assign(name, ppt, subs)
    assert set(assignment[consumer2]) == {tp(topic, 2), tp(topic, 1), tp(topic, 0)}
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_topic_balance_after_reassignment(name):
    """AbstractStickyAssignorTest.testTopicBalanceAfterReassignment"""
    all_topics = [topic1, topic2]
    ppt = {topic1: 12, topic2: 12}

    def per_topic(assignment, count):
        for tps in assignment.values():
            assert sum(p.topic == topic1 for p in tps) == count
            assert sum(p.topic == topic2 for p in tps) == count

    subs = {consumer1: sub(all_topics)}
    assignment = assign(name, ppt, subs)
    assignment = verify(name, ppt, subs, assignment)
    per_topic(assignment, 12)
    assert transferring(ppt, subs) == {}
    assert is_fully_balanced(assignment)

    subs[consumer1] = sub(all_topics, assignment[consumer1])
    subs[consumer2] = sub(all_topics)
    assignment = verify(name, ppt, subs, assign(name, ppt, subs))
    per_topic(assignment, 6)
    assert is_fully_balanced(assignment)

    subs[consumer1] = sub(all_topics, assignment[consumer1])
    subs[consumer2] = sub(all_topics, assignment[consumer2])
    subs[consumer3] = sub(all_topics)
    subs[consumer4] = sub(all_topics)
    assignment = verify(name, ppt, subs, assign(name, ppt, subs))
    per_topic(assignment, 3)
    assert is_fully_balanced(assignment)

    del subs[consumer1], subs[consumer2]
    subs[consumer3] = sub(all_topics, assignment[consumer3])
    subs[consumer4] = sub(all_topics, assignment[consumer4])
    assignment = assign(name, ppt, subs)
    moving = transferring(ppt, subs)
    assignment = verify(name, ppt, subs, assignment)
    per_topic(assignment, 6)
    assert moving == {}
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_add_remove_two_consumers_two_topics(name):
    """AbstractStickyAssignorTest.testAddRemoveTwoConsumersTwoTopics"""
    all_topics = [topic1, topic2]
    ppt = {topic1: 3, topic2: 4}
    subs = {consumer1: sub(all_topics), consumer2: sub(all_topics)}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic1, 0), tp(topic1, 2), tp(topic2, 1),
                                          tp(topic2, 3))
    assert assignment[consumer2] == parts(tp(topic1, 1), tp(topic2, 0), tp(topic2, 2))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)

    subs[consumer1] = sub(all_topics, assignment[consumer1])
    subs[consumer2] = sub(all_topics, assignment[consumer2])
    subs[consumer3] = sub(all_topics)
    subs[consumer4] = sub(all_topics)
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {tp(topic1, 2): consumer3, tp(topic2, 3): consumer3,
                                       tp(topic2, 2): consumer4}
    assignment = verify(name, ppt, subs, assignment)
    assert assignment[consumer1] == parts(tp(topic1, 0), tp(topic2, 1))
    assert assignment[consumer2] == parts(tp(topic2, 0), tp(topic1, 1))
    assert assignment[consumer3] == parts(tp(topic1, 2), tp(topic2, 3))
    assert assignment[consumer4] == parts(tp(topic2, 2))
    assert is_fully_balanced(assignment)

    del subs[consumer1], subs[consumer2]
    subs[consumer3] = sub(all_topics, assignment[consumer3])
    subs[consumer4] = sub(all_topics, assignment[consumer4])
    assignment = assign(name, ppt, subs)
    assert assignment[consumer3] == parts(tp(topic1, 2), tp(topic2, 3), tp(topic1, 0),
                                          tp(topic2, 1))
    assert assignment[consumer4] == parts(tp(topic2, 2), tp(topic1, 1), tp(topic2, 0))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_poor_round_robin_assignment_scenario(name):
    """AbstractStickyAssignorTest.testPoorRoundRobinAssignmentScenario"""
    ppt = {f"topic{i}": i % 2 + 1 for i in range(1, 6)}
    every = ["topic1", "topic2", "topic3", "topic4", "topic5"]
    odd = ["topic1", "topic3", "topic5"]
    subs = {"consumer1": sub(every), "consumer2": sub(odd), "consumer3": sub(odd),
            "consumer4": sub(every)}
    verify(name, ppt, subs, assign(name, ppt, subs))


@pytest.mark.parametrize("name", BOTH)
def test_add_remove_topic_two_consumers(name):
    """AbstractStickyAssignorTest.testAddRemoveTopicTwoConsumers"""
    ppt = {topic: 3}
    subs = {consumer1: sub([topic]), consumer2: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assert is_fully_balanced(assignment)
    assignment = verify(name, ppt, subs, assignment)
    first1, first2 = assignment[consumer1], assignment[consumer2]
    assert sorted([len(first1), len(first2)]) == [1, 2]

    ppt[topic2] = 3
    subs[consumer1] = sub([topic, topic2], assignment[consumer1])
    subs[consumer2] = sub([topic, topic2], assignment[consumer2])
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)
    second1, second2 = assignment[consumer1], assignment[consumer2]
    assert len(second1) == 3 and len(second2) == 3
    assert set(first1) <= set(second1) and set(first2) <= set(second2)

    del ppt[topic]
    subs[consumer1] = sub([topic2], assignment[consumer1])
    subs[consumer2] = sub([topic2], assignment[consumer2])
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)
    third1, third2 = assignment[consumer1], assignment[consumer2]
    assert sorted([len(third1), len(third2)]) == [1, 2]
    assert set(third1) <= set(second1) and set(third2) <= set(second2)


@pytest.mark.parametrize("leaving", ["consumer10", "c10"])
@pytest.mark.parametrize("name", BOTH)
def test_reassignment_after_one_consumer_leaves(name, leaving):
    """AbstractStickyAssignorTest.testReassignmentAfterOneConsumerLeaves. Kafka's test removes
    "consumer10", which is no member (they are c01..c19), so nobody leaves; it is ported as
    is, and once more with c10 leaving."""
    ppt = {name_of("t", i, 20): i for i in range(1, 20)}
    subs = {name_of("c", i, 20): sub([name_of("t", j, 20) for j in range(1, i + 1)])
            for i in range(1, 20)}
    assignment = verify(name, ppt, subs, assign(name, ppt, subs))

    for member in list(subs):
        subs[member] = sub(subs[member].topics, assignment[member])
    subs.pop(leaving, None)
    assignment = assign(name, ppt, subs)
    sticky = is_sticky(ppt, subs)
    verify(name, ppt, subs, assignment)
    assert sticky


@pytest.mark.parametrize("name", BOTH)
def test_reassignment_after_one_consumer_added(name):
    """AbstractStickyAssignorTest.testReassignmentAfterOneConsumerAdded"""
    ppt = {"topic": 20}
    subs = {name_of("c", i, 10): sub(["topic"]) for i in range(1, 10)}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    verify(name, ppt, subs, assignment)

    subs[name_of("c", 10, 10)] = sub(["topic"])   # Kafka's test passes no owned partitions
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    verify(name, ppt, subs, assignment)


@pytest.mark.parametrize("name", BOTH)
def test_same_subscriptions(name):
    """AbstractStickyAssignorTest.testSameSubscriptions"""
    ppt = {name_of("t", i, 15): i for i in range(1, 15)}
    subs = {name_of("c", i, 9): sub(list(ppt)) for i in range(1, 9)}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)

    for member in list(subs):
        subs[member] = sub(subs[member].topics, assignment[member])
    del subs[name_of("c", 5, 9)]
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    verify(name, ppt, subs, assignment)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", BOTH)
def test_large_assignment_with_multiple_consumers_leaving_and_random_subscription(name, seed):
    """AbstractStickyAssignorTest.testLargeAssignmentWithMultipleConsumersLeavingAndRandom-
    Subscription (Kafka's unseeded java.util.Random; seeded here)"""
    rng = random.Random(seed)
    topic_count, consumer_count = 40, 200
    ppt = {name_of("t", i, topic_count): rng.randrange(10) + 1 for i in range(topic_count)}
    subs = {}
    for i in range(consumer_count):
        topics = []
        j = 0
        while j < rng.randrange(20):   # Kafka draws the bound anew at each step, as here
            topics.append(name_of("t", rng.randrange(topic_count), topic_count))
            j += 1
        subs[name_of("c", i, consumer_count)] = sub(topics)
    assignment = verify(name, ppt, subs, assign(name, ppt, subs))

    for i in range(1, consumer_count):
        member = name_of("c", i, consumer_count)
        subs[member] = sub(subs[member].topics, assignment[member])
    for _ in range(50):
        subs.pop(name_of("c", rng.randrange(consumer_count), consumer_count), None)
    assignment = assign(name, ppt, subs)
    sticky = is_sticky(ppt, subs)
    verify(name, ppt, subs, assignment)
    assert sticky


@pytest.mark.parametrize("name", BOTH)
def test_new_subscription(name):
    """AbstractStickyAssignorTest.testNewSubscription"""
    ppt = {name_of("t", i, 5): 1 for i in range(1, 5)}
    subs = {name_of("c", i, 3): sub([name_of("t", j, 5) for j in range(i, 3 * i - 1)])
            for i in range(3)}
    verify(name, ppt, subs, assign(name, ppt, subs))

    c0 = name_of("c", 0, 3)
    subs[c0] = sub(list(subs[c0].topics) + [name_of("t", 1, 5)], subs[c0].owned_partitions)
    assignment = assign(name, ppt, subs)
    sticky = is_sticky(ppt, subs)
    verify(name, ppt, subs, assignment)
    assert sticky


@pytest.mark.parametrize("name", BOTH)
def test_move_existing_assignments(name):
    """AbstractStickyAssignorTest.testMoveExistingAssignments"""
    ppt = {f"topic{i}": 1 for i in range(1, 7)}
    subs = {consumer1: sub([topic1, topic2], [tp(topic1, 0)]),
            consumer2: sub([topic1, topic2, topic3, "topic4"], [tp(topic2, 0), tp(topic3, 0)]),
            consumer3: sub([topic2, topic3, "topic4", "topic5", "topic6"],
                           [tp("topic4", 0), tp("topic5", 0), tp("topic6", 0)])}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) is None
    verify(name, ppt, subs, assignment)


@pytest.mark.parametrize("name", BOTH)
def test_stickiness(name):
    """AbstractStickyAssignorTest.testStickiness"""
    ppt = {topic1: 3}
    subs = {c: sub([topic1]) for c in (consumer1, consumer2, consumer3, consumer4)}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert all(len(v) <= 1 for v in assignment.values())
    first = {c: v[0] for c, v in assignment.items() if v}

    del subs[consumer1]   # the potential group leader leaves
    for c in (consumer2, consumer3, consumer4):
        subs[c] = sub([topic1], assignment[c])
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    for c, v in assignment.items():
        assert len(v) == 1
        assert c not in first or first[c] in v, f"stickiness was not honored for {c}"


@pytest.mark.parametrize("name", BOTH)
def test_assignment_updated_for_deleted_topic(name):
    """AbstractStickyAssignorTest.testAssignmentUpdatedForDeletedTopic"""
    ppt = {topic1: 1, topic3: 100}
    subs = {consumer_id: sub([topic1, topic2, topic3])}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    assert sum(len(v) for v in assignment.values()) == 1 + 100
    assert list(assignment) == [consumer_id]
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_no_exception_thrown_when_only_subscribed_topic_deleted(name):
    """AbstractStickyAssignorTest.testNoExceptionThrownWhenOnlySubscribedTopicDeleted"""
    ppt = {topic: 3}
    subs = {consumer_id: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {}
    subs[consumer_id] = sub([topic], assignment[consumer_id])
    assignment = assign(name, {}, subs)
    assert transferring({}, subs) == {}
    assert assignment == {consumer_id: []}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("name", BOTH)
def test_reassignment_with_random_subscriptions_and_changes(name, seed):
    """AbstractStickyAssignorTest.testReassignmentWithRandomSubscriptionsAndChanges (Kafka
    runs 100 unseeded rounds; here 5 seeds of 4 rounds each)"""
    rng = random.Random(seed)

    def random_sublist(items):
        chosen = list(items)
        for _ in range(rng.randrange(len(items))):
            chosen.pop(rng.randrange(len(chosen)))
        return sorted(chosen)

    for _ in range(4):
        num_topics = 10 + rng.randrange(10)
        topics = [name_of("t", i, 20) for i in range(num_topics)]
        ppt = {t: i + 1 for i, t in enumerate(topics)}
        num_consumers = 20 + rng.randrange(20)
        subs = {name_of("c", i, 40): sub(random_sublist(topics)) for i in range(num_consumers)}
        assignment = verify(name, ppt, subs, assign(name, ppt, subs))

        subs = {name_of("c", i, 40): sub(random_sublist(topics),
                                         assignment[name_of("c", i, 40)])
                for i in range(num_consumers)}
        assignment = assign(name, ppt, subs)
        sticky = is_sticky(ppt, subs)
        verify(name, ppt, subs, assignment)
        assert sticky


@pytest.mark.parametrize("name", BOTH)
def test_all_consumers_reach_expected_quota_and_are_considered_filled(name):
    """AbstractStickyAssignorTest.testAllConsumersReachExpectedQuotaAndAreConsideredFilled"""
    ppt = {topic: 4}
    subs = {consumer1: sub([topic], [tp(topic, 0), tp(topic, 1)]),
            consumer2: sub([topic], [tp(topic, 2)]), consumer3: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic, 0), tp(topic, 1))
    assert assignment[consumer2] == parts(tp(topic, 2))
    assert assignment[consumer3] == parts(tp(topic, 3))
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_partitions_transferring_ownership_include_partition_claimed_by_multiple_consumers(
        name):
    """AbstractStickyAssignorTest.testPartitionsTransferringOwnershipIncludeThePartition-
    ClaimedByMultipleConsumersInSameGeneration"""
    ppt = {topic: 3}
    subs = {consumer1: sub([topic], [tp(topic, 0), tp(topic, 1)]),
            consumer2: sub([topic], [tp(topic, 0), tp(topic, 2)]),
            consumer3: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert transferring(ppt, subs) == {tp(topic, 0): consumer3}
    assignment = verify(name, ppt, subs, assignment)
    assert assignment[consumer1] == parts(tp(topic, 1))
    assert assignment[consumer2] == parts(tp(topic, 2))
    assert assignment[consumer3] == parts(tp(topic, 0))
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_no_reassignment_on_current_members(name):
    """AbstractStickyAssignorTest.testNoReassignmentOnCurrentMembers. Kafka gives the members
    different generations, but no two of them claim the same partition, so the generations
    decide nothing and the owned partitions alone give Kafka's result."""
    all_topics = [topic, topic2, topic3, topic1]
    ppt = {topic: 3, topic1: 3, topic2: 3, topic3: 3}
    subs = {consumer1: sub(all_topics),
            consumer2: sub(all_topics, [tp(topic, 0), tp(topic2, 0), tp(topic1, 0)]),
            consumer3: sub(all_topics, [tp(topic3, 2), tp(topic2, 2), tp(topic1, 1)]),
            consumer4: sub(all_topics, [tp(topic3, 1), tp(topic, 1), tp(topic, 2)])}
    assignment = assign(name, ppt, subs)
    assert set(assignment[consumer1]) == {tp(topic1, 2), tp(topic2, 1), tp(topic3, 0)}
    assert transferring(ppt, subs) == {}
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


UNIFORM_TOPICS = {"t1": 6, "t2": 7, "t3": 2}
UNIFORM_EXPECTED = ["t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0",
                    "t1-2, t1-5, t2-2, t2-5, t3-1"]
NON_EQUAL_EXPECTED = ["t1-5, t2-0, t2-2, t2-4, t2-6", "t1-3, t2-1, t2-3, t2-5, t3-0",
                      "t1-0, t1-1, t1-2, t1-4, t3-1"]


def verify_assignment(name, consumer_topics, owned, expected):
    """AbstractPartitionAssignorTest.verifyRackAssignment without racks: consumer0.. with
    these topics and owned partitions get exactly ``expected``."""
    subs = {f"consumer{i}": sub(topics, parse(owned[i]) if owned else ())
            for i, topics in enumerate(consumer_topics)}
    assert assign(name, UNIFORM_TOPICS, subs) == {
        f"consumer{i}": parse(e) for i, e in enumerate(expected)}


@pytest.mark.parametrize("name", BOTH)
def test_rack_aware_assignment_with_uniform_subscription(name):
    """AbstractStickyAssignorTest.testRackAwareAssignmentWithUniformSubscription: its
    non-rack-aware assignment, from scratch and with the members owning it already (Kafka's
    verifyUniformSubscription; "stickiness is retained when racks match")."""
    all_topics = ["t1", "t2", "t3"]
    consumer_topics = [all_topics] * 3
    verify_assignment(name, consumer_topics, None, UNIFORM_EXPECTED)
    verify_assignment(name, consumer_topics, UNIFORM_EXPECTED, UNIFORM_EXPECTED)


@pytest.mark.parametrize("name", BOTH)
def test_rack_aware_assignment_with_non_equal_subscription(name):
    """AbstractStickyAssignorTest.testRackAwareAssignmentWithNonEqualSubscription: its
    non-rack-aware assignment, from scratch and with the members owning it already (Kafka's
    verifyNonEqualSubscription)."""
    all_topics = ["t1", "t2", "t3"]
    consumer_topics = [all_topics, all_topics, ["t1", "t3"]]
    verify_assignment(name, consumer_topics, None, NON_EQUAL_EXPECTED)
    verify_assignment(name, consumer_topics, NON_EQUAL_EXPECTED, NON_EQUAL_EXPECTED)


def test_rack_aware_assignment_with_non_equal_subscription_cooperative_owned():
    """AbstractStickyAssignorTest.testRackAwareAssignmentWithNonEqualSubscription, the
    CooperativeStickyAssignor's run with misaligned owned partitions and racks that all match
    (preferRackAwareLogic false, so not rack-aware): first the partitions that stay, then,
    once the others are revoked, the final assignment."""
    all_topics = ["t1", "t2", "t3"]
    consumer_topics = [all_topics, all_topics, ["t1", "t3"]]
    owned = ["t1-0, t1-1, t1-2, t1-3, t1-4", "t1-5, t2-0, t2-1, t2-2, t2-3",
             "t2-4, t2-5, t2-6, t3-0, t3-1"]
    intermediate = ["t1-2, t1-3, t1-4", "t2-0, t2-1, t2-2, t2-3", "t3-0, t3-1"]
    final = ["t1-2, t1-3, t1-4, t2-4, t2-5", "t2-0, t2-1, t2-2, t2-3, t2-6",
             "t1-0, t1-1, t1-5, t3-0, t3-1"]
    verify_assignment("cooperative-sticky", consumer_topics, owned, intermediate)
    verify_assignment("cooperative-sticky", consumer_topics, intermediate, final)


# ---- StickyAssignorTest and CooperativeStickyAssignorTest ---------------------------------

@pytest.mark.parametrize("name, consumer3_gets", [("sticky", [tp(topic, 0)]),
                                                  ("cooperative-sticky", [])])
def test_owned_partition_invalidated_when_claimed_by_multiple_consumers_equal_partitions(
        name, consumer3_gets):
    """StickyAssignorTest and CooperativeStickyAssignorTest.testAllConsumersHaveOwned-
    PartitionInvalidatedWhenClaimedByMultipleConsumersInSameGenerationWithEqualPartitionsPer-
    Consumer (the cooperative assignor leaves topic-0 out until both claimants revoke it)"""
    ppt = {topic: 3}
    subs = {consumer1: sub([topic], [tp(topic, 0), tp(topic, 1)]),
            consumer2: sub([topic], [tp(topic, 0), tp(topic, 2)]),
            consumer3: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic, 1))
    assert assignment[consumer2] == parts(tp(topic, 2))
    assert assignment[consumer3] == consumer3_gets
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name, consumer3_gets", [("sticky", [tp(topic, 0)]),
                                                  ("cooperative-sticky", [])])
def test_owned_partition_invalidated_when_claimed_by_multiple_consumers_unequal_partitions(
        name, consumer3_gets):
    """StickyAssignorTest and CooperativeStickyAssignorTest.testAllConsumersHaveOwned-
    PartitionInvalidatedWhenClaimedByMultipleConsumersInSameGenerationWithUnequalPartitions-
    PerConsumer"""
    ppt = {topic: 4}
    subs = {consumer1: sub([topic], [tp(topic, 0), tp(topic, 1)]),
            consumer2: sub([topic], [tp(topic, 0), tp(topic, 2)]),
            consumer3: sub([topic])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic, 1), tp(topic, 3))
    assert assignment[consumer2] == parts(tp(topic, 2))
    assert assignment[consumer3] == consumer3_gets
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)


def test_schema_backward_compatibility():
    """StickyAssignorTest.testSchemaBackwardCompatibility (consumer2's owned partitions come in
    the old user-data schema, without a generation; no partition is claimed twice, so the
    generations decide nothing)"""
    ppt = {topic: 3}
    c1_owned, c2_owned = [tp(topic, 0), tp(topic, 2)], [tp(topic, 1)]
    subs = {consumer1: sub([topic], c1_owned), consumer2: sub([topic], c2_owned),
            consumer3: sub([topic])}
    assignment = assign("sticky", ppt, subs)
    assert [len(assignment[c]) for c in (consumer1, consumer2, consumer3)] == [1, 1, 1]
    assert set(assignment[consumer1]) <= set(c1_owned)
    assert set(assignment[consumer2]) <= set(c2_owned)
    assignment = verify("sticky", ppt, subs, assignment)
    assert is_fully_balanced(assignment)


@pytest.mark.parametrize("name", BOTH)
def test_assignor_with_old_version_subscriptions(name):
    """StickyAssignorTest and CooperativeStickyAssignorTest.testAssignorWithOldVersion-
    Subscriptions"""
    ppt = {topic1: 3}
    subs = {consumer1: sub([topic1], [tp(topic1, 0)]), consumer2: sub([topic1], [tp(topic1, 1)]),
            consumer3: sub([topic1])}
    assignment = assign(name, ppt, subs)
    assert assignment[consumer1] == parts(tp(topic1, 0))
    assert assignment[consumer2] == parts(tp(topic1, 1))
    assert assignment[consumer3] == parts(tp(topic1, 2))
    assignment = verify(name, ppt, subs, assignment)
    assert is_fully_balanced(assignment)
