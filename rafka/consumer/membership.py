"""A consumer's membership in its group, pure (Kafka's AbstractCoordinator: its MemberState,
generation and the rejoin and lost flags around them). No Ray, no threads: the consumer's
coordinator (``rafka.consumer.coordinator``) owns one, guarded by its lock, and feeds it
what happens: requests sent, answers, errors, heartbeats, leaving.

States (Kafka's MemberState):

- ``UNJOINED``: no generation (the first time, or after an error reset it);
- ``PREPARING_REBALANCE``: a JoinGroup is in flight;
- ``COMPLETING_REBALANCE``: joined a generation, the SyncGroup is in flight;
- ``STABLE``: the generation runs and this member holds its assignment.

Beside the state: ``rejoin_needed`` (a stable member must rejoin: the coordinator said the
group rebalances, the subscription or the topics changed, a cooperative rebalance needs a
follow-up), ``partitions_lost`` (the member was fenced or expelled while owning partitions:
the next rebalance drops them without committing, Kafka's onPartitionsLost), and whether
this rebalance's revocation is done (it runs once per rebalance, before the first JoinGroup).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from protocols.errors import (FencedInstanceIdError, IllegalGenerationError, KafkaError,
                              RebalanceInProgressError, UnknownMemberIdError)
from rafka.client.coordinator_client import COORDINATOR_MOVED, RETRY_SAME


class MemberState(Enum):
    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"


class Next(Enum):
    """What the consumer does after a JoinGroup or SyncGroup error."""
    FIND_COORDINATOR = "find the coordinator again, after a backoff"
    BACK_OFF = "retry after a backoff"
    REJOIN = "rejoin now"


@dataclass
class Membership:
    member_id: str = ""
    generation: int = -1
    state: MemberState = MemberState.UNJOINED
    rejoin_needed: bool = True
    partitions_lost: bool = False
    _prepared: bool = False

    # ---- questions -------------------------------------------------------------------------
    def needs_rejoin(self) -> bool:
        return self.rejoin_needed or self.state is not MemberState.STABLE

    def in_group(self) -> bool:
        """Holds a generation or a member id: leaving means telling the coordinator."""
        return self.state is MemberState.STABLE or bool(self.member_id)

    def heartbeat_target(self) -> tuple[str, int] | None:
        """(member id, generation) to heartbeat as; None unless stable."""
        if self.state is not MemberState.STABLE:
            return None
        return self.member_id, self.generation

    # ---- the rebalance ---------------------------------------------------------------------
    def request_rejoin(self) -> None:
        self.rejoin_needed = True

    def begin_rebalance(self) -> bool | None:
        """Before this rebalance's first JoinGroup: None when its revocation already ran;
        else whether the partitions were lost (drop them) rather than to be revoked."""
        if self._prepared:
            return None
        self._prepared = True
        lost, self.partitions_lost = self.partitions_lost, False
        return lost

    def join_sent(self) -> None:
        self.state = MemberState.PREPARING_REBALANCE

    def member_id_required(self, member_id: str) -> None:
        """KIP-394: the coordinator handed out our id; join again with it."""
        self.member_id = member_id

    def joined(self, member_id: str, generation: int) -> None:
        self.member_id, self.generation = member_id, generation
        self.state = MemberState.COMPLETING_REBALANCE

    def synced(self) -> None:
        self.state = MemberState.STABLE
        self.rejoin_needed = False
        self._prepared = False

    def rebalance_failed(self, error: KafkaError) -> Next:
        """A JoinGroup or SyncGroup error: what it resets, and what to do next. Raises the
        errors a rejoin cannot cure (INCONSISTENT_GROUP_PROTOCOL, GROUP_MAX_SIZE_REACHED,
        FENCED_INSTANCE_ID, ...)."""
        self.state = MemberState.UNJOINED
        if isinstance(error, COORDINATOR_MOVED):
            return Next.FIND_COORDINATOR
        if isinstance(error, RETRY_SAME):
            return Next.BACK_OFF
        if isinstance(error, UnknownMemberIdError):
            self.member_id, self.generation = "", -1
        elif isinstance(error, IllegalGenerationError):
            self.generation = -1
        elif not isinstance(error, RebalanceInProgressError):
            raise error
        return Next.REJOIN

    # ---- heartbeats and commits ------------------------------------------------------------
    def heartbeat_failed(self, error: KafkaError, generation: int) -> bool:
        """A heartbeat's error (sent in ``generation``); True when it fenced this member
        and its partitions are lost. An answer for an older generation changes nothing."""
        if generation != self.generation:
            return False
        if isinstance(error, RebalanceInProgressError):
            self.rejoin_needed = True
        elif isinstance(error, (UnknownMemberIdError, IllegalGenerationError,
                                FencedInstanceIdError)):
            if isinstance(error, UnknownMemberIdError):
                self.member_id = ""
            self.generation = -1
            self.state = MemberState.UNJOINED
            self.rejoin_needed = self.partitions_lost = True
            return True
        return False

    def commit_failed(self, error: KafkaError) -> None:
        """A commit refused because the group moved on: rejoin."""
        if isinstance(error, (RebalanceInProgressError, UnknownMemberIdError,
                              IllegalGenerationError)):
            self.rejoin_needed = True

    # ---- leaving ---------------------------------------------------------------------------
    def leave(self, owns_partitions: bool) -> str:
        """Leaving the group (LeaveGroup, a poll timeout, close): the member id to leave
        as. Partitions still owned count as lost for the next rebalance."""
        member_id = self.member_id
        self.state = MemberState.UNJOINED
        self.generation = -1
        self.rejoin_needed = True
        self.partitions_lost = owns_partitions
        return member_id

    def left(self, static: bool) -> None:
        """LeaveGroup was sent. A static member keeps its id (KIP-345)."""
        if not static:
            self.member_id = ""

    def unsubscribed(self) -> None:
        """The application revoked its partitions itself: none is lost."""
        self.partitions_lost = False
