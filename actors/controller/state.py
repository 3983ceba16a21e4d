"""The controller's decisions, pure: brokers, topics, partition leadership and ISR.

Every mutating method returns the messages to send (LeaderAndIsr and StopReplica to the
replicas concerned, UpdateMetadata to every live broker), all stamped with the controller
epoch. ``to_snapshot`` / ``from_snapshot`` carry the state to the next controller (through
Ray's GCS key-value store in the actor shell), which runs with the epoch incremented.
Leader changes increment the partition's leader epoch; every change of leader, ISR or
replicas increments its partition epoch (KRaft's rule), which fences AlterPartition.
"""
from __future__ import annotations

import base64
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

from actors.controller.assignment import assign_replicas_to_brokers
from actors.controller.client_quotas import from_stored, to_stored
from actors.controller.election import (controlled_shutdown_leader, offline_partition_leader,
                                        preferred_replica_leader, reassign_partition_leader)
from actors.controller.state_machines import (PARTITION_PREVIOUS, REPLICA_PREVIOUS,
                                              PartitionStatus, ReplicaStatus, StateMachine)
from protocols.config import ConfigDef, at_least, between
from protocols.errors import (FencedLeaderEpochError, InvalidPartitionsError,
                              InvalidReplicaAssignmentError, InvalidReplicationFactorError,
                              InvalidRequestError, InvalidUpdateVersionError,
                              NoReassignmentInProgressError, TopicAlreadyExistsError,
                              TopicDeletionDisabledError, UnknownTopicOrPartitionError)
from protocols.messages import LeaderAndIsr, StopReplica, UpdateMetadata
from protocols.topics import TopicPartition, validate_topic_name
from storage.config import TOPIC_CONFIG

NO_LEADER = -1

CONTROLLER_CONFIG = (
    ConfigDef()
    .define("broker.session.timeout.ms", "int", 9000, at_least(1))
    .define("delete.topic.enable", "boolean", True)
    .define("unclean.leader.election.enable", "boolean", False)
    .define("auto.leader.rebalance.enable", "boolean", True)
    .define("leader.imbalance.per.broker.percentage", "int", 10, between(0, 100))
    .define("leader.imbalance.check.interval.seconds", "long", 300, at_least(1))
    .define("default.replication.factor", "int", 1, at_least(1))
    .define("num.partitions", "int", 1, at_least(1))
)


def new_kafka_uuid(rng: random.Random) -> str:
    """A random Kafka Uuid as Kafka prints it (``Uuid.toString``: 16 bytes, URL-safe base64
    without padding; 22 characters). Like Kafka's ``Uuid.randomUuid``, never the all-zero
    id (Kafka's "no id") nor an id starting with '-' (confusing on a command line)."""
    while True:
        raw = bytearray(rng.getrandbits(128).to_bytes(16, "big"))
        raw[6] = (raw[6] & 0x0F) | 0x40     # version 4
        raw[8] = (raw[8] & 0x3F) | 0x80     # IETF variant
        text = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class BrokerInfo:
    broker_id: int
    rack: str | None = None
    incarnation: str | None = None   # which start of the broker's process registered
    last_heartbeat_ms: int = 0
    alive: bool = True
    # The broker's Kafka listeners as clients reach them: [[name, host, port], ...]
    # (advertised.listeners).
    endpoints: list = field(default_factory=list)
    # Which registration this is (Kafka's broker epoch): larger for every later one, across
    # controllers too. Its batches carry it to the broker, whose fetchers name it so that
    # leaders can refuse a fetch an earlier start of it sent late (KIP-903).
    broker_epoch: int = -1


@dataclass
class PartitionState:
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)


class ControllerState:
    def __init__(self, clock: Callable[[], int], config: Mapping[str, Any] | None = None, *,
                 controller_epoch: int = 1, rng: random.Random | None = None):
        self.clock = clock
        self.config = CONTROLLER_CONFIG.parse(config or {})
        self.controller_epoch = controller_epoch
        self.rng = rng or random.Random()
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[str, Any]] = {}
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.shutting_down: set[int] = set()
        # Live brokers a message could not be delivered to: each registers again (and so
        # learns the whole state) at its next heartbeat. Not in the snapshot: a new
        # controller sends every broker the whole state anyway.
        self.unsynced: set[int] = set()
        self.next_producer_id = 0
        self.next_broker_epoch = 0
        # Kafka's cluster.id and topic ids (KIP-516): random, kept for the cluster's life (in
        # the snapshot); a topic re-created under the same name gets a new id.
        self.cluster_id = new_kafka_uuid(self.rng)
        self.topic_ids: dict[str, str] = {}
        # SCRAM credentials per user and mechanism (actors.controller.scram_credentials).
        self.scram_credentials: dict[str, dict[str, list]] = {}
        # Client quotas per entity (actors.controller.client_quotas).
        self.client_quotas: dict[tuple, dict[str, float]] = {}
        # The ACLs, each as actors.controller.acls.ACL_FIELDS' values.
        self.acls: list[list] = []
        self.partition_states: StateMachine[TopicPartition, PartitionStatus] = StateMachine(
            "Partition", PARTITION_PREVIOUS, PartitionStatus.NON_EXISTENT)
        self.replica_states: StateMachine[tuple[str, int, int], ReplicaStatus] = StateMachine(
            "Replica", REPLICA_PREVIOUS, ReplicaStatus.NON_EXISTENT)

    def _sync_states(self, tp: TopicPartition) -> None:
        """Move the partition and its replicas to the states their facts imply."""
        st = self.partitions[tp]
        live = set(self.live_brokers())
        self.partition_states.move(tp, PartitionStatus.ONLINE if st.leader != NO_LEADER
                                   else PartitionStatus.OFFLINE)
        for r in st.replicas:
            key = (tp[0], tp[1], r)
            if self.replica_states.state(key) == ReplicaStatus.NON_EXISTENT:
                self.replica_states.move(key, ReplicaStatus.NEW)
            self.replica_states.move(key, ReplicaStatus.ONLINE if r in live
                                     else ReplicaStatus.OFFLINE)

    def _delete_replica_states(self, tp: TopicPartition, replicas: Iterable[int]) -> None:
        live = set(self.live_brokers())
        for r in replicas:
            key = (tp[0], tp[1], r)
            self.replica_states.move(key, ReplicaStatus.OFFLINE)
            self.replica_states.move(key, ReplicaStatus.DELETION_STARTED)
            if r in live:  # StopReplica(delete) goes out now; a dead broker's copy waits
                self.replica_states.move(key, ReplicaStatus.DELETION_SUCCESSFUL)
                self.replica_states.move(key, ReplicaStatus.NON_EXISTENT)
            else:
                self.replica_states.move(key, ReplicaStatus.DELETION_INELIGIBLE)

    # ==== brokers =========================================================================
    def live_brokers(self) -> list[int]:
        return sorted(b for b, info in self.brokers.items() if info.alive)

    def register_broker(self, broker_id: int, rack: str | None = None,
                        incarnation: str | None = None, endpoints: list | None = None
                        ) -> list:
        """A broker (re)joins: it learns its replicas' state, and offline partitions whose
        ISR (or, unclean, whose AR) includes it get a leader."""
        self.brokers[broker_id] = BrokerInfo(broker_id, rack, incarnation, self.clock(), True,
                                             [list(e) for e in endpoints or []],
                                             self.next_broker_epoch)
        self.next_broker_epoch += 1
        self.shutting_down.discard(broker_id)
        self.unsynced.discard(broker_id)
        changed = [tp for tp, st in self.partitions.items()
                   if st.leader == NO_LEADER and broker_id in st.replicas
                   and self._elect(tp, offline=True)]
        for tp, st in self.partitions.items():
            if broker_id in st.replicas and tp not in changed:
                self._sync_states(tp)
        msgs = [m for tp, st in self.partitions.items() if broker_id in st.replicas
                and tp not in changed for m in self._leader_and_isr(tp, only=broker_id)]
        return msgs + self._leader_and_isr_all(changed) + self._update_metadata()

    def allocate_producer_ids(self, count: int = 1) -> int:
        """The first of ``count`` new producer ids: one for an idempotent producer's
        InitProducerId, a block for a transaction coordinator (Kafka's AllocateProducerIds).
        Ids are never reused, across controller failovers too (the counter is in the
        snapshot)."""
        if count < 1:
            raise ValueError(f"Cannot allocate {count} producer ids")
        first = self.next_producer_id
        self.next_producer_id += count
        return first

    def full_state(self) -> list:
        """What a new controller sends every live broker on failover (Kafka's
        onControllerFailover): LeaderAndIsr for every partition and the metadata. Whatever
        its predecessor had queued for a broker when it died is covered by this."""
        for tp in self.partitions:
            self._sync_states(tp)
        return [m for tp in self.partitions for m in self._leader_and_isr(tp)] \
            + self._update_metadata()

    def cold_start(self) -> None:
        """The whole cluster starts again from its on-disk metadata: no broker is up yet,
        so no partition has a leader; each gets one from its ISR as brokers register, as
        after any offline period (the leader epoch goes up then)."""
        for info in self.brokers.values():
            info.alive = False
        for tp, st in self.partitions.items():
            st.leader = NO_LEADER
            self._sync_states(tp)

    def heartbeat(self, broker_id: int) -> bool:
        """A live broker's session goes on; True when it must register again because a
        message to it was lost (``delivery_failed``)."""
        info = self.brokers.get(broker_id)
        if info is None or not info.alive:
            raise InvalidRequestError(f"Broker {broker_id} is not registered")
        info.last_heartbeat_ms = self.clock()
        return broker_id in self.unsynced

    def delivery_failed(self, broker_id: int) -> None:
        """A LeaderAndIsr, StopReplica or UpdateMetadata could not be delivered to a broker
        that still counts as alive (its link was down for less than a session). Kafka's
        ZooKeeper-mode controller retried its queue to the broker for as long as the broker
        was registered; a KRaft broker replays the metadata log it missed. Here the broker
        is told, at its next heartbeat, to register again, and registering sends it the
        whole state of its partitions and the metadata: what was lost, and anything newer."""
        info = self.brokers.get(broker_id)
        if info is not None and info.alive:
            self.unsynced.add(broker_id)

    def next_session_expiry_ms(self) -> int | None:
        """When the earliest live broker's session runs out without a heartbeat: Kafka's
        controller schedules its fencing check for then rather than polling."""
        timeout = self.config["broker.session.timeout.ms"]
        deadlines = [info.last_heartbeat_ms + timeout for info in self.brokers.values()
                     if info.alive]
        return min(deadlines) if deadlines else None

    def expire_sessions(self) -> list:
        now = self.clock()
        timeout = self.config["broker.session.timeout.ms"]
        msgs: list = []
        for b, info in sorted(self.brokers.items()):
            if info.alive and now - info.last_heartbeat_ms > timeout:
                msgs += self.broker_failed(b)
        return msgs

    def broker_failed(self, broker_id: int) -> list:
        """Take the broker out of every ISR and elect new leaders where it led."""
        info = self.brokers.get(broker_id)
        if info is None or not info.alive:
            return []
        info.alive = False
        self.shutting_down.discard(broker_id)
        self.unsynced.discard(broker_id)   # registering again sends it everything
        changed = []
        for tp, st in self.partitions.items():
            if broker_id not in st.replicas:
                continue
            self.replica_states.move((tp[0], tp[1], broker_id), ReplicaStatus.OFFLINE)
            if st.leader == broker_id:
                self._elect(tp, offline=True)
                changed.append(tp)
            elif self._remove_from_isr(st, broker_id):
                changed.append(tp)
        return self._leader_and_isr_all(changed) + self._update_metadata()

    def replicas_failed(self, broker_id: int, tps: Iterable[TopicPartition]) -> list:
        """Some replicas of a live broker went down and are back on their files (their
        replica host died and its broker started it again): Kafka's offline log directory.
        Where the broker led, leadership moves to another ISR member in a new epoch (or, when
        it is the only one, stays with it in a new epoch: a recovered log may end below what
        consumers saw, so the HW must start over); where it followed, it leaves the ISR until
        it has caught up again. The broker learns each named partition's state again, so it
        reopens its replicas."""
        live = set(self.live_brokers()) - {broker_id}
        named: list[TopicPartition] = []
        changed: list[TopicPartition] = []
        for tp in tps:
            tp = (tp[0], tp[1])
            st = self.partitions.get(tp)
            if st is None or broker_id not in st.replicas:
                continue
            named.append(tp)
            if st.leader == broker_id:
                others = [r for r in st.isr if r != broker_id]
                e = offline_partition_leader(st.replicas, others, live)
                if e.leader is not None:
                    self._set_leader(st, e.leader, others)
                else:
                    st.leader_epoch += 1
                    st.partition_epoch += 1
                changed.append(tp)
            elif self._remove_from_isr(st, broker_id):
                changed.append(tp)
        for tp in named:
            self._sync_states(tp)
        unchanged = [m for tp in named if tp not in changed
                     for m in self._leader_and_isr(tp, only=broker_id)]
        return unchanged + self._leader_and_isr_all(changed) + self._update_metadata()

    @staticmethod
    def _remove_from_isr(st: PartitionState, broker_id: int) -> bool:
        """Drop a follower from the ISR (never its last member); True if it changed."""
        if broker_id in st.isr and len(st.isr) > 1:
            st.isr = [r for r in st.isr if r != broker_id]
            st.partition_epoch += 1
            return True
        return False

    def controlled_shutdown(self, broker_id: int) -> list:
        """Move leadership off the broker before it stops (ControlledShutdown strategy)."""
        self.shutting_down.add(broker_id)
        live = set(self.live_brokers())
        changed = []
        for tp, st in self.partitions.items():
            if broker_id not in st.replicas:
                continue
            if st.leader == broker_id:
                e = controlled_shutdown_leader(st.replicas, st.isr, live, self.shutting_down)
                if e.leader is not None:
                    self._set_leader(st, e.leader, [r for r in st.isr if r != broker_id])
                    changed.append(tp)
            elif self._remove_from_isr(st, broker_id):
                changed.append(tp)
        return self._leader_and_isr_all(changed) + self._update_metadata()

    # ==== topics ==========================================================================
    def create_topic(self, name: str, num_partitions: int | None = None,
                     replication_factor: int | None = None,
                     config: Mapping[str, Any] | None = None,
                     assignment: Mapping[int, list[int]] | None = None,
                     fixed_start_index: int = -1) -> list:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if assignment is None:
            # None or -1: the cluster's default (Kafka's CreatableTopic uses -1).
            if num_partitions is not None and num_partitions != -1 and num_partitions <= 0:
                raise InvalidPartitionsError("Number of partitions was set to an invalid "
                                             "non-positive value.")
            if replication_factor is not None and replication_factor != -1 \
                    and replication_factor <= 0:
                raise InvalidReplicationFactorError("Replication factor must be larger than "
                                                    "0, or -1 to use the default value.")
            n = self.config["num.partitions"] if num_partitions in (None, -1) \
                else num_partitions
            rf = self.config["default.replication.factor"] if replication_factor in (None, -1) \
                else replication_factor
            assignment = assign_replicas_to_brokers(self._placement(), n, rf,
                                                    fixed_start_index, rng=self.rng)
        else:
            self._validate_assignment(assignment)
        self.topics[name] = TOPIC_CONFIG.parse(config or {}, defaults=False)
        self.topic_ids[name] = new_kafka_uuid(self.rng)
        for p, replicas in sorted(assignment.items()):
            self._new_partition((name, p), replicas)
        return self._leader_and_isr_all([(name, p) for p in assignment], is_new=True) \
            + self._update_metadata()

    def _placement(self) -> list[int] | dict[int, str | None]:
        live = self.live_brokers()
        if any(self.brokers[b].rack is not None for b in live):
            return {b: self.brokers[b].rack for b in live}
        return live

    def _validate_assignment(self, assignment: Mapping[int, list[int]]) -> None:
        live = set(self.live_brokers())
        sizes = {len(r) for r in assignment.values()}
        if len(sizes) != 1:
            raise InvalidReplicaAssignmentError("All partitions should have the same number "
                                                "of replicas")
        for p, replicas in assignment.items():
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(f"Duplicate replica assignment for "
                                                    f"partition {p}: {replicas}")
            unknown = [r for r in replicas if r not in live]
            if unknown:
                raise InvalidReplicaAssignmentError(f"Unknown broker(s) {unknown} in the "
                                                    f"assignment of partition {p}")

    def _new_partition(self, tp: TopicPartition, replicas: list[int]) -> None:
        live = set(self.live_brokers())
        isr = [r for r in replicas if r in live]
        leader = isr[0] if isr else NO_LEADER
        self.partitions[tp] = PartitionState(leader, 0, 0, list(replicas), isr)
        self.partition_states.move(tp, PartitionStatus.NEW)

    def delete_topic(self, name: str) -> list:
        if not self.config["delete.topic.enable"]:
            raise TopicDeletionDisabledError("Topic deletion is disabled "
                                             "(delete.topic.enable=false)")
        if name not in self.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
        msgs = []
        for tp in [tp for tp in self.partitions if tp[0] == name]:
            st = self.partitions.pop(tp)
            self.partition_states.move(tp, PartitionStatus.OFFLINE)
            self.partition_states.move(tp, PartitionStatus.NON_EXISTENT)
            self._delete_replica_states(tp, st.replicas)
            msgs += [StopReplica(self.controller_epoch, r, tp[0], tp[1], True)
                     for r in st.replicas if r in self.live_brokers()]
        del self.topics[name]
        self.topic_ids.pop(name, None)
        return msgs + self._update_metadata()

    def create_partitions(self, name: str, total: int,
                          assignment: Mapping[int, list[int]] | None = None) -> list:
        if name not in self.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
        existing = sorted(p for t, p in self.partitions if t == name)
        if total <= len(existing):
            raise InvalidPartitionsError(f"Topic currently has {len(existing)} partitions, "
                                         f"{total} would not be an increase.")
        rf = len(self.partitions[(name, existing[0])].replicas)
        if assignment is None:
            assignment = assign_replicas_to_brokers(self._placement(), total - len(existing),
                                                    rf, start_partition_id=len(existing),
                                                    rng=self.rng)
        else:
            self._validate_assignment(assignment)
        for p, replicas in assignment.items():
            self._new_partition((name, p), replicas)
        return self._leader_and_isr_all([(name, p) for p in assignment], is_new=True) \
            + self._update_metadata()

    # ==== elections =======================================================================
    def _set_leader(self, st: PartitionState, leader: int, isr: list[int]) -> None:
        if leader != st.leader:
            st.leader_epoch += 1
        st.leader = leader
        st.isr = isr
        st.partition_epoch += 1

    def _elect(self, tp: TopicPartition, offline: bool = False) -> bool:
        """OfflinePartition election for ``tp``; True if its state changed."""
        st = self.partitions[tp]
        live = set(self.live_brokers())
        unclean = bool(self.topics.get(tp[0], {}).get(
            "unclean.leader.election.enable", self.config["unclean.leader.election.enable"]))
        e = offline_partition_leader(st.replicas, st.isr, live, unclean)
        if e.leader is None:
            if st.leader != NO_LEADER:
                st.leader = NO_LEADER
                st.leader_epoch += 1
                st.partition_epoch += 1
                return True
            return False
        new_isr = [e.leader] if e.unclean else [r for r in st.isr if r in live]
        if e.leader == st.leader and new_isr == st.isr:
            return False
        self._set_leader(st, e.leader, new_isr)
        return True

    def elect_preferred_leaders(self, partitions: Iterable[TopicPartition] | None = None) -> list:
        live = set(self.live_brokers())
        changed = []
        for tp in (partitions if partitions is not None else list(self.partitions)):
            st = self.partitions.get(tuple(tp))
            if st is None:
                raise UnknownTopicOrPartitionError(f"Unknown partition {tp}")
            e = preferred_replica_leader(st.replicas, st.isr, live)
            if e.leader is not None and e.leader != st.leader:
                self._set_leader(st, e.leader, st.isr)
                changed.append(tuple(tp))
        return self._leader_and_isr_all(changed) + (self._update_metadata() if changed else [])

    def leader_imbalance(self) -> dict[int, float]:
        """Per preferred broker: share of its preferred partitions led by someone else."""
        preferred: dict[int, list[PartitionState]] = {}
        for st in self.partitions.values():
            preferred.setdefault(st.replicas[0], []).append(st)
        return {b: sum(1 for st in sts if st.leader != b) / len(sts)
                for b, sts in preferred.items()}

    def auto_rebalance_check(self) -> list:
        """The periodic task: preferred elections on brokers whose imbalance is above
        leader.imbalance.per.broker.percentage."""
        if not self.config["auto.leader.rebalance.enable"]:
            return []
        threshold = self.config["leader.imbalance.per.broker.percentage"] / 100
        live = set(self.live_brokers())
        imbalance = self.leader_imbalance()
        targets = [tp for tp, st in self.partitions.items()
                   if st.replicas[0] in live and st.replicas[0] not in self.shutting_down
                   and imbalance.get(st.replicas[0], 0) > threshold
                   and st.leader != st.replicas[0]]
        return self.elect_preferred_leaders(targets) if targets else []

    # ==== AlterPartition and reassignment =================================================
    def alter_partition(self, topic: str, partition: int, broker_id: int, leader_epoch: int,
                        partition_epoch: int, new_isr: Iterable[int]) -> list:
        st = self.partitions.get((topic, partition))
        if st is None:
            raise UnknownTopicOrPartitionError(f"Unknown partition {topic}-{partition}")
        new_isr = list(new_isr)
        if broker_id != st.leader or leader_epoch != st.leader_epoch:
            raise FencedLeaderEpochError(
                f"AlterPartition for {topic}-{partition} from broker {broker_id} with leader "
                f"epoch {leader_epoch}; the leader is {st.leader} in epoch {st.leader_epoch}")
        if partition_epoch != st.partition_epoch:
            if new_isr == st.isr:
                # A retry whose first attempt was applied but whose answer was lost: the
                # state is already what the leader wants (Kafka answers it the same way).
                return []
            raise InvalidUpdateVersionError(
                f"AlterPartition for {topic}-{partition} at partition epoch {partition_epoch}"
                f", current is {st.partition_epoch}")
        isr = new_isr
        live = set(self.live_brokers())
        bad = [r for r in isr if r not in st.replicas or r not in live]
        if bad or st.leader not in isr:
            raise InvalidRequestError(f"Proposed ISR {isr} for {topic}-{partition} holds "
                                      f"replicas that are not live members of {st.replicas}, "
                                      "or leaves out the leader")
        st.isr = isr
        st.partition_epoch += 1
        msgs = self._maybe_complete_reassignment((topic, partition))
        return msgs + self._update_metadata()

    def reassign_partitions(self, targets: Mapping[TopicPartition, list[int]]) -> list:
        """Start moving partitions to new replica lists: AR becomes new + old until the new
        replicas are in the ISR (reported through AlterPartition), then the old ones go."""
        live = set(self.live_brokers())
        changed = []
        for tp, new in targets.items():
            tp = tuple(tp)
            st = self.partitions.get(tp)
            if st is None:
                raise UnknownTopicOrPartitionError(f"Unknown partition {tp}")
            if not new or len(set(new)) != len(new) or any(r not in live for r in new):
                raise InvalidReplicaAssignmentError(f"Invalid target replicas {new} for {tp}")
            st.adding_replicas = [r for r in new if r not in st.replicas]
            st.removing_replicas = [r for r in st.replicas if r not in new]
            st.replicas = list(new) + st.removing_replicas
            st.partition_epoch += 1
            changed.append(tp)
        msgs = self._leader_and_isr_all(changed)
        for tp in changed:
            msgs += self._maybe_complete_reassignment(tp)
        return msgs + self._update_metadata()

    def cancel_reassignment(self, tp: TopicPartition) -> list:
        st = self.partitions.get(tuple(tp))
        if st is None:
            raise UnknownTopicOrPartitionError(f"Unknown partition {tp}")
        if not st.adding_replicas and not st.removing_replicas:
            raise NoReassignmentInProgressError(f"No reassignment in progress for {tp}")
        st.replicas = [r for r in st.replicas if r not in st.adding_replicas]
        st.isr = [r for r in st.isr if r in st.replicas]
        st.adding_replicas, st.removing_replicas = [], []
        st.partition_epoch += 1
        return self._leader_and_isr_all([tuple(tp)]) + self._update_metadata()

    def ongoing_reassignments(self, tps: Iterable[TopicPartition] | None = None
                              ) -> list[tuple[str, int, list[int], list[int], list[int]]]:
        """The reassignments in flight (of ``tps``, or all): ``(topic, partition, replicas,
        adding, removing)``, replicas being the target and the replicas still leaving."""
        wanted = sorted(self.partitions) if tps is None else [tuple(tp) for tp in tps]
        return [(t, p, list(st.replicas), list(st.adding_replicas), list(st.removing_replicas))
                for t, p in wanted
                if (st := self.partitions.get((t, p))) is not None
                and (st.adding_replicas or st.removing_replicas)]

    def _maybe_complete_reassignment(self, tp: TopicPartition) -> list:
        st = self.partitions[tp]
        if not (st.adding_replicas or st.removing_replicas):
            return []
        if any(r not in st.isr for r in st.adding_replicas):
            return []  # still catching up
        target = [r for r in st.replicas if r not in st.removing_replicas]
        removed = st.removing_replicas
        st.replicas = target
        st.isr = [r for r in st.isr if r in target]
        st.adding_replicas, st.removing_replicas = [], []
        if st.leader not in target:
            e = reassign_partition_leader(target, st.isr, set(self.live_brokers()))
            self._set_leader(st, e.leader if e.leader is not None else NO_LEADER, st.isr)
        else:
            st.partition_epoch += 1
        msgs = self._leader_and_isr_all([tp])
        self._delete_replica_states(tp, removed)
        return msgs + [StopReplica(self.controller_epoch, r, tp[0], tp[1], True)
                       for r in removed if r in self.live_brokers()]

    # ==== outputs =========================================================================
    def _leader_and_isr(self, tp: TopicPartition, only: int | None = None,
                        is_new: bool = False) -> list[LeaderAndIsr]:
        st = self.partitions[tp]
        live = set(self.live_brokers())
        return [LeaderAndIsr(self.controller_epoch, r, tp[0], tp[1], st.leader, st.leader_epoch,
                             st.partition_epoch, tuple(st.isr), tuple(st.replicas), is_new)
                for r in st.replicas if r in live and (only is None or r == only)]

    def _leader_and_isr_all(self, tps: Iterable[TopicPartition], is_new: bool = False) -> list:
        tps = list(tps)
        for tp in tps:
            self._sync_states(tp)
        return [m for tp in tps for m in self._leader_and_isr(tp, is_new=is_new)]

    def _update_metadata(self) -> list[UpdateMetadata]:
        image = self.metadata_image()
        return [UpdateMetadata(self.controller_epoch, b, image) for b in self.live_brokers()]

    def alter_topic_config(self, name: str, changes: Mapping[str, Any]) -> list:
        """IncrementalAlterConfigs for a topic: set the given keys, remove those set to
        None (back to the broker default)."""
        if name not in self.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
        removed = [TOPIC_CONFIG.normalize_name(k) for k, v in changes.items() if v is None]
        updated = TOPIC_CONFIG.parse({k: v for k, v in changes.items() if v is not None},
                                     defaults=False)
        config = {k: v for k, v in self.topics[name].items() if k not in removed}
        config.update(updated)
        self.topics[name] = config
        return self._update_metadata()

    def alter_user_scram_credentials(self, deletions: list, upsertions: list) -> tuple:
        """AlterUserScramCredentials: (the brokers' updates, [(user, error or None)])."""
        from actors.controller.scram_credentials import alter
        self.scram_credentials, results = alter(self.scram_credentials, deletions, upsertions)
        changed = any(error is None for _, error in results)
        return (self._update_metadata() if changed else []), results

    def alter_client_quotas(self, alterations: list, validate_only: bool) -> tuple:
        """AlterClientQuotas: (the brokers' updates, [(entity, error or None)])."""
        from actors.controller.client_quotas import alter
        after, results = alter(self.client_quotas, alterations, validate_only)
        changed = after != self.client_quotas
        self.client_quotas = after
        return (self._update_metadata() if changed else []), results

    def create_acls(self, creations: list) -> tuple:
        """CreateAcls: (the brokers' updates, an error or None per creation)."""
        from actors.controller.acls import create
        after, results = create(self.acls, creations)
        changed = after != self.acls
        self.acls = after
        return (self._update_metadata() if changed else []), results

    def delete_acls(self, filters: list) -> tuple:
        """DeleteAcls: (the brokers' updates, per filter the ACLs removed or its error)."""
        from actors.controller.acls import delete
        after, results = delete(self.acls, filters)
        changed = len(after) != len(self.acls)
        self.acls = after
        return (self._update_metadata() if changed else []), results

    def metadata_image(self) -> dict:
        live = set(self.live_brokers())
        topics: dict[str, dict] = {name: {} for name in sorted(self.topics)}
        # One pass over the partitions (sorted), not one per topic: this image goes out
        # after every ISR change.
        for (t, p), st in sorted(self.partitions.items()):
            entries = topics.get(t)
            if entries is not None:
                entries[p] = {"leader": st.leader, "leader_epoch": st.leader_epoch,
                              "replicas": list(st.replicas), "isr": list(st.isr),
                              "offline_replicas": [r for r in st.replicas if r not in live]}
                if st.adding_replicas:   # a reassignment's: not yet counted as missing
                    entries[p]["adding_replicas"] = list(st.adding_replicas)
        return {
            "controller_epoch": self.controller_epoch,
            "cluster_id": self.cluster_id,
            "brokers": {b: {"rack": i.rack, "incarnation": i.incarnation,
                            "endpoints": i.endpoints}
                        for b, i in sorted(self.brokers.items()) if i.alive},
            "topics": topics,
            "topic_ids": {name: self.topic_ids[name] for name in topics},
            "configs": {name: dict(cfg) for name, cfg in sorted(self.topics.items())},
            "scram_credentials": self.scram_credentials,
            "acls": self.acls,
            "client_quotas": to_stored(self.client_quotas),
        }

    def describe_topic(self, name: str) -> list[str]:
        """Kafka's kafka-topics.sh --describe partition lines."""
        if name not in self.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
        return [f"\tTopic: {name}\tPartition: {p}\tLeader: "
                f"{st.leader if st.leader != NO_LEADER else 'none'}\t"
                f"Replicas: {','.join(map(str, st.replicas))}\t"
                f"Isr: {','.join(map(str, st.isr))}"
                for (t, p), st in sorted(self.partitions.items()) if t == name]

    # ==== failover ========================================================================
    def to_snapshot(self) -> dict:
        return {
            "controller_epoch": self.controller_epoch,
            "config": dict(self.config),
            "brokers": [asdict(b) for b in self.brokers.values()],
            "topics": {name: dict(cfg) for name, cfg in self.topics.items()},
            # By hand, not asdict (which deep-copies field by field): a checkpoint follows
            # every change, and asdict over 1,000 partitions took ~23 ms of the event loop.
            "partitions": [[t, p, {"leader": st.leader, "leader_epoch": st.leader_epoch,
                                   "partition_epoch": st.partition_epoch,
                                   "replicas": list(st.replicas), "isr": list(st.isr),
                                   "adding_replicas": list(st.adding_replicas),
                                   "removing_replicas": list(st.removing_replicas)}]
                           for (t, p), st in self.partitions.items()],
            "replica_states": [[t, p, r, s.value]
                               for (t, p, r), s in self.replica_states.states.items()],
            "next_producer_id": self.next_producer_id,
            "next_broker_epoch": self.next_broker_epoch,
            "cluster_id": self.cluster_id,
            "topic_ids": dict(self.topic_ids),
            "scram_credentials": self.scram_credentials,
            "acls": self.acls,
            "client_quotas": to_stored(self.client_quotas),
        }

    @classmethod
    def from_snapshot(cls, snapshot: Mapping[str, Any],
                      clock: Callable[[], int]) -> "ControllerState":
        """The next controller: same image, controller epoch + 1, brokers' sessions
        restarted (each must heartbeat within the session timeout)."""
        state = cls(clock, snapshot["config"], controller_epoch=snapshot["controller_epoch"] + 1)
        now = clock()
        for b in snapshot["brokers"]:
            b = dict(b)
            if "endpoint" in b:   # a snapshot from before the field said what it holds
                b["incarnation"] = b.pop("endpoint")
            info = BrokerInfo(**b)
            info.last_heartbeat_ms = now
            state.brokers[info.broker_id] = info
        state.topics = {n: dict(c) for n, c in snapshot["topics"].items()}
        for t, p, st in snapshot["partitions"]:
            state.partitions[(t, p)] = PartitionState(**st)
            state.partition_states.states[(t, p)] = (
                PartitionStatus.ONLINE if st["leader"] != NO_LEADER else PartitionStatus.OFFLINE)
        for t, p, r, value in snapshot.get("replica_states", []):
            state.replica_states.states[(t, p, r)] = ReplicaStatus(value)
        state.next_producer_id = snapshot.get("next_producer_id", 0)
        state.next_broker_epoch = snapshot.get("next_broker_epoch", 1 + max(
            (b.broker_epoch for b in state.brokers.values()), default=-1))
        # A snapshot from before topic ids: the ids are made now and kept from then on.
        state.cluster_id = snapshot.get("cluster_id", state.cluster_id)
        state.topic_ids = dict(snapshot.get("topic_ids", {}))
        state.scram_credentials = {u: dict(m) for u, m in
                                   snapshot.get("scram_credentials", {}).items()}
        state.client_quotas = from_stored(snapshot.get("client_quotas", ()))
        state.acls = [list(a) for a in snapshot.get("acls", [])]
        for name in sorted(state.topics):
            state.topic_ids.setdefault(name, new_kafka_uuid(state.rng))
        return state
