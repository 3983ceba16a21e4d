"""The broker's guard on controller requests, and the order the controller queues them in.
The requests themselves (LeaderAndIsr, StopReplica, UpdateMetadata) are in
``protocols.messages``; each carries the controller epoch, so a broker can reject one from a
controller that has since been replaced."""
from __future__ import annotations

from collections import deque

from protocols.errors import StaleControllerEpochError
from protocols.messages import LeaderAndIsr, UpdateMetadata


def check_controller_epoch(current: int, received: int) -> None:
    """A broker's guard: requests from an older controller are refused."""
    if received < current:
        raise StaleControllerEpochError(
            f"Received a request with controller epoch {received}, older than the current "
            f"controller epoch {current}")


def queue_batch(waiting: deque[list], batch: list) -> None:
    """Queue one change's messages for a broker behind those not sent yet.

    An UpdateMetadata is the whole image, so one not sent yet is superseded by a newer one
    (at 1,000 partitions each is ~70 KB, and every ISR change makes one). The newest image
    takes the place of the first one waiting beside a LeaderAndIsr, not the end of the
    queue: that LeaderAndIsr, queued before it, must still reach the broker with an image
    naming its topic, whose configs (min.insync.replicas, retention, ...) the replica opens
    with. Kafka's controller likewise sends a starting broker its UpdateMetadata before any
    LeaderAndIsr."""
    newest = next((m for m in reversed(batch) if isinstance(m, UpdateMetadata)), None)
    if newest is not None:
        placed = False
        for queued in waiting:
            at = [i for i, m in enumerate(queued) if isinstance(m, UpdateMetadata)]
            if not at:
                continue
            # Only a batch with a LeaderAndIsr needs its image; one that was an image alone
            # empties and is not sent, so a change is still one request per broker.
            if not placed and any(isinstance(m, LeaderAndIsr) for m in queued):
                queued[at[0]] = newest
                at = at[1:]
                placed = True
            for i in reversed(at):
                del queued[i]
        if placed:
            batch = [m for m in batch if not isinstance(m, UpdateMetadata)]
    waiting.append(batch)
