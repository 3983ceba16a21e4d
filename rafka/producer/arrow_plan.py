"""How ``send_batch`` cuts many records given as Arrow columns into batches: each record's
partition (the one given, else murmur2 of its key, else the sticky partition, a whole batch
at a time), then whole batches of about ``batch.size`` per partition, records in their given
order, each encoded column by column. Plain numpy and pyarrow: no I/O. Shared by
``Producer.send_batch`` and the producer over the Kafka listener."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from protocols.arrow_records import as_headers, encode_bodies, header_field
from protocols.errors import KafkaError, RecordTooLargeError
from protocols.partitioner import StickyPartitionCache, partitions_for_keys
from protocols.records import RECORD_BATCH_OVERHEAD, MemoryRecordsBuilder
from rafka.producer.accumulator import RECORD_OVERHEAD


def rows(array, indices: np.ndarray):
    """``array``'s rows at ``indices`` (None stays None): a zero-copy slice when they run
    without a gap, as a batch of key-less or one-partition records does (Arrow's take
    copies every value: ~100 ns a record of 100 bytes)."""
    if array is None:
        return None
    first = int(indices[0])
    if int(indices[-1]) - first + 1 == len(indices) and (
            len(indices) < 3 or bool((np.diff(indices) == 1).all())):
        return array.slice(first, len(indices))
    return array.take(indices)


# send_batch's batches when batch.size is not set: just under a topic's default
# max.message.bytes (1000012), the largest batch it takes unless configured otherwise,
# leaving room for a codec's framing of bytes it cannot compress (gzip adds ~330 B to a
# MB). Kafka's 16 KiB default, made for records arriving one by one, would cut a columnar
# call's thousands of records into a batch and a request per few dozen.
BULK_BATCH_BYTES = 1_000_012 - 1_024


def bulk_batch_size(config, given) -> int:
    """The bytes ``send_batch`` puts in a batch (with its header): batch.size when set,
    else ``BULK_BATCH_BYTES``; never more than max.request.size."""
    size = config["batch.size"] if "batch.size" in given else BULK_BATCH_BYTES
    return min(size, config["max.request.size"])


def plan_batches(topic: str, partitions: list[int], partition: int | None, key_array,
                 sizes: np.ndarray, *, batch_size: int, max_request_size: int,
                 ignore_keys: bool, sticky: StickyPartitionCache
                 ) -> list[tuple[int, np.ndarray]]:
    """``[(partition, record indices), ...]``: the whole batches ``send_batch`` makes,
    records in their given order, each holding as many records as fit in ``batch_size``
    bytes (``sizes``: each record's, at most) and in ``max_request_size``; a record larger
    than that is alone in its batch."""
    count = len(sizes)
    if count == 0:
        return []
    limit = min(batch_size, max_request_size)
    if partition is not None:
        if partition not in partitions:
            raise KafkaError(f"Invalid partition given with record: {partition} is not "
                             f"in the range [0...{len(partitions)}].")
        return [(partition, chunk) for chunk in _cut(np.arange(count), sizes, limit)]
    # Each record's partition: its key's (murmur2), else the sticky one, which takes a
    # whole batch of the key-less records and then moves on (KIP-480). Records are then
    # grouped per partition in the order given, so a partition's records keep it.
    target = np.full(count, -1, np.int64)
    if key_array is not None and not ignore_keys:
        keyed = pc.is_valid(key_array).to_numpy(zero_copy_only=False)
        target[keyed] = partitions_for_keys(key_array.filter(pa.array(keyed)),
                                            len(partitions))
    keyless = np.flatnonzero(target < 0)
    if len(keyless):
        for chunk in _cut(keyless, sizes, limit):
            p = sticky.partition(topic, partitions, len(partitions))
            target[chunk] = p
            sticky.next_partition(topic, partitions, len(partitions), p)
    # A stable sort of small ints is a radix sort: ~10x a stable sort of int64.
    order = np.argsort(target.astype(np.int16) if int(target.max()) < 1 << 15 else target,
                       kind="stable")
    bounds = np.flatnonzero(np.diff(target[order])) + 1
    return [(int(target[indices[0]]), chunk) for indices in np.split(order, bounds)
            for chunk in _cut(indices, sizes, limit)]


def _cut(indices: np.ndarray, sizes: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """``indices`` in consecutive runs, each as many records as fit in ``batch_size`` bytes
    with the batch's header (Kafka's accumulator starts a new batch when the next record
    would not fit), at least one each."""
    limit = batch_size - RECORD_BATCH_OVERHEAD
    ends = np.cumsum(sizes[indices])
    if int(ends[-1]) <= limit:
        return [indices]
    chunks, first, done = [], 0, 0
    while first < len(indices):
        last = max(int(np.searchsorted(ends, done + limit, "right")), first + 1)
        chunks.append(indices[first:last])
        first, done = last, int(ends[last - 1])
    return chunks


# Records encoded together in one pass (``arrow_records.encode_bodies``): up to this many
# bytes, so that a huge send_batch neither doubles its memory at once nor passes Arrow's
# 2 GiB binary arrays.
ENCODE_GROUP_BYTES = 64 << 20


def encode_groups(plan: list[tuple[int, np.ndarray]], sizes: np.ndarray,
                  limit: int = ENCODE_GROUP_BYTES) -> list[list[tuple[int, np.ndarray]]]:
    """``plan``'s batches in runs of about ``limit`` bytes of records (``sizes``: each
    record's), whole batches each."""
    if not plan:
        return []
    counts = np.array([len(indices) for _, indices in plan])
    batch_bytes = np.add.reduceat(sizes[np.concatenate([i for _, i in plan])],
                                  np.cumsum(counts) - counts).tolist()
    groups: list[list] = [[]]
    held = 0
    for (p, indices), size in zip(plan, batch_bytes):
        if groups[-1] and held + size > limit:
            groups.append([])
            held = 0
        groups[-1].append((p, indices))
        held += size
    return groups


def encoded_header_field(headers, count: int):
    """The records' headers as ``arrow_records`` encodes them in a record (its header
    count and headers), or None when no record has any."""
    header_array = as_headers(headers, count)
    return None if header_array is None else header_field(header_array)


def record_sizes(value_array, key_array, encoded_headers, max_request_size: int
                 ) -> np.ndarray:
    """Each record's size as a batch holds it (at most: its varints counted at their
    longest), RecordTooLargeError for the first past ``max.request.size``, in Kafka's
    words."""
    sizes = RECORD_OVERHEAD + np.maximum(
        pc.fill_null(pc.binary_length(value_array), 0).to_numpy(), 0)
    if key_array is not None:
        sizes = sizes + pc.fill_null(pc.binary_length(key_array), 0).to_numpy()
    if encoded_headers is not None:   # RECORD_OVERHEAD counts one byte of them
        sizes = sizes + pc.binary_length(encoded_headers).to_numpy() - 1
    if len(sizes) and int(sizes.max()) > max_request_size:
        first = int(np.argmax(sizes > max_request_size))
        raise RecordTooLargeError(
            f"The message at index {first} is {int(sizes[first])} bytes when serialized "
            f"which is larger than {max_request_size}, the value of max.request.size.")
    return sizes


def encoded_batches(plan: list[tuple[int, np.ndarray]], sizes: np.ndarray, value_array,
                    key_array, stamps: np.ndarray, encoded_headers):
    """``(partition, record indices, MemoryRecordsBuilder)`` of each of ``plan``'s batches,
    in order; the records of a run of batches (``encode_groups``) encoded in one pass
    (``arrow_records.encode_bodies``)."""
    for group in encode_groups(plan, sizes):
        order = np.concatenate([indices for _, indices in group])
        bodies = encode_bodies(rows(value_array, order), rows(key_array, order),
                               stamps[order], None, [len(indices) for _, indices in group],
                               now_ms=0, encoded_headers=rows(encoded_headers, order))
        for (p, indices), body in zip(group, bodies):
            yield p, indices, MemoryRecordsBuilder.from_encoded(body)
