"""``ray up cluster.yaml`` for real (issue 19): three SSH "machines" (a head and two
workers, ``tests.launcher.ssh_nodes``), ``cluster.yaml`` changed only in the addresses,
the ssh user and the key; the cluster serves records through the public API and through a
Kafka client; ``ray down`` leaves no rafka or Ray process on any node, and every broker's
log directory holds its clean-shutdown marker."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from tests.faults.hosts import REPO
from tests.launcher.ssh_nodes import SshNodes
from tests.root import require_root

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ROUND_TRIP = """
import json
import rafka
cluster = rafka.Cluster.connect("default", address="auto")
cluster.admin().create_topics([rafka.NewTopic("launched", 3, 3,
                                              config={"min.insync.replicas": 2})])
with rafka.Producer(cluster, {"acks": "all", "enable.idempotence": True}) as producer:
    futures = [producer.send("launched", b"%d" % i, partition=i % 3) for i in range(300)]
    producer.flush()
    acknowledged = sum(1 for f in futures if f.result(60) is not None)
consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
consumer.assign([("launched", p) for p in range(3)])
read = []
for _ in range(60):
    read += consumer.poll(1000)
    if len(read) >= 300:
        break
consumer.close()
print(json.dumps({"brokers": sorted(cluster.metadata()["brokers"]),
                  "acknowledged": acknowledged, "read": sorted(int(r.value) for r in read),
                  "bootstrap_servers": cluster.bootstrap_servers}))
"""


def launch_config(nodes: SshNodes) -> Path:
    """cluster.yaml with what a user edits: the addresses, the ssh user and key."""
    config = yaml.safe_load((REPO / "cluster.yaml").read_text())
    config["provider"]["head_ip"] = nodes.head.address
    config["provider"]["worker_ips"] = [h.address for h in nodes.hosts[1:]]
    config["auth"] = {"ssh_user": "root", "ssh_private_key": str(nodes.key)}
    path = nodes.root / "cluster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(2)


def test_ray_up_serves_records_and_ray_down_stops_every_node_cleanly():
    require_root("make network namespaces with an SSH server each")
    from confluent_kafka import Consumer, Producer
    with SshNodes(workers=2) as nodes:
        config = launch_config(nodes)
        started = time.monotonic()
        up = nodes.launcher("ray", "up", "-y", "--no-config-cache", str(config))
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        up_s = time.monotonic() - started

        def server_log() -> str:
            return nodes.ssh(nodes.head, "cat /tmp/rafka-server.log").stdout
        log = wait_for(lambda: "Kafka clients:" in server_log() and server_log(), 900,
                       "the rafka server on the head")
        serving_s = time.monotonic() - started
        assert "started: 3 brokers" in log, log
        # The public API, from a driver on the head.
        out = nodes.ssh(nodes.head, "/opt/rafka/.venv/bin/python -", input=ROUND_TRIP,
                        timeout=300)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["brokers"] == [0, 1, 2]
        assert (summary["acknowledged"], summary["read"]) == (300, list(range(300)))
        servers = summary["bootstrap_servers"]
        assert sorted(s.rsplit(":", 1)[0] for s in servers.split(",")) == \
            sorted(h.address for h in nodes.hosts)
        # A Kafka client from this machine, as from outside the cluster.
        producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
        for i in range(100):
            producer.produce("from-outside", b"%d" % i, key=b"%d" % (i % 7))
        assert producer.flush(120) == 0
        del producer  # it would go on reconnecting after ray down
        consumer = Consumer({"bootstrap.servers": servers, "group.id": "outside",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["from-outside"])
        values = []
        deadline = time.monotonic() + 120
        while len(values) < 100 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(int(message.value()))
        consumer.close()
        assert sorted(values) == list(range(100))

        down = nodes.launcher("ray", "down", "-y", str(config), timeout=600)
        assert down.returncode == 0, down.stdout[-4000:] + down.stderr[-4000:]
        # Ray's ray down stops the head's Ray only; cluster.yaml's head stops the rest.
        deadline = time.monotonic() + 120
        while any(nodes.processes(h) for h in nodes.hosts) and time.monotonic() < deadline:
            time.sleep(2)
        left = {h.name: nodes.processes(h) for h in nodes.hosts if nodes.processes(h)}
        assert not left, (left, down.stdout[-3000:])
        for host in nodes.hosts:
            logs = sorted((nodes.node_dir(host) / "varlib" / "rafka").glob("broker-*"))
            assert len(logs) == 1, (host, logs)
            assert (logs[0] / ".kafka_cleanshutdown").exists(), logs[0]
        print(f"\nray up returned in {up_s:.0f} s; serving 3 brokers {serving_s:.0f} s after "
              "ray up started")
