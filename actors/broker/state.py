"""BrokerState: a broker's decisions on what its controller tells it, pure (no Ray, no I/O):
Kafka's KafkaApis / ReplicaManager handling of LeaderAndIsr, StopReplica and UpdateMetadata,
and KafkaServer's controlled-shutdown retries, without the actor.

Messages in, work out. A batch of controller messages is taken or refused whole by controller
epoch (a zombie controller's late batch must not undo its successor's); a taken batch becomes
a ``ControllerWork``: the topics whose config the new metadata image changed, the
LeaderAndIsr to apply (after opening the replicas not open yet, each clean or not), the
StopReplica to apply, in that order. After the hosts applied the LeaderAndIsr, the state says
which ``__consumer_offsets`` partitions this broker's group coordinator takes or gives up.
``BrokerActor`` does the work; ``tests.sim`` drives the same object.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Sequence

from actors.controller.messages import check_controller_epoch
from protocols.messages import LeaderAndIsr, StopReplica, UpdateMetadata
from protocols.topics import COORDINATOR_TOPICS, TopicPartition


@dataclass
class ControllerWork:
    """What one batch from the controller asks of the broker, in the order to do it."""

    changed_configs: list[tuple[str, dict]] = field(default_factory=list)
    leader_and_isr: list[LeaderAndIsr] = field(default_factory=list)
    stops: list[StopReplica] = field(default_factory=list)


@dataclass
class BrokerState:
    broker_id: int
    # Whether the broker's last stop was clean (its log directory's marker): replicas opened
    # after an unclean one recover their logs from the last recovery point.
    clean_shutdown: bool = True
    controller_epoch: int = 0
    # This broker's registration as the controller's batches name it (Kafka's broker epoch).
    broker_epoch: int = -1
    image: dict = field(default_factory=dict)
    # Replicas whose host died under them: they reopen as after an unclean stop.
    crashed: set[TopicPartition] = field(default_factory=set)

    # ---- the controller --------------------------------------------------------------------
    @property
    def caught_up(self) -> bool:
        """Whether the metadata image names this broker among the live ones: Kafka's initial
        catch-up, after which the broker answers clients (before, its answers would describe
        a cluster without itself)."""
        return self.broker_id in self.image.get("brokers", {})

    def on_registered(self, controller_epoch: int) -> None:
        """The controller that registered this broker: its epoch is the floor from now on."""
        self.controller_epoch = max(self.controller_epoch, controller_epoch)

    def on_controller_batch(self, messages: Sequence,
                            open_topics: Callable[[], Collection[str]] = frozenset,
                            broker_epoch: int = -1) -> ControllerWork:
        """Take a batch of LeaderAndIsr / StopReplica / UpdateMetadata, or refuse it whole
        with STALE_CONTROLLER_EPOCH (raised) when any message is from an older controller.

        A topic's config goes to its open replicas when it changes, and when the image
        names the topic for the first time while replicas of it are already open
        (``open_topics``: the topics this broker has replicas of): those opened with the
        defaults, before any image named the topic, and must not keep them
        (min.insync.replicas=1 under acks=all would acknowledge on the leader alone)."""
        for m in messages:
            check_controller_epoch(self.controller_epoch, m.controller_epoch)
        if messages:
            self.controller_epoch = max(m.controller_epoch for m in messages)
        self.broker_epoch = max(self.broker_epoch, broker_epoch)
        work = ControllerWork()
        for m in messages:
            if isinstance(m, UpdateMetadata):
                old = self.image.get("configs", {})
                self.image = m.image
                configs = m.image.get("configs", {})
                new_topics = [t for t in configs if t not in old]
                opened = set(open_topics()) & set(new_topics) if new_topics else set()
                work.changed_configs = [
                    (topic, dict(config)) for topic, config in configs.items()
                    if (topic in opened if topic not in old else old[topic] != config)]
            elif isinstance(m, LeaderAndIsr):
                work.leader_and_isr.append(m)
            elif isinstance(m, StopReplica):
                work.stops.append(m)
        return work

    # ---- replicas --------------------------------------------------------------------------
    def replicas_to_open(self, named: Iterable[TopicPartition],
                         open_now: Iterable[TopicPartition]) -> list[tuple[TopicPartition, bool]]:
        """``(topic-partition, clean)`` for each replica named that is not open yet: clean
        unless the broker's last stop was not, or the replica's host died under it."""
        todo = sorted(set(named) - set(open_now))
        return [(tp, self.clean_shutdown and tp not in self.crashed) for tp in todo]

    def opened(self, tps: Iterable[TopicPartition]) -> None:
        self.crashed.difference_update(tps)

    def host_died(self, tps: Iterable[TopicPartition]) -> None:
        """These replicas' host died: they reopen from their files as after a crash."""
        self.crashed.update(tps)

    def coordinator_changes(self, applied: Iterable[LeaderAndIsr]
                            ) -> list[tuple[str, int, int | None]]:
        """For the LeaderAndIsr the hosts applied: ``(topic, partition, leader epoch)`` for
        each ``__consumer_offsets`` or ``__transaction_state`` partition this broker now
        leads (its group or transaction coordinator loads it, the leader epoch becoming
        the coordinator epoch), ``(topic, partition, None)`` for each it follows (the
        coordinator gives it up)."""
        return [(m.topic, m.partition, m.leader_epoch if m.leader == self.broker_id else None)
                for m in applied if m.topic in COORDINATOR_TOPICS]


@dataclass
class ControlledShutdown:
    """KafkaServer's controlled shutdown: ask the controller to move leadership off this
    broker, up to ``controlled.shutdown.max.retries`` more times while it still leads some
    partition (or the attempt failed), ``controlled.shutdown.retry.backoff.ms`` apart."""

    max_retries: int
    backoff_ms: int
    attempts: int = 0

    def on_answer(self, still_leading: Sequence | None) -> int | None:
        """After an attempt (``still_leading``: the partitions the broker still leads, None
        when the attempt failed): milliseconds to wait before the next attempt, or None
        when there is none (all moved, or out of retries: the broker stops anyway)."""
        self.attempts += 1
        if still_leading is not None and not still_leading:
            return None
        if self.attempts > self.max_retries:
            return None
        return self.backoff_ms
