"""Kafka's wire protocol codec (``protocols.kafka.codec``), sans I/O: frames, request
headers of every version, Kafka's answers to what a broker does not serve, responses of every
version of an API built from the same values. Requests are checked against bytes laid out by
hand from Kafka's protocol guide (https://kafka.apache.org/protocol), not only against the
codec's own encoder."""
from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from actors.broker.listener.api_versions import SUPPORTED
from actors.broker.listener.metadata_apis import kafka_uuid_text, metadata_values
from protocols.kafka.codec import (CloseConnection, FrameDecoder, InvalidReceive,
                                   InvalidRequest, api_versions_body, build, encode_response,
                                   parse_request, response_class)
from tests.kafka_wire import parse_response, request_bytes


def api_versions_v3(correlation_id: int = 7, client_id: bytes = b"console-producer") -> bytes:
    """ApiVersions v3 as the Java client sends it: request header v2 (client id a legacy
    int16 string, then tagged fields), compact strings for the software name and version."""
    return (struct.pack(">hhih", 18, 3, correlation_id, len(client_id)) + client_id + b"\x00"
            + bytes([18]) + b"apache-kafka-java" + bytes([6]) + b"4.3.1" + b"\x00")


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def decode_response(chunks: list[bytes], api_key: int, version: int):
    data = b"".join(chunks)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    return parse_response(data[4:], api_key, version)


# ---- frames ---------------------------------------------------------------------------------

def test_frames_come_out_whole_however_the_bytes_are_cut():
    frames = [api_versions_v3(i) for i in range(5)]
    stream = b"".join(framed(f) for f in frames)
    for cut in (1, 3, 4, 7, len(stream)):
        decoder = FrameDecoder()
        got = []
        for i in range(0, len(stream), cut):
            got += decoder.feed(stream[i:i + cut])
        assert got == frames and decoder.pending == 0


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(st.binary(max_size=3_000) | st.sampled_from([b"", b"x" * 70_000]),
                       min_size=1, max_size=6),
       cuts=st.lists(st.integers(1, 20_000), min_size=1, max_size=40))
def test_frames_cut_anywhere_by_reads_of_any_size_come_out_whole(frames, cuts):
    # A megabyte Produce arrives in dozens of reads; a read may end inside a size prefix,
    # hold several frames, or the end of one frame and the start of the next.
    stream = b"".join(framed(f) for f in frames)
    ends = [0]
    for f in frames:
        ends.append(ends[-1] + 4 + len(f))
    decoder, got, at, i = FrameDecoder(), [], 0, 0
    while at < len(stream):
        step = cuts[i % len(cuts)]
        got += decoder.feed(stream[at:at + step])
        at, i = min(at + step, len(stream)), i + 1
        # What is held: the bytes of the frame under way (its size prefix once read aside).
        under_way = at - max(e for e in ends if e <= at)
        assert decoder.pending == (under_way if under_way < 4 else under_way - 4)
    assert got == frames and decoder.pending == 0
    assert all(type(frame) is bytes for frame in got)


def test_what_a_decoder_holds_stays_near_the_bytes_it_was_sent():
    # A client trickling a frame a byte at a time (tiny TCP segments), and one whose large
    # read ends a byte into the next frame: neither makes the broker hold much more than
    # the bytes of the frame under way.
    import tracemalloc
    tracemalloc.start()
    try:
        trickled = FrameDecoder()
        trickled.feed(struct.pack(">i", 500_000))
        for _ in range(100_000):
            trickled.feed(b"x")
        held = tracemalloc.get_traced_memory()[0]
        assert trickled.pending == 100_000 and held < 2 * 100_000 + 50_000
        decoders = []
        for _ in range(50):
            decoder = FrameDecoder()
            assert decoder.feed(framed(bytes(262_000)) + b"\x00") == [bytes(262_000)]
            decoders.append(decoder)
        assert all(d.pending == 1 for d in decoders)
        assert tracemalloc.get_traced_memory()[0] - held < 50 * 1_000
    finally:
        tracemalloc.stop()


def test_a_frame_over_socket_request_max_bytes_is_refused_before_it_is_read():
    # Kafka's SocketServer: InvalidReceiveException, the connection closed.
    decoder = FrameDecoder(max_bytes=1000)
    with pytest.raises(InvalidReceive, match="1001 larger than 1000"):
        decoder.feed(struct.pack(">i", 1001))
    with pytest.raises(InvalidReceive, match="size = -5"):
        FrameDecoder().feed(struct.pack(">i", -5))


# ---- requests -------------------------------------------------------------------------------

def test_an_api_versions_v3_request_as_the_java_client_sends_it():
    request = parse_request(api_versions_v3(), SUPPORTED)
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) \
        == (18, 3, 7, "console-producer")
    assert request.body.client_software_name == "apache-kafka-java"
    assert request.body.client_software_version == "4.3.1"


def test_a_null_client_id_and_request_header_v1():
    request = parse_request(struct.pack(">hhih", 18, 0, 8, -1), SUPPORTED)
    assert (request.api_version, request.correlation_id, request.client_id) == (0, 8, None)


def test_an_api_versions_request_newer_than_the_broker_gets_v0_with_unsupported_version():
    # KIP-511: the broker reads the header only and answers in v0 with error 35 and its
    # list, so the client can retry with a version both know.
    frame = api_versions_v3()[:2] + struct.pack(">h", 99) + api_versions_v3()[4:]
    request = parse_request(frame, SUPPORTED)
    assert request.body is None and request.api_version == 99
    body = api_versions_body(request, SUPPORTED)
    assert type(body).__version__ == 0 and body.error_code == ErrorCode.unsupported_version
    header, answer = decode_response(encode_response(request, body), 18, 0)
    assert header.correlation_id == 7
    assert {(k.api_key, k.min_version, k.max_version) for k in answer.api_keys} == \
        {(k, lo, hi) for k, (lo, hi) in SUPPORTED.items()}


def test_api_keys_are_kafkas():
    """The ApiKey enum names every API Kafka's schemas (kio) have, by Kafka's names."""
    from kio.index import api_key_map
    from protocols.kafka.api_keys import ApiKey
    assert {key.value: key.name.lower() for key in ApiKey} == dict(api_key_map)


def test_api_versions_lists_exactly_what_the_broker_serves():
    request = parse_request(api_versions_v3(), SUPPORTED)
    header, answer = decode_response(encode_response(request, api_versions_body(
        request, SUPPORTED)), 18, 3)
    assert answer.error_code == ErrorCode.none
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == SUPPORTED
    # ApiVersions' response header is v0 in every version (no tagged fields after the id).
    assert header.correlation_id == 7


def test_an_unknown_api_key_or_unsupported_version_closes_the_connection():
    with pytest.raises(InvalidRequest, match="Unknown API key 999"):
        parse_request(struct.pack(">hhih", 999, 0, 1, -1), SUPPORTED)
    with pytest.raises(InvalidRequest, match="Unsupported version 14 of API key 3"):
        parse_request(struct.pack(">hhih", 3, 14, 1, -1), SUPPORTED)
    # An API kio knows that this broker has not built (here CreateDelegationToken) is
    # refused, not half-served.
    assert 38 not in SUPPORTED
    with pytest.raises(InvalidRequest, match="Unknown API key 38"):
        parse_request(struct.pack(">hhih", 38, 1, 1, -1), SUPPORTED)


def test_a_request_that_does_not_decode_closes_the_connection():
    whole = api_versions_v3()
    with pytest.raises(InvalidRequest, match="ApiVersionsRequest"):
        parse_request(whole[:-5], SUPPORTED)            # cut inside the body
    with pytest.raises(InvalidRequest, match="shorter than a request header"):
        parse_request(whole[:6], SUPPORTED)
    # An array claiming more elements than there are bytes left (kio's native reader sized
    # it first and aborted the process: 33 billion topics in a 30-byte request).
    header = struct.pack(">hhih", 3, 13, 1, 4) + b"fuzz" + b"\x00"
    with pytest.raises(InvalidRequest, match="Array of 33619983427 elements"):
        parse_request(header + bytes.fromhex("c4f8a09f7d0200000000"), SUPPORTED)
    with pytest.raises(InvalidRequest, match="Array of 1000 elements"):
        parse_request(struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 1000) + b"ab",
                      SUPPORTED)


def test_a_tagged_field_nobody_defined_is_skipped_as_kafka_does():
    whole = api_versions_v3()
    header_end = 8 + 2 + len(b"console-producer")
    tagged = whole[:header_end] + b"\x01\x05\x02ab" + whole[header_end + 1:]
    request = parse_request(tagged, SUPPORTED)
    assert request.client_id == "console-producer"
    assert request.body.client_software_name == "apache-kafka-java"
    with pytest.raises(InvalidRequest):   # a tag whose length runs past the frame
        parse_request(whole[:header_end] + b"\x01\x05\x7f", SUPPORTED)


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_requests_of_every_version_decode(version):
    frame = request_bytes(3, version, {"topics": [{"name": "events"}],
                                       "allow_auto_topic_creation": True}, 11)[4:]
    request = parse_request(frame, SUPPORTED)
    assert request.correlation_id == 11
    assert [t.name for t in request.body.topics] == ["events"]


# ---- responses ------------------------------------------------------------------------------

IMAGE = {
    "cluster_id": "gYER-Lj_QLOW0IXf4RM79g",
    "brokers": {0: {"rack": None, "endpoints": [["PLAINTEXT", "127.0.0.1", 9092]]},
                1: {"rack": "r1", "endpoints": [["PLAINTEXT", "127.0.0.1", 9093]]}},
    "topics": {"events": {0: {"leader": 0, "leader_epoch": 3, "replicas": [0, 1],
                              "isr": [0, 1]},
                          1: {"leader": -1, "leader_epoch": 4, "replicas": [2, 1],
                              "isr": [2]}}},
    "topic_ids": {"events": "AAECAwQFRgeICQoLDA0ODw"},
}


@pytest.mark.parametrize("version", range(0, 14))
def test_a_metadata_response_of_every_version_from_one_set_of_values(version):
    request = parse_request(_metadata_request(version, ["events", "missing", "bad name!"]),
                            SUPPORTED)
    wanted = [{"name": t.name, "topic_id": getattr(t, "topic_id", None)}
              for t in request.body.topics]
    body = build(response_class(request), metadata_values(IMAGE, wanted, "PLAINTEXT", 1))
    header, answer = decode_response(encode_response(request, body), 3, version)
    assert header.correlation_id == 5
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == \
        [(0, "127.0.0.1", 9092), (1, "127.0.0.1", 9093)]
    events, missing, bad = answer.topics
    assert [t.name for t in answer.topics] == ["events", "missing", "bad name!"]
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert bad.error_code == ErrorCode.invalid_topic_exception
    p0, p1 = events.partitions
    assert (p0.error_code, p0.leader_id, p0.replica_nodes, p0.isr_nodes) == \
        (ErrorCode.none, 0, (0, 1), (0, 1))
    # No leader: LEADER_NOT_AVAILABLE; broker 2 is not live, so it is an offline replica.
    assert (p1.error_code, p1.leader_id) == (ErrorCode.leader_not_available, -1)
    if version >= 1:
        assert answer.controller_id == 1 and answer.brokers[1].rack == "r1"
    if version >= 2:
        assert answer.cluster_id == IMAGE["cluster_id"]
    if version >= 5:
        assert p1.offline_replicas == (2,)
    if version >= 7:
        assert (p0.leader_epoch, p1.leader_epoch) == (3, 4)
    if version >= 10:
        assert kafka_uuid_text(events.topic_id) == IMAGE["topic_ids"]["events"]


def test_metadata_names_topics_by_id_from_v10():
    topic_id = uuid.UUID(bytes=bytes(range(16)))
    wanted = [{"name": None, "topic_id": topic_id},
              {"name": None, "topic_id": uuid.UUID(int=5)}]
    values = metadata_values({**IMAGE, "topic_ids": {"events": kafka_uuid_text(topic_id)}},
                             wanted, "PLAINTEXT", 0)
    found, unknown = values["topics"]
    assert found["name"] == "events" and found["error_code"] == 0
    assert unknown["error_code"] == 100     # UNKNOWN_TOPIC_ID


def test_the_controller_named_is_always_one_of_the_brokers_listed():
    """KRaft brokers name themselves as the controller. A broker the image no longer lists
    (fenced meanwhile) names the first it lists, and none (-1) when it lists no broker:
    librdkafka's admin client, told of a controller missing from the broker list, waited for
    it until its next metadata refresh (CI, a CreateTopics unanswered for 30 s)."""
    assert metadata_values(IMAGE, [], "PLAINTEXT", 1)["controller_id"] == 1
    assert metadata_values(IMAGE, [], "PLAINTEXT", 2)["controller_id"] == 0
    assert metadata_values({**IMAGE, "brokers": {}}, [], "PLAINTEXT", 2)["controller_id"] == -1


def test_all_topics_is_null_from_v1_and_empty_in_v0():
    from actors.broker.listener.metadata_apis import requested_topics
    assert requested_topics(parse_request(_metadata_request(0, []), SUPPORTED)) is None
    assert requested_topics(parse_request(_metadata_request(1, []), SUPPORTED)) == []
    assert requested_topics(parse_request(_metadata_request(12, None), SUPPORTED)) is None


def _metadata_request(version: int, topics: list[str] | None) -> bytes:
    return request_bytes(3, version, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": False}, 5, client_id="t")[4:]


# ---- bad input ------------------------------------------------------------------------------

@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(sorted(SUPPORTED)),
       st.integers(-2, 20))
def test_no_request_bytes_make_the_decoder_fail_other_than_by_closing(data, key, version):
    """Fuzz: a request of any bytes after a plausible header is a Request or a
    CloseConnection, never another exception (the broker's connection task would log it
    as a bug). The long run: ``python -m tests.fuzz.run --target kafka_request``."""
    frame = struct.pack(">hhi", key, version, 1) + data
    try:
        request = parse_request(frame, SUPPORTED)
    except CloseConnection:
        return
    assert request.api_key == key
