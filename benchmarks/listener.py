"""Kafka's own clients through rafka's Kafka listener and against Apache Kafka 4.3.1, in one
run: the same clients, the same topics, one server after the other (never both at once),
each figure the median of ``--repeats`` runs, and the ratio rafka / Kafka printed per row.

    .venv/bin/pip install -e '.[bench]'     # confluent-kafka; mvn fetches Kafka's jars once
    .venv/bin/python benchmarks/listener.py --records 1000000

Rows (6 partitions unless said; RF=3 topics have min.insync.replicas=2):
- confluent-kafka (librdkafka) produce, uniform 100-byte key-less values: RF=1 acks=1 and
  RF=3 acks=all (linger.ms 5, batch.size 256 KiB, idempotent at acks=all);
- confluent-kafka produce of ``benchmarks/streams.py``'s realistic stream (keys of 6-36
  bytes, JSON values of 100 B-2 KiB skewed toward small, a tenth with 1-3 headers) with the
  client's defaults (acks=all), RF=3, and its consume;
- Kafka's ProducerPerformance (Java client, batch.size 256 KiB, linger.ms 5), uniform
  100-byte values: RF=1 acks=1 and RF=3 acks=all, records/s and its p99 latency, and from
  the producer's own metrics where the latency went: its requests' average latency and its
  batches' average wait in the producer's buffer (at full speed a server slower to answer
  than the client is to write fills the buffer, and the percentiles are mostly that wait);
- Kafka's ConsumerPerformance: fetch.nMsg.sec (the group's join excluded);
- confluent-kafka consume, one message at a time as a Python application reads, with the
  client's defaults, and again with ``fetch.queue.backoff.ms=10``. At its defaults
  librdkafka postpones the next fetch by ``fetch.queue.backoff.ms`` (1 s) whenever its local
  queue is over ``queued.min.messages`` (100,000 records) or ``queued.max.messages.kbytes``
  (64 MiB), so an application that drains 100,000 records in well under a second waits
  out the rest of it again and again, against any server: both gave ~150,000/s with the
  two cores mostly idle (the row's CPU figures show it). The second row keeps the fetcher
  going: the client and the servers then share the CPU;
- end-to-end delay at ``--e2e-rate`` records/s (10,000), acks=all, RF=3, confluent-kafka at
  both ends with its defaults, producer and consumer each in a process of their own:
  p50, p99 and p99.9 from ``produce()`` to the consumer's ``poll()``, after 2 s of warm-up;
  and the same with Kafka's Java clients (``benchmarks/java/EndToEnd.java``, compiled once
  against Kafka's client jars: producer and consumer in one JVM, the delay from ``send()``
  to ``poll()`` on one clock), in the "java" group;
- ``--scale-partitions`` partitions at RF=3 (3,334: 10,002 replicas; a comma-separated list
  measures each size in turn, e.g. ``3334,10000`` for 30,000 replicas too, stopping below
  3 GiB of available memory): CreateTopics answered, and every leader answering
  ListOffsets, in seconds from the request.

Each throughput row also says where a run's CPU went, on average (``benchmarks.machine.CpuUse``):
the client's (confluent-kafka in this process, with rafka's Ray driver beside it, or the
Java tool's process), and every other process's (the servers, Ray's own and whatever else
ran; the kernel's loopback work is charged to whichever side's system call it fell in),
beside the run's wall time (the whole run: a Java tool's JVM start and a consumer's set-up
too): on two cores a client near a core (or two, for a JVM) is the bound, whichever server
it uses.

Throughput ratios are rafka / Kafka (higher is better); latency and time ratios are also
rafka / Kafka, where lower is better: each line says which.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.kafka_peer import (KAFKA_VERSION, JavaTools, KafkaCluster,  # noqa: E402
                                   confluent_consume, confluent_end_to_end,
                                   confluent_produce, create_topic, send_all)
from benchmarks.machine import CpuUse, MemoryGuard, available_gib, describe  # noqa: E402
from benchmarks.peers import PeerUnavailable  # noqa: E402
from benchmarks.streams import describe_stream, payload_bytes, realistic_stream  # noqa: E402
from benchmarks.transactions import records_of  # noqa: E402

PARTITIONS = 6
MIN_AVAILABLE_GIB = 3.0   # scale steps stop below this much available memory
VALUE = b"x" * 100
# librdkafka's fetcher not paused for a second each time 100,000 records are queued (see the
# module's doc): one Python consumer as fast as it and the servers go together.
UNPAUSED_FETCHER = {"fetch.queue.backoff.ms": 10}

# name -> (unit, higher is better)
UNITS = {"rate": ("records/sec", True), "ms": ("ms", False), "s": ("s", False)}


def median(values: list[float]) -> float:
    """The middle value; NaN (a figure a run did not report) when any is NaN."""
    if any(v != v for v in values):
        return float("nan")
    return sorted(values)[len(values) // 2]


def produce_realistic(bootstrap_servers: str, topic: str, records: list,
                      client: dict | None = None) -> float:
    """confluent-kafka with its defaults (acks=all, linger.ms 5): seconds until every record
    of the realistic stream is acknowledged."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap_servers,
                         "queue.buffering.max.messages": 1_000_000, **(client or {})})
    return send_all(producer, topic, ((value, key, headers)
                                      for key, value, headers in records))


def control_plane(bootstrap_servers: str, topic: str, partitions: int,
                  timeout_s: float = 300) -> tuple[float, float]:
    """Seconds from CreateTopics (``partitions`` at RF=3) to its answer, and to every
    partition's leader answering ListOffsets."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    started = time.perf_counter()
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(timeout_s)
    answered = time.perf_counter() - started
    waiting = {TopicPartition(topic, p) for p in range(partitions)}
    while waiting:
        if time.perf_counter() - started > timeout_s:
            raise PeerUnavailable(f"{len(waiting)} of {partitions} partitions not serving "
                                  f"ListOffsets within {timeout_s:.0f} s")
        try:
            futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in waiting},
                                         request_timeout=30)
        except Exception:   # noqa: BLE001 - metadata not there yet
            time.sleep(0.2)
            continue
        for tp, future in futures.items():
            try:
                future.result(60)
                waiting.discard(tp)
            except Exception:   # noqa: BLE001 - not serving yet: asked again
                pass
        if waiting:
            time.sleep(0.2)
    return answered, time.perf_counter() - started


class Figures:
    """Each row's measurements on one server, printed as taken."""

    def __init__(self, server: str):
        self.server = server
        self.values: dict[str, tuple[float, str]] = {}

    def add(self, row: str, value: float, unit: str, extra: str = "") -> None:
        self.values[row] = (value, unit)
        shown = (f"{value:,.0f} {UNITS[unit][0]}" if unit == "rate" else
                 f"{value:,.2f} {UNITS[unit][0]}" if unit == "s" else
                 f"{value:,.1f} {UNITS[unit][0]}")
        print(f"{self.server} {row}: {shown}{extra}", flush=True)


def measure(server: str, bootstrap_servers: str, tools: JavaTools, args,
            realistic: list, realistic_mb: float) -> Figures:
    out = Figures(server)
    n, r = args.records, args.repeats
    mb = n * len(VALUE) / 2**20

    def topic(name: str, rf: int) -> str:
        name = f"{name}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap_servers, name, PARTITIONS, rf)
        return name

    def rate(row: str, run: Callable[[], float], count: int, megabytes: float) -> None:
        with CpuUse() as cpu:
            value = median([count / run() for _ in range(r)])
        out.add(row, value, "rate", f" ({value * megabytes / count:.2f} MB/sec)"
                + cpu.per_run(r))

    # Warm-up, not counted: the JVM's JIT on Kafka, connections and caches on both.
    warm = topic("warm-up", 3)
    confluent_produce(bootstrap_servers, warm, min(n, 500_000), VALUE, "all")
    confluent_consume(bootstrap_servers, warm, PARTITIONS, min(n, 500_000))

    rows = set(args.rows.split(","))
    # The consume rows read what the RF=1 and realistic produce rows wrote.
    if rows & {"produce", "consume"}:
        rf1 = topic("ck-rf1", 1)
        rate("confluent-kafka produce RF=1 acks=1",
             lambda: confluent_produce(bootstrap_servers, rf1, n, VALUE, "1"), n, mb)
    if "produce" in rows:
        rf3 = topic("ck-rf3", 3)
        rate("confluent-kafka produce RF=3 acks=all",
             lambda: confluent_produce(bootstrap_servers, rf3, n, VALUE, "all"), n, mb)
    if rows & {"produce", "consume"}:
        keyed = topic("realistic", 3)
        rate("confluent-kafka produce realistic keyed stream RF=3 (client defaults)",
             lambda: produce_realistic(bootstrap_servers, keyed, realistic), len(realistic),
             realistic_mb)

    def consume(name: str, count: int, client: dict | None = None) -> float:
        seen, elapsed = confluent_consume(bootstrap_servers, name, PARTITIONS, count, client)
        if seen < count:
            raise PeerUnavailable(f"{server}: consumed {seen} of {count} records")
        return elapsed
    # The topics hold ``repeats`` copies of what was produced: each read takes the first.
    if "consume" in rows:
        rate("confluent-kafka consume realistic keyed stream", lambda: consume(keyed,
             len(realistic)), len(realistic), realistic_mb)
        rate("confluent-kafka consume (one message at a time)", lambda: consume(rf1, n), n,
             mb)
        rate("confluent-kafka consume, fetch.queue.backoff.ms=10",
             lambda: consume(rf1, n, UNPAUSED_FETCHER), n, mb)

    if "e2e" in rows:
        e2e = topic("e2e", 3)
        runs = []
        for _ in range(r):
            delays = confluent_end_to_end(bootstrap_servers, e2e, PARTITIONS, args.e2e_rate,
                                          args.e2e_seconds, 2.0, VALUE)
            if len(delays) < args.e2e_rate * args.e2e_seconds * 0.9:
                raise PeerUnavailable(f"{server}: end-to-end consumer read {len(delays):,} "
                                      f"of {args.e2e_rate * args.e2e_seconds:,.0f} records")
            runs.append(delays)
        label = f"end-to-end at {args.e2e_rate:,}/s acks=all RF=3 confluent-kafka"
        for name, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)):
            out.add(f"{label} {name}", median([d[int(len(d) * q)] for d in runs]), "ms")

    if "java" in rows:
        for name, rf, acks in (("RF=1 acks=1", 1, "1"), ("RF=3 acks=all", 3, "all")):
            topics = [topic(f"perf-rf{rf}", rf) for _ in range(r)]
            with CpuUse() as cpu:
                runs = [tools.producer_perf(bootstrap_servers, t, n, len(VALUE), acks)
                        for t in topics]
            value = median([x["rate"] for x in runs])
            out.add(f"Java ProducerPerformance {name}", value, "rate",
                    f" ({value * mb / n:.2f} MB/sec){cpu.per_run(r)}")
            out.add(f"Java ProducerPerformance {name} p99",
                    median([x["p99"] for x in runs]), "ms")
            # Where its latency went: the requests' own, or the wait in the client's
            # buffer behind them (a saturating producer's percentiles are mostly that).
            out.add(f"Java ProducerPerformance {name} request latency avg",
                    median([x["request latency"] for x in runs]), "ms")
            out.add(f"Java ProducerPerformance {name} record queue time avg",
                    median([x["queue time"] for x in runs]), "ms")
        perf = topic("perf-consume", 1)
        tools.producer_perf(bootstrap_servers, perf, n, len(VALUE), "1")
        with CpuUse() as cpu:
            value = median([tools.consumer_perf(bootstrap_servers, perf, n)["fetch rate"]
                            for _ in range(r)])
        out.add("Java ConsumerPerformance fetch rate", value, "rate",
                f" ({value * mb / n:.2f} MB/sec){cpu.per_run(r)}")
        e2e = topic("e2e-java", 3)
        runs = [tools.end_to_end(bootstrap_servers, e2e, args.e2e_rate, args.e2e_seconds,
                                 2.0, len(VALUE)) for _ in range(r)]
        for run in runs:
            if run["records"] < args.e2e_rate * args.e2e_seconds * 0.9:
                raise PeerUnavailable(f"{server}: Java end-to-end consumer read "
                                      f"{run['records']:,} of "
                                      f"{args.e2e_rate * args.e2e_seconds:,.0f} records")
        label = f"end-to-end at {args.e2e_rate:,}/s acks=all RF=3 Java clients"
        for name in ("p50", "p99", "p99.9"):
            out.add(f"{label} {name}", median([x[name] for x in runs]), "ms")

    for partitions in (args.scale_partitions if "scale" in rows else []):
        # Sizes grow stepwise; a step is not started below the floor, and one that brings
        # the machine under it stops the rest (no swap here: running out kills everything).
        if available_gib() < MIN_AVAILABLE_GIB:
            print(f"{server}: {partitions:,} partitions x RF=3 not run: "
                  f"{available_gib():.1f} GiB available < {MIN_AVAILABLE_GIB} GiB", flush=True)
            break
        label = f"{partitions:,} partitions x RF=3"
        with MemoryGuard(MIN_AVAILABLE_GIB) as guard:
            try:
                answered, serving = control_plane(bootstrap_servers,
                                                  f"scale-{uuid.uuid4().hex[:6]}", partitions)
            except Exception as e:   # noqa: BLE001 - refused (Kafka: more than 10,000
                # records in one CreateTopics is POLICY_VIOLATION): said, and no ratio
                print(f"{server} {label}: CreateTopics failed: {e}", flush=True)
                break
        out.add(f"{label}: CreateTopics answered", answered, "s")
        out.add(f"{label}: every leader answering ListOffsets", serving, "s",
                f" (available memory after: {available_gib():.1f} GiB)")
        if guard.tripped is not None:
            print(f"{server}: available memory fell to {guard.tripped:.1f} GiB "
                  f"(< {MIN_AVAILABLE_GIB} GiB): larger sizes not run", flush=True)
            break
    return out


def measure_rafka(args, tools, realistic, realistic_mb) -> Figures:
    import rafka
    with tempfile.TemporaryDirectory(prefix="rafka-listener-bench-") as root:
        config = dict(o.split("=", 1) for o in args.override)
        cluster = rafka.Cluster.start(3, Path(root) / "data", name="listener-bench",
                                      config=config or None)
        try:
            print("rafka: 3 brokers (rafka.Cluster.start), Kafka listener on loopback"
                  + (f", config {config}" if config else ""), flush=True)
            return measure("rafka", cluster.bootstrap_servers, tools, args, realistic,
                           realistic_mb)
        finally:
            cluster.shutdown()
            import ray
            ray.shutdown()   # Ray's processes would count beside Kafka's in its CPU figures


def measure_kafka(args, realistic, realistic_mb) -> Figures:
    with KafkaCluster() as kafka:
        print(f"peer: Apache Kafka {KAFKA_VERSION}, KRaft, 3 nodes on loopback (1 GiB heaps)",
              flush=True)
        return measure("Kafka", kafka.bootstrap_servers, kafka.tools, args, realistic,
                       realistic_mb)


def realistic_records(args) -> tuple[list, float]:
    """The realistic stream's records and MB, the machine and the run's parameters
    printed."""
    table = realistic_stream(args.realistic_records)
    print(describe(), flush=True)
    print(f"{args.records:,} records of {len(VALUE)} B per throughput run, {PARTITIONS} "
          f"partitions, median of {args.repeats}; realistic stream: {describe_stream(table)}",
          flush=True)
    return records_of(table), payload_bytes(table) / 2**20


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records per throughput run (100-byte values)")
    parser.add_argument("--realistic-records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; the median")
    parser.add_argument("--scale-partitions", default="3334",
                        type=lambda v: [int(p) for p in v.split(",") if int(p) > 0],
                        help="partitions of each RF=3 control-plane topic, comma-separated, "
                             "created one after the other on the same cluster (3334: "
                             "10,002 replicas; 10000: 30,000); 0: none")
    parser.add_argument("--e2e-rate", type=int, default=10_000,
                        help="end-to-end: records/s produced")
    parser.add_argument("--e2e-seconds", type=float, default=10.0,
                        help="end-to-end: seconds measured (after 2 s of warm-up)")
    parser.add_argument("--rows", default="produce,consume,e2e,java,scale",
                        help="which groups of rows, comma-separated (default: all)")
    parser.add_argument("--skip-peer", action="store_true", help="measure rafka only")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="rafka's cluster config, as `rafka server start --override` "
                             "takes it (e.g. num.replica.hosts=2)")
    args = parser.parse_args(argv)
    realistic, realistic_mb = realistic_records(args)
    with tempfile.TemporaryDirectory(prefix="kafka-tools-") as tools_root:
        ours = measure_rafka(args, JavaTools(Path(tools_root)), realistic, realistic_mb)
    if args.skip_peer:
        return 0
    try:
        theirs = measure_kafka(args, realistic, realistic_mb)
    except PeerUnavailable as e:
        print(f"peer: {e}", flush=True)
        return 0
    for row, (value, unit) in ours.values.items():
        if row in theirs.values:
            higher = UNITS[unit][1]
            peer = theirs.values[row][0]
            ratio = value / peer if peer else float("nan")
            print(f"rafka / Kafka, {row}: {ratio:.2f} "
                  f"({'higher' if higher else 'lower'} is better)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
