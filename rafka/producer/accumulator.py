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
from typing import Callable

from protocols.records import RECORD_BATCH_OVERHEAD, MemoryRecordsBuilder
from protocols.topics import TopicPartition
from rafka.producer.futures import ProduceRequestResult

RECORD_OVERHEAD = 21  # the most a v2 record's framing takes: length, attributes, deltas, counts


def estimate_size(key: bytes | None, value: bytes | None, headers=()) -> int:
    """An upper bound of the record's encoded size, known before it is encoded."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for k, v in headers:
        size += len(k) + len(v or b"") + 10
    return size


@dataclass(eq=False)
class ProducerBatch:
    tp: TopicPartition
    created_ms: int
    builder: MemoryRecordsBuilder = field(default_factory=MemoryRecordsBuilder)
    result: ProduceRequestResult = field(default_factory=ProduceRequestResult)
    size: int = RECORD_BATCH_OVERHEAD
    attempts: int = 0
    retry_at_ms: int = 0
    base_sequence: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    closed: bool = False

    @property
    def record_count(self) -> int:
        return self.builder.count


class RecordAccumulator:
    def __init__(self, batch_size: int, linger_ms: int, buffer_memory: int,
                 delivery_timeout_ms: int, clock: Callable[[], int]):
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        self.clock = clock    # monotonic ms; read only when a batch is created
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.used_bytes = 0
        self.flushing = 0
        self.closing = False

    def has_room_for(self, size: int) -> bool:
        return self.used_bytes == 0 or self.used_bytes + size <= self.buffer_memory

    def append(self, tp: TopicPartition, timestamp: int, key: bytes | None,
               value: bytes | None, headers, size: int) -> tuple[bool, ProducerBatch, int]:
        """Encode the record into its partition's open batch (``size`` is its estimate):
        (whether it started a new batch, the batch, the record's index in it). A new batch
        lets the sticky partitioner move on, as Kafka's onNewBatch."""
        queue = self.batches.get(tp)
        if queue is None:
            queue = self.batches[tp] = deque()
        batch = queue[-1] if queue else None
        new = batch is None or batch.closed or batch.attempts > 0 \
            or (batch.builder.count and batch.size + size > self.batch_size)
        if new:
            batch = ProducerBatch(tp, self.clock())
            queue.append(batch)
        added = batch.builder.append(timestamp, key, value, headers)
        batch.size += added
        self.used_bytes += added
        if batch.size >= self.batch_size:
            batch.closed = True
        return new, batch, batch.builder.count - 1

    def append_built(self, tp: TopicPartition, builder: MemoryRecordsBuilder) -> ProducerBatch:
        """A batch built whole (``Producer.send_batch``): queued closed, after whatever the
        partition holds, so it goes as soon as the sender drains (no linger)."""
        batch = ProducerBatch(tp, self.clock(), builder=builder, size=builder.size_in_bytes,
                              closed=True)
        self.batches.setdefault(tp, deque()).append(batch)
        self.used_bytes += batch.size - RECORD_BATCH_OVERHEAD
        return batch

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

    def first(self, tp: TopicPartition) -> ProducerBatch:
        """The batch ``drain`` would take next."""
        return self.batches[tp][0]

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

    def split_and_reenqueue(self, batch: ProducerBatch, now_ms: int
                            ) -> list[tuple[int, ProducerBatch]]:
        """The broker refused ``batch`` as too large (MESSAGE_TOO_LARGE, Kafka's
        splitAndReenqueue): its records go back in front as two halves, sent at once. Each
        record keeps its sequence number, so an idempotent producer's order holds. Returns
        ``[(index of the part's first record in the batch, part)]``."""
        records = batch.builder.records()
        half = len(records) // 2
        parts = []
        for start, chunk in ((0, records[:half]), (half, records[half:])):
            part = ProducerBatch(batch.tp, batch.created_ms)
            for _delta, timestamp, key, value, headers in chunk:
                part.size += part.builder.append(timestamp, key, value, headers)
            part.closed = True
            part.attempts = batch.attempts      # a retry: ordered by sequence, no linger
            if batch.base_sequence >= 0:
                part.producer_id, part.producer_epoch = batch.producer_id, batch.producer_epoch
                part.base_sequence = (batch.base_sequence + start) % 2**31
            self.used_bytes += part.size - RECORD_BATCH_OVERHEAD
            parts.append((start, part))
        self.release(batch)
        first, second = parts[0][1], parts[1][1]
        self.reenqueue(first, now_ms)            # where the batch itself would go back
        queue = self.batches[batch.tp]
        second.retry_at_ms = now_ms
        queue.insert(queue.index(first) + 1, second)
        return parts

    def release(self, batch: ProducerBatch) -> None:
        """The batch is answered (or failed for good): its bytes are free again."""
        self.used_bytes -= batch.size - RECORD_BATCH_OVERHEAD

    def expired(self, now_ms: int) -> list[ProducerBatch]:
        """Batches still queued after delivery.timeout.ms (removed)."""
        out = []
        for queue in self.batches.values():
            while queue and now_ms - queue[0].created_ms >= self.delivery_timeout_ms:
                out.append(queue.popleft())
        return out

    def queued(self) -> int:
        return sum(len(q) for q in self.batches.values())
