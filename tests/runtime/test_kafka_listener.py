"""The brokers' Kafka listener against unmodified Kafka clients and raw sockets (issue 16,
first step: ApiVersions and Metadata): librdkafka (confluent-kafka) sees the cluster's
brokers, topics, leaders, replicas and ISR; bad bytes close only their own connection."""
from __future__ import annotations

import socket
import struct
import time

import pytest
import ray

import rafka
from actors.broker.kafka_apis import SUPPORTED, kafka_uuid_text
from tests.kafka_wire import read_response, request_bytes
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]


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
            SUPPORTED
        # A version the broker does not know: the v0 answer, UNSUPPORTED_VERSION (35), the
        # list; the connection stays open for the retry.
        frame = request_bytes(18, 3, {}, 10)
        sock.sendall(frame[:6] + struct.pack(">h", 42) + frame[8:])
        header, answer = read_response(sock, 18, 0)
        assert (header.correlation_id, answer.error_code) == (10, 35)
        assert len(answer.api_keys) == len(SUPPORTED)
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


def test_bad_bytes_close_only_their_own_connection(cluster):
    servers = cluster.bootstrap_servers
    target = address(servers, 0)
    bystander = socket.create_connection(target)
    assert api_versions(bystander)[1].error_code == 0
    bad_inputs = {
        "oversized frame": struct.pack(">i", 104_857_601),
        "negative size": struct.pack(">i", -1),
        "unknown API key": struct.pack(">ihhih", 10, 999, 0, 1, -1),
        "API not served (Produce)": struct.pack(">ihhih", 10, 0, 9, 1, -1),
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
