"""The records of ``__transaction_state`` (Kafka's TransactionLog), pure: bytes in, bytes out.

The topic is compacted: each record's key is a transactional id and the last value per key
is its state; a null value (tombstone) is an expired id. The bytes are Kafka's, so that
``kafka-dump-log.sh --transaction-log-decoder`` reads rafka's partitions and the other way
round:

- key: ``i16`` record type 0, then ``TransactionalId`` (``i16`` length, UTF-8);
- value: ``i16`` version, then ``ProducerId i64, ProducerEpoch i16, TransactionTimeoutMs
  i32, TransactionStatus i8, TransactionPartitions [Topic, [PartitionIds i32]] (null for
  Empty), TransactionLastUpdateTimestampMs i64, TransactionStartTimestampMs i64``. Version
  0 is written (Kafka writes it below transaction version 2); version 1, the flexible one
  with compact strings and arrays and tagged PreviousProducerId, NextProducerId and
  ClientTransactionVersion, is read too.
"""
from __future__ import annotations

import struct
from typing import Iterable

from actors.txn.metadata import (NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionState,
                                 TxnTransitMetadata)
from protocols.errors import CorruptRecordError
from protocols.topics import TopicPartition
from protocols.varint import decode_unsigned_varint

KEY_TYPE = 0
VALUE_VERSION = 0
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_HEAD = struct.Struct(">qhib")       # producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")        # last update, start


def key_bytes(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return _I16.pack(KEY_TYPE) + _I16.pack(len(data)) + data


def value_bytes(transit: TxnTransitMetadata) -> bytes:
    if transit.state is TransactionState.EMPTY and transit.topic_partitions:
        raise ValueError(f"Transaction is not expected to have any partitions since its "
                         f"state is Empty: {transit}")
    out = [_I16.pack(VALUE_VERSION),
           _HEAD.pack(transit.producer_id, transit.producer_epoch, transit.txn_timeout_ms,
                      transit.state.id)]
    if transit.state is TransactionState.EMPTY:
        out.append(_I32.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(transit.topic_partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        out.append(_I32.pack(len(by_topic)))
        for topic, partitions in by_topic.items():
            name = topic.encode()
            out += [_I16.pack(len(name)), name, _I32.pack(len(partitions)),
                    struct.pack(f">{len(partitions)}i", *partitions)]
    out.append(_TIMES.pack(transit.txn_last_update_timestamp, transit.txn_start_timestamp))
    return b"".join(out)


def read_key(data: bytes) -> str:
    try:
        (kind,) = _I16.unpack_from(data)
        if kind != KEY_TYPE:
            raise CorruptRecordError(f"Unknown transaction log key type {kind}")
        (size,) = _I16.unpack_from(data, 2)
        if size < 0 or 4 + size != len(data):
            raise CorruptRecordError("A transaction log key's transactional id does not "
                                     "fill it")
        return data[4:4 + size].decode()
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"Unreadable transaction log key: {e}") from None


def read_value(data: bytes | None) -> TxnTransitMetadata | None:
    """The state a value holds; None for a tombstone."""
    if data is None:
        return None
    try:
        return _Reader(data).value()
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as e:
        raise CorruptRecordError(f"Unreadable transaction log value: {e}") from None


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: struct.Struct):
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def uvarint(self) -> int:
        value, self.pos = decode_unsigned_varint(self.data, self.pos)
        return value

    def string(self, flexible: bool) -> str:
        size = self.uvarint() - 1 if flexible else self.take(_I16)[0]
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError("a string runs past the record")
        text = self.data[self.pos:self.pos + size].decode()
        self.pos += size
        return text

    def count(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.take(_I32)[0]

    def skip_tags(self) -> dict[int, bytes]:
        tags = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            tags[tag] = self.data[self.pos:self.pos + size]
            self.pos += size
        return tags

    def value(self) -> TxnTransitMetadata:
        (version,) = self.take(_I16)
        if version not in (0, 1):
            raise ValueError(f"unknown transaction log value version {version}")
        flexible = version >= 1
        producer_id, epoch, timeout, status = self.take(_HEAD)
        partitions = set()
        topics = self.count(flexible)
        for _ in range(max(0, topics)):
            topic = self.string(flexible)
            n = self.count(flexible)
            if n < 0 or self.pos + 4 * n > len(self.data):
                raise ValueError("a partition list runs past the record")
            partitions |= {TopicPartition(topic, p)
                           for p in struct.unpack_from(f">{n}i", self.data, self.pos)}
            self.pos += 4 * n
            if flexible:
                self.skip_tags()
        last_update, start = self.take(_TIMES)
        prev_id = next_id = NO_PRODUCER_ID
        if flexible:
            tags = self.skip_tags()
            if 0 in tags:
                (prev_id,) = struct.unpack(">q", tags[0])
            if 1 in tags:
                (next_id,) = struct.unpack(">q", tags[1])
        if self.pos != len(self.data):
            raise ValueError(f"{len(self.data) - self.pos} bytes after the value")
        return TxnTransitMetadata(producer_id, prev_id, next_id, epoch, NO_PRODUCER_EPOCH,
                                  timeout, TransactionState.from_id(status),
                                  frozenset(partitions), start, last_update)


def replay(records: Iterable[tuple[bytes | None, bytes | None]]
           ) -> dict[str, TxnTransitMetadata]:
    """Fold a partition's ``(key, value)`` records, in offset order, into each
    transactional id's last state (a tombstone removes it), as a coordinator loads them."""
    states: dict[str, TxnTransitMetadata] = {}
    for key, value in records:
        if key is None:
            continue
        transactional_id = read_key(key)
        transit = read_value(value)
        if transit is None:
            states.pop(transactional_id, None)
        else:
            states[transactional_id] = transit
    return states
