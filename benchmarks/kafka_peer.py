"""Apache Kafka 4.3.1 in KRaft mode on loopback, as a peer measured in the same run as rafka.

Kafka's jars come from Maven Central through ``mvn dependency:copy-dependencies`` into a
cache directory (``~/.cache/rafka/kafka-4.3.1``, made once; nothing of Kafka is committed).
Three combined broker+controller nodes on 127.0.0.1, each a JVM with a 1 GiB heap; the
figures are taken with the ``confluent-kafka`` Python client (librdkafka) and with Kafka's own
``kafka-producer-perf-test`` / ``kafka-consumer-perf-test`` classes.

    .venv/bin/python benchmarks/kafka_peer.py --records 1000000   # the peer alone
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers import (PeerUnavailable, free_port, guarded, main,  # noqa: E402
                              maven_jars, output, start, stop, wait_for_ports)

KAFKA_VERSION = "4.3.1"
WHO = "Apache Kafka"
LOG4J_VERSION = "2.24.3"
CACHE = Path(os.environ.get("RAFKA_KAFKA_CACHE",
                            Path.home() / ".cache" / "rafka" / f"kafka-{KAFKA_VERSION}"))

POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rafka.bench</groupId><artifactId>kafka-peer</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId><version>{LOG4J_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId><version>{LOG4J_VERSION}</version></dependency>
  </dependencies>
</project>
"""

# Kafka's own log4j2 configuration would print INFO lines by the thousand: warnings only.
LOG4J2 = """Configuration:
  status: error
  Appenders:
    Console: {name: STDERR, target: SYSTEM_ERR, PatternLayout: {Pattern: "%d %p %c: %m%n"}}
  Loggers:
    Root: {level: warn, AppenderRef: [{ref: STDERR}]}
"""


def classpath() -> Path:
    """The directory holding Kafka's jars and their dependencies (fetched once)."""
    return maven_jars(CACHE, POM, f"Apache Kafka {KAFKA_VERSION}")


class JavaTools:
    """Kafka's Java classes (its servers, tools and clients) run from its jars, against
    Kafka or rafka alike; ``root`` holds their log4j2 configuration."""

    def __init__(self, root: Path, heap: str = "1G"):
        self.root = root
        self.heap = heap
        self.lib = classpath()
        (root / "log4j2.yaml").write_text(LOG4J2)

    def java_cmd(self, main: str, *args: str, classes: Path | None = None) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise PeerUnavailable(f"{WHO}: java is not on PATH")
        cp = f"{self.lib}/*" + (f"{os.pathsep}{classes}" if classes is not None else "")
        return [java, f"-Xmx{self.heap}", f"-Xms{self.heap}", "-cp", cp,
                f"-Dlog4j2.configurationFile={self.root / 'log4j2.yaml'}", main, *args]

    def compiled(self, source: Path) -> Path:
        """Our own Java program (``benchmarks/java``) compiled against Kafka's client jars,
        once per version of its source: the directory holding its classes."""
        digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
        out = CACHE / "classes" / f"{source.stem}-{digest}"
        if not (out / f"{source.stem}.class").exists():
            javac = shutil.which("javac")
            if javac is None:
                raise PeerUnavailable(f"{WHO}: javac is not on PATH")
            tmp = out.with_name(out.name + f".tmp{os.getpid()}")
            tmp.mkdir(parents=True, exist_ok=True)
            done = subprocess.run([javac, "-cp", f"{self.lib}/*", "-d", str(tmp), str(source)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise PeerUnavailable(f"javac {source.name}: {done.stderr[-400:]}")
            tmp.replace(out)
        return out

    def end_to_end(self, bootstrap_servers: str, topic: str, rate: int, seconds: float,
                   warmup: float, size: int, acks: str = "all",
                   trace: Path | None = None) -> dict[str, float]:
        """``benchmarks/java/EndToEnd.java``: Kafka's Java producer at ``rate`` records/s
        and its consumer in one JVM; the delays' ``p50``, ``p99``, ``p99.9`` (ms) and how
        many ``records`` were measured; ``trace``: each measured record's partition,
        offset, send and arrival ns written there."""
        source = Path(__file__).resolve().parent / "java" / "EndToEnd.java"
        proc = subprocess.Popen(self.java_cmd(
            "EndToEnd", bootstrap_servers, topic, str(rate), str(seconds), str(warmup),
            str(size), acks, *([str(trace)] if trace else []),
            classes=self.compiled(source)),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        out = output(WHO, "EndToEnd", proc, warmup + seconds + 180)
        found = re.search(r"^records (\d+) p50 ([\d.]+) p99 ([\d.]+) p99\.9 ([\d.]+)", out,
                          re.M)
        if not found:
            raise PeerUnavailable(f"EndToEnd: no summary: {out[-400:]}")
        records, p50, p99, p999 = found.groups()
        return {"records": int(records), "p50": float(p50), "p99": float(p99),
                "p99.9": float(p999)}

    def java(self, main: str, *args: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.java_cmd(main, *args), **kwargs)

    def perf_tool(self, main: str, *args: str) -> str:
        """One of Kafka's perf tools (by class); its standard output."""
        return output(WHO, main, self.java(main, *args, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, text=True), 600)

    def producer_perf(self, bootstrap_servers: str, topic: str, records: int, size: int,
                      acks: str, batch_size: int = 262_144) -> dict[str, float]:
        """kafka-producer-perf-test's whole-run summary: records/s and latency percentiles
        (ms), as ``rate``, ``p50``, ``p99``, ``p99.9``; and from its producer's own metrics
        (``--print-metrics``), where a record's latency went: ``request latency`` (a Produce
        request's average, send to answer, ms: the server and the sockets) and ``queue
        time`` (a batch's average wait in the producer's buffer from its first record until
        it was sent, ms). At ``--throughput -1`` the producer writes as fast as it can, so a
        server that answers slower than the client fills the buffer: the percentiles are
        then mostly that wait, and the time ``send()`` blocked on the full buffer (counted in
        the percentiles, in neither average)."""
        out = self.perf_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                             "--num-records", str(records), "--record-size", str(size),
                             "--throughput", "-1", "--producer-props",
                             f"bootstrap.servers={bootstrap_servers}", f"acks={acks}",
                             "linger.ms=5", f"batch.size={batch_size}", "--print-metrics")
        # Its last "<n> records sent, <rate> records/sec ..." line is the whole run's.
        found = re.findall(r"^\d+ records sent, ([\d.]+) records/sec.*?(\d+) ms 50th, "
                           r"\d+ ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th", out, re.M)
        if not found:
            raise PeerUnavailable(f"{WHO}: no summary from ProducerPerformance: "
                                  f"{out[-400:]}")
        rate, p50, p99, p999 = (float(v) for v in found[-1])
        metrics = producer_metrics(out)
        return {"rate": rate, "p50": p50, "p99": p99, "p99.9": p999,
                "request latency": metrics.get("request-latency-avg", float("nan")),
                "queue time": metrics.get("record-queue-time-avg", float("nan"))}

    def consumer_perf(self, bootstrap_servers: str, topic: str, records: int
                      ) -> dict[str, float]:
        """kafka-consumer-perf-test's figures: ``rate`` (its nMsg.sec, the group's join
        included) and ``fetch rate`` (fetch.nMsg.sec, without it)."""
        out = self.perf_tool("org.apache.kafka.tools.ConsumerPerformance", "--topic", topic,
                             "--messages", str(records), "--bootstrap-server",
                             bootstrap_servers, "--timeout", "60000")
        # A header ("start.time, end.time, ..., nMsg.sec, ...") and a line of values under it.
        lines = out.splitlines()
        for i, header in enumerate(lines[:-1]):
            names = [n.strip() for n in header.split(",")]
            if "nMsg.sec" in names and "fetch.nMsg.sec" in names:
                values = lines[i + 1].split(",")
                return {"rate": float(values[names.index("nMsg.sec")]),
                        "fetch rate": float(values[names.index("fetch.nMsg.sec")])}
        raise PeerUnavailable(f"{WHO}: no summary from ConsumerPerformance: "
                              f"{out[-400:]}")


def producer_metrics(out: str) -> dict[str, float]:
    """The producer-metrics group of a Java tool's ``--print-metrics`` table (lines such as
    ``producer-metrics:request-latency-avg:{client-id=perf-producer-client} : 12.174``)."""
    found = re.findall(r"^producer-metrics:([\w-]+):\{[^}]*\}\s*:\s*(\S+)\s*$", out, re.M)
    metrics = {}
    for name, value in found:
        try:
            metrics[name] = float(value)
        except ValueError:
            continue
    return metrics


class KafkaCluster:
    """Three KRaft nodes (broker and controller each) on loopback; a context manager that
    stops every JVM it started, by pid, and removes their data."""

    def __init__(self, nodes: int = 3, heap: str = "1G",
                 ssl_keystore: tuple[Path, str] | None = None):
        self.nodes = nodes
        self.procs: list[subprocess.Popen] = []
        self.root = Path(tempfile.mkdtemp(prefix="kafka-peer-"))
        self.ports = [free_port() for _ in range(nodes)]
        # An SSL listener beside PLAINTEXT: (PKCS12 keystore, its password).
        self.ssl_keystore = ssl_keystore
        self.ssl_ports = [free_port() for _ in range(nodes)] if ssl_keystore else []
        self.controller_ports = [free_port() for _ in range(nodes)]
        self.tools = JavaTools(self.root, heap)
        self.java, self.java_cmd = self.tools.java, self.tools.java_cmd

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def ssl_bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ssl_ports)

    def _properties(self, node: int) -> Path:
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.controller_ports))
        props = {
            "process.roles": "broker,controller", "node.id": node + 1,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.ports[node]},"
                         f"CONTROLLER://127.0.0.1:{self.controller_ports[node]}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.ports[node]}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            **({"listeners": f"PLAINTEXT://127.0.0.1:{self.ports[node]},"
                             f"SSL://127.0.0.1:{self.ssl_ports[node]},"
                             f"CONTROLLER://127.0.0.1:{self.controller_ports[node]}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.ports[node]},"
                                        f"SSL://127.0.0.1:{self.ssl_ports[node]}",
                "listener.security.protocol.map":
                    "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(self.ssl_keystore[0]),
                "ssl.keystore.password": self.ssl_keystore[1]}
               if self.ssl_keystore else {}),
            "log.dirs": str(self.root / f"data-{node}"),
            "offsets.topic.replication.factor": 3, "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2, "group.initial.rebalance.delay.ms": 0,
        }
        path = self.root / f"node-{node}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def __enter__(self) -> "KafkaCluster":
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        try:
            for node in range(self.nodes):
                props = self._properties(node)
                output(WHO, f"formatting node {node + 1}",
                       self.java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                                 str(props), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True), 120)
            # All nodes first: a broker opens its port only once a controller quorum is up.
            logs = [self.root / f"node-{node}.log" for node in range(self.nodes)]
            self.procs += [start(self.java_cmd("kafka.Kafka",
                                               str(self.root / f"node-{node}.properties")),
                                 logs[node]) for node in range(self.nodes)]
            deadline = time.monotonic() + 120
            wait_for_ports(WHO, self.procs, self.ports, logs, deadline)
            self._wait_for_brokers(deadline)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_for_brokers(self, deadline: float) -> None:
        """A node opens its port before it is unfenced: wait until the cluster's metadata
        lists every broker (an RF=3 topic needs all three)."""
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        while True:
            try:
                if len(admin.list_topics(timeout=5).brokers) == self.nodes:
                    return
            except Exception:   # not answering yet: ask again until the deadline
                pass
            if time.monotonic() > deadline:
                raise PeerUnavailable(f"{WHO}: {self.nodes} brokers not registered "
                                      "within 120 s")
            time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        stop(self.procs)
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- topics and figures -------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     config: dict[str, str] | None = None) -> None:
        create_topic(self.bootstrap_servers, name, partitions, replication_factor, config)

    def produce(self, topic: str, records: int, value: bytes, acks: str,
                batch_size: int = 262_144) -> float:
        return confluent_produce(self.bootstrap_servers, topic, records, value, acks,
                                 batch_size)

    def consume(self, topic: str, partitions: int, records: int) -> tuple[int, float]:
        return confluent_consume(self.bootstrap_servers, topic, partitions, records)

    def producer_perf(self, topic: str, records: int, size: int, acks: str,
                      batch_size: int = 262_144) -> float:
        """kafka-producer-perf-test's records/sec."""
        return self.tools.producer_perf(self.bootstrap_servers, topic, records, size, acks,
                                        batch_size)["rate"]

    def consumer_perf(self, topic: str, records: int) -> float:
        """kafka-consumer-perf-test's records/sec (its nMsg.sec column)."""
        return self.tools.consumer_perf(self.bootstrap_servers, topic, records)["rate"]


def create_topic(bootstrap_servers: str, name: str, partitions: int, replication_factor: int,
                 config: dict[str, str] | None = None, timeout_s: float = 60,
                 client: dict | None = None) -> None:
    """CreateTopics through confluent-kafka's AdminClient (min.insync.replicas 2 at RF 3),
    then until every partition has a leader and a full ISR in the metadata. ``client``:
    more of the client's settings (security.protocol, ssl.ca.location, ...)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(client or {})})
    config = {**({"min.insync.replicas": "2"} if replication_factor >= 3 else {}),
              **(config or {})}
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor,
                                            config=config)])
    futures[name].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:   # every partition with a leader
        meta = admin.list_topics(name, timeout=10).topics[name]
        if len(meta.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == replication_factor
                for p in meta.partitions.values()):
            return
        time.sleep(0.2)
    raise PeerUnavailable(f"topic {name} not ready within {timeout_s:.0f} s")


def confluent_produce(bootstrap_servers: str, topic: str, records: int, value: bytes,
                      acks: str, batch_size: int = 262_144, client: dict | None = None
                      ) -> float:
    """confluent-kafka's producer, one thread: seconds to send and have every record
    acknowledged (against Kafka, or rafka's Kafka listener)."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": acks,
                         "linger.ms": 5, "batch.size": batch_size,
                         "queue.buffering.max.messages": 1_000_000,
                         "enable.idempotence": acks == "all", **(client or {})})
    return send_all(producer, topic, ((value, None, None) for _ in range(records)))


def send_all(producer, topic: str, records) -> float:
    """``records`` ((value, key, headers) each) through a confluent-kafka producer, waiting
    whenever its queue is full: seconds until every one is acknowledged."""
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)
    started = time.perf_counter()
    produce = producer.produce
    for i, (value, key, headers) in enumerate(records):
        while True:
            try:
                produce(topic, value, key, headers=headers, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    if failed:
        raise PeerUnavailable(f"confluent-kafka: {len(failed)} records failed: {failed[0]}")
    return elapsed

def confluent_consume(bootstrap_servers: str, topic: str, partitions: int, records: int,
                      client: dict | None = None) -> tuple[int, float]:
    """confluent-kafka's consumer, assign() over every partition, one message at a time as a
    Python application reads them."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap_servers,
                         "group.id": f"peer-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **(client or {})})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = last = time.perf_counter()
    try:
        while seen < records:
            batch = consumer.consume(10_000, 2.0)
            if not batch:
                break   # short of records: the time counted ends at the last one read
            seen += sum(1 for m in batch if m.error() is None)
            last = time.perf_counter()
        return seen, last - started
    finally:
        consumer.close()

# Kafka's UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER.
_NOT_SERVING_YET = {3, 5, 6}


def _log_end(consumer, tp, timeout_s: float = 30) -> int:
    """The partition's log end, asked again while its leader does not serve it yet:
    CreateTopics is answered before every leader serves (Kafka's too does not wait for
    them), and librdkafka's ``get_watermark_offsets`` does not retry."""
    from confluent_kafka import KafkaException
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=timeout_s)[1]
        except KafkaException as e:
            error = e.args[0]
            if time.monotonic() > deadline or not (
                    error.retriable() or error.code() in _NOT_SERVING_YET):
                raise
            time.sleep(0.05)


def _e2e_reader(bootstrap_servers: str, topic: str, partitions: int, ready, stop,
                out) -> None:
    """The end-to-end consumer, in a process of its own: assigned at the log end of every
    partition, one message at a time; each record's delay is its arrival (wall clock) less
    its CreateTime, set by the producer's client at ``produce()``."""
    from array import array

    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap_servers,
                         "group.id": f"e2e-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    # From each partition's log end as asked now: every record produced from then on is
    # read (librdkafka's OFFSET_END resolves only on the first fetch).
    consumer.assign([TopicPartition(topic, p, _log_end(consumer, TopicPartition(topic, p)))
                     for p in range(partitions)])
    ready.set()
    created, delays = array("d"), array("d")
    poll = consumer.poll
    while not stop.is_set():
        m = poll(0.05)
        if m is None or m.error() is not None:
            continue
        created.append(m.timestamp()[1])
        delays.append(time.time() * 1000 - m.timestamp()[1])
    consumer.close()
    out.put((created.tobytes(), delays.tobytes()))


def _e2e_writer(bootstrap_servers: str, topic: str, rate: int, seconds: float,
                warmup: float, value: bytes, acks: str, out) -> None:
    """The end-to-end producer, in a process of its own: ``rate`` records/s for ``warmup``
    then ``seconds``, the client's defaults but acks; puts when measuring starts (ms)."""
    from confluent_kafka import Producer

    from rafka.cli.throttle import ThroughputThrottler
    producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": acks})
    measured_from_ms = time.time() * 1000 + warmup * 1000
    throttler = ThroughputThrottler(rate)
    produce, poll = producer.produce, producer.poll
    for i in range(int(rate * (warmup + seconds))):
        produce(topic, value)
        poll(0)
        throttler.throttle(i + 1)
    producer.flush(30)
    out.put(measured_from_ms)


def confluent_end_to_end(bootstrap_servers: str, topic: str, partitions: int, rate: int,
                         seconds: float, warmup: float, value: bytes,
                         acks: str = "all") -> list[float]:
    """Delays (ms, sorted) from ``produce()`` to a consumer's ``poll()`` of the records
    produced after ``warmup`` s, confluent-kafka at both ends, each in a process of its own
    (one Python process for both would measure their shared GIL's pauses)."""
    import multiprocessing
    from array import array
    ctx = multiprocessing.get_context("spawn")
    ready, stop, got, sent = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    reader = ctx.Process(target=_e2e_reader, args=(bootstrap_servers, topic, partitions,
                                                   ready, stop, got), daemon=True)
    reader.start()
    try:
        if not ready.wait(60):
            raise PeerUnavailable("end-to-end: the consumer found no log end in 60 s")
        writer = ctx.Process(target=_e2e_writer, args=(
            bootstrap_servers, topic, rate, seconds, warmup, value, acks, sent), daemon=True)
        writer.start()
        measured_from_ms = sent.get(timeout=warmup + seconds + 120)
        writer.join(30)
        time.sleep(1)   # the last records' way to the consumer
        stop.set()
        raw_created, raw_delays = got.get(timeout=60)
    finally:
        stop.set()
        reader.join(30)
    created, delays = array("d"), array("d")
    created.frombytes(raw_created)
    delays.frombytes(raw_delays)
    return sorted(d for c, d in zip(created, delays) if c >= measured_from_ms)


def measure(records: int, value: bytes, partitions: int = 6) -> dict[str, float]:
    """The peer's figures in records/s, by name; PeerUnavailable when it cannot start or a
    measurement fails."""
    import importlib.util
    if importlib.util.find_spec("confluent_kafka") is None:
        raise PeerUnavailable(f"{WHO}: the confluent-kafka client is missing (pip install -e "
                              "'.[bench]')")
    return guarded(WHO, lambda: _measure(records, value, partitions))


def _measure(records: int, value: bytes, partitions: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with KafkaCluster() as kafka:
        print(f"peer: Apache Kafka {KAFKA_VERSION}, KRaft, 3 nodes on loopback (1 GiB heaps), "
              f"confluent-kafka and Kafka's perf tools", flush=True)
        # The JVMs' JIT needs work to warm up before a figure means anything.
        kafka.create_topic("warm-up", partitions, 3)
        kafka.produce("warm-up", min(records, 500_000), value, "all")
        for name, rf, acks in (("rf1", 1, "1"), ("rf3-acks1", 3, "1"),
                               ("rf3-acksall", 3, "all")):
            kafka.create_topic(f"ck-{name}", partitions, rf)
            out[f"confluent {name}"] = records / kafka.produce(f"ck-{name}", records, value,
                                                               acks)
            print(f"peer Kafka + confluent-kafka produce RF={rf} acks={acks}: "
                  f"{out[f'confluent {name}']:,.0f} records/sec", flush=True)
        seen, elapsed = kafka.consume("ck-rf1", partitions, records)
        out["confluent consume"] = seen / elapsed
        print(f"peer Kafka + confluent-kafka consume (assign, 6 partitions, one message at a "
              f"time): {seen} records, {out['confluent consume']:,.0f} records/sec", flush=True)
        for name, rf, acks in (("rf1", 1, "1"), ("rf3-acksall", 3, "all")):
            kafka.create_topic(f"perf-{name}", partitions, rf)
            out[f"perf {name}"] = kafka.producer_perf(f"perf-{name}", records, len(value), acks)
            print(f"peer Kafka producer-perf-test RF={rf} acks={acks}: "
                  f"{out[f'perf {name}']:,.0f} records/sec", flush=True)
        out["perf consume"] = kafka.consumer_perf("perf-rf1", records)
        print(f"peer Kafka consumer-perf-test: {out['perf consume']:,.0f} records/sec",
              flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main(__doc__, measure))
