"""The command-line tools against a real cluster, each run as its own process (another
Ray driver on the session's Ray instance)."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

import rafka

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]
# The tests share a cluster, each with its own topics and groups; the one that lists every
# group has one of its own.
SHARE_CLUSTER = True


def rafka_cli(cluster, *args, stdin: str | None = None, timeout: float = 120):
    address = ray.get_runtime_context().gcs_address
    return subprocess.run([sys.executable, "-m", "rafka", args[0], "--cluster", cluster.name,
                           "--address", address, *args[1:]], input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def test_console_producer_and_consumer_round_trip_keys_and_values(cluster):
    cluster.admin().create_topics([rafka.NewTopic("lines", 2, 1)])
    out = rafka_cli(cluster, "console-producer", "--topic", "lines", "--property",
                    "parse.key=true", "--property", "key.separator=:",
                    stdin="a:first\nb:second\na:third\n")
    assert out.returncode == 0, out.stderr
    out = rafka_cli(cluster, "console-consumer", "--topic", "lines", "--from-beginning",
                    "--max-messages", "3", "--property", "print.key=true",
                    "--property", "key.separator=:")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sorted(lines) == ["a:first", "a:third", "b:second"]
    assert lines.index("a:first") < lines.index("a:third")     # one key, one partition
    assert "Processed a total of 3 messages" in out.stderr
    bad = rafka_cli(cluster, "console-producer", "--topic", "lines", "--property",
                    "parse.key=true", stdin="no separator here\n")
    assert bad.returncode == 1 and "No key separator" in bad.stderr


def test_perf_tests_print_kafkas_lines(cluster):
    cluster.admin().create_topics([rafka.NewTopic("perf", 2, 2)])
    out = rafka_cli(cluster, "producer-perf-test", "--topic", "perf", "--num-records", "3000",
                    "--record-size", "100", "--throughput", "-1", "--producer-props",
                    "acks=all", "linger.ms=5", "--reporting-interval", "200")
    assert out.returncode == 0, out.stderr
    final = out.stdout.strip().splitlines()[-1]
    assert re.match(r"3000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg "
                    r"latency, [\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, "
                    r"\d+ ms 99\.9th\.", final), final
    out = rafka_cli(cluster, "consumer-perf-test", "--topic", "perf", "--messages", "3000")
    assert out.returncode == 0, out.stderr
    header, values = out.stdout.strip().splitlines()[-2:]
    assert header.startswith("start.time, end.time, data.consumed.in.MB, MB.sec")
    assert values.split(", ")[4] == "3000"


def test_tools_find_the_cluster_by_a_kafka_listener(cluster):
    """--bootstrap-server as Kafka's tools take it: one broker's listener (host names
    resolved) names the cluster; an address no cluster listens at is a clear error."""
    cluster.admin().create_topics([rafka.NewTopic("found", 1, 1)])
    address = ray.get_runtime_context().gcs_address
    host, port = cluster.bootstrap_servers.split(",")[1].rsplit(":", 1)
    server = f"{'localhost' if host == '127.0.0.1' else host}:{port}"
    out = subprocess.run([sys.executable, "-m", "rafka", "topics", "--bootstrap-server",
                          server, "--address", address, "--list"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "found" in out.stdout.split()
    out = subprocess.run([sys.executable, "-m", "rafka", "topics", "--bootstrap-server",
                          "127.0.0.1:1", "--address", address, "--list"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "No rafka cluster on this Ray cluster listens at 127.0.0.1:1" in out.stderr
    assert cluster.name in out.stderr                     # the clusters that are running


def test_server_start_serves_kafka_clients_as_the_readme_shows(ray_session, tmp_path):
    """The README's quick start for Kafka clients: ``rafka server start`` with one broker
    listening at a fixed port prints its bootstrap servers; librdkafka produces to a topic
    created on first use and a group consumer reads it back; Ctrl-C stops it cleanly."""
    from confluent_kafka import Consumer, Producer

    from benchmarks.peers import free_port
    address = ray.get_runtime_context().gcs_address
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rafka", "server", "start", "--data-dir",
                             str(tmp_path / "d"), "--num-brokers", "1", "--name", "srv",
                             "--address", address, "--override", "log.retention.hours=1",
                             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed = []
    try:
        deadline = time.monotonic() + 120
        while not any(line.startswith("Kafka clients:") for line in printed):
            assert time.monotonic() < deadline and proc.poll() is None, \
                "server did not come up: " + "".join(printed)
            printed.append(proc.stdout.readline())
        assert f"Kafka clients: bootstrap.servers=127.0.0.1:{port}\n" in printed
        servers = f"localhost:{port}"
        producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
        producer.produce("quickstart-events", b"hello", key=b"k")
        assert producer.flush(60) == 0
        consumer = Consumer({"bootstrap.servers": servers, "group.id": "quickstart",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["quickstart-events"])
            message = None
            while message is None or message.error() is not None:
                assert time.monotonic() < deadline + 60, "nothing consumed"
                message = consumer.poll(1)
            assert (message.key(), message.value()) == (b"k", b"hello")
        finally:
            consumer.close()
        assert rafka.Cluster.connect("srv").admin().describe_cluster().brokers == [0]
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    out = "".join(printed) + out
    assert "started: 1 brokers" in out and out.strip().endswith("stopped")
    assert (tmp_path / "d" / "broker-0" / ".kafka_cleanshutdown").exists()


def test_server_stop_stops_a_running_server_with_a_controlled_shutdown(ray_session, tmp_path):
    """``rafka server stop`` (kafka-server-stop.sh): the named cluster's brokers shut down
    cleanly (each writes its clean-shutdown marker) and the ``server start`` running it
    sees it stopped and exits 0; naming a cluster that is not running is an error."""
    address = ray.get_runtime_context().gcs_address
    proc = subprocess.Popen([sys.executable, "-m", "rafka", "server", "start", "--data-dir",
                             str(tmp_path / "d"), "--num-brokers", "2", "--name", "stoppable",
                             "--address", address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = []
        deadline = time.monotonic() + 120
        while not any(line.startswith("Kafka clients:") for line in printed):
            assert time.monotonic() < deadline and proc.poll() is None, \
                "server did not come up: " + "".join(printed)
            printed.append(proc.stdout.readline())
        missing = subprocess.run([sys.executable, "-m", "rafka", "server", "stop", "--name",
                                  "nope", "--address", address],
                                 capture_output=True, text=True, timeout=120)
        assert missing.returncode == 1
        assert "No rafka cluster named 'nope' is running" in missing.stderr
        stop = subprocess.run([sys.executable, "-m", "rafka", "server", "stop", "--name",
                               "stoppable", "--address", address],
                              capture_output=True, text=True, timeout=180)
        assert stop.returncode == 0, stop.stderr
        assert "stopped rafka cluster 'stoppable'" in stop.stdout
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "rafka cluster 'stoppable' was stopped (rafka server stop)" in out
    for b in (0, 1):
        assert (tmp_path / "d" / f"broker-{b}" / ".kafka_cleanshutdown").exists()
    assert "stoppable" not in rafka.Cluster.running()


def test_the_broker_count_comes_from_a_cluster_launcher_config(tmp_path):
    """``server start --cluster-config``: one broker per node the config lists (the head
    and each on-premise worker address, or each node type's min_workers)."""
    from rafka.cli.server import nodes_in_launch_config
    local = tmp_path / "local.yaml"
    local.write_text("provider: {type: local, head_ip: 10.0.0.10, "
                     "worker_ips: [10.0.0.11, 10.0.0.12]}\n")
    assert nodes_in_launch_config(local) == 3
    alone = tmp_path / "alone.yaml"
    alone.write_text("provider: {type: local, head_ip: 10.0.0.10, worker_ips: []}\n")
    assert nodes_in_launch_config(alone) == 1
    cloud = tmp_path / "cloud.yaml"
    cloud.write_text("provider: {type: aws}\nhead_node_type: head\navailable_node_types:\n"
                     "  head: {min_workers: 0}\n  cpu: {min_workers: 2}\n"
                     "  gpu: {min_workers: 1}\n")
    assert nodes_in_launch_config(cloud) == 4
    # What `ray up` writes to the head (~/ray_bootstrap_config.yaml) from our cluster.yaml.
    import yaml
    from ray.autoscaler._private.util import prepare_config
    root = Path(__file__).resolve().parents[2]
    prepared = prepare_config(yaml.safe_load((root / "cluster.yaml").read_text()))
    (tmp_path / "prepared.yaml").write_text(yaml.safe_dump(prepared))
    assert nodes_in_launch_config(tmp_path / "prepared.yaml") == \
        1 + len(prepared["provider"]["worker_ips"])


def table(text: str) -> tuple[list[str], list[list[str]]]:
    """A kafka-consumer-groups.sh table: (header, rows), split on whitespace."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line[0] == "GROUP")
    return lines[start], lines[start + 1:]


@pytest.mark.own_cluster
def test_consumer_groups_lists_describes_and_resets_offsets(cluster):
    cluster.admin().create_topics([rafka.NewTopic("cg", 2, 2)])
    with rafka.Producer(cluster) as producer:
        for i in range(10):
            producer.send("cg", f"r{i}".encode(), partition=i % 2)
    # A console consumer in group "readers" reads everything and commits its position.
    out = rafka_cli(cluster, "console-consumer", "--topic", "cg", "--group", "readers",
                    "--from-beginning", "--max-messages", "10")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 10
    out = rafka_cli(cluster, "consumer-groups", "--list")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["readers"]
    out = rafka_cli(cluster, "consumer-groups", "--describe", "--group", "readers")
    assert out.returncode == 0, out.stderr
    assert "Consumer group 'readers' has no active members." in out.stdout
    header, rows = table(out.stdout)
    assert header == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                      "CONSUMER-ID", "CLIENT-ID"]
    assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
        ("cg", "0", "5", "5", "0"), ("cg", "1", "5", "5", "0")]
    # Reset: a dry run by default, then --execute.
    out = rafka_cli(cluster, "consumer-groups", "--reset-offsets", "--group", "readers",
                    "--topic", "cg", "--to-offset", "2")
    assert out.returncode == 0, out.stderr
    assert "No action will be performed" in out.stderr
    assert cluster.admin().list_consumer_group_offsets("readers")[("cg", 0)].offset == 5
    out = rafka_cli(cluster, "consumer-groups", "--reset-offsets", "--group", "readers",
                    "--topic", "cg:1", "--to-earliest", "--execute")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-4:] == ["readers", "cg", "1", "0"]
    offsets = cluster.admin().list_consumer_group_offsets("readers")
    assert (offsets[("cg", 0)].offset, offsets[("cg", 1)].offset) == (5, 0)
    out = rafka_cli(cluster, "consumer-groups", "--describe", "--group", "readers")
    assert [row[5] for row in table(out.stdout)[1]] == ["0", "5"]
    out = rafka_cli(cluster, "consumer-groups", "--delete", "--group", "readers")
    assert out.returncode == 0, out.stderr
    out = rafka_cli(cluster, "consumer-groups", "--describe", "--group", "readers")
    assert out.returncode == 1 and "does not exist" in out.stderr


def tab_table(text: str) -> list[list[str]]:
    """A kafka-transactions.sh table (ToolsUtils.prettyPrintTable): cells end with a tab."""
    return [[cell.strip() for cell in line.split("\t")[:-1]] for line in text.splitlines()]


def test_transactions_lists_describes_and_aborts_an_open_transaction(cluster):
    """kafka-transactions.sh's commands, columns and messages, on a transaction that
    rafka's producer leaves open."""
    from protocols.topics import TopicPartition
    cluster.admin().create_topics([rafka.NewTopic("tx-tools", 1, 3)])
    producer = rafka.Producer(cluster, {"transactional.id": "tools-app"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("tx-tools", b"open").result(30)
    pid = producer._txn.producer_id
    out = rafka_cli(cluster, "transactions", "list")
    assert out.returncode == 0, out.stderr
    rows = tab_table(out.stdout)
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [r for r in rows[1:] if r[0] == "tools-app"][0][2:] == [str(pid), "Ongoing"]
    out = rafka_cli(cluster, "transactions", "describe", "--transactional-id", "tools-app")
    assert out.returncode == 0, out.stderr
    header, row = tab_table(out.stdout)
    described = dict(zip(header, row))
    assert (described["TransactionalId"], described["TransactionState"],
            described["TopicPartitions"], described["TransactionTimeoutMs"]) == \
        ("tools-app", "Ongoing", "tx-tools-0", "60000")
    out = rafka_cli(cluster, "transactions", "describe-producers", "--topic", "tx-tools",
                    "--partition", "0")
    assert out.returncode == 0, out.stderr
    header, row = tab_table(out.stdout)
    assert dict(zip(header, row))["CurrentTransactionStartOffset"] == "0"
    # Not hanging: its coordinator will write the marker.
    out = rafka_cli(cluster, "transactions", "find-hanging", "--topic", "tx-tools",
                    "--max-transaction-timeout", "0")
    assert out.returncode == 0, out.stderr
    assert len(tab_table(out.stdout)) == 1
    out = rafka_cli(cluster, "transactions", "abort", "--topic", "tx-tools", "--partition", "0")
    assert out.returncode == 1 and "--start-offset (for brokers on 3.0 or above)" in out.stderr
    out = rafka_cli(cluster, "transactions", "abort", "--topic", "tx-tools", "--partition",
                    "0", "--start-offset", "7")
    assert out.returncode == 1
    assert "Could not find any open transactions starting at offset 7" in out.stderr
    out = rafka_cli(cluster, "transactions", "abort", "--topic", "tx-tools", "--partition",
                    "0", "--start-offset", "0")
    assert out.returncode == 0, out.stderr
    # The ABORT marker ended it at the partition: the LSO moved past it, the record is
    # never read at read_committed.
    tp = TopicPartition("tx-tools", 0)
    reader = rafka.Consumer(cluster, {"isolation.level": "read_committed",
                                      "auto.offset.reset": "earliest"})
    reader.assign([tp])
    assert reader.end_offsets([tp]) == {tp: 2}
    assert reader.poll(1000) == []
    reader.close()
    producer.abort_transaction()
    producer.close()
    out = rafka_cli(cluster, "transactions", "describe", "--transactional-id", "nobody")
    assert out.returncode == 1
    assert "Failed to describe transaction state of transactional-id `nobody`" in out.stderr


def test_rafka_top_shows_brokers_throughput_partitions_and_lagging_groups(cluster):
    """``rafka top``: two screens (printed one after the other, not to a terminal): every
    broker up with the partitions it leads and holds, the topic's messages in per second
    while a producer writes (the second screen: the first has no earlier sample), and a
    group's lag as consumer-groups --describe tells it."""
    import threading
    admin = cluster.admin()
    admin.create_topics([rafka.NewTopic("top-events", 3, 2)])
    with rafka.Producer(cluster) as producer:
        for i in range(300):
            producer.send("top-events", b"v", partition=i % 3)
    admin.alter_consumer_group_offsets("top-readers", {("top-events", p): 40
                                                        for p in range(3)})
    stop = threading.Event()

    def keep_producing() -> None:
        with rafka.Producer(cluster) as producer:
            while not stop.is_set():
                producer.send("top-events", b"more", partition=0).get(30)
    writer = threading.Thread(target=keep_producing, daemon=True)
    writer.start()

    def lag() -> int:
        return sum(p.lag for p in admin.consumer_group_lag("top-readers").values())
    try:
        before = lag()
        out = rafka_cli(cluster, "top", "--iterations", "2", "--interval", "2")
        after = lag()
    finally:
        stop.set()
        writer.join(30)
    assert out.returncode == 0, out.stderr
    screens = out.stdout.split("\n\nrafka top - ")
    assert len(screens) == 2, out.stdout
    rows = {line.split()[0]: line.split() for screen in screens[1:]
            for line in screen.splitlines() if line.strip()}
    for b in admin.describe_cluster().brokers:
        assert rows[str(b)][1] == "up", out.stdout
    led = sum(int(rows[str(b)][2]) for b in admin.describe_cluster().brokers)
    assert led >= 3, out.stdout    # the topic's partitions, and __consumer_offsets' if any
    name, partitions, rate, under, offline = rows["top-events"]
    assert (partitions, under, offline) == ("3", "0", "0")
    assert int(rate.replace(",", "")) > 0, out.stdout
    # The writer goes on appending to partition 0: the lag shown is between the two told
    # before and after.
    assert before >= 3 * (100 - 40)
    assert before <= int(rows["top-readers"][2].replace(",", "")) <= after, out.stdout
    assert rows["top-readers"][1] == "Empty"
