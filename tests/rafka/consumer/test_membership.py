"""A consumer's membership in its group, pure (Kafka's AbstractCoordinator MemberState and
the ConsumerCoordinatorTest cases about it): the states of a rebalance, what each
coordinator error resets, what a heartbeat's error means, and leaving."""
from __future__ import annotations

import pytest

from protocols.errors import (CoordinatorLoadInProgressError, FencedInstanceIdError,
                              IllegalGenerationError, InconsistentGroupProtocolError,
                              NotCoordinatorError, RebalanceInProgressError,
                              UnknownMemberIdError)
from rafka.consumer.membership import Membership, MemberState, Next


def stable(member_id: str = "m-1", generation: int = 3) -> Membership:
    m = Membership()
    assert m.begin_rebalance() is False
    m.join_sent()
    m.joined(member_id, generation)
    m.synced()
    return m


def test_a_rebalance_goes_unjoined_preparing_completing_stable():
    m = Membership()
    assert m.state is MemberState.UNJOINED and m.needs_rejoin()
    assert m.heartbeat_target() is None
    assert m.begin_rebalance() is False
    assert m.begin_rebalance() is None                # revocation runs once per rebalance
    m.join_sent()
    assert m.state is MemberState.PREPARING_REBALANCE
    m.member_id_required("m-1")                       # KIP-394: join again with the id
    m.join_sent()
    m.joined("m-1", 1)
    assert m.state is MemberState.COMPLETING_REBALANCE and m.needs_rejoin()
    m.synced()
    assert m.state is MemberState.STABLE and not m.needs_rejoin()
    assert m.heartbeat_target() == ("m-1", 1)
    assert m.begin_rebalance() is False               # the next rebalance revokes again


@pytest.mark.parametrize("error, step, member_id, generation", [
    (NotCoordinatorError("moved"), Next.FIND_COORDINATOR, "m-1", 3),
    (CoordinatorLoadInProgressError("loading"), Next.BACK_OFF, "m-1", 3),
    (UnknownMemberIdError("expelled"), Next.REJOIN, "", -1),
    (IllegalGenerationError("old"), Next.REJOIN, "m-1", -1),
    (RebalanceInProgressError("again"), Next.REJOIN, "m-1", 3),
])
def test_what_a_join_or_sync_error_resets_and_what_follows(error, step, member_id,
                                                           generation):
    m = stable()
    m.request_rejoin()
    m.join_sent()
    assert m.rebalance_failed(error) is step
    assert (m.member_id, m.generation, m.state) == (member_id, generation,
                                                    MemberState.UNJOINED)
    assert m.needs_rejoin()


def test_an_error_a_rejoin_cannot_cure_is_raised():
    m = Membership()
    m.join_sent()
    with pytest.raises(InconsistentGroupProtocolError):
        m.rebalance_failed(InconsistentGroupProtocolError("no common protocol"))


def test_a_heartbeat_saying_rebalance_asks_for_a_rejoin_and_keeps_the_partitions():
    m = stable()
    assert m.heartbeat_failed(RebalanceInProgressError("rejoin"), 3) is False
    assert m.needs_rejoin() and m.state is MemberState.STABLE and not m.partitions_lost


@pytest.mark.parametrize("error, member_id", [
    (UnknownMemberIdError("expelled"), ""),
    (IllegalGenerationError("old"), "m-1"),
    (FencedInstanceIdError("replaced"), "m-1"),
])
def test_a_fenced_heartbeat_loses_the_partitions(error, member_id):
    m = stable()
    assert m.heartbeat_failed(error, 3) is True
    assert (m.member_id, m.generation, m.state) == (member_id, -1, MemberState.UNJOINED)
    assert m.begin_rebalance() is True               # onPartitionsLost, not revoked
    assert m.partitions_lost is False


def test_a_heartbeat_answer_for_an_older_generation_changes_nothing():
    m = stable(generation=4)
    assert m.heartbeat_failed(UnknownMemberIdError("late"), 3) is False
    assert m.state is MemberState.STABLE and m.member_id == "m-1"


def test_a_commit_refused_by_a_moving_group_asks_for_a_rejoin():
    m = stable()
    m.commit_failed(RebalanceInProgressError("assigning"))
    assert m.needs_rejoin()


def test_leaving_gives_the_member_id_and_a_dynamic_member_forgets_it():
    m = stable()
    assert m.in_group()
    assert m.leave(owns_partitions=True) == "m-1"
    assert m.state is MemberState.UNJOINED and m.generation == -1 and m.partitions_lost
    m.left(static=False)
    assert m.member_id == "" and not m.in_group()
    static = stable("s-1")
    static.leave(owns_partitions=False)
    static.left(static=True)                          # KIP-345: the id is kept
    assert static.member_id == "s-1"


def test_unsubscribing_loses_nothing():
    m = stable()
    m.leave(owns_partitions=True)
    m.unsubscribed()
    assert m.begin_rebalance() is False
