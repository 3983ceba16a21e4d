"""What a consumer knows of each partition it is assigned (Kafka's SubscriptionState and its
TopicPartitionState): the position, pause, the leader epochs it has read and fetches in,
the fetch in flight and the records fetched and not yet polled."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartitionState:
    position: int | None = None
    paused: bool = False
    last_epoch: int = -1          # leader epoch of the last batch consumed
    leader_epoch: int = -1        # the leader epoch our fetches are sent in
    validated_epoch: int = -1     # position checked against this leader epoch
    in_flight: Any = None         # the HostFetch its next records come in
    buffered: deque = field(default_factory=deque)   # fetched, not yet polled: BufferedChunks
    last_fetched: int = 0         # how many records the last fetch brought
    retry_at: float = 0.0

    def next_fetch_offset(self) -> int:
        """Where the next fetch starts: after what is buffered, else at the position."""
        if self.buffered:
            return self.buffered[-1].next_offset
        return self.position

    def buffered_records(self) -> int:
        return sum(len(c.offsets) - c.start for c in self.buffered)
