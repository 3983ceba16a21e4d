"""``__transaction_state`` records (actors/txn/transaction_log.py) in Kafka's bytes: keys,
values of version 0 (written) and 1 (read), tombstones, and replay."""
from __future__ import annotations

import struct

import pytest

from actors.txn.metadata import NO_PRODUCER_EPOCH, TransactionState, TxnTransitMetadata
from actors.txn.transaction_log import key_bytes, read_key, read_value, replay, value_bytes
from protocols.errors import CorruptRecordError
from protocols.topics import TopicPartition

S = TransactionState


def transit(state=S.ONGOING, partitions=(("t", 1), ("t", 0), ("u", 3))) -> TxnTransitMetadata:
    return TxnTransitMetadata(1001, 1001, -1, 3, NO_PRODUCER_EPOCH, 60_000, state,
                              frozenset(TopicPartition(*p) for p in partitions), 1_000, 2_000)


def test_a_key_is_the_record_type_then_the_transactional_id():
    assert key_bytes("tx") == b"\x00\x00\x00\x02tx"
    assert read_key(key_bytes("payments-7")) == "payments-7"


def test_a_value_is_kafkas_version_0_layout():
    assert value_bytes(transit()) == (
        struct.pack(">hqhib", 0, 1001, 3, 60_000, 1)
        + struct.pack(">i", 2)
        + struct.pack(">h", 1) + b"t" + struct.pack(">i2i", 2, 0, 1)
        + struct.pack(">h", 1) + b"u" + struct.pack(">ii", 1, 3)
        + struct.pack(">qq", 2_000, 1_000))


@pytest.mark.parametrize("state", [s for s in S if s is not S.DEAD])
def test_every_state_reads_back_as_written(state):
    partitions = () if state is S.EMPTY else (("t", 0), ("t", 1))
    written = transit(state, partitions)
    back = read_value(value_bytes(written))
    assert back == TxnTransitMetadata(1001, -1, -1, 3, NO_PRODUCER_EPOCH, 60_000, state,
                                      written.topic_partitions, 1_000, 2_000)


def test_empty_holds_no_partitions():
    assert value_bytes(transit(S.EMPTY, ()))[17:21] == struct.pack(">i", -1)   # null
    with pytest.raises(ValueError, match="not expected to have any partitions"):
        value_bytes(transit(S.EMPTY))


def test_a_version_1_value_is_read_with_its_tagged_producer_ids():
    # Flexible: compact arrays and strings (length + 1), tagged fields at each level.
    body = (struct.pack(">hqhib", 1, 1001, 3, 60_000, 2)
            + bytes([2]) + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 4) + bytes([0])
            + struct.pack(">qq", 2_000, 1_000)
            + bytes([2]) + bytes([0, 8]) + struct.pack(">q", 900)
            + bytes([1, 8]) + struct.pack(">q", 1002))
    back = read_value(body)
    assert (back.state, back.topic_partitions) == (S.PREPARE_COMMIT,
                                                   frozenset({TopicPartition("t", 4)}))
    assert (back.prev_producer_id, back.next_producer_id) == (900, 1002)


def test_replay_keeps_each_ids_last_state_and_drops_tombstones():
    records = [(key_bytes("a"), value_bytes(transit(S.ONGOING))),
               (key_bytes("b"), value_bytes(transit(S.EMPTY, ()))),
               (key_bytes("a"), value_bytes(transit(S.PREPARE_ABORT))),
               (key_bytes("b"), None)]
    states = replay(records)
    assert list(states) == ["a"] and states["a"].state is S.PREPARE_ABORT


@pytest.mark.parametrize("data", [b"", b"\x00\x05\x00\x01a", b"\x00\x00\x00\x09ab",
                                  b"\x00\x00\xff\xff"])
def test_a_malformed_key_is_corrupt(data):
    with pytest.raises(CorruptRecordError):
        read_key(data)


def test_a_malformed_value_is_corrupt():
    good = value_bytes(transit())
    for cut in (3, 20, len(good) - 1):
        with pytest.raises(CorruptRecordError):
            read_value(good[:cut])
    with pytest.raises(CorruptRecordError, match="version 7"):
        read_value(struct.pack(">h", 7) + good[2:])
    with pytest.raises(CorruptRecordError, match="state id 9"):
        read_value(good[:16] + bytes([9]) + good[17:])
    with pytest.raises(CorruptRecordError, match="after the value"):
        read_value(good + b"\x00")
