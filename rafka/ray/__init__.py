"""Topics as Ray Datasets.

    ds = rafka.ray.read_topic(cluster, "events")                 # earliest .. latest
    ds = rafka.ray.read_topic(cluster, "events", start={0: 100}, end="latest")
    rafka.ray.write_topic(ds.map(...), cluster, "results")

The rows have the Spark source's schema: key, value (binary), topic, partition, offset,
timestamp, timestampType. One read task per partition's offset range, its blocks Arrow
tables straight from ``Consumer.poll_arrow``; ``write_topic`` produces each write task's
Arrow blocks through ``Producer.send_batch``, with the producer's acks and idempotence.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from protocols.topics import TopicPartition
from rafka.connectors.arrow_sink import send_rows, split_rows
from rafka.connectors.offset_ranges import OffsetRange, plan_ranges
from rafka.connectors.range_reader import earliest_and_latest, partition_counts, read_tables


def _offsets(spec: str | int | Mapping, topic: str, partitions: list[TopicPartition],
             earliest: dict, latest: dict, what: str) -> dict[TopicPartition, int]:
    if spec in ("earliest", "latest"):
        return dict(earliest if spec == "earliest" else latest)
    if isinstance(spec, int):
        return {tp: spec for tp in partitions}
    if isinstance(spec, Mapping):
        out = {}
        for key, offset in spec.items():
            tp = TopicPartition(topic, key) if isinstance(key, int) else TopicPartition(*key)
            out[tp] = {-2: earliest[tp], -1: latest[tp]}.get(offset, offset)
        return {tp: out.get(tp, earliest[tp] if what == "start" else latest[tp])
                for tp in partitions}
    raise ValueError(f"{what} must be 'earliest', 'latest', an offset or "
                     f"{{partition: offset}}, not {spec!r}")


def _read_task(cluster_name: str, r: OffsetRange, config: dict | None):
    def read():
        import rafka
        cluster = rafka.Cluster.connect(cluster_name)
        schema = _schema()
        for table in read_tables(cluster, r, config=config):
            # poll_arrow's timestamps carry no zone: they are milliseconds since the epoch,
            # UTC, as the schema says (a cast of the type, not of the values).
            yield table.cast(schema)
    return read


def _schema():
    import pyarrow as pa
    return pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                      ("partition", pa.int32()), ("offset", pa.int64()),
                      ("timestamp", pa.timestamp("ms", tz="UTC")),
                      ("timestampType", pa.int32())])


def read_topic(cluster, topic: str, start: Any = "earliest", end: Any = "latest",
               consumer_config: Mapping[str, Any] | None = None):
    """A ``ray.data.Dataset`` of the topic's records in ``[start, end)`` per partition
    (``earliest`` / ``latest``, one offset for every partition, or ``{partition: offset}``
    with -2 / -1 for earliest / latest). The end is fixed when this is called.
    ``consumer_config``: the read tasks' consumers' settings (Kafka's SASL ones sign in
    at the Ray door)."""
    config = dict(consumer_config or {})
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    partitions = [TopicPartition(topic, p) for p in range(partition_counts(cluster)
                                                          .get(topic, 0))]
    if not partitions:
        from protocols.errors import UnknownTopicOrPartitionError
        raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist")
    # A range's size is its record count only where every offset holds a record: the
    # cleaner leaves gaps in a compacted topic's offsets, so there Ray Data must read to
    # count (None: the row count is unknown until the block is read). A reader that may not
    # DESCRIBE_CONFIGS the topic (READ does not imply it) reads to count too.
    from protocols.errors import TopicAuthorizationFailedError
    with cluster.admin(config) as admin:
        earliest, latest = earliest_and_latest(admin, partitions)
        try:
            compacted = "compact" in admin.describe_configs([topic])[topic]["cleanup.policy"]
        except TopicAuthorizationFailedError:
            compacted = True
    begin = _offsets(start, topic, partitions, earliest, latest, "start")
    until = _offsets(end, topic, partitions, earliest, latest, "end")
    ranges = plan_ranges(begin, until)

    class TopicDatasource(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(_read_task(cluster.name, r, config),
                             BlockMetadata(num_rows=None if compacted else r.size,
                                           size_bytes=None,
                                           input_files=None, exec_stats=None),
                             schema=_schema())
                    for r in ranges]

    if not ranges:
        return ray.data.from_arrow(_schema().empty_table())
    return ray.data.read_datasource(TopicDatasource(), override_num_blocks=len(ranges))


def write_topic(dataset, cluster, topic: str | None = None,
                producer_config: Mapping[str, Any] | None = None, *,
                exactly_once: bool = False, transactional_id_prefix: str | None = None) -> int:
    """Produce every row of ``dataset`` (``value`` required; ``key``, ``topic``,
    ``partition``, ``headers`` optional: Spark's Kafka sink's columns, ``rafka.connectors.arrow_sink``)
    a block at a time through ``Producer.send_batch``; ``topic``, when given, is every
    row's topic (it overrides a topic column, as Spark's sink's option does). Returns the
    number of records acknowledged.

    ``exactly_once``: each write task's rows go in one transaction with a marker of what it
    wrote (``rafka.connectors.exactly_once``), so a task Ray retries (after its worker died,
    even after it committed) writes nothing twice. Its transactional ids and marker group
    are named ``transactional_id_prefix`` (default ``rafka-ray-<uuid>``, new per call; the
    same prefix given to a second run of the same pipeline writes only what the first
    did not)."""
    import uuid

    from ray.data import Datasink

    cluster_name = cluster.name
    config = dict(producer_config or {"acks": "all"})
    prefix = transactional_id_prefix or f"rafka-ray-{uuid.uuid4()}"

    class TopicDatasink(Datasink):
        def write(self, blocks: Iterable, ctx) -> int:
            import pyarrow as pa

            import rafka
            tables = (block if isinstance(block, pa.Table) else pa.Table.from_pandas(block)
                      for block in blocks)
            if exactly_once:
                from rafka.connectors.exactly_once import ExactlyOnceTask, write_exactly_once
                return write_exactly_once(rafka.Cluster.connect(cluster_name), config,
                                          ExactlyOnceTask(prefix, ctx.task_idx, 1), tables,
                                          topic)
            producer = rafka.Producer(rafka.Cluster.connect(cluster_name), config)
            futures = []
            count = 0
            try:
                for table in tables:
                    futures.extend(send_rows(producer, target, partition, rows)
                                   for target, partition, rows in split_rows(table, topic))
                    count += table.num_rows
                producer.flush()
                for f in futures:
                    f.result(0)
            finally:
                producer.close()
            return count

        def on_write_complete(self, write_result) -> None:
            self.written = sum(write_result.write_returns)

    sink = TopicDatasink()
    dataset.write_datasink(sink)
    return getattr(sink, "written", 0)
