"""The ``rafka`` format's sink: Spark's Kafka sink, fed by Spark's Arrow writers.

Spark hands each task its rows as Arrow record batches (``DataSourceArrowWriter`` and, for
streaming, ``DataSourceStreamArrowWriter``); ``rafka.connectors.arrow_sink`` sends each batch to
``Producer.send_batch`` in groups (its columns are Spark's Kafka sink's): a producer through
Ray, or, for a job naming the cluster by a PLAINTEXT ``kafka.bootstrap.servers`` alone,
``rafka.client.listener_producer`` over the Kafka listener (kept per worker, as Spark keeps
its Kafka producers). The ``topic``
option, when given, overrides the ``topic`` column (Spark's rule). The options prefixed
``kafka.`` are producer configs; ``acks`` defaults to ``all``. Every record is acknowledged
before its task ends: the first failed record fails the task (at least once, as Spark's
Kafka sink).

With ``exactlyOnce=true`` each task writes its rows in a transaction with a marker of what
it wrote (``rafka.connectors.exactly_once``; over the listener too, for a job named by
``kafka.bootstrap.servers`` alone): a task retried, a zombie attempt, or a
micro-batch run again after a driver restart from its checkpoint writes nothing twice. The
transactional ids and the marker's group are named ``transactionalIdPrefix`` (default
``rafka-spark-<query id>`` for a streaming query, whose id its checkpoint keeps, and
``rafka-spark-job-<uuid>`` for one batch write).
"""
from __future__ import annotations

import uuid

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from rafka.connectors.arrow_sink import TOPIC_REQUIRED, send_rows, split_rows
from rafka.connectors.exactly_once import (ExactlyOnceTask, write_exactly_once,
                                           write_over_listener)
from rafka.spark.connection import connect, listener_producer, writes_over_listener
from rafka.spark.offsets import SparkSourceError, kafka_options

# Spark's KafkaWriter: the types each attribute may have (by Spark's simpleString).
_TYPES = {"value": ("string", "binary"), "key": ("string", "binary"), "topic": ("string",),
          "partition": ("int",), "headers": ("array<struct<key:string,value:binary>>",)}


class Committed(WriterCommitMessage):
    def __init__(self, records: int):
        self.records = records


def producer_config(options) -> dict:
    """``kafka.``-prefixed options are producer configs (Spark's Kafka sink convention)."""
    config = kafka_options(options)
    config.setdefault("acks", "all")
    return config


def check_producer_options(options) -> None:
    """Unknown or invalid ``kafka.*`` producer configs fail the query on the driver, not in
    its tasks."""
    from rafka.producer.config import PRODUCER_CONFIG
    config = PRODUCER_CONFIG.parse(producer_config(options))
    if config["transactional.id"]:
        raise SparkSourceError("Kafka option 'transactional.id' is not supported: set "
                               "option exactlyOnce to true, and the sink writes each task in "
                               "a transaction of its own (transactionalIdPrefix names them)")


def exactly_once(options) -> bool:
    value = str(options.get("exactlyOnce", "false")).strip().lower()
    if value not in ("true", "false"):
        raise SparkSourceError(f"Invalid value '{options.get('exactlyOnce')}' for option "
                               "'exactlyOnce', must be true or false")
    return value == "true"


def _task(options, default_prefix: str | None) -> ExactlyOnceTask:
    """The running Spark task's part of an exactly-once write: its partition id, and for a
    streaming query its micro-batch (Spark's local properties name both)."""
    from pyspark import TaskContext
    context = TaskContext.get()
    batch_id = context.getLocalProperty("streaming.sql.batchId")
    if default_prefix is None:
        default_prefix = f"rafka-spark-{context.getLocalProperty('sql.streaming.queryId')}"
    prefix = options.get("transactionalIdPrefix") or default_prefix
    return ExactlyOnceTask(prefix, context.partitionId(),
                           1 if batch_id is None else int(batch_id) + 1)


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


def write_batches(options, batches, default_prefix: str | None = None) -> Committed:
    """A task's share of the rows, every record acknowledged before it returns (in one
    transaction with ``exactlyOnce``)."""
    import rafka

    topic_option = options.get("topic")
    config = producer_config(options)
    if exactly_once(options):
        task = _task(options, default_prefix)
        servers = writes_over_listener(options, config)
        if servers is not None:
            return Committed(write_over_listener(servers, config, task, batches, topic_option))
        return Committed(write_exactly_once(connect(options), config, task, batches,
                                            topic_option))
    # By kafka.bootstrap.servers alone: Produce over the listener, the producer kept for
    # the worker's next tasks; else a producer through Ray, for this task.
    kept = listener_producer(options, config)
    producer = kept if kept is not None else rafka.Producer(connect(options), config)
    count = 0
    futures = []
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            futures.extend(send_rows(producer, topic, partition, rows)
                           for topic, partition, rows in split_rows(batch, topic_option))
            count += batch.num_rows
        producer.flush()
        for f in futures:
            f.result(0)      # raise the first failed record's error: the task fails
    except BaseException:
        if kept is not None:
            kept.discard()   # nothing of this task is left for the next to send
        raise
    finally:
        if kept is None:
            producer.close()
    return Committed(count)


class RafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, options):
        self.options = options
        # Made on the driver, the same in every attempt of every task of this write.
        self.job_prefix = f"rafka-spark-job-{uuid.uuid4()}"

    def write(self, iterator):
        return write_batches(self.options, iterator, self.job_prefix)


class RafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        return write_batches(self.options, iterator)

    def commit(self, messages, batchId) -> None:
        pass   # every record was acknowledged before its task finished

    def abort(self, messages, batchId) -> None:
        # At least once, as Spark's Kafka sink: what was sent stays. With exactlyOnce, what
        # a task committed stays too, and the batch run again skips it.
        pass
