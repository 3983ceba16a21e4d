"""The gauges Kafka's ReplicaManager and KafkaController report, read off the metadata image
(pure: no Ray). A broker counts the partitions it holds and leads; the controller the
cluster's offline ones."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

NO_LEADER = -1


@dataclass
class ReplicaManagerGauges:
    partition_count: int = 0            # PartitionCount: replicas on this broker
    leader_count: int = 0               # LeaderCount
    under_replicated: int = 0           # UnderReplicatedPartitions: led here, ISR < replicas
    under_min_isr: int = 0              # UnderMinIsrPartitionCount: led here, ISR < min ISR
    at_min_isr: int = 0                 # AtMinIsrPartitionCount
    # (topic, partition) -> 1 / 0 for each partition led here (Partition's UnderMinIsr).
    under_min_isr_by_partition: dict = field(default_factory=dict)


def replica_manager_gauges(image: Mapping[str, Any], broker_id: int,
                           default_min_isr: int) -> ReplicaManagerGauges:
    g = ReplicaManagerGauges()
    configs = image.get("configs", {})
    for topic, partitions in image.get("topics", {}).items():
        min_isr = int(configs.get(topic, {}).get("min.insync.replicas", default_min_isr))
        for partition, st in partitions.items():
            if broker_id not in st["replicas"]:
                continue
            g.partition_count += 1
            if st["leader"] != broker_id:
                continue
            g.leader_count += 1
            isr, replicas = len(st["isr"]), len(st["replicas"])
            # Kafka's replicationFactor: a reassignment's replicas being added are not
            # missing from the ISR until they are in the assignment for good.
            g.under_replicated += isr < replicas - len(st.get("adding_replicas", ()))
            # Kafka's Partition: min.insync.replicas, at most the replicas there are.
            effective = min(min_isr, replicas)
            under = isr < effective
            g.under_min_isr += under
            g.at_min_isr += isr == effective
            g.under_min_isr_by_partition[topic, int(partition)] = int(under)
    return g


@dataclass
class ControllerGauges:
    active_controller_count: int = 0     # ActiveControllerCount
    offline_partitions_count: int = 0    # OfflinePartitionsCount: no leader
    global_partition_count: int = 0      # GlobalPartitionCount
    global_topic_count: int = 0          # GlobalTopicCount
    preferred_replica_imbalance_count: int = 0   # PreferredReplicaImbalanceCount


def controller_gauges(active: bool, topic_count: int,
                      partitions: Iterable[tuple[int, Sequence[int]]]) -> ControllerGauges:
    """``partitions``: (leader, replicas) of each partition in the cluster."""
    g = ControllerGauges(active_controller_count=int(active))
    if not active:   # only the active controller reports the cluster's counts, as Kafka's
        return g
    g.global_topic_count = topic_count
    for leader, replicas in partitions:
        g.global_partition_count += 1
        g.offline_partitions_count += leader == NO_LEADER
        g.preferred_replica_imbalance_count += bool(replicas) and leader != replicas[0]
    return g
