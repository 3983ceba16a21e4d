"""Spark's ``rafka`` format at speed: batch writes and reads, in Kafka-perf style.

    .venv/bin/python benchmarks/spark.py --records 1000000

A local Spark session (``local[2]``, Arrow on both sides: the source yields Arrow record
batches, the sink takes them through Spark's Arrow writer) and a 3-broker cluster on this
machine. Runs, each on the same ``--records`` records of ``--value-size`` bytes, on topics
of ``--partitions`` partitions at ``--replication-factor``:

- write: ``df.write.format("rafka")`` of a generated DataFrame (``spark.range`` with a
  constant value of ``--value-size`` bytes), null keys, the sink's acks=all, ``--passes``
  times, each to a topic of its own (the first pass starts Spark's Python workers and
  their Ray connections);
- Spark's own floor: ``count()`` of a Python data source with as many partitions that yields
  one row per partition and does no I/O (planning, a Python worker per task, the job's two
  stages): every ``format("rafka")`` query pays it too, so it is printed beside them;
- read ``count()``: ``spark.read.format("rafka")...load().count()``, ``--read-passes`` times,
  and the median of the passes after the JVM's JIT has warmed (the second half);
- read ``groupBy(key).count()`` on a topic of the same records with 1,000 distinct keys,
  ``--passes`` times;
- Ray Data: ``rafka.ray.read_topic(...).count()`` and a read of every block.

A progress line (stderr) shows each run's records and seconds while it goes.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import cpu_profile, describe, process_cpu_seconds  # noqa: E402

DISTINCT_KEYS = 1000


def line(name: str, records: int, seconds: float, value_size: int) -> float:
    rate = records / seconds
    print(f"{name}: {records} records in {seconds:.2f} s, {rate:,.0f} records/sec "
          f"({rate * value_size / 2**20:.2f} MB/sec)", flush=True)
    return rate


class Progress:
    """Prints ``name: <done>/<total> records, <s> s`` on one stderr line every second while
    the block runs; ``done`` is a callable (None when it cannot be known)."""

    def __init__(self, name: str, total: int, done=None):
        self.name, self.total, self.done = name, total, done
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.perf_counter()
        while not self._stop.wait(1.0):
            try:
                done = self.done() if self.done else None
            except Exception:   # a progress probe never fails the run
                done = None
            count = f"{done:,}/{self.total:,} records" if done is not None \
                else f"{self.total:,} records"
            print(f"\r  {self.name}: {count}, {time.perf_counter() - started:.0f} s   ",
                  end="", file=sys.stderr, flush=True)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        print("\r" + " " * 72 + "\r", end="", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def register_floor_source(spark, partitions: int) -> None:
    """``format("spark-floor")``: one row per partition, no I/O: what any Python data source's
    ``count()`` costs on this machine before reading a record."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            yield pa.RecordBatch.from_pydict({"value": pa.array([b"x"], pa.binary())})

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return "spark-floor"

        def schema(self):
            return "value binary"

        def reader(self, schema):
            return FloorReader()

    spark.dataSource.register(FloorSource)


def written(consumer, topic: str, partitions: int):
    """A probe: how many records the topic holds (its end offsets' sum)."""
    tps = [(topic, p) for p in range(partitions)]
    return lambda: sum(consumer.end_offsets(tps).values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--passes", type=int, default=2,
                        help="writes and groupBy reads, each (the first warms up)")
    parser.add_argument("--read-passes", type=int, default=8,
                        help="count() reads (the JVM compiles the read path over the first "
                             "few; the median of the second half is printed)")
    parser.add_argument("--profile", action="store_true",
                        help="print CPU seconds per process (from /proc) after each run")
    args = parser.parse_args(argv)
    before = {}

    def measured(name: str, records: int, run) -> float:
        if args.profile:
            before.update(process_cpu_seconds())
        started = time.perf_counter()
        run()
        elapsed = time.perf_counter() - started
        line(name, records, elapsed, args.value_size)
        if args.profile:
            print(cpu_profile(before, elapsed), flush=True)
        return elapsed

    import pyarrow as pa

    import rafka
    import rafka.spark
    from rafka.client.ray_runtime import ensure_ray

    root = Path(tempfile.mkdtemp(prefix="rafka-spark-"))
    print(describe(root))
    print(f"parameters: {args.records} records of {args.value_size} bytes, {args.partitions} "
          f"partitions, RF={args.replication_factor}, 3 brokers, Spark local[2] with Arrow "
          "batches both ways, the sink's acks=all", flush=True)
    ensure_ray()
    cluster = rafka.Cluster.start(3, root / "data", name="bench-spark")
    spark = None
    probe = rafka.Consumer(cluster)
    try:
        admin = cluster.admin()
        outs = [f"spark-out-{i}" for i in range(1, args.passes + 1)]
        admin.create_topics([rafka.NewTopic(t, args.partitions, args.replication_factor)
                             for t in [*outs, "spark-keyed"]])
        spark = rafka.spark.local_session(
            "rafka-bench", conf={"spark.ui.showConsoleProgress": "false"})
        n = args.records

        def read(topic: str):
            return (spark.read.format("rafka").option("cluster", cluster.name)
                    .option("subscribe", topic).option("startingOffsets", "earliest").load())

        df = spark.range(0, n, 1, 2).selectExpr(
            f"unhex(repeat('78', {args.value_size})) AS value")
        for i, topic in enumerate(outs, 1):
            with Progress(f"spark write pass {i}", n, written(probe, topic, args.partitions)):
                measured(f"spark write (df.write.format(\"rafka\"), acks=all), pass {i}", n,
                         df.write.format("rafka").option("cluster", cluster.name)
                         .option("topic", topic).mode("append").save)
        register_floor_source(spark, args.partitions)
        floors = []
        for _ in range(args.read_passes):
            started = time.perf_counter()
            spark.read.format("spark-floor").load().count()
            floors.append(time.perf_counter() - started)
        floor = median(floors[len(floors) // 2:])
        print(f"spark floor: count() of a Python data source of {args.partitions} partitions "
              f"and no I/O takes {floor:.3f} s (median of passes {len(floors) // 2 + 1}-"
              f"{len(floors)}); a format(\"rafka\") query pays it too", flush=True)
        rates = []
        for i in range(1, args.read_passes + 1):
            got = []
            with Progress(f"spark read count() pass {i}", n):
                elapsed = measured(f"spark read count(), pass {i}", n,
                                   lambda: got.append(read(outs[0]).count()))
            rates.append(n / elapsed)
            if got != [n]:
                raise SystemExit(f"count() read {got} records of {n}")
        warm = rates[len(rates) // 2:]
        rate = median(warm)
        print(f"spark read count(), JIT warmed (median of passes {len(rates) - len(warm) + 1}-"
              f"{len(rates)}): {rate:,.0f} records/sec ({rate * args.value_size / 2**20:.2f} "
              f"MB/sec); beyond Spark's floor: {n / max(n / rate - floor, 1e-9):,.0f} "
              "records/sec", flush=True)

        # The keyed topic, written through the client's batch API (not measured).
        with rafka.Producer(cluster, {"acks": "1", "batch.size": 1 << 20}) as producer:
            value = b"x" * args.value_size
            keys = pa.array([b"k%d" % (i % DISTINCT_KEYS) for i in range(min(n, 100_000))])
            futures = []
            for sent in range(0, n, len(keys)):
                count = min(len(keys), n - sent)
                futures.append(producer.send_batch("spark-keyed", pa.array([value] * count),
                                                   keys.slice(0, count)))
            for f in futures:
                f.result(120)
        for i in range(1, args.passes + 1):
            groups = []
            with Progress(f"spark read groupBy(key).count() pass {i}", n):
                measured(f"spark read groupBy(key).count() ({DISTINCT_KEYS} keys), pass {i}",
                         n, lambda: groups.extend(read("spark-keyed").groupBy("key").count()
                                                  .collect()))
            if sum(r["count"] for r in groups) != n:
                raise SystemExit(f"groupBy(key).count() counted "
                                 f"{sum(r['count'] for r in groups)} records of {n}")

        # Ray Data on the same records: count() (planned ranges: no read at all) and a read
        # of every block (Arrow tables from poll_arrow).
        import rafka.ray
        rows = []
        measured("ray data read_topic().count() (from the planned ranges)", n,
                 lambda: rows.append(rafka.ray.read_topic(cluster, outs[0]).count()))
        for i in range(1, args.passes + 1):   # the first pass starts Ray Data's workers
            with Progress(f"ray data read_topic() every block, pass {i}", n):
                measured(f"ray data read_topic(), every block read, pass {i}", n,
                         lambda: rows.append(sum(
                             len(b) for b in rafka.ray.read_topic(cluster, outs[0])
                             .iter_batches(batch_format="pyarrow", batch_size=None))))
        if rows != [n] * (args.passes + 1):
            raise SystemExit(f"read_topic() counted {rows} records of {n}")
    finally:
        probe.close()
        if spark is not None:
            spark.stop()
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
