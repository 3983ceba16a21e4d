"""Reading a topic by offset ranges, for the engines that split a read into tasks (Spark's
data source, Ray Data): each task reads ``[from_offset, until_offset)`` of one partition
with its own consumer."""
from __future__ import annotations

import time
from typing import Iterator

from protocols.topics import TopicPartition
from rafka.connectors.offset_ranges import OffsetRange

# A range's consumer reads one partition to a known end: unless configured, it fetches up to
# 8 MiB of it at a time (Kafka's max.partition.fetch.bytes is 1 MiB), a fetch's round trip
# paid per 50,000 records of 100 bytes rather than per 6,000.
RANGE_FETCH_BYTES = 8 << 20


def partition_counts(cluster) -> dict[str, int]:
    return {t: len(ps) for t, ps in cluster.metadata()["topics"].items()}


def earliest_and_latest(admin, partitions: list[TopicPartition],
                        isolation_level: str = "read_uncommitted",
                        earliest_of: list[TopicPartition] | None = None) -> tuple[dict, dict]:
    """(earliest, latest) offset of each partition, asked with ``admin`` (a ``rafka.Admin``
    or a ``rafka.client.listener_admin.ListenerAdmin``: one kept by the caller reuses its
    leaders); latest is the high watermark, or at ``read_committed`` the last stable offset
    (what such a reader can reach). The earliest only of ``earliest_of`` when given."""
    asked = partitions if earliest_of is None else earliest_of
    earliest = {tp: r.offset for tp, r in admin.list_offsets(
        {tp: "earliest" for tp in asked}).items()} if asked else {}
    latest = {tp: r.offset for tp, r in admin.list_offsets(
        {tp: "latest" for tp in partitions}, isolation_level).items()}
    return earliest, latest


def _polled(cluster, r: OffsetRange, timeout_s: float, poll, config: dict | None = None
            ) -> Iterator:
    """What ``poll(consumer)`` returns while the range's consumer is short of its end:
    ``(answer, position after it)`` for each non-empty answer; KafkaTimeoutError when the
    partition yields nothing for ``timeout_s``."""
    import rafka
    from protocols.errors import KafkaTimeoutError

    consumer = rafka.Consumer(cluster, {"max.partition.fetch.bytes": RANGE_FETCH_BYTES,
                                        **(config or {}), "auto.offset.reset": "none",
                                        "enable.auto.commit": False})
    tp = TopicPartition(r.topic, r.partition)
    consumer.assign([tp])
    consumer.seek(tp, r.from_offset)
    deadline = time.monotonic() + timeout_s
    position = r.from_offset
    try:
        while position < r.until_offset:
            answer = poll(consumer)
            if not len(answer):
                # At read_committed a fetch may hold only an aborted transaction and its
                # marker: nothing to hand out, yet the position moves on past them.
                moved = consumer.position(tp)
                if moved > position:
                    position, deadline = moved, time.monotonic() + timeout_s
                    continue
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError(f"Timed out reading {tp.topic}-{tp.partition} "
                                            f"[{position}, {r.until_offset}) after "
                                            f"{timeout_s} s")
                continue
            deadline = time.monotonic() + timeout_s
            position = consumer.position(tp)
            yield answer, position
    finally:
        consumer.close()


def read_tables(cluster, r: OffsetRange, timeout_s: float = 120.0, headers: bool = False,
                max_records: int = 65_536, config: dict | None = None) -> Iterator:
    """The records of one range, in offset order, as pyarrow Tables (``Consumer.poll_arrow``:
    Spark's Kafka columns), at most ``max_records`` rows each, cut at the range's end;
    KafkaTimeoutError when the partition yields nothing for ``timeout_s``. ``config``: the
    range's consumer's (``auto.offset.reset`` is always ``none``; nothing is committed)."""
    import pyarrow.compute as pc

    def poll(consumer):
        return consumer.poll_arrow(500, max_records=max_records, headers=headers)
    for table, position in _polled(cluster, r, timeout_s, poll, config):
        if position > r.until_offset:
            table = table.filter(pc.less(table["offset"], r.until_offset))
        if len(table):
            yield table
