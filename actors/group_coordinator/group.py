"""One consumer group as Kafka's group coordinator sees it (GroupMetadata and the
coordinator's decisions): plain deterministic Python with the time passed in, no Ray.

The actor beside it turns requests into calls here and delivers what comes back. JoinGroup
and SyncGroup answers may wait for other members, so every call returns the answers that
are now due as ``{member_id: response}``: the caller's own (or nothing, when it must wait)
and those of members whose wait just ended. Timers are deadlines kept here; ``tick(now)``
fires the due ones (session expiry, the end of a rebalance, the initial rebalance delay), and
``next_deadline()`` tells the shell when to call it next.

States (Kafka's): Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
PreparingRebalance when membership changes, and Dead once the group is deleted.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from protocols.consumer_protocol import ConsumerProtocolError, decode_subscription
from protocols.errors import (CoordinatorNotAvailableError, FencedInstanceIdError,
                              GroupMaxSizeReachedError, IllegalGenerationError,
                              InconsistentGroupProtocolError, InvalidSessionTimeoutError,
                              KafkaError, MemberIdRequiredError, RebalanceInProgressError,
                              UnknownMemberIdError)
from protocols.messages import JoinResponse, SyncResponse


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupConfig:
    """The broker's group.* settings, Kafka's defaults."""
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2_147_483_647


@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, Any], ...]   # (name, metadata) in the member's preference
    assignment: Any = None
    awaiting_join: bool = False
    awaiting_sync: bool = False
    session_deadline_ms: int = 0

    def metadata_for(self, protocol: str) -> Any:
        return next(m for name, m in self.protocols if name == protocol)


Answers = dict[str, Any]


@dataclass
class Group:
    group_id: str
    config: GroupConfig = field(default_factory=GroupConfig)
    new_member_id: Callable[[str], str] = lambda client_id: f"{client_id}-{uuid.uuid4()}"
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)   # instance id -> member id
    # Ids handed out with MEMBER_ID_REQUIRED, not yet used: id -> when the offer lapses.
    pending_members: dict[str, int] = field(default_factory=dict)
    rebalance_deadline_ms: int | None = None
    # group.initial.rebalance.delay.ms: the first rebalance of an empty group waits a delay,
    # then another while members keep arriving, up to the rebalance timeout.
    in_initial_delay: bool = False
    initial_delay_left_ms: int = 0
    joined_during_delay: bool = False

    # ---- JoinGroup ----------------------------------------------------------------------
    def join(self, member_id: str, protocol_type: str, protocols, now_ms: int, *,
             client_id: str = "", group_instance_id: str | None = None,
             session_timeout_ms: int = 45_000, rebalance_timeout_ms: int = 300_000,
             require_known_member_id: bool = True) -> tuple[str, Answers]:
        """A member's JoinGroup: (its member id, answers now due). The member's own answer
        is among them unless it waits for the others to rejoin."""
        protocols = tuple((name, meta) for name, meta in protocols)
        if self.state is GroupState.DEAD:
            return member_id, {member_id or "": JoinResponse(CoordinatorNotAvailableError(
                f"Group {self.group_id} is being deleted"), member_id=member_id)}
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return member_id, {member_id or "": JoinResponse(InvalidSessionTimeoutError(
                f"session.timeout.ms {session_timeout_ms} is outside the broker's "
                f"[{self.config.min_session_timeout_ms}, "
                f"{self.config.max_session_timeout_ms}]"), member_id=member_id)}
        if not protocols or (self.protocol_type is not None and self.members
                             and protocol_type != self.protocol_type) or \
                (self.members and not self._supported_protocols() & {n for n, _ in protocols}):
            return member_id, {member_id or "": JoinResponse(InconsistentGroupProtocolError(
                f"The member's protocols {[n for n, _ in protocols]} share none with group "
                f"{self.group_id}'s"), member_id=member_id)}
        if not member_id:
            return self._join_unknown(protocol_type, protocols, now_ms, client_id,
                                      group_instance_id, session_timeout_ms,
                                      rebalance_timeout_ms, require_known_member_id)
        if group_instance_id is not None and \
                self.static_members.get(group_instance_id, member_id) != member_id:
            return member_id, {member_id: JoinResponse(FencedInstanceIdError(
                f"Member {member_id} uses group.instance.id {group_instance_id}, which a newer "
                "member has taken"), member_id=member_id)}
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            return member_id, self._add_member(member_id, protocol_type, protocols, now_ms,
                                               client_id, group_instance_id,
                                               session_timeout_ms, rebalance_timeout_ms)
        member = self.members.get(member_id)
        if member is None:
            return member_id, {member_id: JoinResponse(UnknownMemberIdError(
                f"Member {member_id} is not in group {self.group_id}"), member_id=member_id)}
        member.session_deadline_ms = now_ms + member.session_timeout_ms
        changed = member.protocols != protocols
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            member.awaiting_join = True
            return member_id, self._maybe_complete_join(now_ms)
        if self.state is GroupState.COMPLETING_REBALANCE and not changed:
            # The join answer was lost: send it again.
            return member_id, {member_id: self._join_response(member_id)}
        if self.state is GroupState.STABLE and not changed and member_id != self.leader_id:
            # A follower rejoining with nothing new gets the current generation back.
            return member_id, {member_id: self._join_response(member_id)}
        member.awaiting_join = True
        return member_id, self._prepare_rebalance(now_ms, f"member {member_id} rejoined")

    def _join_unknown(self, protocol_type, protocols, now_ms, client_id, group_instance_id,
                      session_timeout_ms, rebalance_timeout_ms, require_known_member_id):
        if len(self.members) + len(self.pending_members) >= self.config.max_size:
            return "", {"": JoinResponse(GroupMaxSizeReachedError(
                f"Group {self.group_id} already has group.max.size members"))}
        member_id = self.new_member_id(client_id or "consumer")
        if group_instance_id is not None:
            old_id = self.static_members.get(group_instance_id)
            if old_id is not None and old_id in self.members:
                return member_id, self._replace_static_member(
                    old_id, member_id, protocols, now_ms, session_timeout_ms,
                    rebalance_timeout_ms)
            self.static_members[group_instance_id] = member_id
            return member_id, self._add_member(member_id, protocol_type, protocols, now_ms,
                                               client_id, group_instance_id,
                                               session_timeout_ms, rebalance_timeout_ms)
        if require_known_member_id:
            # KIP-394: hand out the id first, so a member that retries is not counted twice.
            self.pending_members[member_id] = now_ms + session_timeout_ms
            return member_id, {member_id: JoinResponse(MemberIdRequiredError(
                "The member must rejoin with the member id it was given"),
                member_id=member_id)}
        return member_id, self._add_member(member_id, protocol_type, protocols, now_ms,
                                           client_id, None, session_timeout_ms,
                                           rebalance_timeout_ms)

    def _replace_static_member(self, old_id, new_id, protocols, now_ms, session_timeout_ms,
                               rebalance_timeout_ms) -> Answers:
        """A static member restarted: it takes its old place; the group does not rebalance
        when nothing it subscribes to changed (KIP-345)."""
        member = self.members.pop(old_id)
        answers: Answers = {}
        if member.awaiting_join:
            answers[old_id] = JoinResponse(FencedInstanceIdError(
                f"{member.group_instance_id} joined again as {new_id}"), member_id=old_id)
        if member.awaiting_sync:
            answers[old_id] = SyncResponse(FencedInstanceIdError(
                f"{member.group_instance_id} joined again as {new_id}"))
            member.awaiting_sync = False
        member.member_id = new_id
        member.session_deadline_ms = now_ms + session_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        self.members[new_id] = member
        self.static_members[member.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        member.protocols = protocols
        if self.state is GroupState.STABLE and self._select_protocol() == self.protocol_name:
            # As Kafka: only a change of the group's protocol forces a rebalance; new
            # metadata (owned partitions, say) is kept for the next one.
            answers[new_id] = self._join_response(new_id)
            return answers
        member.awaiting_join = True
        if self.state is GroupState.PREPARING_REBALANCE:
            answers.update(self._maybe_complete_join(now_ms))
        else:
            answers.update(self._prepare_rebalance(now_ms, f"static member {new_id} changed"))
        return answers

    def _add_member(self, member_id, protocol_type, protocols, now_ms, client_id,
                    group_instance_id, session_timeout_ms, rebalance_timeout_ms) -> Answers:
        if not self.members:
            self.protocol_type = protocol_type
        self.members[member_id] = MemberMetadata(
            member_id, group_instance_id, client_id, session_timeout_ms, rebalance_timeout_ms,
            protocol_type, protocols, awaiting_join=True,
            session_deadline_ms=now_ms + session_timeout_ms)
        if self.leader_id is None:
            self.leader_id = member_id
        if self.state is GroupState.PREPARING_REBALANCE:
            self.joined_during_delay = self.in_initial_delay
            return self._maybe_complete_join(now_ms)
        return self._prepare_rebalance(now_ms, f"member {member_id} joined")

    # ---- rebalancing ----------------------------------------------------------------------
    def _prepare_rebalance(self, now_ms: int, reason: str) -> Answers:
        answers: Answers = {}
        if self.state is GroupState.COMPLETING_REBALANCE:
            # Members waiting in SyncGroup must rejoin: the assignment they wait for is void.
            for m in self.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    answers[m.member_id] = SyncResponse(RebalanceInProgressError(
                        f"Group {self.group_id} is rebalancing: {reason}"))
        for m in self.members.values():
            m.assignment = None
        rebalance_timeout = max((m.rebalance_timeout_ms for m in self.members.values()),
                                default=0)
        if self.state is GroupState.EMPTY and self.config.initial_rebalance_delay_ms > 0:
            delay = self.config.initial_rebalance_delay_ms
            self.in_initial_delay = True
            self.joined_during_delay = False
            self.initial_delay_left_ms = max(0, rebalance_timeout - delay)
            self.rebalance_deadline_ms = now_ms + delay
        else:
            self.in_initial_delay = False
            self.rebalance_deadline_ms = now_ms + rebalance_timeout
        self.state = GroupState.PREPARING_REBALANCE
        answers.update(self._maybe_complete_join(now_ms))
        return answers

    def _all_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def _maybe_complete_join(self, now_ms: int) -> Answers:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return {}
        if self.in_initial_delay or self.rebalance_deadline_ms is None:
            return {}    # the initial delay runs its course (tick ends it)
        if not self._all_joined() and now_ms < self.rebalance_deadline_ms:
            return {}
        return self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> Answers:
        answers: Answers = {}
        for m in [m for m in self.members.values() if not m.awaiting_join]:
            self._remove(m.member_id)          # did not rejoin within the rebalance timeout
        self.rebalance_deadline_ms = None
        self.generation_id += 1
        if not self.members:
            self.state = GroupState.EMPTY
            self.protocol_name = None
            return answers
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self.protocol_name = self._select_protocol()
        self.state = GroupState.COMPLETING_REBALANCE
        for m in self.members.values():
            m.awaiting_join = False
            m.session_deadline_ms = now_ms + m.session_timeout_ms
            answers[m.member_id] = self._join_response(m.member_id)
        return answers

    def _supported_protocols(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def _select_protocol(self) -> str:
        """Seed 001 §10.9.2: the candidates are the protocols every member supports; each
        member votes for the first candidate in its own preference; most votes wins."""
        candidates = self._supported_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n, _ in m.protocols if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Ties go to the protocol the leader prefers (deterministic, as every answer agrees).
        leader_order = [n for n, _ in self.members[self.leader_id].protocols]
        return max(votes, key=lambda n: (votes[n], -leader_order.index(n)))

    def _join_response(self, member_id: str) -> JoinResponse:
        members = ()
        if member_id == self.leader_id:
            members = tuple((m.member_id, m.group_instance_id,
                             m.metadata_for(self.protocol_name))
                            for m in self.members.values())
        return JoinResponse(None, self.generation_id, self.protocol_name, self.leader_id,
                            member_id, members)

    # ---- SyncGroup ------------------------------------------------------------------------
    def sync(self, member_id: str, generation_id: int, assignments: dict | None,
             now_ms: int, group_instance_id: str | None = None) -> Answers:
        error = self._check_member(member_id, generation_id, group_instance_id)
        if error is not None:
            return {member_id: SyncResponse(error)}
        member = self.members[member_id]
        member.session_deadline_ms = now_ms + member.session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return {member_id: SyncResponse(RebalanceInProgressError(
                f"Group {self.group_id} is rebalancing"))}
        if self.state is GroupState.STABLE:
            return {member_id: SyncResponse(None, member.assignment, self.protocol_name)}
        # CompletingRebalance: wait for the leader's assignment.
        member.awaiting_sync = True
        if member_id != self.leader_id:
            return {}
        for mid, m in self.members.items():
            m.assignment = (assignments or {}).get(mid)
        self.state = GroupState.STABLE
        answers: Answers = {}
        for m in self.members.values():
            if m.awaiting_sync:
                m.awaiting_sync = False
                answers[m.member_id] = SyncResponse(None, m.assignment, self.protocol_name)
        return answers

    # ---- Heartbeat, LeaveGroup ------------------------------------------------------------
    def heartbeat(self, member_id: str, generation_id: int, now_ms: int,
                  group_instance_id: str | None = None) -> KafkaError | None:
        error = self._check_member(member_id, generation_id, group_instance_id)
        if error is not None:
            return error
        member = self.members[member_id]
        member.session_deadline_ms = now_ms + member.session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return RebalanceInProgressError(f"Group {self.group_id} is rebalancing: rejoin")
        return None

    def leave(self, member_id: str, now_ms: int,
              group_instance_id: str | None = None) -> tuple[KafkaError | None, Answers]:
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is None:
                return UnknownMemberIdError(f"No member with group.instance.id "
                                            f"{group_instance_id}"), {}
            if member_id and known != member_id:
                return FencedInstanceIdError(f"{group_instance_id} is now {known}"), {}
            member_id = known
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            return None, self._maybe_complete_join(now_ms)
        if member_id not in self.members:
            return UnknownMemberIdError(f"Member {member_id} is not in group "
                                        f"{self.group_id}"), {}
        return None, self._member_gone(member_id, now_ms, "left the group")

    def _member_gone(self, member_id: str, now_ms: int, why: str) -> Answers:
        member = self.members[member_id]
        answers: Answers = {}
        if member.awaiting_join:
            answers[member_id] = JoinResponse(UnknownMemberIdError(f"{member_id} {why}"),
                                              member_id=member_id)
        if member.awaiting_sync:
            answers[member_id] = SyncResponse(UnknownMemberIdError(f"{member_id} {why}"))
        self._remove(member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            answers.update(self._prepare_rebalance(now_ms, f"member {member_id} {why}"))
        elif self.state is GroupState.PREPARING_REBALANCE:
            answers.update(self._maybe_complete_join(now_ms))
        return answers

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    def _check_member(self, member_id: str, generation_id: int,
                      group_instance_id: str | None) -> KafkaError | None:
        if group_instance_id is not None and \
                self.static_members.get(group_instance_id, member_id) != member_id:
            return FencedInstanceIdError(f"{group_instance_id} belongs to another member now")
        if member_id not in self.members:
            return UnknownMemberIdError(f"Member {member_id} is not in group {self.group_id}")
        if generation_id != self.generation_id:
            return IllegalGenerationError(f"Generation {generation_id} is not group "
                                          f"{self.group_id}'s current {self.generation_id}")
        return None

    # ---- OffsetCommit ---------------------------------------------------------------------
    def validate_commit(self, member_id: str, generation_id: int,
                        group_instance_id: str | None = None) -> KafkaError | None:
        """May this member commit now? A commit outside the group protocol (no member id,
        generation -1) is allowed while the group has no members, as Kafka allows an
        assign()-only consumer or an admin tool to."""
        if generation_id < 0 and not member_id:
            if self.members:
                return UnknownMemberIdError(f"Group {self.group_id} has active members; a "
                                            "commit needs a member id and generation")
            return None
        if self.state is GroupState.COMPLETING_REBALANCE and member_id in self.members:
            return RebalanceInProgressError(f"Group {self.group_id} is assigning its "
                                            "partitions")
        # PreparingRebalance still takes commits of the current generation: members commit
        # before they rejoin (Kafka's onJoinPrepare).
        return self._check_member(member_id, generation_id, group_instance_id)

    # ---- time -----------------------------------------------------------------------------
    def next_deadline(self) -> int | None:
        deadlines = [m.session_deadline_ms for m in self.members.values()
                     if not m.awaiting_join]
        deadlines += self.pending_members.values()
        if self.rebalance_deadline_ms is not None:
            deadlines.append(self.rebalance_deadline_ms)
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> Answers:
        """Fire what is due at ``now_ms``: expired sessions, the end of the (initial)
        rebalance wait."""
        answers: Answers = {}
        if self.state is GroupState.DEAD:
            return answers
        for member_id, lapses in list(self.pending_members.items()):
            if lapses <= now_ms:
                del self.pending_members[member_id]
                answers.update(self._maybe_complete_join(now_ms))
        for m in list(self.members.values()):
            # A member parked in JoinGroup is bounded by the rebalance timeout instead.
            if m.member_id in self.members and not m.awaiting_join \
                    and m.session_deadline_ms <= now_ms:
                answers.update(self._member_gone(m.member_id, now_ms,
                                                 "failed to heartbeat within "
                                                 "session.timeout.ms"))
        if self.state is GroupState.PREPARING_REBALANCE and \
                self.rebalance_deadline_ms is not None and self.rebalance_deadline_ms <= now_ms:
            if self.in_initial_delay and self.joined_during_delay \
                    and self.initial_delay_left_ms > 0:
                step = min(self.config.initial_rebalance_delay_ms, self.initial_delay_left_ms)
                self.initial_delay_left_ms -= step
                self.rebalance_deadline_ms = now_ms + step
                self.joined_during_delay = False
                return answers
            self.in_initial_delay = False
            answers.update(self._complete_join(now_ms))
        return answers

    # ---- describe / delete ----------------------------------------------------------------
    def describe(self) -> dict:
        return {"group_id": self.group_id, "state": self.state.value,
                "protocol_type": self.protocol_type or "", "protocol": self.protocol_name or "",
                "generation_id": self.generation_id, "leader": self.leader_id or "",
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "assignment": m.assignment}
                            for m in self.members.values()]}

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == "consumer"

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether a member's subscription (Kafka's ConsumerProtocol, in the group's chosen
        protocol) names ``topic``. A subscription that does not decode counts as naming
        every topic, as in Kafka (GroupMetadata.isSubscribedToTopic)."""
        if not self.is_consumer_group or self.protocol_name is None:
            return False
        for member in self.members.values():
            try:
                metadata = member.metadata_for(self.protocol_name)
                if topic in decode_subscription(bytes(metadata)).topics:
                    return True
            except (ConsumerProtocolError, StopIteration, TypeError, ValueError):
                return True
        return False

    def to_stored(self) -> dict:
        """What the coordinator writes to ``__consumer_offsets`` once a generation is
        stable or the group empties: enough for a new coordinator to carry on without a
        rebalance (Kafka's GroupMetadataValue)."""
        return {"protocol_type": self.protocol_type, "generation_id": self.generation_id,
                "protocol": self.protocol_name, "leader": self.leader_id,
                "members": [(m.member_id, m.group_instance_id, m.client_id,
                             m.session_timeout_ms, m.rebalance_timeout_ms, m.protocols,
                             m.assignment) for m in self.members.values()]}

    @classmethod
    def from_stored(cls, group_id: str, stored: dict, config: GroupConfig,
                    now_ms: int) -> "Group":
        """A group loaded by a new coordinator: Stable with its members, whose sessions
        start now (they must heartbeat to this coordinator within their timeouts)."""
        group = cls(group_id, config, generation_id=stored["generation_id"],
                    protocol_type=stored["protocol_type"], protocol_name=stored["protocol"],
                    leader_id=stored["leader"])
        for mid, instance, client_id, session, rebalance, protocols, assignment in \
                stored["members"]:
            group.members[mid] = MemberMetadata(
                mid, instance, client_id, session, rebalance, group.protocol_type or "",
                tuple(tuple(p) for p in protocols), assignment,
                session_deadline_ms=now_ms + session)
            if instance is not None:
                group.static_members[instance] = mid
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        return group

    def mark_dead(self) -> None:
        self.state = GroupState.DEAD
        self.members.clear()
        self.static_members.clear()
        self.pending_members.clear()
