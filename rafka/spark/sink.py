"""The ``rafka`` format's sink: Spark's Kafka sink, fed by Spark's Arrow writers.

Spark hands each task its rows as Arrow record batches (``DataSourceArrowWriter`` and, for
streaming, ``DataSourceStreamArrowWriter``); each batch goes to ``Producer.send_batch``
whole, so no Python object is made per row on the common path. The columns are Spark's
Kafka sink's: ``value`` (string or binary, required), ``key`` (string or binary),
``topic`` (string), ``partition`` (int) and ``headers`` (array<struct<key: string, value:
binary>>); any other column is ignored, as Spark's sink ignores it. The ``topic`` option,
when given, overrides the ``topic`` column (Spark's rule). A row whose ``partition`` is null
is partitioned by its key (murmur2), else stickily, as ``Producer.send`` does.

Records with headers go through ``send`` one by one (``send_batch`` encodes header-less
records only). The options prefixed ``kafka.`` are producer configs; ``acks`` defaults to
``all``. Every record is acknowledged before its task ends: the first failed record fails
the task (at least once, as Spark's Kafka sink).
"""
from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from rafka.spark.connection import connect
from rafka.spark.offsets import SparkSourceError

TOPIC_REQUIRED = ("topic option required when no 'topic' attribute is present. Use the topic "
                  "option for setting a topic.")
# Spark's KafkaWriter: the types each attribute may have (by Spark's simpleString).
_TYPES = {"value": ("string", "binary"), "key": ("string", "binary"), "topic": ("string",),
          "partition": ("int",), "headers": ("array<struct<key:string,value:binary>>",)}


class Committed(WriterCommitMessage):
    def __init__(self, records: int):
        self.records = records


def producer_config(options) -> dict:
    """``kafka.``-prefixed options are producer configs (Spark's Kafka sink convention).
    Rows arrive thousands at a time (Spark's Arrow batches), so unless set, ``batch.size``
    is ``max.request.size`` (1 MiB by default): Kafka's 16 KiB would cut each Arrow batch
    into a hundred record batches, each a request of its own."""
    from rafka.producer import PRODUCER_CONFIG

    config = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    config.setdefault("acks", "all")
    config.setdefault("batch.size", PRODUCER_CONFIG.parse(config)["max.request.size"])
    return config


def check_schema(schema, options) -> None:
    """Spark's KafkaWriter.validateQuery, on the driver before any task starts: the
    attributes the sink reads must be there (``value``; ``topic`` unless the option gives
    it) and of the types Spark's Kafka sink takes."""
    fields = {f.name: f.dataType.simpleString() for f in schema.fields}
    if "value" not in fields:
        raise SparkSourceError("Required attribute 'value' not found")
    if not options.get("topic") and "topic" not in fields:
        raise SparkSourceError(TOPIC_REQUIRED)
    for name, allowed in _TYPES.items():
        if name == "topic" and options.get("topic"):
            continue   # the option overrides the column: its type does not matter
        found = fields.get(name)
        if found is not None and found.replace(" ", "") not in allowed:
            raise SparkSourceError(f"{name} attribute unsupported type {found}. {name} must "
                                   f"be a(n) {' or '.join(allowed)}")


def split_batch(batch, topic_option: str | None) -> Iterator[tuple[str, int | None, object]]:
    """``(topic, partition or None, rows)`` groups of one Arrow record batch, in an order
    that keeps every partition's rows in the order given (Spark's sink sends row by row):
    per topic, runs of rows with and without a given partition, a run with one split by
    partition."""
    import numpy as np
    import pyarrow.compute as pc

    names = batch.schema.names
    if topic_option:
        groups = [(topic_option, batch)]
    else:
        topics = batch.column(names.index("topic"))
        if topics.null_count:
            raise SparkSourceError("null topic present in the data. Use the topic option for "
                                   "setting a topic.")
        unique = pc.unique(topics).to_pylist()
        groups = [(unique[0], batch)] if len(unique) == 1 else \
            [(t, batch.filter(pc.equal(topics, t))) for t in unique]
    for topic, rows in groups:
        given = rows.column(names.index("partition")) if "partition" in names else None
        if given is None or given.null_count == len(given):
            yield topic, None, rows
            continue
        unset = pc.is_null(given).to_numpy(zero_copy_only=False)
        starts = [0, *(np.flatnonzero(np.diff(unset)) + 1).tolist(), len(rows)]
        for start, end in zip(starts, starts[1:]):
            run = rows.slice(start, end - start)
            if unset[start]:
                yield topic, None, run
                continue
            in_run = given.slice(start, end - start)
            for p in pc.unique(in_run).to_pylist():
                yield topic, p, run.filter(pc.equal(in_run, p))


def _headers(rows) -> list | None:
    """Each row's headers as ``[(key, value), ...]``, or None when no row has any."""
    if "headers" not in rows.schema.names:
        return None
    column = rows.column(rows.schema.names.index("headers"))
    lists = column.to_pylist()
    if not any(lists):
        return None
    return [[(h["key"], h["value"]) for h in hs or ()] for hs in lists]


def send_rows(producer, topic: str, partition: int | None, rows):
    """One group of rows to ``send_batch``: its future."""
    from protocols.arrow_records import as_binary

    names = rows.schema.names
    values = as_binary(rows.column(names.index("value")))
    keys = as_binary(rows.column(names.index("key"))) if "key" in names else None
    return producer.send_batch(topic, values, keys, partition, headers=_headers(rows))


def write_batches(options, batches) -> Committed:
    """A task's share of the rows, every record acknowledged before it returns."""
    import rafka

    topic_option = options.get("topic")
    producer = rafka.Producer(connect(options), producer_config(options))
    count = 0
    futures = []
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            futures.extend(send_rows(producer, topic, partition, rows)
                           for topic, partition, rows in split_batch(batch, topic_option))
            count += batch.num_rows
        producer.flush()
        for f in futures:
            f.result(0)      # raise the first failed record's error: the task fails
    finally:
        producer.close()
    return Committed(count)


class RafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        return write_batches(self.options, iterator)


class RafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        return write_batches(self.options, iterator)

    def commit(self, messages, batchId) -> None:
        pass   # every record was acknowledged before its task finished

    def abort(self, messages, batchId) -> None:
        pass   # at-least-once, as Spark's Kafka sink: what was sent stays
