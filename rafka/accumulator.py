"""The producer's RecordAccumulator: per-partition queues of batches (pure; the producer's
shell adds the lock and the sender thread).

A record joins the last open batch of its partition while that batch has room under
``batch.size`` (a record bigger than that gets a batch of its own); a partition is ready to
send when its first batch is full, has waited ``linger.ms``, is a retry whose backoff ended,
or the producer is flushing or closing. Batches that sit longer than ``delivery.timeout.ms``
expire. ``buffer.memory`` bounds the bytes held.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from protocols.records import Record
from protocols.topics import TopicPartition
from rafka.futures import ProduceRequestResult

RECORD_OVERHEAD = 21  # a v2 record's framing, roughly: length, attributes, deltas, counts
BATCH_HEADER = 61     # a v2 batch header


def estimate_size(record: Record) -> int:
    size = RECORD_OVERHEAD + len(record.key or b"") + len(record.value or b"")
    for k, v in record.headers:
        size += len(k) + len(v or b"") + 2
    return size


@dataclass
class ProducerBatch:
    tp: TopicPartition
    created_ms: int
    records: list[Record] = field(default_factory=list)
    result: ProduceRequestResult = field(default_factory=ProduceRequestResult)
    size: int = BATCH_HEADER
    attempts: int = 0
    retry_at_ms: int = 0
    base_sequence: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    closed: bool = False

    def has_room(self, size: int, batch_size: int) -> bool:
        return not self.closed and (not self.records or self.size + size <= batch_size)


class RecordAccumulator:
    def __init__(self, batch_size: int, linger_ms: int, buffer_memory: int,
                 delivery_timeout_ms: int):
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.used_bytes = 0
        self.flushing = 0
        self.closing = False

    def has_room_for(self, size: int) -> bool:
        return self.used_bytes == 0 or self.used_bytes + size <= self.buffer_memory

    def append(self, tp: TopicPartition, record: Record,
               now_ms: int) -> tuple[bool, ProducerBatch, int]:
        """Add the record: (whether it started a new batch, the batch, the record's index in
        it). A new batch lets the sticky partitioner move on, as Kafka's onNewBatch."""
        size = estimate_size(record)
        queue = self.batches.setdefault(tp, deque())
        new = not queue or not queue[-1].has_room(size, self.batch_size) \
            or queue[-1].attempts > 0
        if new:
            queue.append(ProducerBatch(tp, now_ms))
        batch = queue[-1]
        batch.records.append(record)
        batch.size += size
        self.used_bytes += size
        if batch.size >= self.batch_size:
            batch.closed = True
        return new, batch, len(batch.records) - 1

    def ready(self, now_ms: int) -> tuple[list[TopicPartition], int | None]:
        """Partitions with a batch to send now, and when the next one will be (ms)."""
        ready, next_ms = [], None
        for tp, queue in self.batches.items():
            if not queue:
                continue
            first = queue[0]
            if first.attempts > 0:
                due = first.retry_at_ms
            elif first.closed or len(queue) > 1 or self.flushing or self.closing:
                due = now_ms
            else:
                due = first.created_ms + self.linger_ms
            if due <= now_ms:
                ready.append(tp)
            elif next_ms is None or due < next_ms:
                next_ms = due
        return ready, next_ms

    def drain(self, tp: TopicPartition) -> ProducerBatch:
        batch = self.batches[tp].popleft()
        batch.closed = True
        return batch

    def reenqueue(self, batch: ProducerBatch, retry_at_ms: int) -> None:
        """A retried batch goes back in front of newer ones, in sequence order."""
        batch.retry_at_ms = retry_at_ms
        queue = self.batches.setdefault(batch.tp, deque())
        i = 0
        while (i < len(queue) and queue[i].attempts > 0 and batch.base_sequence >= 0
               and 0 <= queue[i].base_sequence < batch.base_sequence):
            i += 1
        queue.insert(i, batch)

    def release(self, batch: ProducerBatch) -> None:
        """The batch is answered (or failed for good): its bytes are free again."""
        self.used_bytes -= batch.size - BATCH_HEADER

    def expired(self, now_ms: int) -> list[ProducerBatch]:
        """Batches still queued after delivery.timeout.ms (removed)."""
        out = []
        for queue in self.batches.values():
            while queue and now_ms - queue[0].created_ms >= self.delivery_timeout_ms:
                out.append(queue.popleft())
        return out

    def queued(self) -> int:
        return sum(len(q) for q in self.batches.values())
