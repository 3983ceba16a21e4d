"""Replica placement when a topic is created or grows (Kafka's AdminUtils / seed 001 §10.3).

Rack-unaware: partition p's first replica goes to broker index (p + startIndex) % n, and
replica j >= 1 to (first + 1 + (shift + j - 1) % (n - 1)) % n, where ``shift`` grows by one
every n partitions; startIndex and the initial shift are random unless fixed. Rack-aware
placement runs the same walk over brokers interleaved by rack and skips a broker whose rack
(or itself) already holds a replica, until every rack (every broker) does.
"""
from __future__ import annotations

import random
from typing import Mapping, Sequence

from protocols.errors import (InvalidPartitionsError, InvalidReplicaAssignmentError,
                              InvalidReplicationFactorError)


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_replicas_to_brokers(brokers: Sequence[int] | Mapping[int, str | None],
                               n_partitions: int, replication_factor: int,
                               fixed_start_index: int = -1, start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """partition id -> replica list (first = preferred leader). ``brokers`` is a list of ids
    (rack-unaware) or a dict id -> rack (rack-aware when every broker has a rack)."""
    rng = rng or random.Random()
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    ids = sorted(brokers)
    if replication_factor > len(ids):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(ids)}.")
    if isinstance(brokers, Mapping):
        racks = {b: brokers[b] for b in ids}
        with_rack = [b for b in ids if racks[b] is not None]
        if with_rack and len(with_rack) != len(ids):
            raise InvalidReplicaAssignmentError(
                "Not all brokers have rack information for replica rack aware assignment.")
        if with_rack:
            return _rack_aware(racks, n_partitions, replication_factor, fixed_start_index,
                               start_partition_id, rng)
    return _rack_unaware(ids, n_partitions, replication_factor, fixed_start_index,
                         start_partition_id, rng)


def _walk(n: int, n_partitions: int, fixed_start_index: int, start_partition_id: int,
          rng: random.Random):
    """Kafka's walk over ``n`` brokers, shared by both placements: per partition, the index
    of its first replica and the shift of the others (one more after every ``n``
    partitions), from a random start unless ``fixed_start_index`` is given."""
    if fixed_start_index >= 0:
        start_index = shift = fixed_start_index
    else:
        start_index, shift = rng.randrange(n), rng.randrange(n)
    for partition in range(max(0, start_partition_id),
                           max(0, start_partition_id) + n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        yield partition, (partition + start_index) % n, shift


def _rack_unaware(ids: list[int], n_partitions: int, rf: int, fixed_start_index: int,
                  start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    n = len(ids)
    return {partition: [ids[first]] + [ids[_replica_index(first, shift, j, n)]
                                       for j in range(rf - 1)]
            for partition, first, shift in _walk(n, n_partitions, fixed_start_index,
                                                 start_partition_id, rng)}


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """One broker from each rack in turn (racks and brokers in sorted order)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    iters = [iter(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        nxt = next(iters[i], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(iters)
    return out


def _rack_aware(racks: Mapping[int, str], n_partitions: int, rf: int, fixed_start_index: int,
                start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    n_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    for partition, first, shift in _walk(n, n_partitions, fixed_start_index,
                                         start_partition_id, rng):
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                k += 1
                rack = racks[broker]
                if ((rack not in racks_used or len(racks_used) == n_racks)
                        and (broker not in brokers_used or len(brokers_used) == n)):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[partition] = replicas
    return out
