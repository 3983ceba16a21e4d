"""Every Ray actor name rafka uses, in one place.

All of a cluster's actors live in the Ray namespace ``rafka-<cluster name>``, so
``ray list actors`` shows the cluster and two clusters on one Ray instance never collide.
"""
from __future__ import annotations

CONTROLLER = "controller"


def namespace_for(cluster_name: str) -> str:
    return f"rafka-{cluster_name}"


def broker_name(broker_id: int) -> str:
    return f"broker-{broker_id}"


def timer_name(node_id: str) -> str:
    """The timing-wheel scheduler of a Ray node, shared by the brokers on it."""
    return f"timer-{node_id}"


def coordinator_name(broker_id: int) -> str:
    return f"coordinator-{broker_id}"


def txn_coordinator_name(broker_id: int) -> str:
    return f"txn-coordinator-{broker_id}"


def replica_host_name(broker_id: int, index: int) -> str:
    """A shared replica host of a broker (``num.replica.hosts`` of them per broker)."""
    return f"replica-host-{broker_id}-{index}"


def dedicated_host_name(topic: str, partition: int, broker_id: int) -> str:
    """The host of its own that a ``replica.placement=dedicated`` topic's replica gets."""
    return f"replica-{topic}-{partition}-{broker_id}"
