"""Producer and consumer throughput and end-to-end latency, in the style of the 2014 Kafka
benchmark, with its peers measured in the same run: Redis Streams (what a Python user would
otherwise pick), NATS JetStream (``benchmarks/nats_peer.py``: file storage, R1 and R3 on a
3-server cluster, nats-py) and Apache Kafka 4.3.1 itself (``benchmarks/kafka_peer.py``: KRaft
on loopback, with the confluent-kafka client and Kafka's own perf tools). A peer that cannot
start is reported as such.

    .venv/bin/pip install -e '.[bench]'      # redis-py, nats-py + nats-server, confluent-kafka;
                                             # redis-server from Debian; Kafka's jars via mvn
    .venv/bin/python benchmarks/clients.py --records 200000

Scenarios (100-byte values, one producer thread, a 6-partition topic, 3 brokers):
(a) RF=1 acks=1, (b) RF=3 acks=1, (c) RF=3 acks=all; one consumer reading what (a) wrote;
end-to-end latency at a fixed moderate rate (a producer at --rate records/s, a consumer
polling in a process of its own; latency = consume time - produce timestamp). Redis
Streams: XADD pipelined 1000 at a time, XREAD 5000 at a time, same values, redis-server on
loopback.
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import cpu_profile, describe, process_cpu_seconds  # noqa: E402
from benchmarks.peers import free_port, stop  # noqa: E402

VALUE = b"x" * 100


PROFILE = False   # --profile: CPU seconds per process for every rafka run


def line(name: str, records: int, seconds: float,
         peers: dict[str, float | None] | None = None) -> float:
    """A Kafka-perf line, with rafka's ratio to each peer figure given (by the peer's name)."""
    rate = records / seconds
    ratio = "".join(f", {rate / peer:.2f}x {who}" for who, peer in (peers or {}).items()
                    if peer)
    print(f"{name}: {records} records in {seconds:.2f} s, {rate:,.0f} records/sec "
          f"({rate * len(VALUE) / 2**20:.2f} MB/sec){ratio}", flush=True)
    return rate


def peer(measure, records: int) -> dict[str, float]:
    """A peer harness's figures (``nats_peer.measure``, ``kafka_peer.measure``), or none,
    said, when it cannot start."""
    from benchmarks.peers import PeerUnavailable
    try:
        return measure(records, VALUE)
    except PeerUnavailable as e:
        print(f"peer: {e}", flush=True)
        return {}


def measured(run, *args):
    """Call ``run``; with --profile, print where the CPU went meanwhile."""
    before, started = (process_cpu_seconds() if PROFILE else None), time.perf_counter()
    result = run(*args)
    if PROFILE:
        print(cpu_profile(before, time.perf_counter() - started), flush=True)
    return result


# ---- the peer -------------------------------------------------------------------------------

def redis_streams(records: int) -> tuple[float | None, float | None]:
    server = shutil.which("redis-server")
    try:
        import redis
    except ImportError:
        redis = None
    if server is None or redis is None:
        print("peer: Redis Streams skipped (needs redis-server on PATH and redis-py: "
              "apt-get install redis-server; pip install -e '.[bench]')")
        return None, None
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        started = time.perf_counter()
        for start in range(0, records, 1000):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(1000, records - start)):
                pipe.xadd("bench", {"v": VALUE})
            pipe.execute()
        produce = line("peer Redis Streams XADD (pipelined 1000)", records,
                       time.perf_counter() - started)
        started = time.perf_counter()
        last, seen = "0-0", 0
        while seen < records:
            out = client.xread({"bench": last}, count=5000)
            entries = out[0][1] if out else []
            if not entries:
                break
            seen += len(entries)
            last = entries[-1][0]
        consume = line("peer Redis Streams XREAD (5000 at a time)", seen,
                       time.perf_counter() - started)
        return produce, consume
    finally:
        stop([proc])


# ---- rafka ----------------------------------------------------------------------------------

def produce(cluster, topic: str, records: int, acks: str, batch_size: int) -> float:
    import rafka
    with rafka.Producer(cluster, {"acks": acks, "linger.ms": 5,
                                  "batch.size": batch_size}) as producer:
        started = time.perf_counter()
        send = producer.send
        for _ in range(records):
            last = send(topic, VALUE)
        producer.flush()
        elapsed = time.perf_counter() - started
        last.result(0)
    # Every record must have arrived: a figure for records that failed would be no figure.
    # (With acks=1 the high watermark may trail the last answer by a follower fetch.)
    consumer = rafka.Consumer(cluster)
    deadline = time.monotonic() + 30
    while (written := sum(consumer.end_offsets([(topic, p) for p in range(6)]).values())) \
            < records and time.monotonic() < deadline:
        time.sleep(0.1)
    consumer.close()
    if written < records:
        raise SystemExit(f"{topic}: only {written} of {records} records were written")
    return elapsed


def fresh_topic(cluster, name: str, replication_factor: int) -> str:
    """A new 6-partition topic whose replicas (followers too) all answer: a scenario does
    not share the two cores with replicas still opening."""
    import ray
    import rafka
    cluster.admin().create_topics([rafka.NewTopic(name, 6, replication_factor)])
    for p, info in cluster.metadata()["topics"][name].items():
        ray.get([cluster.replica(name, p, b).describe.remote() for b in info["replicas"]])
    return name


def consume(cluster, topic: str, records: int) -> tuple[int, float]:
    import rafka
    # Kafka's defaults, max.poll.records=500 among them, as kafka-consumer-perf-test runs: an
    # application holding more records at a time makes its own collector work harder.
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([(topic, p) for p in range(6)])
    started = time.perf_counter()
    seen = 0
    while seen < records:
        got = consumer.poll(2000)
        if not got:
            break
        seen += len(got)
    elapsed = time.perf_counter() - started
    consumer.close()
    return seen, elapsed


def produce_columns(cluster, topic: str, records: int, acks: str, per_call: int = 100_000,
                    batch_size: int = 1 << 20) -> float:
    """``Producer.send_batch`` of ``per_call`` records at a time (an Arrow array of the same
    values), null keys (sticky), batches of ``batch_size``; every record answered."""
    import pyarrow as pa
    import rafka
    values = pa.array([VALUE] * per_call, pa.binary())
    with rafka.Producer(cluster, {"acks": acks, "batch.size": batch_size}) as producer:
        started = time.perf_counter()
        futures = [producer.send_batch(topic, values.slice(0, min(per_call, records - sent)))
                   for sent in range(0, records, per_call)]
        for future in futures:
            future.result(120)
        elapsed = time.perf_counter() - started
    return elapsed


def consume_columns(cluster, topic: str, records: int, max_records: int = 100_000
                    ) -> tuple[int, float]:
    """``Consumer.poll_arrow`` until every record is read."""
    import rafka
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest",
                                        "max.partition.fetch.bytes": 4 << 20,
                                        "fetch.max.bytes": 16 << 20})
    consumer.assign([(topic, p) for p in range(6)])
    started = time.perf_counter()
    seen = 0
    while seen < records:
        table = consumer.poll_arrow(2000, max_records=max_records)
        if not len(table):
            break
        seen += len(table)
    elapsed = time.perf_counter() - started
    consumer.close()
    return seen, elapsed


class _LatencyReader:
    """The end-to-end consumer, in a process of its own (a Ray actor): a reader thread beside
    the producer would share its GIL and measure the producer's pauses, not rafka's
    (PEERS.md). Both processes read the same wall clock."""

    def __init__(self, cluster_name: str, topic: str):
        import rafka
        self.consumer = rafka.Consumer(rafka.Cluster.connect(cluster_name),
                                       {"auto.offset.reset": "latest"})
        self.consumer.assign([(topic, p) for p in range(6)])
        for p in range(6):
            self.consumer.position((topic, p))
        # Two flat arrays, not a list of tuples: a million tracked objects would make the
        # reader's own garbage collections (tens of ms, GIL held) part of what is measured.
        self.timestamps, self.latencies = array("d"), array("d")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stop.is_set():
            for r in self.consumer.poll(50):
                self.timestamps.append(r.timestamp)
                self.latencies.append(time.time() * 1000 - r.timestamp)

    def finish(self) -> tuple[bytes, bytes]:
        self.stop.set()
        self.thread.join()
        self.consumer.close()
        return self.timestamps.tobytes(), self.latencies.tobytes()


def _latency_producer(cluster_name: str, topic: str, rate: int, seconds: float,
                      warmup: float, linger_ms: int) -> float:
    """The end-to-end producer, in a process of its own as a producing service runs (the
    driver's heap, Ray's and Spark's and every peer's modules, made its full garbage
    collections last 40-120 ms, and where one fell in the measured window it was a pause of
    the producer, not of rafka). Returns the wall time (ms) measuring starts at."""
    import rafka
    from rafka.cli.throttle import ThroughputThrottler
    cluster = rafka.Cluster.connect(cluster_name)
    with rafka.Producer(cluster, {"acks": "all", "linger.ms": linger_ms}) as producer:
        measured_from_ms = time.time() * 1000 + warmup * 1000
        throttler = ThroughputThrottler(rate)
        for i in range(int(rate * (warmup + seconds))):
            producer.send(topic, VALUE)
            throttler.throttle(i + 1)
        producer.flush()
    return measured_from_ms


def end_to_end(cluster, topic: str, rate: int, seconds: float, warmup: float,
               linger_ms: int = 5) -> list[float]:
    """Latencies (ms) of the records produced after ``warmup`` seconds at ``rate``: the
    first second or so pays for connections and actor-handle lookups, which a long-running
    producer pays once. Producer and consumer each run in a Ray worker process of their
    own."""
    import ray
    reader = ray.remote(num_cpus=0)(_LatencyReader).remote(cluster.name, topic)
    ray.get(reader.__ray_ready__.remote())
    measured_from_ms = ray.get(ray.remote(num_cpus=0)(_latency_producer).remote(
        cluster.name, topic, rate, seconds, warmup, linger_ms))
    time.sleep(1)
    raw_ts, raw_lat = ray.get(reader.finish.remote())
    ray.kill(reader)
    timestamps, latencies = array("d"), array("d")
    timestamps.frombytes(raw_ts)
    latencies.frombytes(raw_lat)
    return sorted(lat for ts, lat in zip(timestamps, latencies) if ts >= measured_from_ms)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=10_000, help="end-to-end records/s")
    parser.add_argument("--latency-seconds", type=float, default=10)
    parser.add_argument("--latency-linger-ms", type=int, default=5,
                        help="the end-to-end producer's linger.ms (5: Kafka 4's default; a "
                             "record waits up to this long for others to join its batch)")
    parser.add_argument("--warmup-seconds", type=float, default=2,
                        help="end-to-end: produce at the rate this long before measuring")
    parser.add_argument("--batch-size", type=int, default=256 * 1024,
                        help="the producer's batch.size (a Ray call costs ~1 ms of CPU, so "
                             "fewer, bigger batches pay)")
    parser.add_argument("--consume-passes", type=int, default=1,
                        help="read the RF=1 topic this many times, each with a new consumer "
                             "(the first pass in a process pays for warm-up)")
    parser.add_argument("--batch-passes", type=int, default=2,
                        help="run the batch API's lines (send_batch, poll_arrow) this many "
                             "times, each on new topics with a new producer and consumer")
    parser.add_argument("--skip-peer", action="store_true", help="measure no peer")
    parser.add_argument("--peers", default="redis,nats,kafka",
                        help="which peers to measure: redis, nats, kafka (comma-separated)")
    parser.add_argument("--profile", action="store_true",
                        help="print CPU seconds per process (from /proc) after each run")
    parser.add_argument("--only-latency", action="store_true",
                        help="skip the throughput runs")
    args = parser.parse_args(argv)
    global PROFILE
    PROFILE = args.profile

    import rafka
    from rafka.client.ray_runtime import ensure_ray

    root = Path(tempfile.mkdtemp(prefix="rafka-clients-"))
    print(describe(root))
    print(f"parameters: {args.records} records of {len(VALUE)} bytes, one producer thread, "
          f"6 partitions, 3 brokers, linger.ms=5, batch.size={args.batch_size}; latency at "
          f"{args.rate} records/s for {args.latency_seconds} s after {args.warmup_seconds} s of "
          f"warm-up, Kafka's ThroughputThrottler")
    wanted = set() if args.skip_peer or args.only_latency else set(args.peers.split(","))
    peer_p, peer_c = redis_streams(args.records) if "redis" in wanted else (None, None)
    from benchmarks import kafka_peer, nats_peer
    jetstream_figures = peer(nats_peer.measure, args.records) if "nats" in wanted else {}
    kafka_figures = peer(kafka_peer.measure, args.records) if "kafka" in wanted else {}

    def peers(kind: str) -> dict[str, float | None]:
        """The peer figures a rafka line compares with: produce at one RF and acks, or
        consume."""
        if kind.startswith("wire "):   # the same client against Kafka: its only peer
            return {"Kafka+confluent-kafka": kafka_figures.get(f"confluent {kind[5:]}")}
        redis = peer_c if kind == "consume" else peer_p
        # A JetStream publish is acknowledged once its replicas have it: acks=all's peer.
        jetstream = {"rf1": "r1 produce", "rf3-acksall": "r3 produce",
                     "consume": "consume"}.get(kind, "")
        return {"Redis Streams": redis, "NATS JetStream": jetstream_figures.get(jetstream),
                "Kafka+confluent-kafka": kafka_figures.get(f"confluent {kind}"),
                "Kafka perf-test": kafka_figures.get(f"perf {kind}")}
    ensure_ray()
    cluster = rafka.Cluster.start(3, root / "data", name="bench-clients")
    try:
        admin = cluster.admin()
        if not args.only_latency:
            topic = fresh_topic(cluster, "rf1", 1)
            line("(a) produce RF=1 acks=1", args.records,
                 measured(produce, cluster, topic, args.records, "1", args.batch_size),
                 peers("rf1"))
            for n in range(1, args.consume_passes + 1):
                seen, elapsed = measured(consume, cluster, topic, args.records)
                line("consume (one consumer, 6 partitions)" if args.consume_passes == 1
                     else f"consume (one consumer, 6 partitions), pass {n}", seen, elapsed,
                     peers("consume"))
            admin.delete_topics([topic])
            for name, acks in (("(b) produce RF=3 acks=1", "1"),
                               ("(c) produce RF=3 acks=all", "all")):
                topic = fresh_topic(cluster, f"rf3-acks{acks}", 3)
                line(name, args.records,
                     measured(produce, cluster, topic, args.records, acks, args.batch_size),
                     peers(f"rf3-acks{acks}"))
                admin.delete_topics([topic])
            # The batch API: 100,000 records per send_batch call, batch.size 1 MiB. A batch
            # pass lasts ~0.5 s, so the first in a process (pyarrow's kernels loaded, the
            # first connections to each replica host) is printed but not the only one.
            for n in range(1, args.batch_passes + 1):
                label = "" if args.batch_passes == 1 else f", pass {n}" + (
                    " (the first in this process)" if n == 1 else "")
                for name, rf, acks in (("(d) send_batch RF=1 acks=1", 1, "1"),
                                       ("(e) send_batch RF=3 acks=all", 3, "all")):
                    topic = fresh_topic(cluster, f"cols-rf{rf}-{n}", rf)
                    line(name + label, args.records,
                         measured(produce_columns, cluster, topic, args.records, acks),
                         peers("rf1" if rf == 1 else "rf3-acksall"))
                    if rf == 1:
                        seen, elapsed = measured(consume_columns, cluster, topic,
                                                 args.records)
                        line("poll_arrow (one consumer, 6 partitions)" + label, seen, elapsed,
                             peers("consume"))
                    admin.delete_topics([topic])
        fresh_topic(cluster, "e2e", 3)
        lat = measured(end_to_end, cluster, "e2e", args.rate, args.latency_seconds,
                       args.warmup_seconds, args.latency_linger_ms)
        if lat:
            p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
            print(f"end-to-end latency at {args.rate} records/s (acks=all, RF=3, "
                  f"linger.ms={args.latency_linger_ms}): "
                  f"{len(lat)} records, p50 {p(0.5):.1f} ms, p95 {p(0.95):.1f} ms, "
                  f"p99 {p(0.99):.1f} ms, p99.9 {p(0.999):.1f} ms, max {lat[-1]:.1f} ms")
        if not args.only_latency:
            # Unmodified Kafka clients over the brokers' Kafka listener: confluent-kafka as
            # the Kafka peer measures it (the same functions), RF=1 acks=1. After the
            # latency run: the consumer's group id makes the cluster create
            # __consumer_offsets (50 partitions), which would run beside it.
            if importlib.util.find_spec("confluent_kafka") is not None:
                from benchmarks.kafka_peer import confluent_consume, confluent_produce
                topic = fresh_topic(cluster, "wire", 1)
                line("(f) confluent-kafka produce over rafka's Kafka listener, RF=1 acks=1",
                     args.records, measured(confluent_produce, cluster.bootstrap_servers,
                                            topic, args.records, VALUE, "1"),
                     peers("wire rf1"))
                seen, elapsed = measured(confluent_consume, cluster.bootstrap_servers, topic,
                                         6, args.records)
                line("confluent-kafka consume over rafka's Kafka listener (assign, 6 "
                     "partitions)", seen, elapsed, peers("wire consume"))
                admin.delete_topics([topic])
            else:
                print("(f) confluent-kafka over rafka's Kafka listener: not measured, "
                      "confluent-kafka is not installed (pip install -e '.[bench]')")
    finally:
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
