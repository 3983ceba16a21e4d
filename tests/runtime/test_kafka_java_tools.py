"""Apache Kafka 4.3.1's own command-line tools against rafka's Kafka listener (issue 16):
``kafka-topics``, ``kafka-console-producer``, ``kafka-console-consumer``,
``kafka-consumer-groups``, ``kafka-configs``, ``kafka-get-offsets``,
``kafka-reassign-partitions``, ``kafka-delete-records`` and ``kafka-producer-perf-test``,
each the unmodified Java class the shell script runs, with Kafka's Java clients (the
consumer in fetch sessions, the producer idempotent by default).

The jars come from Maven Central once into ``~/.cache/rafka/kafka-4.3.1``
(``benchmarks/kafka_peer.classpath``); nothing of Kafka is committed."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import rafka
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

TOOLS = "org.apache.kafka.tools."


class KafkaTools:
    """Runs a Kafka tool's main class as its shell script would (small heap, warnings only
    on stderr)."""

    def __init__(self, lib: Path, root: Path, bootstrap_servers: str):
        from benchmarks.kafka_peer import LOG4J2
        self.lib = lib
        self.log4j = root / "log4j2.yaml"
        self.log4j.write_text(LOG4J2)
        self.bootstrap_servers = bootstrap_servers
        self.java = shutil.which("java")
        assert self.java, "java is not on PATH (Java 17 is part of this machine's set-up)"

    def run(self, main: str, *args: str, input: str | None = None, timeout: float = 180,
            check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [self.java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-cp", f"{self.lib}/*", f"-Dlog4j2.configurationFile={self.log4j}",
             main if main.startswith("kafka.") else TOOLS + main, *args],
            input=input, capture_output=True, text=True, timeout=timeout)
        if check:
            assert result.returncode == 0, \
                f"{main} {' '.join(args)} exited {result.returncode}:\n" \
                f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        return result

    def tool(self, main: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.run(main, "--bootstrap-server", self.bootstrap_servers, *args, **kwargs)


SHARE_CLUSTER = True   # one cluster for the module's tests (module_cluster)


@pytest.fixture(scope="module")
def kafka(module_cluster, tmp_path_factory) -> KafkaTools:
    from benchmarks.kafka_peer import classpath
    from benchmarks.peers import PeerUnavailable
    try:
        lib = classpath()
    except PeerUnavailable as e:
        pytest.fail(f"Kafka's jars could not be fetched from Maven Central: {e}")
    return KafkaTools(lib, tmp_path_factory.mktemp("kafka-tools"), module_cluster.bootstrap_servers)


def test_kafka_topics_creates_lists_describes_alters_and_deletes(cluster, kafka):
    kafka.tool("TopicCommand", "--create", "--topic", "jt", "--partitions", "3",
               "--replication-factor", "2", "--config", "retention.ms=3600000")
    image = cluster.metadata()
    assert len(image["topics"]["jt"]) == 3
    assert "jt" in kafka.tool("TopicCommand", "--list").stdout.split()
    described = kafka.tool("TopicCommand", "--describe", "--topic", "jt").stdout
    assert re.search(r"Topic: jt\s+TopicId: \S+\s+PartitionCount: 3\s+ReplicationFactor: 2"
                     r"\s+Configs: .*retention\.ms=3600000", described), described
    for p, st in image["topics"]["jt"].items():
        assert re.search(rf"Partition: {p}\s+Leader: {st['leader']}\s+Replicas: "
                         rf"{','.join(map(str, st['replicas']))}\s+Isr: ", described), described
    exists = kafka.tool("TopicCommand", "--create", "--topic", "jt", "--partitions", "1",
                        check=False)
    assert exists.returncode != 0 and "already exists" in exists.stdout + exists.stderr
    kafka.tool("TopicCommand", "--alter", "--topic", "jt", "--partitions", "4")
    wait_until(lambda: len(cluster.metadata()["topics"]["jt"]) == 4, 30, "four partitions")
    kafka.tool("TopicCommand", "--delete", "--topic", "jt")
    wait_until(lambda: "jt" not in cluster.metadata()["topics"], 30, "the topic deleted")


def test_console_producer_and_consumer_with_keys_in_a_group(cluster, kafka):
    """kafka-console-producer (an idempotent Java producer) writes keyed records where
    rafka's partitioner puts them; kafka-console-consumer reads them all in a group (the
    Java consumer, fetch sessions and all) and kafka-consumer-groups shows its offsets."""
    from protocols.partitioner import partition_for_key
    cluster.admin().create_topics([rafka.NewTopic("console", 3, 2)])
    lines = "".join(f"k{i}:v{i}\n" for i in range(300))
    kafka.tool("ConsoleProducer", "--topic", "console", "--property", "parse.key=true",
               "--property", "key.separator=:", input=lines)
    out = kafka.tool("consumer.ConsoleConsumer", "--topic", "console", "--from-beginning",
                     "--max-messages", "300", "--group", "console-group",
                     "--property", "print.key=true", "--property", "print.partition=true",
                     "--property", "key.separator=|").stdout
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 2]
    assert sorted(v for _, _, v in rows) == sorted(f"v{i}" for i in range(300))
    for partition, key, _ in rows:
        assert int(partition.removeprefix("Partition:")) == \
            partition_for_key(key.encode(), 3), (partition, key)
    described = kafka.tool("consumer.group.ConsumerGroupCommand", "--describe",
                           "--group", "console-group").stdout
    consumer = rafka.Consumer(cluster)
    ends = {p: o for (_, p), o in consumer.end_offsets(
        [("console", p) for p in range(3)]).items()}
    consumer.close()
    for p, end in ends.items():
        assert re.search(rf"console-group\s+console\s+{p}\s+{end}\s+{end}\s+0\b", described), \
            described
    assert "console-group" in kafka.tool("consumer.group.ConsumerGroupCommand",
                                         "--list").stdout.split()
    kafka.tool("consumer.group.ConsumerGroupCommand", "--reset-offsets", "--group",
               "console-group", "--topic", "console", "--to-earliest", "--execute")
    assert {o.offset for o in cluster.admin().list_consumer_group_offsets(
        "console-group").values()} == {0}
    kafka.tool("consumer.group.ConsumerGroupCommand", "--delete-offsets", "--group",
               "console-group", "--topic", "console")
    assert cluster.admin().list_consumer_group_offsets("console-group") == {}
    kafka.tool("consumer.group.ConsumerGroupCommand", "--delete", "--group", "console-group")
    assert "console-group" not in {g.group_id for g in
                                   cluster.admin().list_consumer_groups()}


def test_kafka_configs_and_get_offsets_and_delete_records(cluster, kafka, tmp_path):
    cluster.admin().create_topics([rafka.NewTopic("conf-j", 1, 2)])
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        for i in range(10):
            producer.send("conf-j", b"%d" % i)
    kafka.tool("kafka.admin.ConfigCommand", "--alter", "--entity-type", "topics",
               "--entity-name", "conf-j", "--add-config", "retention.ms=7200000")
    wait_until(lambda: cluster.admin().describe_configs(["conf-j"])["conf-j"][
        "retention.ms"] == 7_200_000, 30, "the altered retention.ms")
    described = kafka.tool("kafka.admin.ConfigCommand", "--describe", "--entity-type",
                           "topics", "--entity-name", "conf-j").stdout
    assert "retention.ms=7200000" in described, described
    assert kafka.tool("GetOffsetShell", "--topic", "conf-j", "--time", "-1"
                      ).stdout.split() == ["conf-j:0:10"]
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "conf-j", "partition": 0, "offset": 4}]}))
    out = kafka.tool("DeleteRecordsCommand", "--offset-json-file", str(plan)).stdout
    assert "low_watermark: 4" in out, out
    assert kafka.tool("GetOffsetShell", "--topic", "conf-j", "--time", "-2"
                      ).stdout.split() == ["conf-j:0:4"]


def test_kafka_reassign_partitions_moves_a_partition(cluster, kafka, tmp_path):
    cluster.admin().create_topics([rafka.NewTopic("reassign-j", 1, 1)])
    (old,) = cluster.metadata()["topics"]["reassign-j"][0]["replicas"]
    target = sorted({0, 1, 2} - {old})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "reassign-j", "partition": 0, "replicas": target}]}))
    kafka.tool("reassign.ReassignPartitionsCommand", "--reassignment-json-file", str(plan),
               "--execute")
    wait_until(lambda: sorted(cluster.metadata()["topics"]["reassign-j"][0]["replicas"])
               == target, 60, "the partition on its new replicas")
    verified = kafka.tool("reassign.ReassignPartitionsCommand", "--reassignment-json-file",
                          str(plan), "--verify").stdout
    assert "Reassignment of partition reassign-j-0 is completed" in verified, verified


def test_kafka_producer_perf_test_writes_every_record(cluster, kafka, tmp_path):
    """ProducerPerformance as listener.py runs it: its summary line and its producer's own
    metrics (``--print-metrics``) read, every record written."""
    from benchmarks.kafka_peer import JavaTools
    cluster.admin().create_topics([rafka.NewTopic("perf-j", 2, 3)])
    figures = JavaTools(tmp_path, heap="256m").producer_perf(
        cluster.bootstrap_servers, "perf-j", 20_000, 100, "all")
    assert figures["rate"] > 0 and 0 <= figures["p50"] <= figures["p99"]
    # Both of the producer's own averages were read: every request was answered (a
    # latency), and its batches waited in the producer's buffer before they went.
    assert figures["request latency"] > 0 and figures["queue time"] > 0, figures
    consumer = rafka.Consumer(cluster)
    ends = consumer.end_offsets([("perf-j", 0), ("perf-j", 1)])
    consumer.close()
    assert sum(ends.values()) == 20000


def test_the_java_end_to_end_benchmark_reads_every_record_it_measures(cluster, kafka,
                                                                     tmp_path):
    """``benchmarks/java/EndToEnd.java`` (listener.py's Java end-to-end row), compiled
    against Kafka's client jars: at 2,000 records/s for 1 s after 1 s of warm-up, acks=all,
    its consumer reads each of the 2,000 measured records."""
    from benchmarks.kafka_peer import JavaTools
    cluster.admin().create_topics([rafka.NewTopic("e2e-j", 3, 3)])
    tools = JavaTools(tmp_path, heap="256m")
    figures = tools.end_to_end(cluster.bootstrap_servers, "e2e-j", 2_000, 1.0, 1.0, 100)
    assert figures["records"] == 2_000
    assert 0 < figures["p50"] <= figures["p99"] <= figures["p99.9"]


def test_every_record_the_java_clients_measure_is_followed_through_every_hop(cluster, kafka,
                                                                            tmp_path):
    """``benchmarks/hops.py``'s mode (issue 42, step 3): with the brokers' and hosts' per-hop
    timestamps on, each record EndToEnd.java measures (2,000/s, acks=all, RF=3) is found by
    its offset at every hop from the listener's read of its Produce to the listener's write
    of its Fetch, the hops in order on the one clock the JVM and rafka's processes share;
    tracing off, the brokers and hosts write no more."""
    import ray

    from benchmarks.hops import PATH, follow, read_client_trace, read_marks
    from benchmarks.kafka_peer import JavaTools
    cluster.admin().create_topics([rafka.NewTopic("hops-j", 3, 3)])
    brokers = [cluster.broker(b) for b in sorted(cluster.broker_nodes)]
    marks = tmp_path / "hops"
    ray.get([b.hop_trace.remote(str(marks)) for b in brokers])
    try:
        figures = JavaTools(tmp_path, heap="256m").end_to_end(
            cluster.bootstrap_servers, "hops-j", 2_000, 1.0, 1.0, 100,
            trace=tmp_path / "client")
    finally:
        ray.get([b.hop_trace.remote(None) for b in brokers])
    records = read_client_trace(tmp_path / "client")
    assert figures["records"] == len(records) == 2_000
    times, missed = follow(records, "hops-j", read_marks(marks))
    assert missed == 0 and times.shape == (2_000, len(PATH))
    back = times[:, 1:] < times[:, :-1]
    assert not back.any(), [(PATH[i + 1], int(back[:, i].sum()),
                             float((times[:, i + 1] - times[:, i]).min()) / 1e6)
                            for i in range(back.shape[1]) if back[:, i].any()]
    written = {p: p.stat().st_size for p in marks.glob("*.hops")}
    assert len(written) >= 2   # a broker's listener and a replica host at least
    with rafka.Producer(cluster) as producer:
        producer.send("hops-j", b"untraced").get(timeout=30)
    from confluent_kafka import Consumer, Producer
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    producer.produce("hops-j", b"untraced, through the listener")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "hops-j",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["hops-j"])
    assert consumer.consume(1, 30)
    consumer.close()
    assert {p: p.stat().st_size for p in marks.glob("*.hops")} == written


def test_java_transactions_read_committed_console_consumer_and_kafka_transactions(
        cluster, kafka):
    """kafka-producer-perf-test with a transactional id (Kafka's Java transactional
    producer, a commit every 100 ms), kafka-console-consumer --isolation-level
    read_committed reading every record, and kafka-transactions listing and describing the
    producer's transactional id."""
    cluster.admin().create_topics([rafka.NewTopic("txn-j", 2, 3)])
    out = kafka.run("ProducerPerformance", "--topic", "txn-j", "--num-records", "5000",
                    "--record-size", "100", "--throughput", "-1", "--transactional-id",
                    "perf-txn", "--transaction-duration-ms", "100", "--producer-props",
                    f"bootstrap.servers={cluster.bootstrap_servers}", "acks=all").stdout
    assert re.search(r"^5000 records sent, [\d.]+ records/sec", out, re.M), out
    read = kafka.tool("consumer.ConsoleConsumer", "--topic", "txn-j", "--from-beginning",
                      "--max-messages", "5000", "--isolation-level", "read_committed",
                      "--timeout-ms", "60000").stdout
    assert len([line for line in read.splitlines() if len(line) == 100]) == 5000
    listed = kafka.tool("TransactionsCommand", "list").stdout
    assert re.search(r"^perf-txn\s+\d+\s+\d+\s+CompleteCommit\s*$", listed, re.M), listed
    described = kafka.tool("TransactionsCommand", "describe", "--transactional-id",
                           "perf-txn").stdout
    assert re.search(r"\bperf-txn\s+\d+\s+\d+\s+CompleteCommit\b", described), described


def test_kafka_transactions_aborts_a_hanging_transaction(cluster, kafka):
    """kafka-transactions.sh abort: a transaction left open (its producer gone quiet, a
    long transaction.timeout.ms) holds read_committed consumers at its first offset; the
    tool finds its producer with DescribeProducers and writes the ABORT marker through
    the partition's leader (WriteTxnMarkers), and the last stable offset moves on."""
    import confluent_kafka
    cluster.admin().create_topics([rafka.NewTopic("hang-j", 1, 3)])
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "transactional.id": "hanging",
                                         "transaction.timeout.ms": 900_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("hang-j", key=b"k", value=b"left open")
    producer.flush(30)
    consumer = rafka.Consumer(cluster, {"isolation.level": "read_committed"})
    try:
        assert consumer.end_offsets([("hang-j", 0)]) == {("hang-j", 0): 0}
        kafka.tool("TransactionsCommand", "abort", "--topic", "hang-j", "--partition", "0",
                   "--start-offset", "0")
        wait_until(lambda: consumer.end_offsets([("hang-j", 0)]) == {("hang-j", 0): 2}, 30,
                   "the last stable offset past the abort")
    finally:
        consumer.close()
        producer.abort_transaction(30)   # the producer's own abort after the tool's
