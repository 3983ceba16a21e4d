"""A batch the broker finds too large (MESSAGE_TOO_LARGE) is split, as Kafka's producer
splits it: pure parts here, the real round trip in tests/runtime/test_clients.py."""
from __future__ import annotations

from protocols.records import RECORD_BATCH_OVERHEAD
from protocols.topics import TopicPartition
from rafka.producer.accumulator import RecordAccumulator
from rafka.producer.futures import FutureRecordMetadata, ProduceRequestResult

TP = TopicPartition("t", 0)


def accumulator_with(n: int) -> tuple[RecordAccumulator, object]:
    acc = RecordAccumulator(1 << 20, 5, 1 << 25, 120_000, lambda: 0)
    for i in range(n):
        _, batch, _ = acc.append(TP, 1_000 + i, None, f"v{i}".encode(), (), 30)
    return acc, batch


def test_a_split_keeps_every_record_and_its_sequence_number():
    acc, batch = accumulator_with(9)
    batch.attempts, batch.producer_id, batch.producer_epoch = 1, 5, 0
    batch.base_sequence = 2**31 - 3                        # the halves wrap around
    acc.drain(TP)
    used = acc.used_bytes
    parts = acc.split_and_reenqueue(batch, now_ms=77)
    assert [start for start, _ in parts] == [0, 4]
    first, second = (p for _, p in parts)
    assert [r[3] for r in first.builder.records()] == [b"v0", b"v1", b"v2", b"v3"]
    assert [r[3] for r in second.builder.records()] == [f"v{i}".encode() for i in range(4, 9)]
    assert [r[1] for r in second.builder.records()] == [1_004 + i for i in range(5)]
    assert (first.base_sequence, second.base_sequence) == (2**31 - 3, 1)
    assert (second.producer_id, second.producer_epoch) == (5, 0)
    # Both go out at once, the first half first, and the bytes are accounted once.
    assert list(acc.batches[TP]) == [first, second]
    assert acc.ready(77) == ([TP], None)
    assert acc.used_bytes == used - (batch.size - RECORD_BATCH_OVERHEAD) + \
        (first.size - RECORD_BATCH_OVERHEAD) + (second.size - RECORD_BATCH_OVERHEAD)


def test_each_record_is_answered_by_the_part_it_went_out_in():
    parent = ProduceRequestResult()
    futures = [FutureRecordMetadata(parent, i, "t", 0, 1_000, -1, 1) for i in range(6)]
    low, high = ProduceRequestResult(), ProduceRequestResult()
    parent.split_into([(0, low), (3, high)])
    high_low, high_high = ProduceRequestResult(), ProduceRequestResult()
    high.split_into([(0, high_low), (1, high_high)])         # split again
    done = []
    futures[0].add_done_callback(done.append)
    low.complete(100, -1, None)
    high_high.complete(250, -1, None)
    assert not futures[0].done() and done == []               # one part still out
    high_low.complete(200, -1, None)
    assert done == [futures[0]]
    assert [f.result(0).offset for f in futures] == [100, 101, 102, 200, 250, 251]


def test_a_part_that_fails_fails_only_its_own_records():
    parent = ProduceRequestResult()
    futures = [FutureRecordMetadata(parent, i, "t", 0, 1_000, -1, 1) for i in range(2)]
    ok, too_big = ProduceRequestResult(), ProduceRequestResult()
    parent.split_into([(0, ok), (1, too_big)])
    ok.complete(7, -1, None)
    too_big.complete(-1, -1, ValueError("record too large"))
    assert futures[0].result(0).offset == 7
    assert isinstance(futures[1].exception(0), ValueError)
