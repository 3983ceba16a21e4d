"""The jobs users run, on the records they bring: Kafka-perf style lines, with Apache Kafka
4.3.1 and Spark's own Kafka connector doing the same jobs in the same run.

    .venv/bin/pip install -e '.[bench]'     # confluent-kafka (the peer's loader); mvn fetches
                                            # Kafka's jars and Spark's Kafka connector once
    .venv/bin/python benchmarks/pipeline.py --records 400000

The records are ``benchmarks/streams.py``'s realistic stream (keys of 8-36 bytes, JSON values
of 100 B-2 KiB skewed toward small, a tenth with 1-3 headers, rising timestamps). On a 3-broker
rafka cluster (``--partitions`` partitions, RF ``--replication-factor``), in this order:

- the client calls with their default arguments: ``Producer(cluster)`` and ``send_batch``
  of the stream's Arrow columns (and of Python lists), ``Consumer(cluster)`` and
  ``poll_arrow(timeout_ms=1000)`` / ``poll(timeout_ms=1000)`` until every record is read;
  the same reads of the stream written in Kafka's default batches (``batch.size=16384``,
  the batches Kafka's Java producer writes: a few dozen records each);
- the Spark batch copy job, twice (the first is the Spark session's first job, so its
  one-time costs are in it)::

      spark.read.format(F).option("subscribe", src).option("includeHeaders", "true").load()
          .where("length(value) <= 1500").select("key", "value", "headers")
          .write.format(F).option("topic", dst).save()

- the same job as Structured Streaming: the query started and fed the stream's first
  ``--stream-warmup`` records, its start-up timed from starting it until all of them are
  copied (Spark plans and runs its first micro-batches); then fed the rest while it runs
  (a producer thread sending at full speed, stamped with the time of sending): the
  sustained rate, from the first of those sent to the last copied, and the end-to-end
  delay of each (the copy's LogAppendTime minus the source record's CreateTime), p50 /
  p99 / max;
- Ray Data: ``read_topic`` -> ``map_batches`` (the same filter and projection) ->
  ``write_topic``.

Then, with rafka stopped, the same Spark jobs with ``format("kafka")`` against a 3-node Kafka
4.3.1 (KRaft, 1 GiB heaps) loaded with the same records, and each rafka figure's ratio to
the peer's. The Spark session (``local[2]``) is the same for both; its first job is rafka's.
Rates count records, MB/s the key, value and header bytes of the records.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402
from benchmarks.spark import Progress  # noqa: E402
from benchmarks.streams import describe_stream, payload_bytes, realistic_stream  # noqa: E402

FILTER = "length(value) <= 1500"
MAX_COPIED_VALUE = 1500


class Report:
    """Lines in Kafka-perf style; rafka's figures kept by job for the peer's ratio."""

    def __init__(self, mb_per_record: float):
        self.mb_per_record = mb_per_record
        self.rafka: dict[str, float] = {}

    def line(self, name: str, records: int, seconds: float, job: str | None = None,
             peer_of: str | None = None) -> float:
        rate = records / seconds
        ratio = ""
        if peer_of is not None and self.rafka.get(peer_of):
            ratio = f"; rafka / Kafka = {self.rafka[peer_of] / rate:.2f}x"
        print(f"{name}: {records} records in {seconds:.2f} s, {rate:,.0f} records/sec "
              f"({rate * self.mb_per_record:.2f} MB/sec){ratio}", flush=True)
        if job is not None:
            self.rafka[job] = rate
        return rate


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def copied(table) -> int:
    import pyarrow.compute as pc
    return int(pc.sum(pc.less_equal(pc.binary_length(table["value"]),
                                     MAX_COPIED_VALUE)).as_py())


def spark_copy(spark, fmt: str, options: dict, src: str, dst: str) -> None:
    (spark.read.format(fmt).options(**options).option("subscribe", src)
     .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
     .where(FILTER).select("key", "value", "headers")
     .write.format(fmt).options(**options).option("topic", dst).mode("append").save())


def spark_stream(spark, fmt: str, options: dict, src: str, dst: str, checkpoint: Path):
    return (spark.readStream.format(fmt).options(**options).option("subscribe", src)
            .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
            .where(FILTER).select("key", "value", "headers")
            .writeStream.format(fmt).options(**options).option("topic", dst)
            .option("checkpointLocation", str(checkpoint)).start())


def delays(sent_ms, copied_values, copied_ms) -> str:
    """p50 / p99 / max of each copy's LogAppendTime minus its source record's CreateTime,
    matched by value (every value is unique: it holds the record's id)."""
    import numpy as np
    import pyarrow as pa
    src = pa.table({"value": sent_ms[0], "sent": sent_ms[1]})
    dst = pa.table({"value": copied_values, "copied": copied_ms})
    joined = dst.join(src, "value", join_type="inner")   # the copies of what was timed
    d = joined["copied"].to_numpy() - joined["sent"].to_numpy()
    if not len(d):
        return "end-to-end delay: no record copied of those timed"
    p50, p99 = np.percentile(d, [50, 99])
    return (f"end-to-end delay over {len(d):,} records: p50 {p50:.0f} ms, p99 {p99:.0f} ms, "
            f"max {d.max():.0f} ms")


def copied_until(query, copied, expected: int, name: str) -> None:
    """Wait, with a progress line, until the streaming ``query`` has copied ``expected``
    records (``copied()`` counts them); its failure ends the run."""
    with Progress(name, expected, copied):
        while copied() < expected:
            if query.exception() is not None:
                raise SystemExit(f"{name} failed: {query.exception()}")
            time.sleep(0.05)


def feed(send_chunk, table, chunk: int, sent: list) -> threading.Thread:
    """A thread sending ``table`` a chunk at a time, each stamped with the time it is sent;
    ``sent`` gets (values, stamps) of each chunk."""
    import numpy as np
    import pyarrow as pa

    def run():
        for start in range(0, len(table), chunk):
            part = table.slice(start, chunk)
            now = time.time_ns() // 1_000_000
            send_chunk(part, now)
            sent.append((part["value"], pa.array(np.full(len(part), now, np.int64))))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


class StreamRun(NamedTuple):
    query: object
    warm: int          # records fed first
    startup: float     # seconds from starting the query to the first ``warm`` copied
    elapsed: float     # seconds from the first of the rest sent to the last copied
    fed: int           # the rest
    sent: list         # what was sent of the rest, as ``feed`` records it


def stream_copy(start_query, send_chunk, copies, stream, args, name: str) -> StreamRun:
    """Structured Streaming's copy job as users run it: started (``start_query()``), then
    fed. The stream's first ``--stream-warmup`` records go first, and the start-up is the
    time from starting the query until all of them are copied (the source's and sink's
    planning, Spark's first micro-batches, the checkpoint); then the rest at full speed
    while the query runs."""
    warm = args.stream_warmup
    started = time.perf_counter()
    query = start_query()
    send_chunk(stream.slice(0, warm), time.time_ns() // 1_000_000)
    copied_until(query, copies, copied(stream.slice(0, warm)), f"{name} start-up")
    startup = time.perf_counter() - started
    rest = stream.slice(warm)
    sent: list = []
    started = time.perf_counter()
    feeder = feed(send_chunk, rest, args.stream_chunk, sent)
    copied_until(query, copies, copied(stream), name)
    elapsed = time.perf_counter() - started
    feeder.join()
    return StreamRun(query, warm, startup, elapsed, len(rest), sent)


def rafka_jobs(args, spark, stream, report: Report, root: Path) -> None:
    import pyarrow as pa

    import rafka
    import rafka.ray
    from protocols.topics import TopicPartition

    cluster = rafka.Cluster.start(3, root / "rafka", name="bench-pipeline")
    try:
        n, parts, rf = len(stream), args.partitions, args.replication_factor
        expected = copied(stream)
        admin = cluster.admin()
        topics = ["src", "src-lists", "src-16k", "copy-1", "copy-2", "ray-copy", "stream-src"]
        admin.create_topics([rafka.NewTopic(t, parts, rf) for t in topics] + [
            rafka.NewTopic("stream-copy", parts, rf,
                           config={"message.timestamp.type": "LogAppendTime"})])
        probe = rafka.Consumer(cluster)

        def end(topic):
            return lambda: sum(probe.end_offsets([TopicPartition(topic, p)
                                                  for p in range(parts)]).values())

        # ---- the client calls, default arguments --------------------------------------
        def send_arrow():
            with rafka.Producer(cluster) as producer:
                producer.send_batch("src", stream["value"], stream["key"],
                                    timestamps=stream["timestamp"],
                                    headers=stream["headers"]).result(300)
        with Progress("send_batch", n, end("src")):
            report.line("send_batch(topic, values, keys, timestamps=, headers=) of Arrow "
                        "columns, Producer(cluster) defaults", n, timed(send_arrow),
                        job="send_batch arrow")
        lists = {c: stream[c].to_pylist() for c in ("key", "value", "timestamp", "headers")}

        def send_lists():
            with rafka.Producer(cluster) as producer:
                producer.send_batch("src-lists", lists["value"], lists["key"],
                                    timestamps=lists["timestamp"],
                                    headers=lists["headers"]).result(300)
        with Progress("send_batch lists", n, end("src-lists")):
            report.line("send_batch(...) of Python lists, Producer(cluster) defaults", n,
                        timed(send_lists), job="send_batch lists")
        lists.clear()

        def send_kafka_sized():
            with rafka.Producer(cluster, {"batch.size": 16_384}) as producer:
                producer.send_batch("src-16k", stream["value"], stream["key"],
                                    timestamps=stream["timestamp"],
                                    headers=stream["headers"]).result(300)
        with Progress("send_batch 16 KiB", n, end("src-16k")):
            report.line("send_batch(...) of Arrow columns, batch.size=16384 (Kafka's default: "
                        "batches as Kafka's Java producer makes them)", n,
                        timed(send_kafka_sized), job="send_batch 16k")

        for topic, call in (("src", "poll_arrow"), ("src", "poll"), ("src-16k", "poll_arrow"),
                            ("src-16k", "poll")):
            consumer = rafka.Consumer(cluster)
            consumer.assign([TopicPartition(topic, p) for p in range(parts)])
            consumer.seek_to_beginning()   # auto.offset.reset is latest, as Kafka's
            got = [0]

            def read():
                deadline = time.monotonic() + 300
                while got[0] < n:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{call} read {got[0]} of {n} records in 300 s")
                    if call == "poll_arrow":
                        got[0] += len(consumer.poll_arrow(timeout_ms=1000))
                    else:
                        got[0] += len(consumer.poll(timeout_ms=1000))
            batches = ("send_batch's" if topic == "src" else
                       "16 KiB (as Kafka's Java producer writes them)")
            with Progress(call, n, lambda: got[0]):
                report.line(f"{call}(timeout_ms=1000) until every record is read, "
                            f"Consumer(cluster) defaults, {batches} batches", n, timed(read),
                            job=call if topic == "src" else f"{call} 16k")
            consumer.close()

        # ---- Spark batch copy ---------------------------------------------------------
        options = ({"cluster": cluster.name} if args.by == "cluster" else
                   {"kafka.bootstrap.servers": cluster.bootstrap_servers})
        for i in (1, 2):
            with Progress(f"spark copy {i}", expected, end(f"copy-{i}")):
                report.line(f"spark batch copy job, format(\"rafka\"), "
                            f"{'first job of the Spark session' if i == 1 else 'again'}",
                            n, timed(lambda: spark_copy(spark, "rafka", options, "src",
                                                        f"copy-{i}")),
                            job=f"spark copy {i}")
            if end(f"copy-{i}")() != expected:
                raise SystemExit(f"copy-{i} holds {end(f'copy-{i}')()} records, not {expected}")

        # ---- Ray Data -----------------------------------------------------------------
        import pyarrow.compute as pc

        def ray_copy():
            ds = rafka.ray.read_topic(cluster, "src").map_batches(
                lambda t: t.filter(pc.less_equal(pc.binary_length(t["value"]),
                                                 MAX_COPIED_VALUE)).select(["key", "value"]),
                batch_format="pyarrow", batch_size=None)
            rafka.ray.write_topic(ds, cluster, "ray-copy")
        with Progress("ray data copy", expected, end("ray-copy")):
            report.line("ray data read_topic -> map_batches -> write_topic", n,
                        timed(ray_copy), job="ray copy")

        # ---- Structured Streaming -----------------------------------------------------
        producer = rafka.Producer(cluster)
        run = stream_copy(
            lambda: spark_stream(spark, "rafka", options, "stream-src", "stream-copy",
                                 root / "rafka-checkpoint"),
            lambda part, now: producer.send_batch(
                "stream-src", part["value"], part["key"], timestamps=now,
                headers=part["headers"]), end("stream-copy"), stream, args, "streaming copy")
        producer.close()
        run.query.stop()
        sent = run.sent
        print(f"spark structured streaming copy job, format(\"rafka\"), start-up: its first "
              f"{run.warm:,} records copied {run.startup:.2f} s after it started", flush=True)
        report.line("spark structured streaming copy job, format(\"rafka\"), sustained: fed "
                    "at full speed while it runs", run.fed, run.elapsed, job="streaming")
        consumer = rafka.Consumer(cluster)
        consumer.assign([TopicPartition("stream-copy", p) for p in range(parts)])
        consumer.seek_to_beginning()
        tables = []
        while sum(map(len, tables)) < expected:
            tables.append(consumer.poll_arrow(1000, max_records=100_000))
        consumer.close()
        out = pa.concat_tables(tables)
        print("  rafka streaming " + delays(
            (pa.concat_arrays([v.combine_chunks() if hasattr(v, "combine_chunks") else v
                               for v, _ in sent]),
             pa.concat_arrays([s for _, s in sent])),
            out["value"], out["timestamp"].cast(pa.int64())), flush=True)
        probe.close()
    finally:
        cluster.shutdown()


def kafka_jobs(args, spark, stream, report: Report) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from benchmarks.kafka_peer import KAFKA_VERSION, KafkaCluster

    n, parts, rf = len(stream), args.partitions, args.replication_factor
    expected = copied(stream)
    with KafkaCluster() as kafka:
        print(f"peer: Apache Kafka {KAFKA_VERSION}, KRaft, 3 nodes on loopback (1 GiB heaps), "
              "Spark's Kafka connector in the same Spark session", flush=True)
        for t in ("src", "copy-1", "copy-2", "stream-src"):
            kafka.create_topic(t, parts, rf)
        kafka.create_topic("stream-copy", parts, rf,
                           config={"message.timestamp.type": "LogAppendTime"})
        servers = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
        probe = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "probe"})

        def end(topic):
            return lambda: sum(probe.get_watermark_offsets(KafkaTopicPartition(topic, p),
                                                           timeout=10)[1]
                               for p in range(parts))

        def send(topic: str, table, stamp=None) -> None:
            producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                                 "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
            keys, values = table["key"].to_pylist(), table["value"].to_pylist()
            headers = table["headers"].to_pylist()
            stamps = table["timestamp"].to_pylist()
            for i in range(len(values)):
                while True:
                    try:
                        producer.produce(topic, values[i], keys[i],
                                         timestamp=stamp or stamps[i],
                                         headers=[(h["key"], h["value"]) for h in headers[i]]
                                         if headers[i] else None)
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.flush(120)

        with Progress("loading Kafka", n, end("src")):
            send("src", stream)
        for i in (1, 2):
            with Progress(f"kafka spark copy {i}", expected, end(f"copy-{i}")):
                report.line(f"peer: spark batch copy job, format(\"kafka\") against Kafka, "
                            f"{'its first job' if i == 1 else 'again'}", n,
                            timed(lambda: spark_copy(spark, "kafka", servers, "src",
                                                     f"copy-{i}")),
                            peer_of=f"spark copy {i}")
            if end(f"copy-{i}")() != expected:
                raise SystemExit(f"Kafka copy-{i} holds {end(f'copy-{i}')()} records")

        with tempfile.TemporaryDirectory(prefix="kafka-checkpoint-") as checkpoint:
            run = stream_copy(
                lambda: spark_stream(spark, "kafka", servers, "stream-src", "stream-copy",
                                     Path(checkpoint)),
                lambda part, now: send("stream-src", part, now), end("stream-copy"),
                stream, args, "kafka streaming copy")
            run.query.stop()
        print(f"peer: spark structured streaming copy job, format(\"kafka\") against Kafka, "
              f"start-up: its first {run.warm:,} records copied {run.startup:.2f} s after it "
              "started", flush=True)
        report.line("peer: spark structured streaming copy job, format(\"kafka\") against "
                    "Kafka, sustained: fed by confluent-kafka at full speed", run.fed,
                    run.elapsed, peer_of="streaming")
        probe.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--stream-chunk", type=int, default=10_000,
                        help="records per send while feeding the streaming job")
    parser.add_argument("--stream-warmup", type=int, default=10_000,
                        help="records fed to the streaming job first, to time its start-up")
    parser.add_argument("--no-peer", action="store_true", help="rafka's figures only")
    parser.add_argument("--by", choices=("cluster", "bootstrap"), default="cluster",
                        help="how rafka's Spark jobs name the cluster: the cluster option, "
                             "or kafka.bootstrap.servers alone as the peer's jobs do (reads "
                             "planned and read over the Kafka listener, no Ray in Spark's "
                             "planners and read tasks)")
    args = parser.parse_args(argv)
    if not 0 < args.stream_warmup < args.records:
        parser.error("--stream-warmup must be at least 1 and fewer than --records")

    import rafka.spark
    from rafka.client.ray_runtime import ensure_ray

    root = Path(tempfile.mkdtemp(prefix="rafka-pipeline-"))
    print(describe(root))
    stream = realistic_stream(args.records)
    print(describe_stream(stream))
    print(f"parameters: 3 brokers, {args.partitions} partitions, RF={args.replication_factor}"
          ", Spark local[2], rafka's Spark jobs name the cluster by "
          f"{'the cluster option' if args.by == 'cluster' else 'kafka.bootstrap.servers alone'}"
          ", the sinks' acks=all, copy jobs keep records with "
          f"{FILTER} ({copied(stream):,} of {len(stream):,})", flush=True)
    report = Report(payload_bytes(stream) / len(stream) / 2**20)
    ensure_ray()
    jars = []
    if not args.no_peer:
        from tests.spark_kafka import spark_kafka_jars
        jars = [str(j) for j in spark_kafka_jars()]
    conf = {"spark.ui.showConsoleProgress": "false"}
    if jars:
        conf["spark.jars"] = ",".join(jars)
    spark = rafka.spark.local_session("rafka-pipeline", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rafka_jobs(args, spark, stream, report, root)
        if not args.no_peer:
            kafka_jobs(args, spark, stream, report)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
