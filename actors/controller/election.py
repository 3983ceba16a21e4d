"""Partition leader election strategies (Kafka's PartitionLeaderElectionAlgorithms).

All walk the assigned replicas (AR) in order, so the preferred replica wins when it can.
"""
from __future__ import annotations

from typing import Collection, NamedTuple, Sequence


class Election(NamedTuple):
    leader: int | None
    unclean: bool = False


def offline_partition_leader(assignment: Sequence[int], isr: Collection[int],
                             live: Collection[int], unclean_enabled: bool = False) -> Election:
    """First live replica in AR order that is in the ISR; with unclean election enabled and
    no such replica, the first live replica at all (availability over consistency)."""
    for r in assignment:
        if r in live and r in isr:
            return Election(r)
    if unclean_enabled:
        for r in assignment:
            if r in live:
                return Election(r, unclean=True)
    return Election(None)


def reassign_partition_leader(reassignment: Sequence[int], isr: Collection[int],
                              live: Collection[int]) -> Election:
    """First live replica of the new AR that is in the ISR."""
    return offline_partition_leader(reassignment, isr, live)


def preferred_replica_leader(assignment: Sequence[int], isr: Collection[int],
                             live: Collection[int]) -> Election:
    """The first replica of AR, if it is live and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return Election(assignment[0])
    return Election(None)


def controlled_shutdown_leader(assignment: Sequence[int], isr: Collection[int],
                               live: Collection[int],
                               shutting_down: Collection[int]) -> Election:
    """First live replica in AR that is in the ISR and not on a broker shutting down."""
    for r in assignment:
        if r in live and r in isr and r not in shutting_down:
            return Election(r)
    return Election(None)
