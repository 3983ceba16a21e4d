"""Kafka's sticky assignment (``AbstractStickyAssignor``, without rack awareness), used by the
``sticky`` and ``cooperative-sticky`` assignors in :mod:`protocols.assignors`.

    sticky_assign({"t": 3}, {"c1": Subscription(["t"], [("t", 0)]), "c2": Subscription(["t"])})
        -> StickyResult(assignment={"c1": [t-0, t-2], "c2": [t-1]}, transferring={}, ...)

First each member's owned partitions are read: those of topics that no longer exist are dropped,
and a partition two members both claim is taken from both (Kafka does so for claims of the same
generation; rafka's subscriptions carry no generation, so every claim counts as the same one).
Then one of Kafka's two algorithms runs:

- every member subscribes to the same topics (the *constrained* algorithm): with P partitions
  and M members each member gets ``P // M`` or ``P // M + 1`` and only ``P % M`` members get the
  larger count. In turn, each member keeps its owned partitions (sorted by partition number,
  then topic) up to its quota (the larger one while members with the larger count are still
  wanted); the partitions left over, in topic and partition order, are dealt round-robin to
  the members below the smaller quota (sorted by member id), then one each to members at it.
- otherwise (the *general* algorithm): owned partitions of topics the member still subscribes
  to are kept; every other partition, topics with the fewest subscribers first, goes to the
  least-loaded subscribed member (ties by member id); then, while a member holds two or more
  partitions more than another subscriber of one of its topics, partitions move to the
  least-loaded subscriber (undoing an earlier move between the same two members where there
  is one), and the moves are dropped again if they did not improve the balance score (the sum
  of the count differences over all pairs of members).

Where Kafka iterates a ``java.util.HashMap`` of members (which members keep the larger quota in
the constrained algorithm) the same order is used here: by hash bucket of the member id's
``String.hashCode()``, ties in the order the subscriptions were given (see ``java_map_order``).

Two deliberate differences from Kafka, both for input Kafka's own clients do not send: a member
with an empty subscription makes the subscriptions unequal (Kafka skips it when it comes first
in its map, and then gives it partitions of topics it did not subscribe to), and an owned
partition numbered beyond its topic's partition count is ignored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Mapping

from protocols.topics import TopicPartition
from protocols.java_hash import java_string_hash

__all__ = ["StickyResult", "sticky_assign", "cooperative_assignment",
           "java_map_order"]

Assignment = dict[str, list[TopicPartition]]


@dataclass
class StickyResult:
    assignment: Assignment
    # Kafka's partitionsTransferringOwnership: partitions given to a member other than the one
    # that owned them (None after the general algorithm: the cooperative assignor then works it
    # out from the owned partitions).
    transferring: dict[TopicPartition, str] | None
    # Kafka's isSticky(): no partition of a topic moved from a to b while another moved from
    # b to a during the general algorithm's balancing.
    is_sticky: bool = True


# ---- Java's hash iteration order -----------------------------------------------------------

def _topic_partition_hash(tp: TopicPartition) -> int:
    """Kafka's ``TopicPartition.hashCode()``."""
    return (31 * (31 + tp.partition) + java_string_hash(tp.topic)) & 0xFFFFFFFF


def _bucket(h: int, capacity: int) -> int:
    return (h ^ (h >> 16)) & (capacity - 1)


def _grown_capacity(size: int, capacity: int = 16) -> int:
    """A HashMap's table size once it holds ``size`` entries (it doubles past 3/4 full)."""
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def java_map_order(keys: Iterable[str]) -> list[str]:
    """The order a ``new HashMap<>()`` given these string keys, in this order, iterates them:
    by bucket, and within a bucket in insertion order."""
    keys = list(keys)
    capacity = _grown_capacity(len(keys))
    return sorted(keys, key=lambda k: _bucket(java_string_hash(k), capacity))


class _JavaHashSet:
    """A set that knows which element a ``java.util.HashSet``'s iterator would give first
    (bins Java turns into trees, eight or more elements in one bucket, are not modelled)."""

    def __init__(self, hash_of: Callable[[Hashable], int]):
        self._items: dict = {}          # insertion order, as within a bucket
        self._capacity = 16
        self._hash_of = hash_of

    def add(self, item) -> None:
        if item not in self._items:
            self._items[item] = None
            self._capacity = _grown_capacity(len(self._items), self._capacity)

    def discard(self, item) -> None:
        self._items.pop(item, None)

    def __len__(self) -> int:
        return len(self._items)

    def first(self):
        return min(self._items, key=lambda x: _bucket(self._hash_of(x), self._capacity))


# ---- reading the subscriptions --------------------------------------------------------------

def _owned_partitions(partitions_per_topic: Mapping[str, int], members: list[str],
                      subscriptions: Mapping) -> tuple[dict[str, list[TopicPartition]],
                                                       set[TopicPartition]]:
    """Each member's still-existing owned partitions, without those several members claim
    (Kafka's allSubscriptionsEqual with every member in the same generation); and the set of
    partitions claimed more than once."""
    owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    claimed_by: dict[TopicPartition, str] = {}
    multiply_claimed: set[TopicPartition] = set()
    for member in members:
        for tp in subscriptions[member].owned_partitions:
            if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                continue
            other = claimed_by.get(tp)
            if other is None:
                owned[member].append(tp)
            else:
                multiply_claimed.add(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
            claimed_by[tp] = member
    return owned, multiply_claimed


def sticky_assign(partitions_per_topic: Mapping[str, int],
                  subscriptions: Mapping) -> StickyResult:
    """Kafka's AbstractStickyAssignor.assign for ``{member: Subscription}``."""
    if not subscriptions:
        return StickyResult({}, {})
    members = java_map_order(subscriptions)
    topics = {t for s in subscriptions.values() for t in s.topics}
    counts = {t: n for t, n in partitions_per_topic.items() if t in topics}
    owned, multiply_claimed = _owned_partitions(counts, members, subscriptions)
    if len({frozenset(s.topics) for s in subscriptions.values()}) == 1:
        assignment, transferring = _constrained_assign(counts, owned, multiply_claimed)
        return StickyResult(assignment, transferring)
    general = _GeneralAssignment(counts, subscriptions, owned)
    return StickyResult(general.build(), None, general.movements.is_sticky())


def cooperative_assignment(result: StickyResult, subscriptions: Mapping) -> Assignment:
    """CooperativeStickyAssignor: the sticky assignment without the partitions that move from
    one member to another (their owner revokes them first; a follow-up rebalance assigns
    them)."""
    assignment = {m: list(tps) for m, tps in result.assignment.items()}
    transferring = result.transferring
    if transferring is None:
        added: dict[TopicPartition, str] = {}
        revoked: set[TopicPartition] = set()
        for member, assigned in assignment.items():
            owned = set(subscriptions[member].owned_partitions)
            added.update((tp, member) for tp in assigned if tp not in owned)
            revoked.update(owned - set(assigned))
        transferring = {tp: m for tp, m in added.items() if tp in revoked}
    for tp, member in transferring.items():
        assignment[member].remove(tp)
    return assignment


# ---- every member subscribes to the same topics --------------------------------------------

def _constrained_assign(partitions_per_topic: Mapping[str, int],
                        owned: dict[str, list[TopicPartition]],
                        multiply_claimed: set[TopicPartition]
                        ) -> tuple[Assignment, dict[TopicPartition, str]]:
    """Kafka's ConstrainedAssignmentBuilder; ``owned`` is iterated in its (Java map) order."""
    total = sum(partitions_per_topic.values())
    min_quota, expected_over_min = divmod(total, len(owned))
    max_quota = min_quota + (1 if expected_over_min else 0)
    over_min = 0                       # members given max_quota (when it exceeds min_quota)
    assignment: Assignment = {m: [] for m in owned}
    under_min: list[str] = []          # members that still need partitions to reach min_quota
    at_min: list[str] = []             # members at min_quota that may still get one more
    maybe_revoked: dict[TopicPartition, str] = {}
    transferring: dict[TopicPartition, str] = {}

    # 1. Each member keeps its owned partitions, up to its quota.
    for member, claimed in owned.items():
        mine = sorted((tp for tp in claimed if tp not in multiply_claimed),
                      key=lambda tp: (tp.partition, tp.topic))
        if len(mine) < min_quota:
            keep = len(mine)
            under_min.append(member)
        elif len(mine) >= max_quota and over_min < expected_over_min:
            keep = max_quota
            over_min += 1
            if over_min == expected_over_min:
                at_min.clear()
        else:
            keep = min_quota
            if over_min < expected_over_min:
                at_min.append(member)
        assignment[member].extend(mine[:keep])
        maybe_revoked.update((tp, member) for tp in mine[keep:])

    # 2. The rest, in topic and partition order, round-robin to the members under min_quota,
    # then one each to members at min_quota while members with max_quota are still wanted.
    assigned = {tp for tps in assignment.values() for tp in tps}
    unassigned = [TopicPartition(t, p) for t in sorted(partitions_per_topic)
                  for p in range(partitions_per_topic[t])
                  if TopicPartition(t, p) not in assigned]
    under_min.sort()
    at_min.sort()
    cursor = 0                         # Kafka's iterator over under_min
    for tp in unassigned:
        if cursor < len(under_min):
            member = under_min[cursor]
            cursor += 1
        elif not under_min and not at_min:
            raise RuntimeError(f"sticky assignment: no member left for {tp}")
        elif not under_min:
            member = at_min.pop(0)
        else:
            member = under_min[0]
            cursor = 1
        assignment[member].append(tp)
        if maybe_revoked.get(tp, member) != member or tp in multiply_claimed:
            transferring[tp] = member
        count = len(assignment[member])
        if count == min_quota:
            cursor -= 1
            del under_min[cursor]
            at_min.append(member)
        elif count == max_quota:
            over_min += 1

    # 3. Members still under min_quota are an error unless they hold exactly min_quota.
    if under_min and (over_min != expected_over_min
                      or any(len(assignment[m]) != min_quota for m in under_min)):
        raise RuntimeError("sticky assignment: members left below their quota: "
                           f"{sorted(under_min)}")
    return assignment, transferring


# ---- members subscribe to different topics ------------------------------------------------

class _PartitionMovements:
    """Kafka's PartitionMovements: each moved partition's first owner and current owner, per
    topic, so that a move can undo an earlier one between the same two members."""

    def __init__(self):
        self._moves: dict[TopicPartition, tuple[str, str]] = {}
        self._by_topic: dict[str, dict[tuple[str, str], _JavaHashSet]] = {}

    def _remove(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self._moves.pop(tp)
        pairs = self._by_topic[tp.topic]
        pairs[pair].discard(tp)
        if not len(pairs[pair]):
            del pairs[pair]
        if not pairs:
            del self._by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self._moves[tp] = pair
        self._by_topic.setdefault(tp.topic, {}).setdefault(
            pair, _JavaHashSet(_topic_partition_hash)).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self._moves:
            first_owner, _ = self._remove(tp)
            if first_owner != new:
                self._add(tp, (first_owner, new))
        else:
            self._add(tp, (old, new))

    def partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """The partition to move instead of ``tp`` from ``old`` to ``new``: one of the same
        topic that earlier moved from ``new`` to (``tp``'s first owner), if any."""
        pairs = self._by_topic.get(tp.topic)
        if not pairs:
            return tp
        if tp in self._moves:
            old = self._moves[tp][0]
        reverse = pairs.get((new, old))
        return reverse.first() if reverse else tp

    def is_sticky(self) -> bool:
        return not any((dst, src) in pairs
                       for pairs in self._by_topic.values() for src, dst in pairs)


class _GeneralAssignment:
    """Kafka's GeneralAssignmentBuilder."""

    def __init__(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping,
                 owned: dict[str, list[TopicPartition]]):
        self.counts = dict(partitions_per_topic)
        self.members = list(owned)
        self.member_topics = {m: [t for t in dict.fromkeys(subscriptions[m].topics)
                                  if t in self.counts] for m in self.members}
        self.topic_members = {t: [m for m in self.members if t in self.member_topics[m]]
                              for t in self.counts}
        self.current: Assignment = {m: list(tps) for m, tps in owned.items()}
        self.owner: dict[TopicPartition, str] = {tp: m for m, tps in owned.items()
                                                 for tp in tps}
        topics = sorted(self.counts, key=lambda t: (len(self.topic_members[t]), t))
        self.sorted_partitions = [TopicPartition(t, p) for t in topics
                                  for p in range(self.counts[t])]
        self.movements = _PartitionMovements()
        self.revocation_required = False

    def build(self) -> Assignment:
        # Owned partitions of topics the member no longer subscribes to are revoked.
        for member, tps in self.current.items():
            for tp in list(tps):
                if tp.topic not in self.member_topics[member]:
                    tps.remove(tp)
                    del self.owner[tp]
                    self.revocation_required = True
        unassigned = [tp for tp in self.sorted_partitions if tp not in self.owner]
        self._balance(unassigned)
        return self.current

    def _least_loaded(self, topic: str) -> str | None:
        """The member (of those taking part) with the fewest partitions, then the lowest id,
        among those subscribed to ``topic``."""
        candidates = [m for m in self.current if topic in self.member_topics[m]]
        return min(candidates, key=lambda m: (len(self.current[m]), m), default=None)

    def _max_size(self, member: str) -> int:
        return sum(self.counts[t] for t in self.member_topics[member])

    def _can_participate(self, member: str) -> bool:
        tps = self.current[member]
        return (len(tps) < self._max_size(member)
                or any(len(self.topic_members[tp.topic]) >= 2 for tp in tps))

    def _balance(self, unassigned: list[TopicPartition]) -> None:
        initializing = not any(self.current.values())
        for tp in unassigned:
            member = self._least_loaded(tp.topic)
            if member is not None:
                self.current[member].append(tp)
                self.owner[tp] = member

        # Only partitions of topics with two or more subscribers, and members that could
        # take or give one, take part in the rebalancing.
        fixed_topics = {t for t, ms in self.topic_members.items() if len(ms) < 2}
        self.sorted_partitions = [tp for tp in self.sorted_partitions
                                  if tp.topic not in fixed_topics]
        unassigned = [tp for tp in unassigned if tp.topic not in fixed_topics]
        fixed = {m: self.current.pop(m) for m in list(self.current)
                 if not self._can_participate(m)}

        before = {m: list(tps) for m, tps in self.current.items()}
        owner_before = dict(self.owner)
        if not self.revocation_required:   # first try moving only the newly assigned ones
            self._reassign_all(unassigned)
        reassigned = self._reassign_all(self.sorted_partitions)
        if (not initializing and reassigned
                and _balance_score(self.current) >= _balance_score(before)):
            self.current, self.owner = before, owner_before
        self.current.update(fixed)

    def _reassign_all(self, partitions: list[TopicPartition]) -> bool:
        reassigned = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                size = len(self.current[self.owner[tp]])
                if any(size > len(self.current[other]) + 1
                       for other in self.topic_members[tp.topic] if other in self.current):
                    self._reassign(tp, self._least_loaded(tp.topic))
                    reassigned = modified = True
        return reassigned

    def _reassign(self, tp: TopicPartition, new: str) -> None:
        tp = self.movements.partition_to_move(tp, self.owner[tp], new)
        old = self.owner[tp]
        self.movements.move(tp, old, new)
        self.current[old].remove(tp)
        self.current[new].append(tp)
        self.owner[tp] = new

    def _is_balanced(self) -> bool:
        sizes = [len(tps) for tps in self.current.values()]
        if not sizes or min(sizes) >= max(sizes) - 1:
            return True
        owner = {tp: m for m, tps in self.current.items() for tp in tps}
        for member, tps in self.current.items():
            if len(tps) == self._max_size(member):
                continue
            mine = set(tps)
            for topic in self.member_topics[member]:
                for p in range(self.counts[topic]):
                    tp = TopicPartition(topic, p)
                    other = owner.get(tp)
                    if (tp not in mine and other is not None
                            and len(tps) + 1 < len(self.current[other])):
                        return False
        return True


def _balance_score(assignment: Assignment) -> int:
    sizes = [len(tps) for tps in assignment.values()]
    return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1:])
