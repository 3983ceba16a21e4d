"""Controller logic: replica assignment, elections, ISR changes, failover (seed 000 §8, docs/architecture.md "Control")."""
from __future__ import annotations

import random

import pytest

from actors.controller.assignment import assign_replicas_to_brokers, rack_alternated_brokers
from actors.controller.election import (controlled_shutdown_leader, offline_partition_leader,
                                        preferred_replica_leader)
from actors.controller.messages import check_controller_epoch, queue_batch
from actors.controller.state import ControllerState
from protocols.errors import (FencedLeaderEpochError, InvalidReplicaAssignmentError,
                              InvalidReplicationFactorError, InvalidTopicError,
                              InvalidUpdateVersionError, NoReassignmentInProgressError,
                              StaleControllerEpochError, TopicAlreadyExistsError,
                              TopicDeletionDisabledError, UnknownTopicOrPartitionError)
from protocols.messages import LeaderAndIsr, StopReplica, UpdateMetadata
from tests.clock import ManualClock


# ---- assignment -----------------------------------------------------------------------
def test_rack_unaware_assignment_is_kafkas():
    """Kafka's own documented example: 5 brokers, 10 partitions, 3 replicas, start 0."""
    assert assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, fixed_start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_assignment_continues_from_a_start_partition():
    """Adding partitions 6..9: leaders keep rotating from the partition id; the replica shift
    starts again from the given start (Kafka counts shifts within one call only)."""
    tail = assign_replicas_to_brokers([0, 1, 2, 3, 4], 4, 3, fixed_start_index=0,
                                      start_partition_id=6)
    assert tail == {6: [1, 2, 3], 7: [2, 3, 4], 8: [3, 4, 0], 9: [4, 0, 1]}


def test_replication_factor_above_the_brokers_is_refused():
    with pytest.raises(InvalidReplicationFactorError,
                       match="Replication factor: 3 larger than available brokers: 2."):
        assign_replicas_to_brokers([0, 1], 1, 3)


def test_random_start_still_spreads_leaders_and_never_repeats_a_broker():
    for seed in range(20):
        got = assign_replicas_to_brokers([10, 11, 12, 13], 8, 3, rng=random.Random(seed))
        assert all(len(set(r)) == 3 for r in got.values())
        leaders = [r[0] for r in got.values()]
        assert sorted(leaders.count(b) for b in (10, 11, 12, 13)) == [2, 2, 2, 2]


def test_rack_aware_assignment_spreads_each_partition_over_racks():
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    assert rack_alternated_brokers(racks) == [0, 2, 4, 1, 3, 5]
    got = assign_replicas_to_brokers(racks, 12, 3, fixed_start_index=0)
    for replicas in got.values():
        assert len({racks[b] for b in replicas}) == 3


# ---- election strategies --------------------------------------------------------------
def test_offline_election_seed_example():
    """Seed 000 §8.2 (Kafka's offlinePartitionLeaderElection): AR [0,1,2], ISR [2,1] -> 1
    (AR order, not ISR order)."""
    assert offline_partition_leader([0, 1, 2], [2, 1], live={0, 1, 2}).leader == 1


def test_unclean_election_only_when_enabled():
    assert offline_partition_leader([0, 1, 2], [0], live={1, 2}).leader is None
    e = offline_partition_leader([0, 1, 2], [0], live={1, 2}, unclean_enabled=True)
    assert (e.leader, e.unclean) == (1, True)


def test_preferred_and_controlled_shutdown_elections():
    assert preferred_replica_leader([2, 0, 1], [0, 1, 2], {0, 1, 2}).leader == 2
    assert preferred_replica_leader([2, 0, 1], [0, 1], {0, 1, 2}).leader is None
    assert controlled_shutdown_leader([0, 1, 2], [0, 1, 2], {0, 1, 2}, {0}).leader == 1


# ---- the controller -------------------------------------------------------------------
def controller(brokers=(0, 1, 2), **config) -> tuple[ControllerState, ManualClock]:
    clock = ManualClock(1_000)
    c = ControllerState(clock, config, rng=random.Random(0))
    for b in brokers:
        c.register_broker(b)
    return c, clock


def seed_topic(c: ControllerState) -> None:
    c.create_topic("t", assignment={0: [1, 2, 0], 1: [2, 0, 1], 2: [0, 1, 2]})


def test_describe_prints_kafkas_lines():
    c, _ = controller()
    seed_topic(c)
    assert c.describe_topic("t") == [
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,0\tIsr: 1,2,0",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 2,0,1\tIsr: 2,0,1",
        "\tTopic: t\tPartition: 2\tLeader: 0\tReplicas: 0,1,2\tIsr: 0,1,2"]


def test_seed_example_broker_0_stops():
    """Replicas 1,2,0 / 2,0,1 / 0,1,2 with full ISRs; broker 0's session expires: partition
    2's leader becomes 1 and broker 0 leaves every ISR."""
    c, clock = controller()
    seed_topic(c)
    clock.advance(5_000)
    c.heartbeat(1)
    c.heartbeat(2)
    clock.advance(5_000)                        # 10 s since broker 0's last heartbeat
    msgs = c.expire_sessions()
    p = {tp[1]: st for tp, st in c.partitions.items()}
    assert (p[2].leader, p[2].isr, p[2].leader_epoch) == (1, [1, 2], 1)
    assert (p[0].leader, p[0].isr, p[0].leader_epoch) == (1, [1, 2], 0)
    assert (p[1].leader, p[1].isr) == (2, [2, 1])
    assert {m.broker_id for m in msgs if isinstance(m, LeaderAndIsr)} == {1, 2}
    assert all(m.controller_epoch == 1 for m in msgs)
    assert {m.broker_id for m in msgs if isinstance(m, UpdateMetadata)} == {1, 2}


def test_a_broker_that_missed_a_message_registers_again_and_learns_everything():
    # A LeaderAndIsr to a broker still alive was lost (the call failed: a link down for
    # less than a session). Its next heartbeat says "register again"; registering sends
    # it its partitions' whole state and the metadata.
    c, clock = controller()
    seed_topic(c)
    assert c.heartbeat(0) is False
    c.delivery_failed(0)
    assert c.heartbeat(0) is True and c.heartbeat(0) is True      # until it registers
    msgs = c.register_broker(0)
    assert sorted(m.partition for m in msgs if isinstance(m, LeaderAndIsr)
                  and m.broker_id == 0) == [0, 1, 2]
    assert any(isinstance(m, UpdateMetadata) and m.broker_id == 0 for m in msgs)
    assert c.heartbeat(0) is False
    # A broker already fenced registers anyway: nothing to remember for it.
    clock.advance(c.config["broker.session.timeout.ms"] + 1)
    c.expire_sessions()
    c.delivery_failed(1)
    assert c.unsynced == set()


def test_the_session_check_is_due_when_the_earliest_live_session_runs_out():
    # Kafka's controller schedules its fencing check for the next session expiry instead
    # of polling; a heartbeat moves that broker's deadline, a fenced broker has none.
    c, clock = controller()
    seed_topic(c)
    timeout = c.config["broker.session.timeout.ms"]
    start = clock()
    assert c.next_session_expiry_ms() == start + timeout
    clock.advance(2_000)
    for b in (0, 1, 2):
        c.heartbeat(b)
    clock.advance(1_000)
    c.heartbeat(1)
    assert c.next_session_expiry_ms() == start + 2_000 + timeout
    clock.advance(timeout - 1_000)                 # 0 and 2 are exactly at their deadline
    assert c.expire_sessions() == []
    clock.advance(1)
    assert c.expire_sessions() != []               # both fenced just after it
    assert c.next_session_expiry_ms() == start + 3_000 + timeout


def test_a_partition_without_live_isr_goes_offline_and_comes_back_with_its_replica():
    c, _ = controller()
    c.create_topic("solo", assignment={0: [0]})
    c.broker_failed(0)
    st = c.partitions[("solo", 0)]
    assert st.leader == -1
    c.register_broker(0)
    assert (st.leader, st.leader_epoch) == (0, 2)


def test_replicas_of_a_failed_replica_host_lose_leadership_and_isr_membership():
    """Broker 0's replica host died and came back on its files. Where 0
    led (partition 2), the next ISR member in AR order leads in a new epoch; where it
    followed, it leaves the ISR; broker 0 learns every named partition's state (to reopen
    it), the other replicas only the changes. Broker 0 stays alive."""
    c, _ = controller()
    seed_topic(c)
    msgs = c.replicas_failed(0, [("t", 0), ("t", 1), ("t", 2)])
    p = {tp[1]: st for tp, st in c.partitions.items()}
    assert (p[2].leader, p[2].isr, p[2].leader_epoch) == (1, [1, 2], 1)
    assert (p[0].leader, p[0].isr, p[0].leader_epoch) == (1, [1, 2], 0)
    assert (p[1].leader, p[1].isr) == (2, [2, 1])
    to_0 = sorted(m.partition for m in msgs if isinstance(m, LeaderAndIsr) and m.broker_id == 0)
    assert to_0 == [0, 1, 2]
    assert 0 in c.live_brokers()


def test_a_failed_replica_host_s_only_isr_member_keeps_leading_in_a_new_epoch():
    """No other replica may lead without losing acknowledged records, so the recovered
    replica leads again, in a new epoch (its HW starts over there, KIP-207)."""
    c, _ = controller()
    c.create_topic("solo", assignment={0: [0, 1]})
    c.alter_partition("solo", 0, 0, 0, 0, [0])   # 1 fell out of the ISR
    st = c.partitions[("solo", 0)]
    epoch = st.leader_epoch
    msgs = c.replicas_failed(0, [("solo", 0), ("unknown", 3)])
    assert (st.leader, st.isr, st.leader_epoch) == (0, [0], epoch + 1)
    assert {(m.broker_id, m.leader_epoch) for m in msgs if isinstance(m, LeaderAndIsr)} == {
        (0, epoch + 1), (1, epoch + 1)}


def test_unclean_election_per_topic():
    c, _ = controller()
    c.create_topic("t", assignment={0: [0, 1]},
                   config={"unclean.leader.election.enable": True})
    c.alter_partition("t", 0, 0, 0, 0, [0])     # 1 fell out of the ISR
    c.broker_failed(0)
    st = c.partitions[("t", 0)]
    assert (st.leader, st.isr) == (1, [1])       # availability over consistency


def test_alter_partition_is_fenced_by_leader_and_partition_epoch():
    c, _ = controller()
    seed_topic(c)
    with pytest.raises(FencedLeaderEpochError):
        c.alter_partition("t", 0, 2, 0, 0, [2, 1])   # not the leader
    with pytest.raises(InvalidUpdateVersionError):
        c.alter_partition("t", 0, 1, 0, 7, [1, 2])
    c.alter_partition("t", 0, 1, 0, 0, [1, 2])
    st = c.partitions[("t", 0)]
    assert (st.isr, st.partition_epoch) == ([1, 2], 1)


def test_a_retried_alter_partition_whose_answer_was_lost_is_accepted():
    """The leader resends after a timeout; the controller already holds that ISR at a newer
    partition epoch, so it answers with the state instead of INVALID_UPDATE_VERSION."""
    c, _ = controller()
    seed_topic(c)
    c.alter_partition("t", 0, 1, 0, 0, [1, 2])
    c.alter_partition("t", 0, 1, 0, 0, [1, 2])       # the retry, same partition epoch 0
    st = c.partitions[("t", 0)]
    assert (st.isr, st.partition_epoch) == ([1, 2], 1)
    with pytest.raises(InvalidUpdateVersionError):   # a different ISR at a stale epoch
        c.alter_partition("t", 0, 1, 0, 0, [1, 0])


def test_controlled_shutdown_moves_leaders_first():
    c, _ = controller()
    seed_topic(c)
    c.controlled_shutdown(0)
    assert c.partitions[("t", 2)].leader == 1
    assert all(0 not in st.isr for st in c.partitions.values())


def test_reassignment_adds_waits_then_drops():
    c, _ = controller(brokers=(0, 1, 2, 3))
    c.create_topic("t", assignment={0: [0, 1]})
    c.reassign_partitions({("t", 0): [2, 3]})
    st = c.partitions[("t", 0)]
    assert st.replicas == [2, 3, 0, 1] and st.adding_replicas == [2, 3]
    msgs = c.alter_partition("t", 0, 0, st.leader_epoch, st.partition_epoch, [0, 1, 2, 3])
    assert (st.replicas, st.isr, st.leader) == ([2, 3], [2, 3], 2)
    assert {m.broker_id for m in msgs if isinstance(m, StopReplica)} == {0, 1}


def test_reassignments_in_flight_are_listed_and_can_be_cancelled():
    """ListPartitionReassignments and a cancelling AlterPartitionReassignments (KIP-455):
    the target with the replicas still leaving, what is being added and removed; a cancel
    restores the old replicas; NO_REASSIGNMENT_IN_PROGRESS when nothing is moving."""
    c, _ = controller(brokers=(0, 1, 2, 3))
    c.create_topic("t", assignment={0: [0, 1], 1: [1, 2]})
    assert c.ongoing_reassignments() == []
    c.reassign_partitions({("t", 0): [2, 0]})
    assert c.ongoing_reassignments() == [("t", 0, [2, 0, 1], [2], [1])]
    assert c.ongoing_reassignments([("t", 1), ("gone", 0)]) == []
    c.cancel_reassignment(("t", 0))
    assert (c.partitions[("t", 0)].replicas, c.ongoing_reassignments()) == ([0, 1], [])
    with pytest.raises(NoReassignmentInProgressError):
        c.cancel_reassignment(("t", 0))
    with pytest.raises(UnknownTopicOrPartitionError):
        c.cancel_reassignment(("t", 9))
    with pytest.raises(InvalidReplicaAssignmentError):
        c.reassign_partitions({("t", 1): []})


def test_preferred_election_and_auto_rebalance():
    c, _ = controller()
    seed_topic(c)
    c.broker_failed(1)
    c.register_broker(1)
    c.alter_partition("t", 0, 2, c.partitions[("t", 0)].leader_epoch,
                      c.partitions[("t", 0)].partition_epoch, [2, 0, 1])
    assert c.partitions[("t", 0)].leader == 2
    assert c.leader_imbalance()[1] == 1.0
    c.auto_rebalance_check()
    assert c.partitions[("t", 0)].leader == 1


def test_topic_admin_errors():
    c, _ = controller(**{"delete.topic.enable": False})
    seed_topic(c)
    with pytest.raises(TopicAlreadyExistsError):
        seed_topic(c)
    with pytest.raises(TopicDeletionDisabledError):
        c.delete_topic("t")
    with pytest.raises(InvalidTopicError):
        c.create_topic("..", 1, 1)
    with pytest.raises(InvalidReplicationFactorError):
        c.create_topic("big", 1, 4)


def test_create_partitions_keeps_existing_ones():
    c, _ = controller()
    seed_topic(c)
    c.create_partitions("t", 5)
    assert [c.partitions[("t", p)].replicas for p in range(3)] == [[1, 2, 0], [2, 0, 1],
                                                                 [0, 1, 2]]
    assert all(len(set(c.partitions[("t", p)].replicas)) == 3 for p in (3, 4))


def test_failover_through_a_snapshot_bumps_the_controller_epoch():
    c, clock = controller()
    seed_topic(c)
    snapshot = c.to_snapshot()
    import msgpack
    restored = msgpack.unpackb(msgpack.packb(snapshot, use_bin_type=True), raw=False,
                               strict_map_key=False)
    successor = ControllerState.from_snapshot(restored, clock)
    assert successor.controller_epoch == 2
    assert successor.describe_topic("t") == c.describe_topic("t")
    msgs = successor.broker_failed(0)
    assert all(m.controller_epoch == 2 for m in msgs)
    check_controller_epoch(current=2, received=2)
    with pytest.raises(StaleControllerEpochError):
        check_controller_epoch(current=2, received=1)


# ---- the queue of what a broker has not been sent yet ------------------------------------
def _um(n: int) -> UpdateMetadata:
    return UpdateMetadata(1, 0, {"configs": {}, "n": n})


def _lai(topic: str) -> LeaderAndIsr:
    return LeaderAndIsr(1, 0, topic, 0, 0, 1, 1, (0, 1), (0, 1))


def test_a_newer_image_takes_the_first_waiting_images_place_ahead_of_its_leader_and_isr():
    """Found by the demo on a cold start: broker 0's registration queued [LeaderAndIsr,
    UpdateMetadata]; broker 1's registration superseded that image with one queued at the
    end, so broker 0 opened its replicas before any image named the topic, with the default
    min.insync.replicas=1, and acks=all was acknowledged by the leader alone."""
    from collections import deque
    waiting: deque[list] = deque()
    queue_batch(waiting, [_lai("a"), _um(1)])
    queue_batch(waiting, [_lai("b"), _um(2)])
    queue_batch(waiting, [_um(3)])
    assert list(waiting) == [[_lai("a"), _um(3)], [_lai("b")], []]
    queue_batch(waiting, [StopReplica(1, 0, "a", 0, True)])  # no image: queued as it is
    assert list(waiting)[-1] == [StopReplica(1, 0, "a", 0, True)]
    # With nothing waiting, or only batches without an image, the image stays in its batch.
    fresh: deque[list] = deque([[_lai("c")]])
    queue_batch(fresh, [_lai("d"), _um(4)])
    assert list(fresh) == [[_lai("c")], [_lai("d"), _um(4)]]
    # A waiting image with no LeaderAndIsr beside it is superseded and its batch not sent:
    # creating a topic while an ISR change's image waits is still one request per broker
    # (test_creating_a_topic_is_one_controller_request_per_broker once met [1, 1, 2]).
    isr_change: deque[list] = deque([[_um(5)]])
    queue_batch(isr_change, [_lai("e"), _um(6)])
    assert list(isr_change) == [[], [_lai("e"), _um(6)]]


# ---- partition and replica state machines --------------------------------------------
def test_state_machines_follow_the_facts():
    from actors.controller.state_machines import PartitionStatus as P, ReplicaStatus as R
    c, clock = controller()
    seed_topic(c)
    assert {c.partition_states.state(("t", p)) for p in range(3)} == {P.ONLINE}
    assert c.replica_states.state(("t", 2, 0)) == R.ONLINE
    c.broker_failed(0)
    assert c.replica_states.state(("t", 2, 0)) == R.OFFLINE
    c.create_topic("solo", assignment={0: [1]})
    c.broker_failed(1)
    assert c.partition_states.state(("solo", 0)) == P.OFFLINE
    c.register_broker(1)
    assert c.partition_states.state(("solo", 0)) == P.ONLINE
    c.delete_topic("t")
    assert c.partition_states.state(("t", 0)) == P.NON_EXISTENT
    assert c.replica_states.state(("t", 0, 1)) == R.NON_EXISTENT       # deleted
    assert c.replica_states.state(("t", 0, 0)) == R.DELETION_INELIGIBLE  # its broker is down


def test_an_illegal_transition_is_refused():
    from actors.controller.state_machines import (PARTITION_PREVIOUS, IllegalStateTransitionError,
                                                  PartitionStatus as P, StateMachine)
    sm = StateMachine("Partition", PARTITION_PREVIOUS, P.NON_EXISTENT)
    with pytest.raises(IllegalStateTransitionError, match="NonExistentPartition to Online"):
        sm.move(("t", 0), P.ONLINE)
    sm.move(("t", 0), P.NEW)
    sm.move(("t", 0), P.ONLINE)
    with pytest.raises(IllegalStateTransitionError):
        sm.move(("t", 0), P.NON_EXISTENT)  # must go offline first


def test_a_snapshot_holds_every_field_of_every_partition():
    """``to_snapshot`` writes partitions by hand (asdict is too slow for a checkpoint per
    change): a field added to PartitionState must reach the snapshot, and come back."""
    from dataclasses import asdict
    state = ControllerState(ManualClock(), {})
    for b in range(4):
        state.register_broker(b, None, incarnation=f"i{b}")
    state.create_topic("t", 4, 3)
    replicas = state.partitions[("t", 0)].replicas
    spare = next(b for b in range(4) if b not in replicas)
    state.reassign_partitions({("t", 0): replicas[1:] + [spare]})
    assert state.partitions[("t", 0)].adding_replicas == [spare]
    snapshot = state.to_snapshot()
    assert {(t, p): d for t, p, d in snapshot["partitions"]} == {
        tp: asdict(st) for tp, st in state.partitions.items()}
    again = ControllerState.from_snapshot(snapshot, ManualClock())
    assert again.partitions == state.partitions


def test_every_registration_gets_a_larger_broker_epoch_across_controllers_too():
    """Kafka's broker epoch: a broker registering again (restarted, or after missing a
    message) gets a larger one than any before, and a new controller goes on from the
    snapshot, so that the epochs a follower's fetches name only grow (KIP-903)."""
    state = ControllerState(ManualClock(), {})
    for b in range(3):
        state.register_broker(b, None, incarnation=f"i{b}")
    assert [state.brokers[b].broker_epoch for b in range(3)] == [0, 1, 2]
    state.register_broker(1, None, incarnation="i1-again")
    assert state.brokers[1].broker_epoch == 3
    again = ControllerState.from_snapshot(state.to_snapshot(), ManualClock())
    assert again.brokers[1].broker_epoch == 3
    again.register_broker(0, None, incarnation="i0-again")
    assert again.brokers[0].broker_epoch == 4
    # A snapshot from before broker epochs: they start above every one it names.
    snapshot = again.to_snapshot()
    del snapshot["next_broker_epoch"]
    assert ControllerState.from_snapshot(snapshot, ManualClock()).next_broker_epoch == 5


def test_topic_ids_and_the_cluster_id_live_as_long_as_what_they_name():
    """KIP-516: a topic's id is made when it is created, kept across controller failovers
    (the snapshot), and a topic deleted and created again under its name gets a new one;
    the cluster id never changes. Both are Kafka's printed form (22 characters of URL-safe
    base64) and in the metadata every broker gets."""
    import base64
    import uuid
    state = ControllerState(ManualClock(), {}, rng=random.Random(5))
    for b in range(3):
        state.register_broker(b, None, incarnation=f"i{b}",
                              endpoints=[["PLAINTEXT", "127.0.0.1", 9092 + b]])
    state.create_topic("t", 2, 2)
    state.create_topic("u", 1, 1)
    first = state.topic_ids["t"]
    assert len(first) == 22 and first != state.topic_ids["u"]
    raw = uuid.UUID(bytes=base64.urlsafe_b64decode(first + "=="))
    assert raw.version == 4 and raw.int != 0
    image = state.metadata_image()
    assert image["topic_ids"] == {"t": first, "u": state.topic_ids["u"]}
    assert image["cluster_id"] == state.cluster_id
    assert image["brokers"][1]["endpoints"] == [["PLAINTEXT", "127.0.0.1", 9093]]
    again = ControllerState.from_snapshot(state.to_snapshot(), ManualClock())
    assert (again.topic_ids, again.cluster_id) == (state.topic_ids, state.cluster_id)
    assert again.brokers[2].endpoints == [["PLAINTEXT", "127.0.0.1", 9094]]
    again.delete_topic("t")
    assert "t" not in again.metadata_image()["topic_ids"]
    again.create_topic("t", 1, 1)
    assert again.topic_ids["t"] not in (first, state.topic_ids["u"])


def test_a_snapshot_from_before_topic_ids_gets_them_once():
    state = ControllerState(ManualClock(), {})
    state.register_broker(0, None, incarnation="i0")
    state.create_topic("old", 1, 1)
    snapshot = state.to_snapshot()
    del snapshot["topic_ids"], snapshot["cluster_id"]
    again = ControllerState.from_snapshot(snapshot, ManualClock())
    assert len(again.topic_ids["old"]) == 22 and len(again.cluster_id) == 22
    assert ControllerState.from_snapshot(again.to_snapshot(), ManualClock()).topic_ids == \
        again.topic_ids


def test_create_topics_refuses_non_positive_partitions_and_replication_as_kafka_does():
    """Kafka's CreateTopics: -1 (or nothing) means the cluster's default; 0 or less is
    INVALID_PARTITIONS (37) / INVALID_REPLICATION_FACTOR (38)."""
    from protocols.errors import InvalidPartitionsError
    state = ControllerState(ManualClock(), {"num.partitions": 2,
                                            "default.replication.factor": 1})
    for b in range(2):
        state.register_broker(b, None, incarnation=f"i{b}")
    with pytest.raises(InvalidPartitionsError, match="non-positive"):
        state.create_topic("zero", 0, 1)
    with pytest.raises(InvalidReplicationFactorError, match="larger than 0"):
        state.create_topic("zero", 1, 0)
    assert "zero" not in state.topics
    state.create_topic("defaults", -1, -1)
    assert len([tp for tp in state.partitions if tp[0] == "defaults"]) == 2


# ---- the controller's lease ------------------------------------------------------------
def test_a_lease_that_stood_still_for_half_a_session_has_expired():
    """Brokers fence a controller only on this: the same lease read half a session apart
    (three renewals missed). Found by the fault harness: a broker cut off from every host
    killed the controller everyone else reached, once the link came back."""
    from actors.controller.lease import LeaseReading, lease_expired, lease_value
    session = 9000
    held = lease_value(3, 17)
    assert lease_expired(LeaseReading(held, 1000), LeaseReading(held, 5500), session)
    # It moved on: the controller renews, and the trouble is between it and this broker.
    assert not lease_expired(LeaseReading(held, 1000), LeaseReading(lease_value(3, 18), 9000),
                             session)
    # A successor's lease differs even at the same renewal count.
    assert not lease_expired(LeaseReading(held, 0), LeaseReading(lease_value(4, 17), 9000),
                             session)
    # Too short a window to tell a frozen controller from the time between two renewals.
    assert not lease_expired(LeaseReading(held, 1000), LeaseReading(held, 5499), session)


def test_a_controller_renews_its_lease_at_least_three_times_in_half_a_session():
    from actors.controller.lease import renew_interval_ms
    for session in (1000, 6000, 9000, 45000):
        assert 3 * renew_interval_ms(session) <= session // 2


def test_a_controller_stops_renewing_once_a_newer_controllers_lease_is_there():
    """A superseded controller still alive would keep a successor's lease moving, and a
    frozen successor would never be fenced: it stops (and exits) instead."""
    from actors.controller.lease import lease_value, superseded
    assert superseded(lease_value(4, 1), 3)
    assert not superseded(lease_value(3, 99), 3)
    assert not superseded(lease_value(2, 5), 3)
    assert not superseded(None, 3)
