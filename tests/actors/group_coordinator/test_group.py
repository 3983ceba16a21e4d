"""The group coordinator's decisions for one group, with the clock passed in (no Ray)."""
from __future__ import annotations

import itertools

from actors.group_coordinator.group import Group, GroupConfig, GroupState
from protocols.errors import (FencedInstanceIdError, IllegalGenerationError,
                              InconsistentGroupProtocolError, InvalidSessionTimeoutError,
                              MemberIdRequiredError, RebalanceInProgressError,
                              UnknownMemberIdError)
from protocols.messages import JoinResponse, SyncResponse

RANGE = [("range", b"meta-r")]


def new_group(delay_ms: int = 3000) -> Group:
    ids = itertools.count(1)
    return Group("g", GroupConfig(initial_rebalance_delay_ms=delay_ms),
                 new_member_id=lambda client: f"{client}-{next(ids)}")


def join_new(group: Group, client: str, now: int, protocols=RANGE, **kw):
    """Kafka's two-step first join: MEMBER_ID_REQUIRED, then again with the id."""
    member_id, answers = group.join("", "consumer", protocols, now, client_id=client, **kw)
    assert isinstance(answers[member_id].error, MemberIdRequiredError)
    return group.join(member_id, "consumer", protocols, now, client_id=client, **kw)


def stable_group_of(n: int) -> tuple[Group, list[str]]:
    group = new_group(delay_ms=0)
    ids = []
    for i in range(n):
        member_id, _ = join_new(group, f"c{i}", 0)
        ids.append(member_id)
        if i == 0:
            # The first member's generation completes at once (no initial delay here).
            group.sync(member_id, group.generation_id, {member_id: b"a"}, 0)
    # Everyone rejoins the rebalance the later joins started.
    for member_id in ids:
        group.join(member_id, "consumer", RANGE, 1)
    leader = group.leader_id
    group.sync(leader, group.generation_id, {m: f"a-{m}".encode() for m in ids}, 1)
    for m in ids:
        group.sync(m, group.generation_id, None, 1)
    assert group.state is GroupState.STABLE
    return group, ids


def test_first_join_gets_a_member_id_then_waits_out_the_initial_delay():
    group = new_group()
    member_id, answers = join_new(group, "c1", now=0)
    assert member_id == "c1-1" and answers == {}        # waiting: initial delay
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.tick(2999) == {}
    answers = group.tick(3000)
    ok = answers["c1-1"]
    assert isinstance(ok, JoinResponse) and ok.error is None
    assert (ok.generation_id, ok.protocol_name, ok.leader_id) == (1, "range", "c1-1")
    assert ok.members == (("c1-1", None, b"meta-r"),)   # the leader sees the members
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_members_arriving_during_the_delay_extend_it_and_join_one_generation():
    group = new_group()
    join_new(group, "c1", 0)
    join_new(group, "c2", 2000)
    assert group.tick(3000) == {}                          # a member came: one more delay
    join_new(group, "c3", 4000)
    assert group.tick(6000) == {}
    answers = group.tick(9000)
    assert sorted(answers) == ["c1-1", "c2-2", "c3-3"]
    assert {a.generation_id for a in answers.values()} == {1}
    assert len(answers["c1-1"].members) == 3 and answers["c2-2"].members == ()


def test_sync_hands_the_leaders_assignment_to_every_member():
    group = new_group()
    a, _ = join_new(group, "a", 0)
    b, _ = join_new(group, "b", 0)
    group.tick(3000)                                       # b came during the delay
    assert set(group.tick(6000)) == {a, b}
    assert group.sync(b, 1, None, 6001) == {}              # followers wait for the leader
    answers = group.sync(a, 1, {a: b"A", b: b"B"}, 6002)
    assert answers == {a: SyncResponse(None, b"A", "range"), b: SyncResponse(None, b"B", "range")}
    assert group.state is GroupState.STABLE


def test_protocol_vote_of_seed_001_picks_what_most_members_prefer():
    # Candidates: protocols every member supports; each votes for its first candidate.
    group = new_group(delay_ms=10)
    join_new(group, "c1", 0, protocols=[("roundrobin", b""), ("range", b""), ("sticky", b"")])
    join_new(group, "c2", 0, protocols=[("range", b""), ("roundrobin", b"")])
    join_new(group, "c3", 0, protocols=[("sticky", b""), ("range", b""), ("roundrobin", b"")])
    assert group.tick(10) == {}                            # others came: one more delay
    answers = group.tick(20)
    # candidates {range, roundrobin}; votes: c1 roundrobin, c2 range, c3 range -> range
    assert {a.protocol_name for a in answers.values()} == {"range"}


def test_a_member_with_no_protocol_in_common_is_refused():
    group, _ = stable_group_of(1)
    _, answers = group.join("", "consumer", [("sticky", b"")], 5)
    assert isinstance(answers[""].error, InconsistentGroupProtocolError)


def test_session_timeout_outside_the_brokers_bounds_is_refused():
    _, answers = new_group().join("", "consumer", RANGE, 0, session_timeout_ms=10)
    assert isinstance(answers[""].error, InvalidSessionTimeoutError)


def test_heartbeats_name_the_problem():
    group, (a, b) = stable_group_of(2)
    assert group.heartbeat(a, group.generation_id, 10) is None
    assert isinstance(group.heartbeat(a, group.generation_id - 1, 10), IllegalGenerationError)
    assert isinstance(group.heartbeat("nobody", group.generation_id, 10), UnknownMemberIdError)
    group.leave(b, 20)
    assert isinstance(group.heartbeat(a, group.generation_id, 21), RebalanceInProgressError)


def test_a_member_that_stops_heartbeating_is_expelled_after_the_session_timeout():
    group, (a, b) = stable_group_of(2)
    generation = group.generation_id
    for now in range(1000, 45_001, 3000):
        assert group.heartbeat(a, generation, now) is None
        assert group.tick(now) == {}
    group.tick(45_001)       # b's last sign of life was at 1 ms: 45 s session timeout
    assert b not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert isinstance(group.heartbeat(a, generation, 45_002), RebalanceInProgressError)
    _, answers = group.join(a, "consumer", RANGE, 45_003)   # the only member: done at once
    assert answers[a].generation_id == generation + 1 and answers[a].leader_id == a


def test_leaving_moves_leadership_and_a_rebalance_drops_members_that_do_not_rejoin():
    group, (a, b, c) = stable_group_of(3)
    assert group.leader_id == a
    error, _ = group.leave(a, 100)
    assert error is None and group.leader_id in (b, c)
    _, answers = group.join(b, "consumer", RANGE, 101)
    assert answers == {}                                    # c has not rejoined yet
    answers = group.tick(101 + 300_000)                     # rebalance.timeout.ms
    assert list(answers) == [b] and c not in group.members
    assert answers[b].leader_id == b


def test_sync_waiters_are_told_to_rejoin_when_a_rebalance_starts_under_them():
    group = new_group(delay_ms=0)
    a, _ = join_new(group, "a", 0)
    b, answers = join_new(group, "b", 0)
    group.join(a, "consumer", RANGE, 1)
    group.sync(b, group.generation_id, None, 2)
    _, answers = group.leave(a, 3)
    assert isinstance(answers[b].error, RebalanceInProgressError)


def test_a_member_leaving_while_it_waits_in_sync_gets_its_answer():
    group = new_group(delay_ms=0)
    a, _ = join_new(group, "a", 0)
    b, _ = join_new(group, "b", 0)
    group.join(a, "consumer", RANGE, 1)
    assert group.sync(b, group.generation_id, None, 2) == {}
    _, answers = group.leave(b, 3)
    assert isinstance(answers[b], SyncResponse)
    assert isinstance(answers[b].error, UnknownMemberIdError)


def test_a_restarted_static_member_takes_its_place_without_a_rebalance():
    group = new_group(delay_ms=0)
    old, _ = group.join("", "consumer", RANGE, 0, client_id="s", group_instance_id="i-1")
    group.sync(old, 1, {old: b"mine"}, 1)
    assert group.state is GroupState.STABLE
    # Its subscription metadata may differ (a restart owns nothing yet): no rebalance.
    new, answers = group.join("", "consumer", [("range", b"meta-after-restart")], 10,
                              client_id="s", group_instance_id="i-1")
    assert new != old and answers[new].generation_id == 1      # same generation
    assert group.state is GroupState.STABLE
    assert group.sync(new, 1, None, 11)[new].assignment == b"mine"
    assert isinstance(group.heartbeat(old, 1, 12, group_instance_id="i-1"),
                      FencedInstanceIdError)


def test_commits_are_checked_against_member_and_generation():
    group, (a, b) = stable_group_of(2)
    gen = group.generation_id
    assert group.validate_commit(a, gen) is None
    assert isinstance(group.validate_commit(a, gen - 1), IllegalGenerationError)
    assert isinstance(group.validate_commit("ghost", gen), UnknownMemberIdError)
    assert isinstance(group.validate_commit("", -1), UnknownMemberIdError)   # group active
    group.leave(b, 5)
    # PreparingRebalance: members still commit (as they do before rejoining, in Kafka's
    # onJoinPrepare); once the new generation is being assigned, they may not.
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.validate_commit(a, gen) is None
    group.join(a, "consumer", RANGE, 6)
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert isinstance(group.validate_commit(a, group.generation_id), RebalanceInProgressError)
    assert isinstance(group.validate_commit(a, gen), RebalanceInProgressError)  # Kafka's order
    assert new_group().validate_commit("", -1) is None     # an empty group: admin commit
