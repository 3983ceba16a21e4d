"""Fetched records waiting to be polled (Kafka's CompletedFetch and FetchBuffer): a fetch
answer's batches for one partition appended to its buffer as columns, and taken from the
buffers in order, up to a limit. Shared by the consumer's fetcher and the readers of offset
ranges over the Kafka listener."""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable

from protocols.control_records import ABORT, control_record_type
from protocols.errors import KafkaError
from protocols.records import (CONTROL_MASK, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
                               RecordBatch, iter_batches)
from protocols.topics import TopicPartition
from rafka.consumer.subscription_state import PartitionState


@dataclass(eq=False, slots=True)
class BufferedChunk:
    """The records of consecutive fetched batches of one leader epoch and timestamp type
    not yet polled, kept as columns: a ConsumerRecord is made only when poll hands it out.
    (ConsumerRecords are tuple subclasses, which CPython's collector tracks for as long as
    they live: tens of thousands of them waiting in a buffer were promoted to the oldest
    generation and made every full collection slower, a third of the consumer's time at a
    million records a second.)"""
    epoch: int                     # the batch's partition leader epoch
    timestamp_type: int
    offsets: list | range         # a range when they run without a gap (Arrow chunks)
    timestamps: list
    keys: list
    values: list
    headers: list | None           # None: no record has headers
    # The batch's last offset + 1: where the position goes once the chunk is handed out.
    # Compaction leaves batches whose last records, or all of them, are gone (Kafka's
    # cleaner keeps the batch's last offset), so it can lie past the last record; a chunk
    # with no records at all still moves the position past its batch, as Kafka's fetcher
    # moves to the batch's nextOffset, else the next fetch would ask for the same batch.
    next_offset: int
    start: int = 0                 # the next one to hand out
    # Kept as Arrow arrays (timestamps, keys, values, headers) once poll_arrow is used: no
    # Python object per record at all (offsets stay a list: positions are Python ints).
    arrow: bool = False


class SkippedBatches:
    """Which fetched batches a consumer never hands out (Kafka's CompletedFetch): control
    batches (transaction markers) always; for read_committed, the transactional batches of
    a producer whose transaction the fetch answer lists as aborted, from that transaction's
    first offset until its ABORT marker."""

    def __init__(self, read_committed: bool, aborted: tuple | None):
        self.read_committed = read_committed
        # (first offset, producer id), oldest first: each joins ``producers`` when reached.
        self.pending = sorted((first, pid) for pid, first in (aborted or ()))
        self.producers: set[int] = set()

    def __call__(self, batch: RecordBatch, header) -> bool:
        control = bool(header.attributes & CONTROL_MASK)
        if self.read_committed and header.producer_id >= 0:
            last = header.base_offset + header.last_offset_delta
            pending = self.pending
            while pending and pending[0][0] <= last:
                self.producers.add(pending.pop(0)[1])
            if control:
                record = next(iter(batch.records()), None)
                if record is not None and control_record_type(record.key) == ABORT:
                    self.producers.discard(header.producer_id)
            elif header.attributes & TRANSACTIONAL_MASK \
                    and header.producer_id in self.producers:
                return True
        return control


def buffer_fetched(st: PartitionState, records: bytes | memoryview, fetch_offset: int,
                   aborted: tuple | None = None, *, read_committed: bool = False,
                   check_crcs: bool = True, as_arrow: bool = False,
                   key_de: Callable | None = None, value_de: Callable | None = None
                   ) -> None:
    """A fetch answer's record batches for one partition, fetched from ``fetch_offset``,
    appended to its buffer (Kafka's CompletedFetch): what the position has passed
    dropped, markers and (``read_committed``) aborted transactions' batches left out,
    ``as_arrow`` as Arrow chunks, else as lists (through the deserializers given)."""
    before = st.buffered_records()
    group: list = []   # consecutive batches for one chunk: same epoch and timestamp type

    # Kafka's consumer hands out the records before a corrupt batch (or one it cannot
    # decompress or deserialize), then raises: a group failing as a whole is buffered batch
    # by batch, up to the one that fails. (Each chunk is appended only once made.)
    def buffer_group(group: list) -> None:
        try:
            if as_arrow:
                _buffer_arrow(st, group, fetch_offset)
            else:
                _buffer_lists(st, group, fetch_offset, key_de, value_de)
        except Exception:
            if len(group) == 1:
                raise
            for one in group:
                buffer_group([one])
    skip = SkippedBatches(read_committed, aborted)
    batches = iter_batches(records)
    while True:
        try:
            batch = next(batches, None)
            if batch is not None and check_crcs:
                batch.ensure_valid()
        except KafkaError:   # a batch's framing, magic or CRC
            if group:
                buffer_group(group)
            raise
        if batch is None:
            break
        header = batch.header()
        next_offset = header.base_offset + header.last_offset_delta + 1
        if next_offset <= fetch_offset:
            continue
        if skip(batch, header):
            # A marker, or a batch of an aborted transaction: never handed out, but the
            # position moves past it (Kafka's fetcher moves to its nextOffset).
            if group:
                buffer_group(group)
                group = []
            st.buffered.append(BufferedChunk(header.partition_leader_epoch, 0, [], [], [],
                                             [], None, next_offset))
            continue
        if group and (group[0][1].partition_leader_epoch != header.partition_leader_epoch
                      or (group[0][1].attributes ^ header.attributes) & TIMESTAMP_TYPE_MASK):
            buffer_group(group)
            group = []
        group.append((batch, header, next_offset))
    if group:
        buffer_group(group)
    st.last_fetched = st.buffered_records() - before


def _buffer_lists(st: PartitionState, group: list, fetch_offset: int,
                  key_de: Callable | None, value_de: Callable | None) -> None:
    """Consecutive batches of one leader epoch and timestamp type as one chunk of lists,
    decoded together (``RecordBatch.record_columns_of``), through the deserializers."""
    offsets, timestamps, keys, values, headers = RecordBatch.record_columns_of(
        [batch for batch, _, _ in group])
    if offsets and offsets[0] < fetch_offset:   # the fetch began inside the first batch
        i = bisect_left(offsets, fetch_offset)
        offsets, timestamps, keys, values = offsets[i:], timestamps[i:], keys[i:], values[i:]
        headers = headers[i:] if headers is not None else None
    if key_de is not None:
        keys = list(map(key_de, keys))
    if value_de is not None:
        values = list(map(value_de, values))
    header = group[0][1]
    st.buffered.append(BufferedChunk(
        header.partition_leader_epoch, 1 if header.attributes & TIMESTAMP_TYPE_MASK else 0,
        offsets, timestamps, keys, values, headers, group[-1][2]))


def _buffer_arrow(st: PartitionState, group: list, fetch_offset: int) -> None:
    """Consecutive batches of one leader epoch and timestamp type as one Arrow chunk,
    decoded together (``RecordBatch.arrow_columns_of``: one numpy pass for all)."""
    columns = RecordBatch.arrow_columns_of([batch for batch, _, _ in group])
    header, next_offset = group[0][1], group[-1][2]
    array = columns["offset"].to_numpy()
    offsets, i = range(next_offset, next_offset), 0
    if len(array):
        first, last = int(array[0]), int(array[-1])
        # A batch's offsets run without a gap unless compaction removed some: then a
        # range stands for them (no Python int per record).
        offsets = (range(first, last + 1) if last - first + 1 == len(array)
                   else array.tolist())
        i = bisect_left(offsets, fetch_offset) if offsets[0] < fetch_offset else 0
    headers = columns.get("headers")
    st.buffered.append(BufferedChunk(
        header.partition_leader_epoch,
        1 if header.attributes & TIMESTAMP_TYPE_MASK else 0,
        offsets[i:], columns["timestamp"].slice(i), columns["key"].slice(i),
        columns["value"].slice(i), None if headers is None else headers.slice(i),
        next_offset, arrow=True))


def take(parts: dict[TopicPartition, PartitionState], limit: int):
    """Up to ``limit`` buffered records, from the assigned unpaused partitions in order:
    ``(topic, partition, chunk, start, end)`` pieces, positions moved past them."""
    taken = 0
    for (topic, partition), st in parts.items():
        buffered = st.buffered
        while buffered and not st.paused:
            c = buffered[0]
            start = c.start
            if start < len(c.offsets):
                if taken >= limit:
                    break
                end = min(len(c.offsets), start + limit - taken)
                taken += end - start
                yield topic, partition, c, start, end
            else:   # no record left in it (compaction): only the position moves
                end = start
            if end >= len(c.offsets):
                buffered.popleft()
                st.position = c.next_offset
            else:
                c.start = end
                st.position = c.offsets[end - 1] + 1
            if c.epoch > st.last_epoch:
                st.last_epoch = c.epoch

