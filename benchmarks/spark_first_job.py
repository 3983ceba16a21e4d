"""Where a Spark job's time goes: Spark's own first-job floor, rafka's one-time costs, and the
CPU of each kind of process while the copy job runs warm. Kafka-perf style lines.

    .venv/bin/python benchmarks/spark_first_job.py --records 200000

In one Spark session (``local[2]``), in this order, with the times of a first and a second
run of each job:

- Spark's floor for a Python data source: ``count()`` of a source that reads nothing
  (``benchmarks/spark.py``'s), then the same source filtered and written to a Python
  writer that writes nothing: what any Python data source's read and write jobs cost
  before a record moves; then the copy job on the realistic stream read from memory into
  that writer: Spark's own cost for the job, the ceiling of any Python data source's copy
  on this machine;
- rafka's ``count()`` of the realistic stream (``benchmarks/streams.py``) and the copy job
  of ``benchmarks/pipeline.py`` (read, filter, project, write): their first runs, after
  Spark's floors were paid, show rafka's one-time costs (Ray in each new Python worker, the
  producers' and consumers' set-up);
- the CPU seconds each kind of process spent during a third, warm, copy: Spark's Python
  workers, Spark's JVM, rafka's brokers and replica hosts, and the rest (Ray's own).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402
from benchmarks.pipeline import FILTER, spark_copy  # noqa: E402
from benchmarks.spark import register_floor_source  # noqa: E402
from benchmarks.streams import describe_stream, realistic_stream  # noqa: E402

KINDS = (("Spark Python workers", ("pyspark.daemon", "pyspark.worker")),
         ("Spark JVM", ("java",)),
         ("rafka brokers and replica hosts", ("ReplicaHost", "Broker", "Controller")))


def process_cpu() -> dict[int, tuple[str, float]]:
    """Every process's command line and CPU seconds so far (``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        out[int(pid)] = (cmd, (int(fields[11]) + int(fields[12])) / tick)
    return out


def cpu_by_kind(before: dict, after: dict) -> dict[str, float]:
    spent: dict[str, float] = {}
    for pid, (cmd, seconds) in after.items():
        used = seconds - before.get(pid, (cmd, 0.0))[1]
        kind = next((name for name, marks in KINDS if any(m in cmd for m in marks)), "other")
        spent[kind] = spent.get(kind, 0.0) + used
    return spent


def register_stream_floor(spark, path: Path, partitions: int) -> None:
    """``format("spark-stream-floor")``: the realistic stream (an Arrow file, memory-mapped)
    in the ``rafka`` source's columns and partitions, read from memory: the copy job on it,
    into a writer that writes nothing, is what Spark alone costs for that job here."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rafka.spark.source import HEADERS, SCHEMA

    class StreamFloorReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            import numpy as np
            import pyarrow as pa
            table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
            step = -(-len(table) // partitions)
            part = table.slice(partition.value * step, step)
            n = len(part)
            columns = {
                "key": part["key"], "value": part["value"],
                "topic": pa.array(np.full(n, "src", object), pa.string()),
                "partition": pa.array(np.full(n, partition.value, np.int32)),
                "offset": pa.array(np.arange(n, dtype=np.int64)),
                "timestamp": part["timestamp"].cast(pa.timestamp("ms"))
                             .cast(pa.timestamp("us", tz="UTC")),
                "timestampType": pa.array(np.zeros(n, np.int32)),
                "headers": part["headers"]}
            yield from pa.table(columns).to_batches(max_chunksize=10_000)

    class StreamFloorSource(DataSource):
        @classmethod
        def name(cls):
            return "spark-stream-floor"

        def schema(self):
            return f"{SCHEMA}, {HEADERS}"

        def reader(self, schema):
            return StreamFloorReader()

    spark.dataSource.register(StreamFloorSource)


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--by", choices=("cluster", "bootstrap"), default="cluster",
                        help="how rafka's jobs name the cluster: the cluster option, or a "
                             "Kafka job's kafka.bootstrap.servers alone (reads planned and read "
                             "over the Kafka listener, without Ray in Spark's planners and "
                             "read tasks)")
    args = parser.parse_args(argv)
    import pyspark.sql.datasource as ds

    import rafka
    import rafka.spark

    print(describe(), flush=True)
    stream = realistic_stream(args.records)
    print(describe_stream(stream), flush=True)
    n, parts = len(stream), args.partitions
    with tempfile.TemporaryDirectory(prefix="rafka-first-job-") as root:
        cluster = rafka.Cluster.start(3, Path(root) / "rafka", name="bench-first-job")
        try:
            cluster.admin().create_topics([rafka.NewTopic(t, parts, 1)
                                           for t in ("src", "c1", "c2")])
            with rafka.Producer(cluster) as producer:
                producer.send_batch("src", stream["value"], stream["key"],
                                    timestamps=stream["timestamp"],
                                    headers=stream["headers"]).result(300)
            started = time.perf_counter()
            spark = rafka.spark.local_session("first-job")
            session_s = time.perf_counter() - started
            print(f"spark session created in {session_s:.2f} s (local[2])", flush=True)
            register_floor_source(spark, parts)
            import pyarrow as pa
            stream_file = Path(root) / "stream.arrow"
            with pa.ipc.new_file(str(stream_file), stream.schema) as w:
                w.write_table(stream)
            register_stream_floor(spark, stream_file, parts)

            class NoWriter(ds.DataSourceArrowWriter):
                def write(self, iterator):
                    for _ in iterator:
                        pass
                    return ds.WriterCommitMessage()

            class NoSink(ds.DataSource):
                @classmethod
                def name(cls):
                    return "spark-floor-sink"

                def writer(self, schema, overwrite):
                    return NoWriter()
            spark.dataSource.register(NoSink)

            def floor_read():
                spark.read.format("spark-floor").load().count()

            def floor_write():
                (spark.read.format("spark-floor").load().where("length(value) < 5")
                 .write.format("spark-floor-sink").mode("append").save())

            def floor_copy():
                (spark.read.format("spark-stream-floor").load().where(FILTER)
                 .select("key", "value", "headers")
                 .write.format("spark-floor-sink").mode("append").save())

            named = ({"cluster": cluster.name} if args.by == "cluster" else
                     {"kafka.bootstrap.servers": cluster.bootstrap_servers})
            print(f"rafka's jobs name the cluster by {', '.join(named)}", flush=True)

            def rafka_count():
                spark.read.format("rafka").options(**named) \
                    .option("subscribe", "src").option("startingOffsets", "earliest") \
                    .load().count()
            copies = iter(("c1", "c2"))

            def rafka_copy():
                spark_copy(spark, "rafka", named, "src", next(copies))
            for name, job, moved in (
                    ("spark floor read job (count, no I/O)", floor_read, 0),
                    ("spark floor write job (filter, no-op Python writer)", floor_write, 0),
                    (f"spark floor copy job of {n:,} records (the stream from memory, filter, "
                     "projection, no-op Python writer)", floor_copy, n),
                    (f"rafka count() of {n:,} records", rafka_count, n),
                    (f"rafka copy job of {n:,} records", rafka_copy, n)):
                before = process_cpu()
                first = timed(job)
                first_spent = cpu_by_kind(before, process_cpu())
                before = process_cpu()
                again = timed(job)
                spent = cpu_by_kind(before, process_cpu())
                rate = f" ({moved / again:,.0f} records/s)" if moved else ""
                print(f"{name}: first job {first:.2f} s, again {again:.2f} s{rate}, one-time cost "
                      f"{first - again:.2f} s; cpu of the first beyond the second: " + ", ".join(
                          f"{kind} {first_spent.get(kind, 0.0) - spent.get(kind, 0.0):+.2f} s"
                          for kind, _ in (*KINDS, ("other", ()))), flush=True)
            print(f"cpu during the warm copy ({again:.2f} s wall, 2 cores): " + ", ".join(
                f"{kind} {spent.get(kind, 0.0):.2f} s ({spent.get(kind, 0.0) / n * 1e6:.1f} "
                f"us/record)" for kind, _ in (*KINDS, ("other", ()))), flush=True)
            spark.stop()
        finally:
            cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
