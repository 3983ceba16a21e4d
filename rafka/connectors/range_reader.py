"""Reading a topic by offset ranges, for the engines that split a read into tasks (Spark's
data source, Ray Data): each task reads ``[from_offset, until_offset)`` of one partition,
with its own consumer through Ray, or with Fetch over the Kafka listener."""
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


def read_tables_over_listener(fetcher, r: OffsetRange, timeout_s: float = 120.0,
                              headers: bool = False, max_records: int = 65_536,
                              config: dict | None = None) -> Iterator:
    """``read_tables`` over the cluster's Kafka listener: ``fetcher`` is a
    ``rafka.client.listener_fetcher.ListenerFetcher``, asked for the range's partition at
    the reader's position until the range's end, each answer's batches buffered and taken
    as the consumer's fetcher does (``rafka.consumer.fetch_buffer``), so the tables are the
    same. The next fetch is sent only once an answer is taken: a range's reader is one of
    many tasks sharing the machine's cores, and Spark takes each table before asking for
    the next. ``timeout_s`` bounds the time spent waiting for the partition's next records
    (not the time the caller holds a table). Its consumer settings (``config``):
    ``isolation.level``, ``check.crcs``, ``max.partition.fetch.bytes`` (default
    ``RANGE_FETCH_BYTES``), ``fetch.max.bytes``, ``fetch.max.wait.ms``, ``fetch.min.bytes``,
    ``request.timeout.ms`` (a leader that does not answer is left, its partition's leader
    asked again), ``retry.backoff.ms``."""
    import pyarrow.compute as pc

    from protocols.errors import (CorruptRecordError, KafkaError, KafkaTimeoutError,
                                  OffsetOutOfRangeError)
    from protocols.messages import ISOLATION_LEVELS, READ_COMMITTED
    from rafka.consumer.arrow_table import arrow_table
    from rafka.consumer.config import CONSUMER_CONFIG
    from rafka.consumer.fetch_buffer import buffer_fetched, take
    from rafka.consumer.subscription_state import PartitionState

    c = CONSUMER_CONFIG.parse({"max.partition.fetch.bytes": RANGE_FETCH_BYTES,
                               **(config or {}), "auto.offset.reset": "none",
                               "enable.auto.commit": False})
    isolation = ISOLATION_LEVELS[c["isolation.level"]]
    tp = TopicPartition(r.topic, r.partition)
    name = f"{tp.topic}-{tp.partition}"
    st = PartitionState(position=r.from_offset)
    parts = {tp: st}
    deadline: float | None = None   # set while waiting for the next records

    def timed_out(offset: int, cause: Exception | None = None) -> KafkaTimeoutError:
        why = f": {cause}" if cause is not None else ""
        return KafkaTimeoutError(f"Timed out reading {name} [{offset}, {r.until_offset}) "
                                 f"after {timeout_s} s{why}")
    while st.position < r.until_offset:
        if not st.buffered:
            offset = st.position
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout_s
            try:
                fetched = fetcher.fetch(
                    tp, offset, deadline=min(deadline, now + c["request.timeout.ms"] / 1000),
                    partition_max_bytes=c["max.partition.fetch.bytes"],
                    max_bytes=c["fetch.max.bytes"], isolation_level=isolation,
                    max_wait_ms=c["fetch.max.wait.ms"], min_bytes=c["fetch.min.bytes"])
            except OffsetOutOfRangeError:
                # auto.offset.reset=none: Kafka's consumer raises it to the application.
                raise OffsetOutOfRangeError(
                    f"Fetch position FetchPosition{{offset={offset}}} is out of range for "
                    f"partition {name}") from None
            except CorruptRecordError as e:
                raise KafkaError(f"Encountered corrupt message when fetching offset {offset} "
                                 f"for topic-partition {name}: {e}") from e
            except (KafkaError, OSError) as e:
                # UNKNOWN_SERVER_ERROR is fetched again too, as Kafka's FetchCollector does.
                if isinstance(e, KafkaError) and not e.retriable and e.code != -1:
                    raise
                if time.monotonic() > deadline:
                    raise timed_out(offset, e) from e
                time.sleep(c["retry.backoff.ms"] / 1000)
                continue
            buffer_fetched(st, fetched.records, offset, fetched.aborted_transactions,
                           read_committed=isolation == READ_COMMITTED,
                           check_crcs=c["check.crcs"], as_arrow=True)
            if not st.buffered:
                if fetched.records:
                    # Bytes, but not one whole batch: the next fetch would get the same.
                    raise KafkaError(
                        f"Failed to make progress reading messages at {name}-{offset}. "
                        "Received a non-empty fetch response from the server, but no "
                        "complete records were found.")
                if time.monotonic() > deadline:   # none yet: asked again until the time is up
                    raise timed_out(offset)
                continue
            deadline = None
        pieces = list(take(parts, max_records))
        if not pieces:
            continue   # markers or aborted batches only: the position moved past them
        table = arrow_table(pieces, headers)
        if st.position > r.until_offset:
            table = table.filter(pc.less(table["offset"], r.until_offset))
        if len(table):
            yield table
