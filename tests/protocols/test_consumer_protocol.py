"""Kafka's consumer protocol (``protocols.consumer_protocol``): the subscription a consumer
sends in JoinGroup and the assignment it gets in SyncGroup, byte for byte as Kafka's
``ConsumerProtocol`` writes and reads them (checked against Kafka's own schemas through
kio), so rafka's consumers and any Kafka client can share one group."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from protocols.consumer_protocol import (ConsumerProtocolError, decode_assignment,
                                         decode_subscription, encode_assignment,
                                         encode_subscription)
from protocols.topics import TopicPartition


def kio_write(cls, value) -> bytes:
    out = type("W", (list,), {"write": list.append})()
    entity_writer(cls)(out, value)
    return b"".join(out)


def subscription_class(version: int):
    import importlib
    return importlib.import_module(
        f"kio.schema.consumer_protocol_subscription.v{version}.data").ConsumerProtocolSubscription


def assignment_class(version: int):
    import importlib
    return importlib.import_module(
        f"kio.schema.consumer_protocol_assignment.v{version}.data").ConsumerProtocolAssignment


def test_a_subscription_is_kafkas_version_3_layout():
    data = encode_subscription(["b", "a"], [TopicPartition("a", 1), TopicPartition("a", 0),
                                            TopicPartition("b", 2)], generation_id=7)
    assert struct.unpack_from(">h", data)[0] == 3
    sub, used = entity_reader(subscription_class(3))(data, 2)
    assert used == len(data) - 2
    assert list(sub.topics) == ["a", "b"] and sub.user_data is None
    assert [(t.topic, list(t.partitions)) for t in sub.owned_partitions] == \
        [("a", [0, 1]), ("b", [2])]
    assert (sub.generation_id, sub.rack_id) == (7, None)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscriptions_of_every_version_kafka_writes_are_read(version):
    cls = subscription_class(version)
    nested = [f for f in cls.__dataclass_fields__.values() if f.name == "owned_partitions"]
    values = {"topics": ("events", "clicks"), "user_data": b"u"}
    if nested:
        import importlib
        mod = importlib.import_module(cls.__module__)
        values["owned_partitions"] = (mod.TopicPartition(topic="events", partitions=(3, 1)),)
    if version >= 2:
        values["generation_id"] = 4
    if version >= 3:
        values["rack_id"] = "r1"
    data = struct.pack(">h", version) + kio_write(cls, cls(**values))
    sub = decode_subscription(data)
    assert sub.topics == ["events", "clicks"] and sub.user_data == b"u"
    assert sub.owned_partitions == ([TopicPartition("events", 3), TopicPartition("events", 1)]
                                    if version >= 1 else [])
    assert sub.generation_id == (4 if version >= 2 else -1)
    assert sub.rack_id == ("r1" if version >= 3 else None)


def test_an_assignment_round_trips_through_kafkas_schema():
    parts = [TopicPartition("t", 2), TopicPartition("t", 0), TopicPartition("u", 5)]
    data = encode_assignment(parts)
    assert struct.unpack_from(">h", data)[0] == 3
    got, used = entity_reader(assignment_class(3))(data, 2)
    assert used == len(data) - 2
    assert [(t.topic, list(t.partitions)) for t in got.assigned_partitions] == \
        [("t", [0, 2]), ("u", [5])]
    kafka = struct.pack(">h", 0) + kio_write(assignment_class(0), got)
    assert sorted(decode_assignment(kafka)) == sorted(parts)
    assert decode_assignment(b"") == []


def test_bytes_that_are_not_the_consumer_protocol_are_refused_clearly():
    with pytest.raises(ConsumerProtocolError, match="an array of 1000"):
        decode_subscription(struct.pack(">hi", 1, 1000) + b"x")
    with pytest.raises(ConsumerProtocolError, match="end early"):
        decode_assignment(b"\x00")
    # rafka's old msgpack subscription is not the consumer protocol either.
    from protocols.wire import encode
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(encode({"topics": ["t"], "owned": []}))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_any_bytes_decode_or_are_refused_with_the_protocol_error(data):
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except ConsumerProtocolError:
            pass
