"""BrokerTopicStats: Kafka's per-topic byte and message counters (BytesInPerSec,
MessagesInPerSec, BytesOutPerSec, ReplicationBytesOutPerSec), counted by a replica host per
request, not per record, and taken as deltas by its broker's report (pure: no Ray)."""
from __future__ import annotations

import collections
import struct
from dataclasses import dataclass, field

from protocols.records import RECORDS_COUNT_OFFSET

_LENGTH = struct.Struct(">i")   # a batch's length field, after its 8-byte base offset
_BATCH_HEADER = 12              # base offset and length: what the length does not count


def record_count(records: bytes | memoryview) -> int:
    """The records in a buffer of v2 record batches, from each batch's header (its
    records count), without decoding a record."""
    count, at, end = 0, 0, len(records)
    while at + RECORDS_COUNT_OFFSET + 4 <= end:
        size = _BATCH_HEADER + _LENGTH.unpack_from(records, at + 8)[0]
        if size < RECORDS_COUNT_OFFSET + 4:   # not a batch (the log validated it): stop
            break
        count += _LENGTH.unpack_from(records, at + RECORDS_COUNT_OFFSET)[0]
        at += size
    return count


@dataclass
class TopicDeltas:
    """Counts since the last take, by topic."""

    bytes_in: collections.Counter = field(default_factory=collections.Counter)
    messages_in: collections.Counter = field(default_factory=collections.Counter)
    bytes_out: collections.Counter = field(default_factory=collections.Counter)
    replication_bytes_out: collections.Counter = field(default_factory=collections.Counter)
    isr_shrinks: int = 0
    isr_expands: int = 0

    def as_tuple(self) -> tuple:
        """Plain values, for a Ray call's answer."""
        return (dict(self.bytes_in), dict(self.messages_in), dict(self.bytes_out),
                dict(self.replication_bytes_out), self.isr_shrinks, self.isr_expands)

    @classmethod
    def from_tuple(cls, values: tuple) -> "TopicDeltas":
        b_in, m_in, b_out, r_out, shrinks, expands = values
        return cls(collections.Counter(b_in), collections.Counter(m_in),
                   collections.Counter(b_out), collections.Counter(r_out), shrinks, expands)

    def add(self, other: "TopicDeltas") -> None:
        self.bytes_in.update(other.bytes_in)
        self.messages_in.update(other.messages_in)
        self.bytes_out.update(other.bytes_out)
        self.replication_bytes_out.update(other.replication_bytes_out)
        self.isr_shrinks += other.isr_shrinks
        self.isr_expands += other.isr_expands


class BrokerTopicStats:
    def __init__(self) -> None:
        self._deltas = TopicDeltas()

    def appended(self, topic: str, records: bytes | memoryview) -> None:
        """A producer's batches appended by a leader (Kafka marks them after the append:
        a refused batch is not counted)."""
        d = self._deltas
        d.bytes_in[topic] += len(records)
        d.messages_in[topic] += record_count(records)

    def read(self, topic: str, size: int, from_follower: bool) -> None:
        """A fetch answer's bytes for ``topic``: a follower's are replication traffic."""
        if size:
            (self._deltas.replication_bytes_out if from_follower
             else self._deltas.bytes_out)[topic] += size

    def isr_changed(self, before: int, after: int) -> None:
        """A leader's ISR change the controller took (IsrShrinksPerSec, IsrExpandsPerSec)."""
        if after < before:
            self._deltas.isr_shrinks += 1
        elif after > before:
            self._deltas.isr_expands += 1

    def take(self) -> TopicDeltas:
        taken, self._deltas = self._deltas, TopicDeltas()
        return taken
