"""Kafka's consumer protocol: what a consumer puts in JoinGroup (its subscription) and what
the group leader hands out through SyncGroup (each member's assignment), as Kafka's
``ConsumerProtocol`` lays them out, so that rafka's consumers and any Kafka client can share
one group: an int16 version, then ``ConsumerProtocolSubscription`` / ``Assignment`` of that
version (non-flexible; later versions only append fields, so a reader reads the fields it
knows and ignores the rest, as Kafka's does).

Written by hand with ``struct`` rather than through kio: this runs in every consumer
process, and kio's schema machinery adds ~16,000 objects to a heap whose full garbage
collections show in end-to-end latency (see ``actors/broker/actor.py``). The tests check
these bytes against kio's reading and writing of Kafka's schemas.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable

from protocols.topics import TopicPartition

SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3


class ConsumerProtocolError(ValueError):
    """Bytes that are not a consumer-protocol subscription or assignment."""


@dataclass(frozen=True)
class ConsumerSubscription:
    topics: list[str]
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    user_data: bytes | None = None
    generation_id: int = -1
    rack_id: str | None = None


# ---- writing --------------------------------------------------------------------------------

def _string(out: list, value: str) -> None:
    raw = value.encode()
    out.append(struct.pack(">h", len(raw)) + raw)


def _nullable_string(out: list, value: str | None) -> None:
    if value is None:
        out.append(struct.pack(">h", -1))
    else:
        _string(out, value)


def _nullable_bytes(out: list, value: bytes | None) -> None:
    out.append(struct.pack(">i", -1) if value is None
               else struct.pack(">i", len(value)) + bytes(value))


def _topic_partitions(out: list, partitions: Iterable[TopicPartition]) -> None:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out.append(struct.pack(">i", len(by_topic)))
    for topic, numbers in by_topic.items():
        _string(out, topic)
        out.append(struct.pack(f">i{len(numbers)}i", len(numbers), *numbers))


def encode_subscription(topics: Iterable[str], owned: Iterable[TopicPartition] = (),
                        user_data: bytes | None = None, generation_id: int = -1,
                        rack_id: str | None = None) -> bytes:
    out = [struct.pack(">h", SUBSCRIPTION_VERSION)]
    names = sorted(topics)
    out.append(struct.pack(">i", len(names)))
    for name in names:
        _string(out, name)
    _nullable_bytes(out, user_data)
    _topic_partitions(out, owned)                       # v1+
    out.append(struct.pack(">i", generation_id))        # v2+
    _nullable_string(out, rack_id)                      # v3+
    return b"".join(out)


def encode_assignment(partitions: Iterable[TopicPartition],
                      user_data: bytes | None = None) -> bytes:
    out = [struct.pack(">h", ASSIGNMENT_VERSION)]
    _topic_partitions(out, partitions)
    _nullable_bytes(out, user_data)
    return b"".join(out)


# ---- reading --------------------------------------------------------------------------------

class _Reader:
    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = memoryview(data), 0, what

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ConsumerProtocolError(f"{self.what}: {len(self.data)} bytes end early")
        value = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value if len(value) > 1 else value[0]

    def done(self) -> bool:
        return self.pos >= len(self.data)

    def count(self) -> int:
        n = self.take(">i")
        if n < -1 or n > len(self.data) - self.pos:
            raise ConsumerProtocolError(f"{self.what}: an array of {n} in "
                                        f"{len(self.data) - self.pos} bytes")
        return n

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ConsumerProtocolError(f"{self.what}: a string runs past the end")
        raw = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ConsumerProtocolError(f"{self.what}: a string is not UTF-8") from None

    def bytes_(self) -> bytes | None:
        n = self.take(">i")
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ConsumerProtocolError(f"{self.what}: bytes run past the end")
        raw = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return raw

    def topic_partitions(self) -> list[TopicPartition]:
        out = []
        for _ in range(max(self.count(), 0)):
            topic = self.string()
            n = self.count()
            out += [TopicPartition(topic, p) for p in self.take(f">{max(n, 0)}i")] \
                if n > 1 else ([TopicPartition(topic, self.take(">i"))] if n == 1 else [])
        return out


def decode_subscription(data: bytes) -> ConsumerSubscription:
    r = _Reader(data, "consumer subscription")
    version = r.take(">h")
    if version < 0:
        raise ConsumerProtocolError(f"consumer subscription: version {version}")
    topics = [r.string() for _ in range(max(r.count(), 0))]
    user_data = r.bytes_()
    owned = r.topic_partitions() if version >= 1 else []
    generation = r.take(">i") if version >= 2 else -1
    rack = r.string() if version >= 3 else None
    return ConsumerSubscription([t for t in topics if t is not None], owned, user_data,
                                generation, rack)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data:   # a member the leader gave nothing may get empty bytes
        return []
    r = _Reader(data, "consumer assignment")
    version = r.take(">h")
    if version < 0:
        raise ConsumerProtocolError(f"consumer assignment: version {version}")
    return r.topic_partitions()
