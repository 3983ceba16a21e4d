"""AlterPartitionSender: a leader's ISR change on its way to the controller, pure (Kafka's
AlterPartitionManager, for one partition).

The core (``PartitionReplica``) holds at most one pending proposal; the sender says when to
send it: at most one request in flight, sent again when its answer has not come within
``retry_ms`` or the request failed; an answer applies only if the core still holds that
proposal (a LeaderAndIsr, or an ISR change after it, may have replaced it), and a newer
proposal goes once the one in flight is answered. ``HostedReplica`` sends what it says over
Ray; ``tests.sim`` over its simulated network.
"""
from __future__ import annotations

from typing import Callable

from actors.replica.partition import AlterPartition, PartitionReplica
from protocols.errors import KafkaError


class AlterPartitionSender:
    def __init__(self, replica: PartitionReplica, clock: Callable[[], int], retry_ms: int):
        self.replica = replica
        self.clock = clock
        self.retry_ms = retry_ms
        self.in_flight: AlterPartition | None = None
        self.sent_ms = 0

    def next_to_send(self) -> AlterPartition | None:
        """The proposal to send now, if any: the core's pending one, unless a request is in
        flight and not yet given up on."""
        proposal = self.replica.take_alter_partition()
        if proposal is None:
            self.in_flight = None       # withdrawn (a LeaderAndIsr): nothing to wait for
            return None
        now = self.clock()
        if self.in_flight is not None and now - self.sent_ms < self.retry_ms:
            return None
        self.in_flight, self.sent_ms = proposal, now
        return proposal

    def on_answer(self, proposal: AlterPartition, isr: list[int] | None, partition_epoch: int,
                  error: KafkaError | None = None) -> None:
        """The controller's answer to ``proposal``: the new ISR and partition epoch, or the
        error refusing it (then the core proposes again when it still should)."""
        if self.in_flight is proposal:
            self.in_flight = None
        if self.replica.take_alter_partition() is proposal:
            self.replica.on_alter_partition_result(isr, partition_epoch, error)

    def on_failure(self, proposal: AlterPartition) -> None:
        """The request got no answer (no controller at the moment): it may go again."""
        if self.in_flight is proposal:
            self.in_flight = None
