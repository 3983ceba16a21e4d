"""The consumer group's partition assignors, with Kafka's names and behaviour (pure: the
group leader runs one on the members' subscriptions and hands the result to SyncGroup).

    assignor_for("range").assign({"t": 5}, {"c1": Subscription(["t"]), ...})
        -> {"c1": [TopicPartition("t", 0), TopicPartition("t", 1)], ...}

Members are ordered as Kafka orders them: static members (``group_instance_id``) first, by
instance id, then the others by member id.

- ``range`` (the default): per topic, the subscribed members in order each take a contiguous
  range; the first ``partitions % members`` take one more.
- ``roundrobin``: all partitions sorted by topic and number, dealt out in turn to the members
  (skipping a member not subscribed to the partition's topic).
- ``sticky``: Kafka's AbstractStickyAssignor (see :mod:`protocols.sticky_assignor`): as
  balanced as possible (member counts differ by at most one where subscriptions allow),
  keeping as many of each member's owned partitions as it can. It orders members by member id
  (not instance id), and where Kafka walks a Java HashMap of members, in that map's order.
- ``cooperative-sticky``: the sticky assignment, except that a partition another member still
  owns is left out for now: its owner revokes it, and the follow-up rebalance assigns it
  (incremental cooperative rebalancing, KIP-429).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from protocols.errors import InvalidConfigError
from protocols.sticky_assignor import cooperative_assignment, sticky_assign
from protocols.topics import TopicPartition

__all__ = ["Subscription", "TopicPartition", "PartitionAssignor", "RangeAssignor",
           "RoundRobinAssignor", "StickyAssignor", "CooperativeStickyAssignor",
           "assignor_for", "ASSIGNORS"]


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    group_instance_id: str | None = None

    def __init__(self, topics: Iterable[str], owned_partitions: Iterable = (),
                 group_instance_id: str | None = None):
        object.__setattr__(self, "topics", tuple(topics))
        object.__setattr__(self, "owned_partitions",
                           tuple(TopicPartition(*tp) for tp in owned_partitions))
        object.__setattr__(self, "group_instance_id", group_instance_id or None)


Assignment = dict[str, list[TopicPartition]]


def member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Kafka's MemberInfo order: static members by instance id, then dynamic ones by id."""
    def key(member_id: str):
        instance = subscriptions[member_id].group_instance_id
        return (0, instance, member_id) if instance is not None else (1, member_id, "")
    return sorted(subscriptions, key=key)


def _subscribed_topics(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted({t for s in subscriptions.values() for t in s.topics})


def _partitions(partitions_per_topic: Mapping[str, int], topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(partitions_per_topic.get(topic, 0))]


class PartitionAssignor:
    name = ""
    rebalance_protocol = "EAGER"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> Assignment:
        raise NotImplementedError


class RangeAssignor(PartitionAssignor):
    name = "range"

    def assign(self, partitions_per_topic, subscriptions):
        out: Assignment = {m: [] for m in subscriptions}
        order = member_order(subscriptions)
        for topic in _subscribed_topics(subscriptions):
            members = [m for m in order if topic in subscriptions[m].topics]
            partitions = _partitions(partitions_per_topic, topic)
            per_member, extra = divmod(len(partitions), len(members))
            for i, member in enumerate(members):
                start = i * per_member + min(i, extra)
                out[member] += partitions[start:start + per_member + (1 if i < extra else 0)]
        return out


class RoundRobinAssignor(PartitionAssignor):
    name = "roundrobin"

    def assign(self, partitions_per_topic, subscriptions):
        out: Assignment = {m: [] for m in subscriptions}
        order = member_order(subscriptions)
        turn = 0
        for topic in _subscribed_topics(subscriptions):
            for tp in _partitions(partitions_per_topic, topic):
                # The next member in the circle that subscribes to this topic.
                while topic not in subscriptions[order[turn % len(order)]].topics:
                    turn += 1
                out[order[turn % len(order)]].append(tp)
                turn += 1
        return out


class StickyAssignor(PartitionAssignor):
    name = "sticky"

    def assign(self, partitions_per_topic, subscriptions):
        result = sticky_assign(partitions_per_topic, subscriptions)
        return {m: sorted(result.assignment[m]) for m in subscriptions}


class CooperativeStickyAssignor(StickyAssignor):
    name = "cooperative-sticky"
    rebalance_protocol = "COOPERATIVE"

    def assign(self, partitions_per_topic, subscriptions):
        result = sticky_assign(partitions_per_topic, subscriptions)
        # A partition moving between members is given to nobody this round: its owner
        # revokes it first, then a follow-up rebalance hands it to the new member.
        assignment = cooperative_assignment(result, subscriptions)
        return {m: sorted(assignment[m]) for m in subscriptions}


ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
    "org.apache.kafka.clients.consumer.RangeAssignor": RangeAssignor,
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": RoundRobinAssignor,
    "org.apache.kafka.clients.consumer.StickyAssignor": StickyAssignor,
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": CooperativeStickyAssignor,
}


def assignor_for(name: str) -> PartitionAssignor:
    """The assignor for a ``partition.assignment.strategy`` entry (short or class name)."""
    try:
        return ASSIGNORS[name.strip()]()
    except KeyError:
        raise InvalidConfigError(
            f"Unknown partition.assignment.strategy {name!r}; known: range, roundrobin, "
            "sticky, cooperative-sticky (or Kafka's class names)") from None
