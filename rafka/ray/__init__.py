"""Topics as Ray Datasets.

    ds = rafka.ray.read_topic(cluster, "events")                 # earliest .. latest
    ds = rafka.ray.read_topic(cluster, "events", start={0: 100}, end="latest")
    rafka.ray.write_topic(ds.map(...), cluster, "results")

The rows have the Spark source's schema: key, value (binary), topic, partition, offset,
timestamp, timestampType. One read task per partition's offset range; ``write_topic``
produces from the dataset's write tasks with the producer's acks and idempotence.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from protocols.topics import TopicPartition
from rafka.range_reader import earliest_and_latest, partition_counts, read_records
from rafka.spark.offsets import OffsetRange, plan_ranges


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


def _read_task(cluster_name: str, r: OffsetRange):
    def read():
        import pyarrow as pa

        import rafka
        cluster = rafka.Cluster.connect(cluster_name)
        columns: dict[str, list] = {n: [] for n in ("key", "value", "topic", "partition",
                                                    "offset", "timestamp", "timestampType")}
        for rec in read_records(cluster, r):
            columns["key"].append(rec.key)
            columns["value"].append(rec.value)
            columns["topic"].append(rec.topic)
            columns["partition"].append(rec.partition)
            columns["offset"].append(rec.offset)
            columns["timestamp"].append(rec.timestamp)
            columns["timestampType"].append(rec.timestamp_type)
        yield pa.table(columns, schema=_schema())
    return read


def _schema():
    import pyarrow as pa
    return pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                      ("partition", pa.int32()), ("offset", pa.int64()),
                      ("timestamp", pa.timestamp("ms", tz="UTC")),
                      ("timestampType", pa.int32())])


def read_topic(cluster, topic: str, start: Any = "earliest", end: Any = "latest"):
    """A ``ray.data.Dataset`` of the topic's records in ``[start, end)`` per partition
    (``earliest`` / ``latest``, one offset for every partition, or ``{partition: offset}``
    with -2 / -1 for earliest / latest). The end is fixed when this is called."""
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    partitions = [TopicPartition(topic, p) for p in range(partition_counts(cluster)
                                                          .get(topic, 0))]
    if not partitions:
        from protocols.errors import UnknownTopicOrPartitionError
        raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist")
    earliest, latest = earliest_and_latest(cluster, partitions)
    begin = _offsets(start, topic, partitions, earliest, latest, "start")
    until = _offsets(end, topic, partitions, earliest, latest, "end")
    ranges = plan_ranges(begin, until)

    class TopicDatasource(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(_read_task(cluster.name, r),
                             BlockMetadata(num_rows=r.size, size_bytes=None,
                                           input_files=None, exec_stats=None),
                             schema=_schema())
                    for r in ranges]

    if not ranges:
        return ray.data.from_arrow(_schema().empty_table())
    return ray.data.read_datasource(TopicDatasource(), override_num_blocks=len(ranges))


def write_topic(dataset, cluster, topic: str | None = None,
                producer_config: Mapping[str, Any] | None = None) -> int:
    """Produce every row of ``dataset`` (``value`` required; ``key``, ``topic``,
    ``partition`` optional; ``topic`` here for rows without one); returns the number of
    records acknowledged."""
    from ray.data import Datasink

    cluster_name = cluster.name
    config = dict(producer_config or {"acks": "all"})

    class TopicDatasink(Datasink):
        def write(self, blocks: Iterable, ctx) -> int:
            import pyarrow as pa

            import rafka
            producer = rafka.Producer(rafka.Cluster.connect(cluster_name), config)
            futures = []
            try:
                for block in blocks:
                    table = block if isinstance(block, pa.Table) else pa.Table.from_pandas(block)
                    for row in table.to_pylist():
                        target = row.get("topic") or topic
                        if not target:
                            raise ValueError("topic is required when a row has no 'topic'")
                        value, key = row["value"], row.get("key")
                        futures.append(producer.send(
                            target, value.encode() if isinstance(value, str) else value,
                            key=key.encode() if isinstance(key, str) else key,
                            partition=row.get("partition")))
                producer.flush()
                for f in futures:
                    f.result(0)
            finally:
                producer.close()
            return len(futures)

        def on_write_complete(self, write_result) -> None:
            self.written = sum(write_result.write_returns)

    sink = TopicDatasink()
    dataset.write_datasink(sink)
    return getattr(sink, "written", 0)
