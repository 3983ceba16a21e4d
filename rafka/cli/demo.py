"""`rafka demo`: the main job on embedded defaults.

It starts a local Ray instance and a 3-broker rafka cluster whose data lives under
``--data-dir``, creates a replicated topic, writes records as Kafka v2 batches with acks=all,
reads them back with a consumer and by timestamp, kills the process of one partition's
leader broker (SIGKILL) and shows a new leader serving every acknowledged record, then shuts
the cluster down cleanly and starts it again on the same directory to show that topics and
records come back.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from rafka.cli.args import EXIT_OK, positive_int


TOPIC = "demo-events"
PARTITIONS = 3
CONFIG = {"broker.session.timeout.ms": 6000, "broker.heartbeat.interval.ms": 500,
          "replica.lag.time.max.ms": 3000, "log.segment.bytes": 256 * 1024}


def _read(cluster, partition: int) -> dict[int, bytes]:
    """Everything committed in the partition, read with a consumer: offset -> value."""
    import rafka
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest",
                                        "max.poll.records": 5000})
    tp = (TOPIC, partition)
    consumer.assign([tp])
    end = consumer.end_offsets([tp])[tp]
    out: dict[int, bytes] = {}
    while consumer.position(tp) < end:
        for r in consumer.poll(1000):
            out[r.offset] = r.value
    consumer.close()
    return out


def run_demo(data_dir: Path, records_per_partition: int = 2_000, batch_records: int = 100,
             out=print, name: str = "demo") -> dict[int, int]:
    import ray

    import rafka

    ray_was_running = ray.is_initialized()
    data_dir = Path(data_dir)
    t = time.perf_counter()
    cluster = rafka.Cluster.start(3, data_dir, CONFIG, name=name)
    out(f"started a 3-broker cluster '{name}' on Ray in {time.perf_counter() - t:.1f} s, "
        f"data under {data_dir.resolve()}")
    admin = cluster.admin()
    if TOPIC not in admin.list_topics():
        t = time.perf_counter()
        admin.create_topics([rafka.NewTopic(TOPIC, PARTITIONS, 3,
                                            config={"min.insync.replicas": 2})])
        out(f"created topic '{TOPIC}' ({PARTITIONS} partitions, replication factor 3) in "
            f"{time.perf_counter() - t:.1f} s")
    for line in admin.describe_topic_lines(TOPIC):
        out(line)

    start = {p: admin.list_offsets({(TOPIC, p): "latest"})[(TOPIC, p)].offset
             for p in range(PARTITIONS)}
    t0 = int(time.time() * 1000)
    t = time.perf_counter()
    with rafka.Producer(cluster, {"acks": "all", "compression.type": "lz4",
                                  "batch.size": batch_records * 40}) as producer:
        for p in range(PARTITIONS):
            for i in range(records_per_partition):
                producer.send(TOPIC, f"event {start[p] + i}".encode(),
                              key=f"key-{i % 97}".encode(), partition=p, timestamp=t0 + i)
        producer.flush()
    n = PARTITIONS * records_per_partition
    elapsed = time.perf_counter() - t
    out(f"produced {n} records with acks=all (idempotent producer, lz4) in {elapsed:.2f} s "
        f"({n / elapsed:,.0f} records/sec)")
    by_time = admin.list_offsets({(TOPIC, 0): t0 + records_per_partition // 2})[(TOPIC, 0)]
    out(f"{TOPIC}-0: first offset at or after t0+{records_per_partition // 2} ms is "
        f"{by_time.offset}")

    victim, _ = cluster.leader(TOPIC, 0)
    acked = _read(cluster, 0)
    os.kill(cluster.broker_pid(victim), signal.SIGKILL)
    t = time.perf_counter()
    out(f"killed broker {victim} (the leader of {TOPIC}-0) with SIGKILL")
    while cluster.metadata()["topics"][TOPIC][0]["leader"] in (victim, -1):
        time.sleep(0.05)
    leader, _ = cluster.leader(TOPIC, 0)
    survived = _read(cluster, 0)
    lost = [o for o in acked if survived.get(o) != acked[o]]
    out(f"new leader of {TOPIC}-0: broker {leader} after {time.perf_counter() - t:.1f} s; "
        f"{len(acked)} acknowledged records, {len(lost)} lost")
    if lost:
        raise RuntimeError(f"acknowledged records lost: {lost[:5]}")
    cluster.wait_for_brokers([victim], 60)
    out(f"broker {victim} was restarted by Ray and rejoined")

    ends = {p: admin.list_offsets({(TOPIC, p): "latest"})[(TOPIC, p)].offset
            for p in range(PARTITIONS)}
    cluster.shutdown()
    out("clean shutdown")
    cluster = rafka.Cluster.start(3, data_dir, CONFIG, name=name)
    try:
        recovered = {p: len(_read(cluster, p)) + cluster.admin().list_offsets(
            {(TOPIC, p): "earliest"})[(TOPIC, p)].offset for p in range(PARTITIONS)}
    finally:
        cluster.shutdown()
    out(f"restart on the same data dir: log end offsets "
        f"{'match' if recovered == ends else 'DIFFER'}: "
        + ", ".join(f"{TOPIC}-{p}={o}" for p, o in sorted(recovered.items())))
    if recovered != ends:
        raise RuntimeError(f"log end offsets changed across restart: {ends} -> {recovered}")
    if not ray_was_running:
        ray.shutdown()
    return recovered


def configure(parser) -> None:
    """``rafka demo``'s options."""
    parser.add_argument("--data-dir", default="./data",
                        help="where the brokers' log directories go (default ./data)")
    parser.add_argument("--records", type=positive_int, default=10_000,
                        help="records to append to each partition (default 10000)")


def run(args) -> int:
    run_demo(Path(args.data_dir), records_per_partition=args.records)
    return EXIT_OK
