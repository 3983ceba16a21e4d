"""Kafka's controller partition and replica state machines: the states and their legal moves.

``ControllerState`` moves every partition and replica through these; an illegal move is a bug
in the controller, so it raises at once rather than corrupting the metadata.
"""
from __future__ import annotations

from enum import Enum
from typing import Generic, Hashable, TypeVar


class PartitionStatus(str, Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


class ReplicaStatus(str, Enum):
    NON_EXISTENT = "NonExistentReplica"
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"


P, R = PartitionStatus, ReplicaStatus

PARTITION_PREVIOUS: dict[PartitionStatus, frozenset] = {
    P.NEW: frozenset({P.NON_EXISTENT}),
    P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.NON_EXISTENT: frozenset({P.OFFLINE}),
}

REPLICA_PREVIOUS: dict[ReplicaStatus, frozenset] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.DELETION_STARTED: frozenset({R.OFFLINE}),
    R.DELETION_SUCCESSFUL: frozenset({R.DELETION_STARTED}),
    R.DELETION_INELIGIBLE: frozenset({R.OFFLINE, R.DELETION_STARTED}),
    R.NON_EXISTENT: frozenset({R.DELETION_SUCCESSFUL}),
}


class IllegalStateTransitionError(RuntimeError):
    """A controller bug: a move its state machine does not allow (Kafka's
    IllegalStateException)."""


K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Enum)


class StateMachine(Generic[K, S]):
    def __init__(self, kind: str, previous: dict, initial: S):
        self.kind = kind
        self.previous = previous
        self.initial = initial
        self.states: dict[K, S] = {}

    def state(self, key: K) -> S:
        return self.states.get(key, self.initial)

    def move(self, key: K, target: S) -> None:
        current = self.state(key)
        if current not in self.previous[target]:
            raise IllegalStateTransitionError(
                f"{self.kind} {key} cannot move from {current.value} to {target.value}; "
                f"it must be in one of {sorted(s.value for s in self.previous[target])}")
        if target == self.initial:
            self.states.pop(key, None)
        else:
            self.states[key] = target

    def in_state(self, target: S) -> list[K]:
        return [k for k, s in self.states.items() if s == target]
