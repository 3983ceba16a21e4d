"""A driver on the head host of a ``Hosts`` cluster (run by ``Hosts.run_driver``): starts a
rafka cluster with one broker per Ray node, listeners on every interface (advertised at each
node's address), and checks that records cross the hosts: rafka's producer (acks=all,
idempotent) and consumer, and librdkafka through the brokers' listeners. Prints one JSON
line: the brokers' node addresses, the records written and read back."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)

    import ray
    from confluent_kafka import Consumer, Producer

    import rafka
    ray.init(address="auto", log_to_driver=False)
    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="rfk-data-")
    cluster = rafka.Cluster.start(args.brokers, data_dir, {
        "listeners": "PLAINTEXT://:0", "offsets.topic.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 500}, name="smoke", timeout_s=180)
    try:
        cluster.admin().create_topics([rafka.NewTopic("smoke", 3, 3, config={
            "min.insync.replicas": 2})])
        with rafka.Producer(cluster, {"acks": "all", "enable.idempotence": True}) as producer:
            futures = [producer.send("smoke", b"%d" % i, key=b"k%d" % i)
                       for i in range(args.records)]
            producer.flush()
            written = sorted(f.result(30).offset >= 0 for f in futures)
        consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
        consumer.assign([("smoke", p) for p in range(3)])
        read: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(read) < args.records and time.monotonic() < deadline:
            read += [r.value for r in consumer.poll(500)]
        consumer.close()

        errors: list[str] = []
        wire = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True,
                         "error_cb": lambda e: errors.append(str(e))})
        for i in range(100):
            wire.produce("smoke-wire", b"w%d" % i,
                         on_delivery=lambda e, m: e and errors.append(str(e)))
        unsent = wire.flush(60)
        reader = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "smoke",
                           "auto.offset.reset": "earliest"})
        reader.subscribe(["smoke-wire"])
        wire_read: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(wire_read) < 100 and time.monotonic() < deadline:
            wire_read += [m.value() for m in reader.consume(100, 0.5) if m.error() is None]
        reader.close()
        print(json.dumps({
            "broker_nodes": sorted(nodes[n] for n in cluster.broker_nodes.values()),
            "bootstrap_servers": cluster.bootstrap_servers,
            "acknowledged": sum(written), "read": len(set(read)),
            "wire_unsent": unsent, "wire_read": len(set(wire_read)),
            "wire_errors": errors[:5]}), flush=True)
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
