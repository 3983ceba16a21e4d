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
- ``sticky``: as balanced as possible (member counts differ by at most one where
  subscriptions allow), keeping as many of each member's owned partitions as it can.
- ``cooperative-sticky``: the sticky assignment, except that a partition another member still
  owns is left out for now: its owner revokes it, and the follow-up rebalance assigns it
  (incremental cooperative rebalancing, KIP-429).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from protocols.errors import InvalidConfigError
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
        order = member_order(subscriptions)
        rank = {m: i for i, m in enumerate(order)}
        all_partitions = [tp for t in _subscribed_topics(subscriptions)
                          for tp in _partitions(partitions_per_topic, t)]
        eligible = {tp: [m for m in order if tp.topic in subscriptions[m].topics]
                    for tp in all_partitions}
        # What each member may keep: partitions it owns that still exist, that it still
        # subscribes to, and that no member earlier in the order also claims.
        out: Assignment = {m: [] for m in order}
        owner: dict[TopicPartition, str] = {}
        for m in order:
            for tp in subscriptions[m].owned_partitions:
                if tp in eligible and m in eligible[tp] and tp not in owner:
                    owner[tp] = m
                    out[m].append(tp)
        # With the same subscriptions everywhere the quotas are exact: each member keeps at
        # most ceil(P / M), and only P % M members may hold that many.
        total, members = len(all_partitions), len(order)
        uniform = len({frozenset(subscriptions[m].topics) for m in order}) == 1
        if uniform and members:
            low, high_slots = divmod(total, members)
            for m in sorted(order, key=lambda m: (-len(out[m]), rank[m])):
                keep = low + 1 if high_slots and len(out[m]) > low else low
                if keep > low:
                    high_slots -= 1
                for tp in out[m][keep:]:
                    del owner[tp]
                out[m] = out[m][:keep]
        # Unowned partitions go, in order, to the eligible member holding the fewest.
        for tp in all_partitions:
            if tp not in owner and eligible[tp]:
                m = min(eligible[tp], key=lambda m: (len(out[m]), rank[m]))
                out[m].append(tp)
                owner[tp] = m
        # Then move partitions from members with two or more above an eligible member until
        # no such move is left (needed when subscriptions differ).
        moved = True
        while moved:
            moved = False
            for tp in reversed(all_partitions):
                src = owner.get(tp)
                if src is None:
                    continue
                dst = min(eligible[tp], key=lambda m: (len(out[m]), rank[m]))
                if len(out[src]) - len(out[dst]) >= 2:
                    out[src].remove(tp)
                    out[dst].append(tp)
                    owner[tp] = dst
                    moved = True
        return {m: sorted(tps) for m, tps in out.items()}


class CooperativeStickyAssignor(StickyAssignor):
    name = "cooperative-sticky"
    rebalance_protocol = "COOPERATIVE"

    def assign(self, partitions_per_topic, subscriptions):
        target = super().assign(partitions_per_topic, subscriptions)
        owned_by = {tp: m for m, s in subscriptions.items() for tp in s.owned_partitions}
        # A partition moving between members is given to nobody this round: its owner
        # revokes it first, then a follow-up rebalance hands it to the new member.
        return {m: [tp for tp in tps if owned_by.get(tp, m) == m]
                for m, tps in target.items()}


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
