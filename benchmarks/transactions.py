"""Transactions through Kafka's own client: confluent-kafka's transactional producer (a commit
every ``--per-transaction`` records, acks=all, RF=3, min.insync 2) and its consumer at
read_committed and read_uncommitted (after a first read not counted, each three times,
alternating, the median kept), against rafka's Kafka listener and against Apache Kafka
4.3.1 in the same run (one after the other, never both at once), with the ratio.

    .venv/bin/pip install -e '.[bench]'     # confluent-kafka; mvn fetches Kafka's jars once
    .venv/bin/python benchmarks/transactions.py --records 200000

The records are ``benchmarks/streams.py``'s realistic stream (keys of 6-36 bytes, JSON values
of 100 B-2 KiB skewed toward small, a tenth with 1-3 headers), sent with the client's
defaults but ``transactional.id`` and ``linger.ms=5``. Each server gets a warm-up pass first.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.machine import describe  # noqa: E402
from benchmarks.streams import describe_stream, payload_bytes, realistic_stream  # noqa: E402

PARTITIONS = 6


def records_of(table) -> list[tuple[bytes, bytes, list]]:
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    headers = table.column("headers").to_pylist()
    return [(k, v, [(h["key"], h["value"]) for h in hs] if hs else None)
            for k, v, hs in zip(keys, values, headers)]


def transactional_produce(bootstrap_servers: str, topic: str, records: list,
                          per_transaction: int) -> float:
    """Seconds to send every record in transactions of ``per_transaction`` and commit each."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5,
                        "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)
    started = time.perf_counter()
    for start in range(0, len(records), per_transaction):
        producer.begin_transaction()
        for key, value, headers in records[start:start + per_transaction]:
            while True:
                try:
                    producer.produce(topic, value, key, headers=headers,
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction(60)
    elapsed = time.perf_counter() - started
    if failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[0]}")
    return elapsed


def consume(bootstrap_servers: str, topic: str, records: int, isolation: str) -> float:
    """Seconds for confluent-kafka's consumer (assign() over every partition) to read
    ``records`` records, counted to the last one read."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap_servers,
                         "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    started = last = time.perf_counter()
    try:
        while seen < records:
            batch = consumer.consume(10_000, 5.0)
            if not batch:
                raise RuntimeError(f"read {seen} of {records} records at {isolation}")
            seen += sum(1 for m in batch if m.error() is None)
            last = time.perf_counter()
        return last - started
    finally:
        consumer.close()


def run(name: str, bootstrap_servers: str, create_topic, records: list, per_transaction: int,
        warmup: list, megabytes: float) -> dict[str, float]:
    """The three figures on one server, in records/s."""
    create_topic("warm-up")
    transactional_produce(bootstrap_servers, "warm-up", warmup, per_transaction)
    # A consumer with a group.id makes the server create __consumer_offsets and start its
    # group coordinators (on rafka, three actors loading 50 partitions: the reads in the
    # next ~8 s ran at 40% of later ones). Done here, untimed, as on a cluster in use.
    consume(bootstrap_servers, "warm-up", len(warmup), "read_committed")
    create_topic("txn")
    out = {"produce": len(records) / transactional_produce(bootstrap_servers, "txn", records,
                                                            per_transaction)}
    # A first read of the topic, not counted: it pays for what later ones do not
    # (connections, metadata, cold caches; on Kafka it ran at a fifth of the later ones).
    # Then each isolation level three times, alternating, the median kept.
    consume(bootstrap_servers, "txn", len(records), "read_uncommitted")
    rates: dict[str, list[float]] = {}
    for isolation in ("read_uncommitted", "read_committed") * 3:
        rates.setdefault(isolation, []).append(
            len(records) / consume(bootstrap_servers, "txn", len(records), isolation))
    for isolation, measured in rates.items():
        out[isolation] = sorted(measured)[len(measured) // 2]
    for what, rate in out.items():
        print(f"{name} confluent-kafka {'transactional produce' if what == 'produce' else what}"
              f": {rate:,.0f} records/sec ({rate * megabytes / len(records):.2f} MB/sec)",
              flush=True)
    return out


def measure_rafka(records, per_transaction, warmup, megabytes) -> dict[str, float]:
    import rafka
    with tempfile.TemporaryDirectory(prefix="rafka-txn-bench-") as root:
        cluster = rafka.Cluster.start(3, Path(root) / "data", name="txn-bench")
        try:
            def create(topic: str) -> None:
                cluster.admin().create_topics([rafka.NewTopic(
                    topic, PARTITIONS, 3, {"min.insync.replicas": "2"})])
            return run("rafka", cluster.bootstrap_servers, create, records, per_transaction,
                       warmup, megabytes)
        finally:
            cluster.shutdown()


def measure_kafka(records, per_transaction, warmup, megabytes) -> dict[str, float]:
    from benchmarks.kafka_peer import KAFKA_VERSION, KafkaCluster
    with KafkaCluster() as kafka:
        print(f"peer: Apache Kafka {KAFKA_VERSION}, KRaft, 3 nodes on loopback (1 GiB heaps)",
              flush=True)
        return run("Kafka", kafka.bootstrap_servers,
                   lambda topic: kafka.create_topic(topic, PARTITIONS, 3), records,
                   per_transaction, warmup, megabytes)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-transaction", type=int, default=1000)
    parser.add_argument("--skip-peer", action="store_true", help="measure rafka only")
    args = parser.parse_args(argv)
    table = realistic_stream(args.records)
    records = records_of(table)
    warmup = records[:min(len(records), 50_000)]
    megabytes = payload_bytes(table) / 2**20
    print(describe(), flush=True)
    print(f"records: {describe_stream(table)}; {PARTITIONS} partitions, RF=3, "
          f"min.insync.replicas=2; a commit every {args.per_transaction} records", flush=True)
    ours = measure_rafka(records, args.per_transaction, warmup, megabytes)
    if args.skip_peer:
        return 0
    from benchmarks.peers import PeerUnavailable
    try:
        theirs = measure_kafka(records, args.per_transaction, warmup, megabytes)
    except PeerUnavailable as e:
        print(f"peer: {e}", flush=True)
        return 0
    for what in ours:
        print(f"rafka / Kafka, {what}: {ours[what] / theirs[what]:.2f}", flush=True)
    print(f"rafka read_committed / read_uncommitted: "
          f"{ours['read_committed'] / ours['read_uncommitted']:.2f} "
          f"(Kafka: {theirs['read_committed'] / theirs['read_uncommitted']:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
