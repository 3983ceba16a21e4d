"""BrokerState and ControlledShutdown (actors/broker/state.py): the broker's decisions on
what its controller sends, without the actor. Kafka's ControllerEpoch fencing
(KafkaApis.handleLeaderAndIsrRequest: "Received LeaderAndIsrRequest with stale controller
epoch"), ReplicaManager's split of the work, and KafkaServer.controlledShutdown's retries."""
from __future__ import annotations

import pytest

from actors.broker.state import BrokerState, ControlledShutdown
from protocols.errors import StaleControllerEpochError
from protocols.messages import LeaderAndIsr, StopReplica, UpdateMetadata
from protocols.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition


def lai(epoch: int, topic: str = "t", partition: int = 0, leader: int = 1,
        leader_epoch: int = 0) -> LeaderAndIsr:
    return LeaderAndIsr(epoch, 1, topic, partition, leader, leader_epoch, 0, (1, 2), (1, 2))


def image(**configs) -> dict:
    return {"topics": {}, "configs": configs}


def test_a_batch_with_a_message_from_an_older_controller_is_refused_whole():
    state = BrokerState(1)
    state.on_controller_batch([lai(3)])
    with pytest.raises(StaleControllerEpochError):
        state.on_controller_batch([lai(3, partition=1), lai(2, partition=2)])
    assert state.controller_epoch == 3
    work = state.on_controller_batch([lai(4, partition=1)])   # a successor: taken
    assert [m.partition for m in work.leader_and_isr] == [1] and state.controller_epoch == 4


def test_the_controller_that_registered_the_broker_sets_the_floor():
    state = BrokerState(1)
    state.on_registered(5)
    with pytest.raises(StaleControllerEpochError):
        state.on_controller_batch([lai(4)])
    state.on_registered(2)                                     # never lowers it
    assert state.controller_epoch == 5


def test_the_broker_epoch_is_the_largest_its_controllers_batches_named():
    """What the broker's replica hosts put in their fetches (KIP-903): a batch for an
    earlier registration, delivered late, does not lower it."""
    state = BrokerState(1)
    assert state.broker_epoch == -1
    state.on_controller_batch([lai(1)], broker_epoch=4)
    state.on_controller_batch([lai(1, partition=1)], broker_epoch=3)
    assert state.broker_epoch == 4
    state.on_controller_batch([lai(2)], broker_epoch=9)
    assert state.broker_epoch == 9


def test_a_broker_has_caught_up_once_its_image_names_it_live():
    """Kafka's initial metadata catch-up: the broker answers clients only from then on."""
    state = BrokerState(1)
    assert not state.caught_up
    state.on_controller_batch([UpdateMetadata(1, 1, {"brokers": {0: {}}, "topics": {}})])
    assert not state.caught_up                                 # registered, not yet told
    state.on_controller_batch([UpdateMetadata(1, 1, {"brokers": {0: {}, 1: {}}})])
    assert state.caught_up


def test_a_batch_is_split_into_metadata_leader_and_isr_and_stops_in_that_order():
    state = BrokerState(1)
    state.on_controller_batch([UpdateMetadata(1, 1, image(a={"retention.ms": 1}))])
    stop = StopReplica(1, 1, "b", 0, True)
    work = state.on_controller_batch([
        stop, lai(1, "a"), UpdateMetadata(1, 1, image(a={"retention.ms": 2}, c={}))])
    assert state.image == image(a={"retention.ms": 2}, c={})
    # Only a topic whose config changed is pushed to the replicas; a new one opens with it.
    assert work.changed_configs == [("a", {"retention.ms": 2})]
    assert work.leader_and_isr == [lai(1, "a")] and work.stops == [stop]


def test_a_topics_config_reaches_replicas_opened_before_any_image_named_it():
    """A LeaderAndIsr that arrives before the first image naming its topic opens replicas
    with the defaults; the image, when it comes, must push the topic's config to them (the
    cold-start demo acknowledged acks=all on one replica, min.insync.replicas=2 lost)."""
    state = BrokerState(1)
    work = state.on_controller_batch([lai(1, "a")])
    assert work.leader_and_isr == [lai(1, "a")] and state.image == {}
    work = state.on_controller_batch(
        [UpdateMetadata(1, 1, image(a={"min.insync.replicas": 2}, b={"retention.ms": 5}))],
        open_topics=lambda: {"a"})
    # "a" has replicas open here: pushed. "b" has none: its replicas will open with it.
    assert work.changed_configs == [("a", {"min.insync.replicas": 2})]


def test_replicas_reopen_uncleanly_after_an_unclean_stop_or_when_their_host_died():
    a, b, c = (TopicPartition("t", p) for p in range(3))
    assert BrokerState(1, clean_shutdown=False).replicas_to_open([a, b], []) == \
        [(a, False), (b, False)]
    state = BrokerState(1, clean_shutdown=True)
    assert state.replicas_to_open([c, a, b], [b]) == [(a, True), (c, True)]
    state.opened([a, c])
    state.host_died([a])
    assert state.replicas_to_open([a, c], []) == [(a, False), (c, True)]
    state.opened([a])
    assert state.replicas_to_open([a], []) == [(a, True)]


def test_the_coordinators_take_the_internal_partitions_the_broker_leads():
    state = BrokerState(1)
    applied = [lai(1, OFFSETS_TOPIC, 4, leader=1, leader_epoch=7),
               lai(1, OFFSETS_TOPIC, 5, leader=2), lai(1, "t", 0, leader=1),
               lai(1, TRANSACTION_STATE_TOPIC, 4, leader=1, leader_epoch=2)]
    assert state.coordinator_changes(applied) == [
        (OFFSETS_TOPIC, 4, 7), (OFFSETS_TOPIC, 5, None), (TRANSACTION_STATE_TOPIC, 4, 2)]


def test_controlled_shutdown_retries_while_the_broker_still_leads_then_gives_up():
    attempts = ControlledShutdown(max_retries=2, backoff_ms=5000)
    assert attempts.on_answer([("t", 0)]) == 5000
    assert attempts.on_answer(None) == 5000            # the attempt failed: try again
    assert attempts.on_answer([("t", 0)]) is None      # 3 attempts: stop anyway
    done = ControlledShutdown(max_retries=3, backoff_ms=5000)
    assert done.on_answer([]) is None and done.attempts == 1
