"""The brokers' Kafka listener against unmodified Kafka clients and raw sockets (issue 16,
first steps: ApiVersions, Metadata, Produce, Fetch, ListOffsets): librdkafka (confluent-kafka)
sees the cluster's brokers, topics, leaders, replicas and ISR, produces what rafka's consumer
reads and reads what rafka's producer wrote; bad bytes close only their own connection."""
from __future__ import annotations

import os
import signal
import socket
import struct
import time

import pytest
import ray

import rafka
from actors.broker.listener.api_versions import ADVERTISED, SUPPORTED
from actors.broker.listener.metadata_apis import kafka_uuid_text
from tests.kafka_wire import read_response, request_bytes
from tests.runtime.helpers import controller_cannot_commit, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]
SHARE_CLUSTER = True   # each test its own topics; own_cluster for kills and counts


def address(servers: str, index: int = 0) -> tuple[str, int]:
    host, port = servers.split(",")[index].rsplit(":", 1)
    return host, int(port)


def closed_by_broker(sock: socket.socket, timeout_s: float = 10) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def api_versions(sock: socket.socket, version: int = 3, correlation_id: int = 9):
    sock.sendall(request_bytes(18, version, {"client_software_name": "t",
                                             "client_software_version": "1"},
                               correlation_id))
    return read_response(sock, 18, version)


def test_librdkafka_sees_the_brokers_topics_leaders_and_isr(cluster):
    from confluent_kafka.admin import AdminClient
    cluster.admin().create_topics([rafka.NewTopic("events", 3, 2)])
    servers = cluster.bootstrap_servers
    assert len(servers.split(",")) == 3
    image = cluster.metadata()
    metadata = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=20)
    assert metadata.cluster_id == image["cluster_id"]
    assert {b: f"{m.host}:{m.port}" for b, m in metadata.brokers.items()} == \
        dict(zip(sorted(image["brokers"]), servers.split(",")))
    events = metadata.topics["events"]
    assert events.error is None
    assert {p: (m.leader, m.replicas, m.isrs) for p, m in events.partitions.items()} == \
        {p: (st["leader"], list(st["replicas"]), list(st["isr"]))
         for p, st in image["topics"]["events"].items()}


def test_metadata_v12_carries_topic_ids_and_leader_epochs(cluster):
    cluster.admin().create_topics([rafka.NewTopic("ids", 2, 3)])
    image = cluster.metadata()
    with socket.create_connection(address(cluster.bootstrap_servers, 1)) as sock:
        sock.sendall(request_bytes(3, 12, {"topics": [{"name": "ids"}],
                                           "allow_auto_topic_creation": False}, 4))
        header, answer = read_response(sock, 3, 12)
    assert header.correlation_id == 4 and answer.controller_id in image["brokers"]
    (topic,) = answer.topics
    assert kafka_uuid_text(topic.topic_id) == image["topic_ids"]["ids"]
    assert [(p.partition_index, p.leader_id, p.leader_epoch) for p in topic.partitions] == \
        [(p, st["leader"], st["leader_epoch"]) for p, st in image["topics"]["ids"].items()]


def test_api_versions_tells_what_is_served_and_answers_a_newer_client_in_v0(cluster):
    with socket.create_connection(address(cluster.bootstrap_servers)) as sock:
        header, answer = api_versions(sock)
        assert header.correlation_id == 9 and answer.error_code == 0
        assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == \
            ADVERTISED
        # KAFKA-18659: Produce is told from v0, as Kafka 4 tells it, though v3 is the oldest
        # served (librdkafka before 2.10 compresses only where Produce v0-v2 is claimed).
        assert ADVERTISED[0] == (0, SUPPORTED[0][1]) and SUPPORTED[0][0] == 3
        # A version the broker does not know: the v0 answer, UNSUPPORTED_VERSION (35), the
        # list; the connection stays open for the retry.
        frame = request_bytes(18, 3, {}, 10)
        sock.sendall(frame[:6] + struct.pack(">h", 42) + frame[8:])
        header, answer = read_response(sock, 18, 0)
        assert (header.correlation_id, answer.error_code) == (10, 35)
        assert len(answer.api_keys) == len(ADVERTISED)
        assert api_versions(sock, 0, 11)[1].error_code == 0


def test_metadata_creates_a_topic_it_is_asked_for_unless_the_client_says_not_to(cluster):
    with socket.create_connection(address(cluster.bootstrap_servers)) as sock:
        sock.sendall(request_bytes(3, 12, {"topics": [{"name": "not-made"}],
                                           "allow_auto_topic_creation": False}))
        (topic,) = read_response(sock, 3, 12)[1].topics
        assert topic.error_code == 3          # UNKNOWN_TOPIC_OR_PARTITION
        assert "not-made" not in cluster.metadata()["topics"]
        sock.sendall(request_bytes(3, 12, {"topics": [{"name": "made"}],
                                           "allow_auto_topic_creation": True}))
        (topic,) = read_response(sock, 3, 12)[1].topics
        assert topic.error_code == 5          # LEADER_NOT_AVAILABLE while it is created
    # Kafka's defaults for an auto-created topic: num.partitions=1, RF=1.
    wait_until(lambda: "made" in cluster.metadata()["topics"], 30, "the auto-created topic")
    assert len(cluster.metadata()["topics"]["made"]) == 1


@pytest.mark.own_cluster
def test_a_broker_answers_clients_only_once_its_metadata_names_it(cluster):
    """Kafka's BrokerServer enables request processing only after the initial metadata
    catch-up. A rafka broker answered from the start: a Metadata answer from a broker whose
    image did not list it yet named as controller a broker missing from the broker list, and
    librdkafka's admin client waited for that controller (CI: CreateTopics unanswered for
    30 s). Here a broker is SIGKILLed and started again by Ray while the controller cannot
    commit its registration (a file stands where its metadata directory was): the broker's
    new listener takes the connection and the request, and answers once the broker has
    registered and its image names it."""
    before = cluster.admin().describe_cluster()
    victim = next(b for b in (0, 1, 2) if b != before.controller_id)
    pid = cluster.broker_pid(victim)
    with controller_cannot_commit(cluster):
        os.kill(pid, signal.SIGKILL)
        restarted = wait_until(
            lambda: (lambda d: d if d["pid"] != pid and d["endpoints"]
                     and d["boot_step"].startswith("registering") else None)(
                ray.get(cluster.broker(victim).describe.remote(), timeout=5)),
            60, "the restarted broker to bind its listener and try to register")
        assert not restarted["kafka_requests_processed"]
        (_, host, port), = [e for e in restarted["endpoints"] if e[0] == "PLAINTEXT"]
        sock = socket.create_connection((host, port))
        sock.sendall(request_bytes(3, 12, {"topics": None,
                                           "allow_auto_topic_creation": False}, 7))
        sock.settimeout(3)
        with pytest.raises(TimeoutError):
            sock.recv(1)                        # not answered while it is not registered
    with sock:
        sock.settimeout(60)
        header, answer = read_response(sock, 3, 12)
    assert header.correlation_id == 7
    listed = {b.node_id for b in answer.brokers}
    assert victim in listed and answer.controller_id == victim
    assert ray.get(cluster.broker(victim).describe.remote())["kafka_requests_processed"]


@pytest.mark.own_cluster
def test_bad_bytes_close_only_their_own_connection(cluster):
    servers = cluster.bootstrap_servers
    target = address(servers, 0)
    bystander = socket.create_connection(target)
    assert api_versions(bystander)[1].error_code == 0
    bad_inputs = {
        "oversized frame": struct.pack(">i", 104_857_601),
        "negative size": struct.pack(">i", -1),
        "unknown API key": struct.pack(">ihhih", 10, 999, 0, 1, -1),
        "API not served (DescribeAcls)": struct.pack(">ihhih", 10, 29, 1, 1, -1),
        "unsupported Metadata version": struct.pack(">ihhih", 10, 3, 99, 1, -1),
        "does not decode": struct.pack(">i", 12) + struct.pack(">hhih", 3, 12, 1, 200) + b"xx",
        # 33 billion topics in a few bytes: must not make the broker allocate for them.
        "array count over the frame": (lambda b: struct.pack(">i", len(b)) + b)(
            struct.pack(">hhih", 3, 13, 1, 4) + b"fuzz\x00" + bytes.fromhex("c4f8a09f7d020000")),
    }
    for what, data in bad_inputs.items():
        with socket.create_connection(target) as sock:
            sock.sendall(data)
            assert closed_by_broker(sock), what
    # A client that disconnects mid-request, and one that connects and sends nothing.
    with socket.create_connection(target) as sock:
        sock.sendall(request_bytes(18, 3, {})[:9])
    silent = socket.create_connection(target)
    assert api_versions(bystander, correlation_id=77)[0].correlation_id == 77
    info = ray.get(cluster.broker(0).describe.remote())
    assert info["kafka_connections_closed"].get("InvalidReceive") == 2
    assert info["kafka_connections_closed"].get("InvalidRequest") == 5
    wait_until(lambda: ray.get(cluster.broker(0).describe.remote())[
        "kafka_connections_closed"].get("eof-mid-request") == 1, 10,
        "the broker to see the half-sent request's end")
    silent.close()
    bystander.close()


@pytest.mark.own_cluster
def test_a_thousand_idle_connections_and_the_broker_still_answers(cluster):
    target = address(cluster.bootstrap_servers, 2)
    idle = [socket.create_connection(target) for _ in range(1000)]
    try:
        wait_until(lambda: ray.get(cluster.broker(2).describe.remote())[
            "kafka_connections"] >= 1000, 30, "1,000 connections accepted")
        with socket.create_connection(target) as sock:
            started = time.monotonic()
            assert api_versions(sock)[1].error_code == 0
            assert time.monotonic() - started < 10
        assert api_versions(idle[500], correlation_id=5)[0].correlation_id == 5
    finally:
        for s in idle:
            s.close()
    wait_until(lambda: ray.get(cluster.broker(2).describe.remote())[
        "kafka_connections"] == 0, 30, "the closed connections gone")


# ---- Produce, Fetch, ListOffsets: one system, two doors ---------------------------------------

def test_librdkafka_produces_what_rafkas_consumer_reads_where_java_would_put_it(cluster):
    """librdkafka's Java-compatible partitioner (murmur2_random) puts each key where
    rafka's producer does; the records come back in order per partition, acks=all."""
    from confluent_kafka import Producer

    from protocols.partitioner import partition_for_key
    cluster.admin().create_topics([rafka.NewTopic("in", 3, 2)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "linger.ms": 5, "partitioner": "murmur2_random"})
    delivered, failed = [], []
    for i in range(3000):
        producer.produce("in", value=b"v%d" % i, key=b"k%d" % (i % 40),
                         on_delivery=lambda e, m: (failed if e else delivered).append(m))
    assert producer.flush(60) == 0
    assert not failed and len(delivered) == 3000
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("in", p) for p in range(3)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3000 and time.monotonic() < deadline:
        got += consumer.poll(500)
    consumer.close()
    assert len(got) == 3000
    for r in got:
        assert r.partition == partition_for_key(r.key, 3)
    for p in range(3):
        values = [int(r.value[1:]) for r in got if r.partition == p]
        assert values == sorted(values)
    # Offsets librdkafka was told are where the records are.
    told = {(m.partition(), m.offset()): m.value() for m in delivered}
    assert told == {(r.partition, r.offset): r.value for r in got}


def test_librdkafka_reads_what_rafkas_producer_wrote_and_finds_offsets(cluster):
    from confluent_kafka import Consumer, TopicPartition
    cluster.admin().create_topics([rafka.NewTopic("out", 3, 3)])
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        metas = [producer.send("out", b"v%d" % i, key=b"k%d" % (i % 7),
                               headers=[("h", b"%d" % i)]) for i in range(2000)]
        producer.flush()
        metas = [m.result(10) for m in metas]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("out", p, 0) for p in range(3)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2000 and time.monotonic() < deadline:
            got += [m for m in consumer.consume(500, 1.0) if m.error() is None]
        assert {(m.partition(), m.offset()): (m.key(), m.value(), m.headers())
                for m in got} == {
            (meta.partition, meta.offset): (b"k%d" % (i % 7), b"v%d" % i,
                                            [("h", b"%d" % i)])
            for i, meta in enumerate(metas)}
        ends = {p: sum(1 for m in metas if m.partition == p) for p in range(3)}
        assert {p: consumer.get_watermark_offsets(TopicPartition("out", p), timeout=10)
                for p in range(3)} == {p: (0, n) for p, n in ends.items()}
        first = min(metas, key=lambda m: m.timestamp)
        (found,) = consumer.offsets_for_times(
            [TopicPartition("out", first.partition, first.timestamp)], timeout=10)
        assert found.offset == 0
    finally:
        consumer.close()


def test_fetch_answers_go_from_the_segment_files_and_partial_batches_are_fetched_again(
        cluster):
    """Zero-copy fetch (the seeds' 零拷贝): a Kafka client's fetch answer carries its
    records from the segment file by sendfile, cut at max.partition.fetch.bytes inside a
    batch as Kafka cuts it; librdkafka drops the partial batch and fetches it again whole,
    and reads every record once, in order. The brokers count the bytes they sent so."""
    from confluent_kafka import Consumer, TopicPartition
    cluster.admin().create_topics([rafka.NewTopic("zero-copy", 2, 2)])
    values = [b"%06d-" % i + os.urandom(200 + i % 700).hex().encode() for i in range(3000)]
    with rafka.Producer(cluster, {"acks": "all", "linger.ms": 20,
                                  "batch.size": 64 * 1024}) as producer:
        metas = [producer.send("zero-copy", v, partition=i % 2) for i, v in enumerate(values)]
        producer.flush()
        metas = [m.result(10) for m in metas]

    def sent_from_files() -> int:
        return sum(ray.get(cluster.broker(b).describe.remote(), timeout=10)
                   ["kafka_fetch_bytes_sent_from_files"] for b in cluster.broker_nodes)
    before = sent_from_files()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 10_000,
                         "fetch.max.bytes": 1_000_000, "message.max.bytes": 1_000_000})
    try:
        consumer.assign([TopicPartition("zero-copy", p, 0) for p in range(2)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [m for m in consumer.consume(500, 1.0) if m.error() is None]
    finally:
        consumer.close()
    for p in range(2):
        assert [m.value() for m in got if m.partition() == p] == values[p::2]
        assert [m.offset() for m in got if m.partition() == p] == \
            [meta.offset for meta in metas[p::2]]
    assert sent_from_files() - before >= sum(map(len, values))


def test_produce_to_a_follower_names_the_leader_and_acks_0_gets_no_answer(cluster):
    from protocols.records import Record, encode_batch
    cluster.admin().create_topics([rafka.NewTopic("moved", 1, 2)])
    image = cluster.metadata()
    leader = image["topics"]["moved"][0]["leader"]
    follower = next(b for b in image["topics"]["moved"][0]["replicas"] if b != leader)
    servers = cluster.bootstrap_servers.split(",")
    batch = encode_batch([Record(b"k", b"v")])
    produce = {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": "moved", "partition_data": [{"index": 0, "records": batch}]}]}
    with socket.create_connection(address(servers[follower])) as sock:
        sock.sendall(request_bytes(0, 10, produce, 3))
        header, answer = read_response(sock, 0, 10)
    (part,) = answer.responses[0].partition_responses
    assert (header.correlation_id, part.error_code) == (3, 6)   # NOT_LEADER_OR_FOLLOWER
    # KIP-951: the leader and where to reach it, so the client need not ask Metadata.
    assert part.current_leader.leader_id == leader
    assert [(e.node_id, f"{e.host}:{e.port}") for e in answer.node_endpoints] == \
        [(leader, servers[leader])]
    with socket.create_connection(address(servers[leader])) as sock:
        sock.sendall(request_bytes(0, 10, {**produce, "acks": 0}, 4))
        assert api_versions(sock, correlation_id=5)[0].correlation_id == 5   # no answer to 4
        sock.sendall(request_bytes(0, 10, produce, 6))
        (part,) = read_response(sock, 0, 10)[1].responses[0].partition_responses
        assert (part.error_code, part.base_offset) == (0, 1)   # the acks=0 record is at 0


def test_a_corrupt_batch_is_refused_and_nothing_of_it_is_written(cluster):
    from protocols.records import Record, encode_batch
    cluster.admin().create_topics([rafka.NewTopic("crc", 1, 1)])
    leader = cluster.metadata()["topics"]["crc"][0]["leader"]
    batch = bytearray(encode_batch([Record(b"k", b"value")]))
    batch[-1] ^= 0xFF     # a flipped bit in the last record: the CRC-32C no longer matches
    with socket.create_connection(address(cluster.bootstrap_servers, leader)) as sock:
        sock.sendall(request_bytes(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": "crc", "partition_data": [{"index": 0, "records": bytes(batch)}]}]}))
        (part,) = read_response(sock, 0, 9)[1].responses[0].partition_responses
        assert part.error_code == 2   # CORRUPT_MESSAGE
        assert api_versions(sock)[1].error_code == 0      # the connection carries on
    consumer = rafka.Consumer(cluster)
    assert consumer.end_offsets([("crc", 0)]) == {("crc", 0): 0}
    consumer.close()


def test_produce_v13_and_fetch_v16_name_topics_by_id(cluster):
    from protocols.records import Record, encode_batch, iter_batches
    cluster.admin().create_topics([rafka.NewTopic("byid", 1, 1)])
    image = cluster.metadata()
    leader = image["topics"]["byid"][0]["leader"]
    import base64
    import uuid
    topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(image["topic_ids"]["byid"] + "=="))
    with socket.create_connection(address(cluster.bootstrap_servers, leader)) as sock:
        sock.sendall(request_bytes(0, 13, {"acks": -1, "timeout": 5000, "topic_data": [
            {"topic_id": topic_id, "partition_data": [
                {"index": 0, "records": encode_batch([Record(b"a", b"1"),
                                                      Record(b"b", b"2")])}]}]}))
        answer = read_response(sock, 0, 13)[1]
        assert answer.responses[0].topic_id == topic_id
        assert answer.responses[0].partition_responses[0].error_code == 0
        fetch = {"max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                 "session_id": 0, "session_epoch": -1, "topics": [
                     {"topic_id": topic_id, "partitions": [
                         {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                          "current_leader_epoch": -1, "last_fetched_epoch": -1,
                          "log_start_offset": -1}]}],
                 "forgotten_topics_data": [], "rack_id": ""}
        sock.sendall(request_bytes(1, 16, fetch, 8))
        header, answer = read_response(sock, 1, 16)
        (topic,) = answer.responses
        (part,) = topic.partitions
        assert (header.correlation_id, topic.topic_id, part.error_code, part.high_watermark) \
            == (8, topic_id, 0, 2)
        assert [(r.key, r.value) for b in iter_batches(part.records) for r in b.records()] \
            == [(b"a", b"1"), (b"b", b"2")]
        # An unknown id: UNKNOWN_TOPIC_ID, the rest of the request still answered.
        fetch["topics"][0]["topic_id"] = uuid.UUID(int=7)
        sock.sendall(request_bytes(1, 16, fetch, 9))
        assert read_response(sock, 1, 16)[1].responses[0].partitions[0].error_code == 100


def test_fetch_sessions_answer_only_what_is_new_and_refuse_a_wrong_epoch(cluster):
    """KIP-227 as a Java consumer drives it: a full fetch at epoch 0 opens a session; the
    next fetches name no partitions and get only those with records or a moved high
    watermark; a partition named in forgotten_topics_data is dropped; a wrong epoch is
    INVALID_FETCH_SESSION_EPOCH (71), an unknown session FETCH_SESSION_ID_NOT_FOUND (70)."""
    cluster.admin().create_topics([rafka.NewTopic("sess", 2, 1)])
    image = cluster.metadata()
    # Both partitions on one broker, so that one connection fetches both.
    leader = image["topics"]["sess"][0]["leader"]
    cluster.admin().alter_partition_reassignments({("sess", 1): [leader]})
    wait_until(lambda: cluster.metadata()["topics"]["sess"][1]["leader"] == leader, 30,
               "both partitions on one broker")

    def part(p: int, offset: int) -> dict:
        return {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}

    def fetch(sock, session_id: int, epoch: int, parts: list, forgotten=(), wait_ms=100,
              correlation_id: int = 1):
        body = {"max_wait": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": "sess", "partitions": parts}] if parts else [],
                "forgotten_topics_data": [{"topic": "sess", "partitions": list(forgotten)}]
                if forgotten else [], "rack_id": ""}
        sock.sendall(request_bytes(1, 12, body, correlation_id))
        answer = read_response(sock, 1, 12)[1]
        return answer, {p.partition_index: p for t in answer.responses for p in t.partitions}

    def send(p: int, n: int):
        with rafka.Producer(cluster, {"acks": "all"}) as producer:
            for i in range(n):
                producer.send("sess", b"%d" % i, partition=p)

    with socket.create_connection(address(cluster.bootstrap_servers, leader)) as sock:
        # Until the moved partition serves here (a full fetch without a session): an error
        # in the session's first answer would be told again in the next one.
        deadline = time.monotonic() + 30
        while any(p.error_code for p in fetch(sock, 0, -1, [part(0, 0), part(1, 0)])[1]
                  .values()):
            assert time.monotonic() < deadline, "partition 1 never served on its new leader"
            time.sleep(0.2)
        answer, parts = fetch(sock, 0, 0, [part(0, 0), part(1, 0)])
        assert answer.error_code == 0 and answer.session_id != 0 and set(parts) == {0, 1}
        assert not any(p.error_code for p in parts.values())
        session = answer.session_id
        # Nothing new: an empty answer after the wait.
        answer, parts = fetch(sock, session, 1, [])
        assert (answer.error_code, answer.session_id, parts) == (0, session, {})
        send(1, 3)
        answer, parts = fetch(sock, session, 2, [], wait_ms=2000)
        assert set(parts) == {1} and parts[1].high_watermark == 3 and parts[1].records
        # The consumer moved on partition 1: it names it with its new offset, and is told
        # its high watermark again, without records (the session's rule for a changed
        # partition, actors/replica/fetch_session.py); then partition 1 is quiet.
        answer, parts = fetch(sock, session, 3, [part(1, 3)])
        assert set(parts) == {1} and parts[1].high_watermark == 3 and not parts[1].records
        send(0, 2)
        answer, parts = fetch(sock, session, 4, [], wait_ms=2000)
        assert set(parts) == {0} and parts[0].high_watermark == 2
        # Forget partition 0: new records there are no longer told.
        answer, parts = fetch(sock, session, 5, [], forgotten=[0])
        send(0, 1)
        answer, parts = fetch(sock, session, 6, [])
        assert parts == {}
        answer, _ = fetch(sock, session, 9, [])
        assert (answer.error_code, answer.session_id, answer.responses) == (71, 0, ())
        answer, _ = fetch(sock, session + 1, 1, [])
        assert answer.error_code == 70
        # A full fetch naming the session closes it and, at epoch -1, opens none.
        answer, parts = fetch(sock, session, -1, [part(0, 0)])
        assert (answer.session_id, set(parts)) == (0, {0})
        answer, _ = fetch(sock, session, 7, [])
        assert answer.error_code == 70


@pytest.mark.own_cluster
def test_a_leaders_broker_killed_during_idempotent_acks_all_produce_loses_and_repeats_nothing(
        cluster):
    """librdkafka with enable.idempotence and acks=all while the partition leader's broker
    process is SIGKILLed: it finds the new leader and retries; every record it was told is
    written is there exactly once, none twice, in the order sent."""
    import os
    import signal

    from confluent_kafka import Producer
    cluster.admin().create_topics([rafka.NewTopic("killed", 1, 3,
                                                  config={"min.insync.replicas": 2})])
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 120_000})
    acked: list[int] = []
    failed: list = []

    def delivered(error, message):
        if error is None:
            acked.append(int(message.value()))
        else:
            failed.append(error)
    killed = None
    for i in range(20_000):
        while True:
            try:
                producer.produce("killed", value=b"%d" % i, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if i == 6000:
            def some_acknowledged() -> bool:
                producer.poll(0.05)      # serves the delivery callbacks
                return len(acked) >= 3000
            wait_until(some_acknowledged, 60, "records acknowledged before the kill")
            killed, _ = cluster.leader("killed", 0)
            os.kill(cluster.broker_pid(killed), signal.SIGKILL)
    assert producer.flush(180) == 0
    assert not failed, failed[:5]
    wait_until(lambda: cluster.leader("killed", 0)[0] != killed, 60, "a new leader")
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("killed", 0)])
    values: list[int] = []
    deadline = time.monotonic() + 60
    while len(values) < len(acked) and time.monotonic() < deadline:
        values += [int(r.value) for r in consumer.poll(500)]
    consumer.close()
    assert len(values) == len(set(values)), "a record written twice"
    assert set(acked) <= set(values), "an acknowledged record lost"
    assert values == sorted(values)


# ---- consumer groups ------------------------------------------------------------------------

def test_librdkafka_consumers_share_a_group_and_their_offsets_are_the_clusters(ray_session,
                                                                             tmp_path):
    """Two librdkafka consumers subscribe in one group: the coordinator (found through
    FindCoordinator) splits the partitions between them, each record is read once, their
    commits are what rafka's admin and consumer see, and the group is rafka's group."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaPartition

    from tests.runtime.conftest import cluster_with
    with cluster_with(tmp_path) as cluster:
        cluster.admin().create_topics([rafka.NewTopic("shared", 4, 2)])
        config = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "wire-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 10_000}
        consumers = [Consumer(config), Consumer(config)]
        try:
            for c in consumers:
                c.subscribe(["shared"])
            deadline = time.monotonic() + 60
            while not all(c.assignment() for c in consumers):
                assert time.monotonic() < deadline, "the group never gave both a share"
                for c in consumers:
                    c.poll(0.2)
            shares = [{tp.partition for tp in c.assignment()} for c in consumers]
            assert shares[0].isdisjoint(shares[1]) and shares[0] | shares[1] == set(range(4))
            with rafka.Producer(cluster, {"acks": "all"}) as producer:
                metas = [producer.send("shared", b"v%d" % i, key=b"k%d" % i)
                         for i in range(2000)]
                producer.flush()
                metas = [m.result(10) for m in metas]
            read = [[], []]
            deadline = time.monotonic() + 60
            while sum(map(len, read)) < 2000 and time.monotonic() < deadline:
                for i, c in enumerate(consumers):
                    read[i] += [m for m in c.consume(500, 0.3) if m.error() is None]
            assert sorted(m.value() for r in read for m in r) == \
                sorted(b"v%d" % i for i in range(2000))
            for i, c in enumerate(consumers):
                assert {m.partition() for m in read[i]} <= shares[i]
                c.commit(asynchronous=False)
            ends = {p: 1 + max(m.offset for m in metas if m.partition == p) for p in range(4)}
            committed = consumers[0].committed(
                [KafkaPartition("shared", p) for p in range(4)], timeout=10)
            assert {tp.partition: tp.offset for tp in committed} == ends
        finally:
            for c in consumers:
                c.close()
        admin = cluster.admin()
        (group,) = admin.describe_consumer_groups(["wire-group"]).values()
        assert group.state == "Empty" and group.generation_id >= 1
        assert {tp.partition: o.offset for tp, o in
                admin.list_consumer_group_offsets("wire-group").items()} == ends
        # rafka's own consumer in the same group starts where the wire clients left off.
        consumer = rafka.Consumer(cluster, {"group.id": "wire-group"})
        assert {tp.partition: o.offset for tp, o in consumer.committed(
            [("shared", p) for p in range(4)]).items()} == ends
        consumer.close()


# ---- administration and idempotent producers -------------------------------------------------

def test_librdkafkas_admin_client_changes_the_same_cluster(cluster):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic("made-by-wire", 3, 2,
                                            config={"retention.ms": "3600000"}),
                                   NewTopic("bad name!", 1, 1),
                                   NewTopic("too-many-replicas", 1, 5)])
    futures["made-by-wire"].result(30)
    with pytest.raises(Exception, match="INVALID_TOPIC_EXCEPTION|illegal"):
        futures["bad name!"].result(30)
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|replication"):
        futures["too-many-replicas"].result(30)
    image = cluster.metadata()
    assert len(image["topics"]["made-by-wire"]) == 3
    assert cluster.admin().describe_configs(["made-by-wire"])["made-by-wire"][
        "retention.ms"] == 3600000
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        admin.create_topics([NewTopic("made-by-wire", 1, 1)])["made-by-wire"].result(30)
    admin.create_partitions([NewPartitions("made-by-wire", 5)])["made-by-wire"].result(30)
    wait_until(lambda: len(cluster.metadata()["topics"]["made-by-wire"]) == 5, 30,
               "five partitions")
    cluster_info = admin.describe_cluster().result(30)
    assert cluster_info.cluster_id == image["cluster_id"]
    assert sorted(n.id for n in cluster_info.nodes) == sorted(image["brokers"])
    admin.delete_topics(["made-by-wire"])["made-by-wire"].result(30)
    wait_until(lambda: "made-by-wire" not in cluster.metadata()["topics"], 30,
               "the topic deleted")


def test_an_idempotent_librdkafka_producer_gets_an_id_and_its_records_are_not_repeated(
        cluster):
    from confluent_kafka import Producer
    cluster.admin().create_topics([rafka.NewTopic("idem", 2, 3)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "enable.idempotence": True, "linger.ms": 2})
    for i in range(2000):
        producer.produce("idem", value=b"%d" % i, key=b"k%d" % (i % 9))
    assert producer.flush(60) == 0
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("idem", 0), ("idem", 1)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 2000 and time.monotonic() < deadline:
        got += consumer.poll(500)
    consumer.close()
    assert sorted(int(r.value) for r in got) == list(range(2000))
    # The batches carry the producer id the controller gave (InitProducerId).
    from protocols.records import iter_batches
    leader = cluster.metadata()["topics"]["idem"][0]["leader"]
    raw = ray.get(cluster.replica("idem", 0, leader).read_local.remote(0, 1 << 20))
    ids = {b.producer_id for b in iter_batches(raw)}
    assert len(ids) == 1 and ids.pop() >= 0


def test_librdkafka_lists_describes_and_deletes_groups(cluster):
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient
    cluster.admin().create_topics([rafka.NewTopic("g", 1, 1)])
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "listed",
                         "session.timeout.ms": 10_000})
    consumer.subscribe(["g"])
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        assert time.monotonic() < deadline
        consumer.poll(0.2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    listed = admin.list_consumer_groups().result(30)
    assert "listed" in {g.group_id for g in listed.valid}
    (described,) = admin.describe_consumer_groups(["listed"]).values()
    group = described.result(30)
    assert group.state.name == "STABLE" and len(group.members) == 1
    consumer.close()
    admin.delete_consumer_groups(["listed"])["listed"].result(30)
    assert "listed" not in {g.group_id for g in cluster.admin().list_consumer_groups()}


def test_a_group_mixes_a_librdkafka_consumer_and_a_rafka_consumer(ray_session, tmp_path):
    """One system, two doors: both speak Kafka's consumer protocol in JoinGroup and
    SyncGroup, so whichever leads assigns both, the partitions are split between them, and
    rafka's admin describes both members with their assignments."""
    from confluent_kafka import Consumer

    from tests.runtime.conftest import cluster_with
    with cluster_with(tmp_path) as cluster:
        cluster.admin().create_topics([rafka.NewTopic("mixed", 4, 2)])
        wire = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "mixed",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10_000,
                         "partition.assignment.strategy": "range"})
        ours = rafka.Consumer(cluster, {"group.id": "mixed", "auto.offset.reset": "earliest",
                                        "partition.assignment.strategy": "range",
                                        "session.timeout.ms": 10_000})
        try:
            wire.subscribe(["mixed"])
            ours.subscribe(["mixed"])
            deadline = time.monotonic() + 90
            while not (wire.assignment() and ours.assignment()):
                assert time.monotonic() < deadline, "the mixed group never settled"
                wire.poll(0.1)
                ours.poll(100)
            shares = ({tp.partition for tp in wire.assignment()},
                      {tp.partition for tp in ours.assignment()})
            assert shares[0].isdisjoint(shares[1]) and shares[0] | shares[1] == set(range(4))
            (group,) = cluster.admin().describe_consumer_groups(["mixed"]).values()
            assert sorted(tp.partition for m in group.members for tp in m.assignment) == \
                [0, 1, 2, 3]
            with rafka.Producer(cluster, {"acks": "all"}) as producer:
                for i in range(1000):
                    producer.send("mixed", b"%d" % i, key=b"k%d" % i)
            seen: list[int] = []
            deadline = time.monotonic() + 60
            while len(seen) < 1000 and time.monotonic() < deadline:
                seen += [int(m.value()) for m in wire.consume(200, 0.2) if m.error() is None]
                seen += [int(r.value) for r in ours.poll(200)]
            assert sorted(seen) == list(range(1000))
        finally:
            wire.close()
            ours.close()


def test_offset_for_leader_epoch_tells_where_an_epoch_ends(cluster):
    """KIP-320: a consumer checks its position after a leader change by asking where its
    epoch ends on the new leader."""
    cluster.admin().create_topics([rafka.NewTopic("epochs", 1, 2)])
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        for i in range(5):
            producer.send("epochs", b"%d" % i)
    image = cluster.metadata()
    state = image["topics"]["epochs"][0]
    follower = next(b for b in state["replicas"] if b != state["leader"])
    ask = {"replica_id": -1, "topics": [{"topic": "epochs", "partitions": [
        {"partition": 0, "current_leader_epoch": state["leader_epoch"],
         "leader_epoch": state["leader_epoch"]}]}]}
    with socket.create_connection(address(cluster.bootstrap_servers, state["leader"])) as s:
        s.sendall(request_bytes(23, 4, ask))
        (part,) = read_response(s, 23, 4)[1].topics[0].partitions
        assert (part.error_code, part.leader_epoch, part.end_offset) == \
            (0, state["leader_epoch"], 5)
    with socket.create_connection(address(cluster.bootstrap_servers, follower)) as s:
        s.sendall(request_bytes(23, 4, ask))
        (part,) = read_response(s, 23, 4)[1].topics[0].partitions
        assert part.error_code == 6       # NOT_LEADER_OR_FOLLOWER


def test_librdkafka_describes_and_alters_topic_configs(cluster):
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource)
    cluster.admin().create_topics([rafka.NewTopic("conf", 1, 1,
                                                  config={"retention.ms": 3_600_000})])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "conf")
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["retention.ms"].value == "3600000"
    assert described["retention.ms"].source == 1            # DYNAMIC_TOPIC_CONFIG
    assert described["cleanup.policy"].value == "delete"
    assert described["cleanup.policy"].source == 5          # DEFAULT_CONFIG
    change = ConfigResource(ConfigResource.Type.TOPIC, "conf", incremental_configs=[
        ConfigEntry("retention.ms", "7200000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([change])[change].result(30)
    wait_until(lambda: cluster.admin().describe_configs(["conf"])["conf"]["retention.ms"]
               == 7_200_000, 30, "the altered retention.ms")
    assert sorted(cluster.admin().describe_configs(["conf"])["conf"]["cleanup.policy"]) == \
        ["compact", "delete"]
    bad = ConfigResource(ConfigResource.Type.TOPIC, "conf", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="INVALID_CONFIG|retention.ms"):
        admin.incremental_alter_configs([bad])[bad].result(30)


def test_librdkafka_deletes_records_up_to_an_offset(cluster):
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient
    cluster.admin().create_topics([rafka.NewTopic("trim", 1, 2)])
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        for i in range(10):
            producer.send("trim", b"%d" % i)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    (done,) = admin.delete_records([KafkaPartition("trim", 0, 4)]).values()
    assert done.result(30).low_watermark == 4
    consumer = rafka.Consumer(cluster)
    assert consumer.beginning_offsets([("trim", 0)]) == {("trim", 0): 4}
    consumer.close()
    (beyond,) = admin.delete_records([KafkaPartition("trim", 0, 99)]).values()
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|out of range"):
        beyond.result(30)


def test_librdkafka_elects_preferred_leaders(cluster):
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient
    cluster.admin().create_topics([rafka.NewTopic("elect", 2, 2)])
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    results = admin.elect_leaders(ElectionType.PREFERRED,
                                  [KafkaPartition("elect", 0)]).result(30)
    assert "ELECTION_NOT_NEEDED" in str(results[KafkaPartition("elect", 0)])
    # Reorder partition 1's replicas: its leader is no longer the preferred one.
    state = cluster.metadata()["topics"]["elect"][1]
    reordered = list(reversed(state["replicas"]))
    cluster.admin().alter_partition_reassignments({("elect", 1): reordered})
    wait_until(lambda: list(cluster.metadata()["topics"]["elect"][1]["replicas"]) == reordered,
               30, "the reordered replicas")
    assert cluster.metadata()["topics"]["elect"][1]["leader"] != reordered[0]
    results = admin.elect_leaders(ElectionType.PREFERRED,
                                  [KafkaPartition("elect", 1)]).result(30)
    assert results[KafkaPartition("elect", 1)] is None
    wait_until(lambda: cluster.metadata()["topics"]["elect"][1]["leader"] == reordered[0], 30,
               "the preferred leader")


def test_describe_log_dirs_gives_each_partitions_size_on_disk(cluster):
    cluster.admin().create_topics([rafka.NewTopic("sized", 2, 3)])
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        for i in range(200):
            producer.send("sized", b"x" * 1000, partition=i % 2)
    leader = cluster.metadata()["topics"]["sized"][0]["leader"]
    with socket.create_connection(address(cluster.bootstrap_servers, leader)) as s:
        s.sendall(request_bytes(35, 4, {"topics": [{"topic": "sized", "partitions": [0, 1]}]}))
        (result,) = read_response(s, 35, 4)[1].results
    assert result.error_code == 0 and result.log_dir.endswith(f"broker-{leader}")
    assert result.total_bytes >= result.usable_bytes > 0
    (topic,) = result.topics
    sizes = {p.partition_index: p.partition_size for p in topic.partitions}
    assert set(sizes) == {0, 1} and all(size > 100 * 1000 for size in sizes.values())
