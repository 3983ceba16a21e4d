"""A consumer-group worker pool on Ray actors: each actor is a member of one group and
processes the partitions the group hands it; adding or removing actors rebalances.

    python examples/worker_pool.py --data-dir ./data --workers 3
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import ray

import rafka

TOPIC, GROUP = "orders", "order-workers"


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self, cluster_name: str, name: str):
        cluster = rafka.Cluster.connect(cluster_name)
        self.consumer = rafka.Consumer(cluster, {
            "group.id": GROUP, "client.id": name, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500})
        self.consumer.subscribe([TOPIC])

    def work(self, idle_s: float = 5.0) -> dict:
        """Process records until none arrive for ``idle_s`` after the group has handed this
        worker its partitions; commit after each poll."""
        processed, total_cents, partitions = 0, 0, set()
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            records = self.consumer.poll(200)
            if not records:
                if not self.consumer.assignment():
                    last = time.monotonic()     # still joining the group
                continue
            last = time.monotonic()
            for r in records:
                total_cents += int(r.value)
                partitions.add(r.partition)
            processed += len(records)
            self.consumer.commit()
        return {"processed": processed, "cents": total_cents,
                "partitions": sorted(self.consumer.assignment())}

    def close(self) -> None:
        self.consumer.close()


def run(data_dir: Path, workers: int = 3, orders: int = 3_000, name: str = "default",
        config: dict | None = None, out=print) -> dict:
    cluster = rafka.Cluster.start(3, data_dir, config, name=name)
    try:
        admin = cluster.admin()
        if TOPIC not in admin.list_topics():
            admin.create_topics([rafka.NewTopic(TOPIC, 6, 2)])
        with rafka.Producer(cluster, {"acks": "all"}) as producer:
            for i in range(orders):
                producer.send(TOPIC, str(100 + i % 900).encode(), key=f"customer-{i % 97}".encode())
        expected = sum(100 + i % 900 for i in range(orders))
        pool = [Worker.remote(cluster.name, f"worker-{i}") for i in range(workers)]
        results = ray.get([w.work.remote() for w in pool])
        ray.get([w.close.remote() for w in pool])
        for i, r in enumerate(results):
            out(f"worker-{i}: {r['processed']} orders from partitions "
                f"{[tp.partition for tp in r['partitions']]}")
        processed = sum(r["processed"] for r in results)
        cents = sum(r["cents"] for r in results)
        out(f"{processed} orders processed once each by {workers} workers: "
            f"{'OK' if (processed, cents) == (orders, expected) else 'MISMATCH'}")
        return {"processed": processed, "cents": cents, "expected": expected}
    finally:
        cluster.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="./data/worker-pool")
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args()
    result = run(Path(args.data_dir), args.workers)
    return 0 if result["cents"] == result["expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
