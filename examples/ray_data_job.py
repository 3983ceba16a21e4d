"""A Ray Data batch job over a topic: read a topic as a Dataset, transform it, write the
result to another topic.

    python examples/ray_data_job.py --data-dir ./data/ray-data
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import rafka
import rafka.ray


def run(data_dir: Path, records: int = 2_000, name: str = "default",
        config: dict | None = None, out=print) -> dict:
    cluster = rafka.Cluster.start(3, data_dir, config, name=name)
    try:
        admin = cluster.admin()
        admin.create_topics([rafka.NewTopic(t, 3, 2) for t in ("readings", "alerts")
                             if t not in admin.list_topics()])
        with rafka.Producer(cluster) as producer:
            for i in range(records):
                reading = {"sensor": f"s{i % 10}", "celsius": 15 + (i * 7) % 30}
                producer.send("readings", json.dumps(reading).encode(),
                              key=reading["sensor"].encode())
        ds = rafka.ray.read_topic(cluster, "readings").materialize()   # earliest .. latest

        def too_hot(batch):
            rows = [json.loads(v) for v in batch["value"]]
            hot = [r for r in rows if r["celsius"] >= 40]
            return {"key": [r["sensor"].encode() for r in hot],
                    "value": [json.dumps(r).encode() for r in hot]}

        alerts = ds.map_batches(too_hot, batch_format="numpy")
        written = rafka.ray.write_topic(alerts, cluster, "alerts")
        out(f"read {ds.count()} readings in {ds.num_blocks()} blocks, wrote {written} "
            "alerts to 'alerts'")
        return {"read": ds.count(), "alerts": written}
    finally:
        cluster.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="./data/ray-data")
    args = parser.parse_args()
    run(Path(args.data_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
