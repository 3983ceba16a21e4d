"""Which of a broker's replica hosts holds a replica: a stable rule, so a broker that
restarts with the same number of hosts puts every replica where it was, and the partitions
of one topic spread evenly over the hosts (consecutive partitions, consecutive hosts)."""
from __future__ import annotations

import zlib


def default_num_replica_hosts(node_cpus: float, brokers_on_node: int) -> int:
    """``num.replica.hosts`` when it is not set: one host per CPU of the node, shared among
    the brokers on it, at least one each."""
    return max(1, int(node_cpus) // max(1, brokers_on_node))


def host_index(topic: str, partition: int, num_hosts: int) -> int:
    # crc32, not hash(): Python salts str hashes per process, and the rule must agree
    # across restarts.
    return (zlib.crc32(topic.encode()) + partition) % num_hosts
