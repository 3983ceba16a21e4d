"""How a client over its quota is held (issue 44's target: producer_byte_rate held within
10% over 20 s), on rafka and on Apache Kafka 4.3.1 in the same run, the same client and
quota: confluent-kafka producing 1,000-byte values as fast as it can (acks=1, linger.ms=5,
a 64 KiB queue) under producer_byte_rate for its client id, set with Kafka's own
kafka-configs.sh on both. Then rafka's own producer (``rafka.Producer.send`` with its
defaults but acks=1 and a 200 kB buffer.memory, 1,000-byte values) under the same quota for
its own client id, on rafka alone (no Kafka client takes that path): the replica hosts
hold it, not a listener.

    .venv/bin/python benchmarks/quotas.py [--quota 500000] [--seconds 45]

Lines: the bytes delivered each second, the mean rate over [5 s, 25 s) and over the whole
run from 5 s, the throttle times the brokers answered (librdkafka's throttle callback), and
rafka / Kafka. Kafka's windowed rate (quota.window.num 11 windows of 1 s) lets a greedy
client burst about ten windows' worth whenever its old bytes leave the window, then
throttles it: its rate over 20 s depends on where the bursts fall.
"""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402

VALUE = b"q" * 1000


def set_quota(bootstrap_servers: str, quota: int, client_id: str = "throttled") -> None:
    from benchmarks.kafka_peer import classpath
    subprocess.run(["java", "-cp", f"{classpath()}/*", "kafka.admin.ConfigCommand",
                    "--bootstrap-server", bootstrap_servers, "--alter", "--entity-type",
                    "clients", "--entity-name", client_id, "--add-config",
                    f"producer_byte_rate={quota}"], check=True, capture_output=True,
                   timeout=120)


def produce(bootstrap_servers: str, seconds: float) -> tuple[collections.Counter, list]:
    from confluent_kafka import Producer
    throttles: list = []
    delivered: collections.Counter = collections.Counter()
    started = time.monotonic()

    def done(err, msg):
        if err is None:
            delivered[int(time.monotonic() - started)] += len(msg.value())
    producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": 1,
                         "client.id": "throttled", "linger.ms": 5,
                         "queue.buffering.max.kbytes": 64,
                         "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    while time.monotonic() - started < seconds:
        try:
            producer.produce("quota", VALUE, on_delivery=done)
            producer.poll(0)
        except BufferError:
            producer.poll(0.05)
    producer.flush(60)
    return delivered, throttles


def produce_rafka(cluster, seconds: float) -> tuple[collections.Counter, float]:
    import rafka
    delivered: collections.Counter = collections.Counter()
    started = time.monotonic()

    def done(future) -> None:
        if future.exception() is None:
            delivered[int(time.monotonic() - started)] += len(VALUE)
    with rafka.Producer(cluster, {"client.id": "throttled-rafka", "acks": "1",
                                  "buffer.memory": 200_000}) as producer:
        while time.monotonic() - started < seconds:
            producer.send("quota-rafka", VALUE).add_done_callback(done)
        producer.flush(60)
        longest = producer.metrics()["produce-throttle-time-max"]
    return delivered, longest


def report(name: str, quota: int, seconds: int, delivered, throttles: list | float
           ) -> float:
    """``throttles``: each throttle time answered (s), or the longest one (ms) as a
    producer's produce-throttle-time-max tells it."""
    window = sum(delivered[s] for s in range(5, 25)) / 20
    whole = sum(delivered[s] for s in range(5, seconds)) / (seconds - 5)
    print(f"{name}: per second (KB) {[delivered[s] // 1000 for s in range(seconds)]}",
          flush=True)
    print(f"{name}: producer_byte_rate={quota:,}: {window:,.0f} B/s over [5 s, 25 s) "
          f"({window / quota:.2f}x the quota), {whole:,.0f} B/s over [5 s, {seconds} s) "
          f"({whole / quota:.2f}x); " + (
              f"{len(throttles)} throttled answers, the longest "
              f"{max(throttles, default=0) * 1000:.0f} ms" if isinstance(throttles, list)
              else f"produce-throttle-time-max {throttles:.0f} ms"), flush=True)
    return window


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quota", type=int, default=500_000)
    p.add_argument("--seconds", type=int, default=45)
    args = p.parse_args()
    print(describe(), flush=True)
    print(f"confluent-kafka, 1,000-byte values, acks=1, linger.ms=5, "
          f"queue.buffering.max.kbytes=64, one partition, {args.seconds} s", flush=True)

    import rafka
    from benchmarks.kafka_peer import KafkaCluster, create_topic
    with tempfile.TemporaryDirectory(prefix="rafka-quota-bench-") as tmp:
        cluster = rafka.Cluster.start(1, Path(tmp), name="bench-quotas")
        try:
            cluster.admin().create_topics([rafka.NewTopic("quota", 1, 1)])
            set_quota(cluster.bootstrap_servers, args.quota)
            ours = report("rafka", args.quota, args.seconds,
                          *produce(cluster.bootstrap_servers, args.seconds))
            cluster.admin().create_topics([rafka.NewTopic("quota-rafka", 1, 1)])
            set_quota(cluster.bootstrap_servers, args.quota, "throttled-rafka")
            time.sleep(2)   # the quota reaches the replica hosts
            report("rafka, rafka.Producer (no peer)", args.quota, args.seconds,
                   *produce_rafka(cluster, args.seconds))
        finally:
            cluster.shutdown()
    with KafkaCluster(nodes=1) as kafka:
        create_topic(kafka.bootstrap_servers, "quota", 1, 1)
        set_quota(kafka.bootstrap_servers, args.quota)
        time.sleep(2)   # the quota reaches the broker's cache
        theirs = report("Apache Kafka 4.3.1", args.quota, args.seconds,
                        *produce(kafka.bootstrap_servers, args.seconds))
    print(f"rafka / Kafka over [5 s, 25 s): {ours / theirs:.2f}x", flush=True)


if __name__ == "__main__":
    main()
