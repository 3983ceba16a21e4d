"""The ``rafka`` format for Spark: a Python data source (Spark 4) mirroring Spark's Kafka
source and sink, so a job switches by changing ``format("kafka")`` to ``format("rafka")``.

    rafka.spark.register(spark)
    df = (spark.read.format("rafka").option("cluster", "default")
          .option("subscribe", "events").option("startingOffsets", "earliest").load())
    df.selectExpr("CAST(value AS STRING)").show()
    df.write.format("rafka").option("topic", "copy").mode("append").save()

Options are case-insensitive, as Spark's are (``self.options`` is Spark's
CaseInsensitiveDict, kept as it is).

Spark's Python workers (the planner and the executors) reach the cluster through Ray
(``rafka.Cluster.connect``): options ``cluster`` (the rafka cluster's name, default
``default``) and ``rayAddress`` (default ``RAY_ADDRESS``, else the local Ray instance). A
Kafka job's ``kafka.bootstrap.servers`` without ``cluster`` names the cluster by its
listeners instead, and a read is then planned and read over the listener as Spark's Kafka
source plans and reads it (``rafka.spark.connection.planning``, ``listener_fetcher``). The
decisions (offsets, ranges, limits) are ``rafka.spark.offsets``'; this module moves
records.
"""
from __future__ import annotations

import time
from typing import Iterator

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from protocols.topics import TopicPartition
from rafka.connectors.offset_ranges import OffsetRange, plan_ranges
from rafka.connectors.range_reader import (earliest_and_latest, read_tables,
                                           read_tables_over_listener)
from rafka.spark.connection import connect, listener_fetcher, planning
from rafka.spark.filters import Pushed, narrow, narrow_ranges, push
from rafka.spark.offsets import (SparkSourceError, check_data_loss, consumer_options,
                                 from_json, micro_batch_offsets, parse_offsets,
                                 parse_subscription, rate_limit, resolve, to_json)
from rafka.spark.sink import (RafkaBatchWriter, RafkaStreamWriter, check_producer_options,
                              check_schema, exactly_once)

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
HEADERS = "headers array<struct<key: string, value: binary>>"


def _flag(options, name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if str(value).lower() not in ("true", "false"):
        raise SparkSourceError(f"Option {name} must be true or false, got {value!r}")
    return str(value).lower() == "true"


def _int(options, name: str, minimum: int = 1) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    try:
        n = int(value)
    except ValueError:
        raise SparkSourceError(f"Option {name} must be {kind}, got {value!r}") from None
    if n < minimum:
        raise SparkSourceError(f"Option {name} must be {kind}, got {value!r}")
    return n


def _starting(options, partitions, earliest, latest, default: str) -> dict:
    timestamp = options.get("startingTimestamp")
    if timestamp is not None:
        consumer_offsets = planning(options).list_offsets(
            {tp: int(timestamp) for tp in partitions})
        # No record at or after the time: start at the end (Spark's default strategy).
        return {tp: (r.offset if r.offset >= 0 else latest[tp])
                for tp, r in consumer_offsets.items()}
    spec = parse_offsets(options.get("startingOffsets"), default, option="startingOffsets")
    return resolve(spec, partitions, earliest, latest, option="startingOffsets")


def _isolation(options) -> str:
    """``kafka.isolation.level``: at read_committed a read ends at the last stable offset,
    as Spark's Kafka source's admin-based offset reader has it."""
    return consumer_options(options).get("isolation.level", "read_uncommitted")


def _check_consumer_options(options) -> None:
    """Refused or unknown ``kafka.*`` consumer options fail the query on the driver, not in
    its tasks."""
    from rafka.consumer.config import CONSUMER_CONFIG
    CONSUMER_CONFIG.parse(consumer_options(options))


class RangePartition(InputPartition):
    def __init__(self, offset_range: OffsetRange):
        super().__init__(offset_range)
        self.range = offset_range


def read_partition(options, partition, include_headers: bool) -> Iterator:
    """A planned partition's rows. With nothing to read the planner returns no partitions,
    and Spark then calls read once with a plain InputPartition: no rows."""
    r = getattr(partition, "range", None)
    return iter(()) if r is None else read_range(options, r, include_headers)


def read_range(options, r: OffsetRange, include_headers: bool) -> Iterator:
    """One offset range, read on this Spark worker as Arrow record batches in the source's
    schema (Spark takes them without a Python object per row): over the Kafka listener when
    the read was planned over it (``connection.listener_fetcher``), else with a consumer
    through Ray."""
    import pyarrow as pa
    timeout_s = float(options.get("fetchTimeoutMs", 120_000)) / 1000
    fetcher = listener_fetcher(options)
    if fetcher is not None:   # by the Kafka listener: no Ray in this worker
        tables = read_tables_over_listener(fetcher, r, timeout_s, headers=include_headers,
                                           config=consumer_options(options))
    else:
        tables = read_tables(connect(options), r, timeout_s, headers=include_headers,
                             config=consumer_options(options))
    for table in tables:
        # Spark's TimestampType is microseconds since the epoch, in UTC.
        table = table.set_column(5, "timestamp",
                                 table["timestamp"].cast(pa.timestamp("us", tz="UTC")))
        yield from table.to_batches()


# ---- batch read --------------------------------------------------------------------------
class RafkaBatchReader(DataSourceReader):
    def __init__(self, options):
        self.options = options
        self.include_headers = _flag(options, "includeHeaders", False)
        self.pushed = Pushed()
        _check_consumer_options(options)

    def partitions(self):
        options = self.options
        asked = planning(options)
        subscription = parse_subscription(options)
        partitions = narrow(self.pushed, subscription.select(
            asked.partition_counts(subscription.named_topics())))
        earliest, latest = earliest_and_latest(asked, partitions,
                                               _isolation(options))
        start = _starting(options, partitions, earliest, latest, "earliest")
        end_spec = parse_offsets(options.get("endingOffsets"), "latest", option="endingOffsets",
                                 allow_earliest=False)
        end = resolve(end_spec, partitions, earliest, latest, option="endingOffsets")
        start = check_data_loss(start, earliest, _flag(options, "failOnDataLoss", True))
        if self.pushed:
            start, end = narrow_ranges(self.pushed, start, end, lambda times: {
                tp: r.offset for tp, r in asked.list_offsets(times).items()})
        ranges = plan_ranges(start, end, _int(options, "minPartitions"))
        return [RangePartition(r) for r in ranges]

    def read(self, partition):
        return read_partition(self.options, partition, self.include_headers)


class RafkaFilteringReader(RafkaBatchReader):
    """The batch reader, taking the filters Spark pushes down on partition, offset and
    timestamp (``rafka.spark.filters``). Spark refuses a reader with ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled`` is true, so ``register`` picks this one only
    on a session where it is."""

    def pushFilters(self, filters):
        self.pushed, residual = push(list(filters))
        return residual


# ---- streaming read ----------------------------------------------------------------------
class RafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic": {"partition": offset}}``: the next offset to read per
    partition. A partition that appears later (new partitions, a new topic matching the
    pattern) starts at its earliest offset."""

    def __init__(self, options):
        self.options = options
        self.include_headers = _flag(options, "includeHeaders", False)
        self.fail_on_data_loss = _flag(options, "failOnDataLoss", True)
        self.max_rows = _int(options, "maxOffsetsPerTrigger")
        self.fetch_attempts = _int(options, "fetchOffset.numRetries") or 3
        self.fetch_interval_ms = _int(options, "fetchOffset.retryIntervalMs", minimum=0)
        if self.fetch_interval_ms is None:
            self.fetch_interval_ms = 1000
        self.subscription = parse_subscription(options)
        _check_consumer_options(options)
        parse_offsets(options.get("startingOffsets"), "latest", option="startingOffsets")
        self.target: dict[TopicPartition, int] | None = None
        # What the last latestOffset found: Spark asks reportLatestOffset right after it,
        # in the same trigger, for the query's progress.
        self.latest: dict[TopicPartition, int] | None = None

    def _now(self, start: dict | None = None, earliest: bool = True):
        """The subscribed partitions now, with their earliest and latest offsets; given
        ``start`` (a trigger's), the earliest only of the partitions new to it, as Spark's
        Kafka source asks (one ListOffsets round per trigger, not two); none without
        ``earliest``."""
        asked = planning(self.options)
        partitions = self.subscription.select(
            asked.partition_counts(self.subscription.named_topics()))
        if not earliest:
            new = []
        elif start is None:
            new = None    # all of them
        else:
            new = [tp for tp in partitions if tp not in start]
        return partitions, *earliest_and_latest(asked, partitions, _isolation(self.options),
                                                new)

    def initialOffset(self) -> dict:
        partitions, earliest, latest = self._now()
        return to_json(_starting(self.options, partitions, earliest, latest, "latest"))

    def getDefaultReadLimit(self):
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        _, _, self.target = self._now(earliest=False)

    def latestOffset(self, start: dict, limit=None) -> dict:
        begin = from_json(start)
        partitions, earliest, latest = self._now(begin)
        # A latest offset below the start is asked again before it is believed (Spark's
        # fetchLatestOffsets: fetchOffset.numRetries times, fetchOffset.retryIntervalMs
        # apart), so that a passing answer is not reported as data lost.
        for _ in range(self.fetch_attempts - 1):
            if not any(o < begin.get(tp, o) for tp, o in latest.items()):
                break
            time.sleep(self.fetch_interval_ms / 1000)
            partitions, earliest, latest = self._now(begin)
        self.latest = latest
        begin.update({tp: earliest[tp] for tp in partitions if tp not in begin})
        if self.target is not None:
            latest = {tp: min(o, self.target.get(tp, begin[tp])) for tp, o in latest.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        # An end below its start (a partition truncated or its topic recreated) is kept, as
        # Spark's Kafka source keeps it: planning the batch reports the data lost.
        return to_json(rate_limit(begin, latest, max_rows))

    def reportLatestOffset(self):
        if self.latest is None:
            _, _, self.latest = self._now(earliest=False)
        return to_json(self.latest)

    def partitions(self, start: dict, end: dict):
        begin, until = from_json(start), from_json(end)
        asked = planning(self.options)
        counts = asked.partition_counts(self.subscription.named_topics())
        existing = [tp for tp in until if tp.partition < counts.get(tp.topic, 0)]
        earliest = {tp: r.offset for tp, r in asked.list_offsets(
            {tp: "earliest" for tp in existing}).items()} if existing else {}
        begin, until = micro_batch_offsets(begin, until, earliest, self.fail_on_data_loss)
        ranges = plan_ranges(begin, until, _int(self.options, "minPartitions"))
        return [RangePartition(r) for r in ranges]

    def read(self, partition):
        return read_partition(self.options, partition, self.include_headers)

    def commit(self, end: dict) -> None:
        pass   # offsets live in Spark's checkpoint, as with Spark's Kafka source


def _append_only(overwrite: bool) -> None:
    # A log is appended to; Spark's Kafka sink refuses Overwrite too.
    if overwrite:
        raise SparkSourceError("Save mode Overwrite not allowed for rafka. Allowed save mode "
                               "is Append (Spark's Python data sources have no "
                               "ErrorIfExists): df.write.format(\"rafka\").mode(\"append\")")


class RafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rafka"

    def schema(self):
        if _flag(self.options, "includeHeaders", False):
            return f"{SCHEMA}, {HEADERS}"
        return SCHEMA

    def reader(self, schema):
        return RafkaBatchReader(self.options)

    def streamReader(self, schema):
        return RafkaStreamReader(self.options)

    def writer(self, schema, overwrite):
        _append_only(overwrite)
        check_schema(schema, self.options)
        check_producer_options(self.options)
        exactly_once(self.options)
        return RafkaBatchWriter(self.options)

    def streamWriter(self, schema, overwrite):
        _append_only(overwrite)
        check_schema(schema, self.options)
        check_producer_options(self.options)
        exactly_once(self.options)
        return RafkaStreamWriter(self.options)


class RafkaFilteringDataSource(RafkaDataSource):
    """The ``rafka`` format on a session with Python filter pushdown enabled."""

    def reader(self, schema):
        return RafkaFilteringReader(self.options)
