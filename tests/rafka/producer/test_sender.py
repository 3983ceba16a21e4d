"""The producer's sender decisions, pure (cases of Kafka's SenderTest and
RecordAccumulatorTest about draining, sequences and retries): which batches go in which
request, their sequence numbers, the in-flight limit, the producer id, and what becomes of
a batch whose answer is an error."""
from __future__ import annotations

import pytest

from protocols.errors import (InvalidTopicError, NotEnoughReplicasError,
                              NotLeaderOrFollowerError, OutOfOrderSequenceNumberError,
                              RecordTooLargeError)
from protocols.topics import TopicPartition
from rafka.producer.accumulator import RecordAccumulator
from rafka.producer.sender import Outcome, SenderState

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
LEADERS = {A0: ("host-1", "h1"), A1: ("host-1", "h1"), B0: ("host-2", "h2")}


def sender(idempotent: bool = True, max_in_flight: int = 5, max_request_size: int = 1 << 20,
           producer_id: int = 7) -> SenderState:
    state = SenderState(max_in_flight, max_request_size, idempotent, retries=2**31 - 1,
                        delivery_timeout_ms=120_000)
    if producer_id >= 0:
        state.set_producer_id(producer_id, 0)
    return state


def queued(*records: tuple[TopicPartition, int], batch_size: int = 1 << 20
           ) -> RecordAccumulator:
    """An accumulator with ``n`` records of 100 bytes queued per partition, flushing."""
    acc = RecordAccumulator(batch_size, 0, 1 << 25, 120_000, lambda: 0)
    for tp, n in records:
        for i in range(n):
            acc.append(tp, i, None, b"v" * 100, (), 121)
    return acc


def drain(state: SenderState, acc: RecordAccumulator, leaders=LEADERS):
    ready, _ = acc.ready(0)
    return state.drain(ready, leaders.get, acc)


def test_one_request_per_leader_host_with_the_first_batch_of_each_ready_partition():
    state, acc = sender(), queued((A0, 2), (A1, 1), (B0, 3))
    requests, unknown = drain(state, acc)
    by_host = {r.host_id: sorted(b.tp for b in r.batches) for r in requests}
    assert by_host == {"host-1": [A0, A1], "host-2": [B0]} and unknown == []
    assert state.in_flight_per_host == {"host-1": 1, "host-2": 1}
    assert {r.host for r in requests} == {"h1", "h2"}


def test_sequences_are_consecutive_per_partition_and_a_retry_keeps_its_own():
    state, acc = sender(), queued((A0, 3), batch_size=300)   # two records per batch
    [first], _ = drain(state, acc)
    [second], _ = drain(state, acc)
    batch1, batch2 = first.batches[0], second.batches[0]
    assert (batch1.base_sequence, batch1.record_count) == (0, 2)
    assert (batch2.base_sequence, batch2.producer_id) == (2, 7)
    acc.reenqueue(batch1, 0)                                  # retried: same sequence
    [again], _ = drain(state, acc)
    assert again.batches[0].base_sequence == 0 and state.next_sequence[A0] == 3


def test_the_in_flight_limit_holds_per_host():
    state, acc = sender(max_in_flight=1), queued((A0, 1), (B0, 1))
    drain(state, acc)
    acc2 = queued((A0, 1), (B0, 1))
    state.request_done("host-2")
    requests, _ = drain(state, acc2)
    assert [r.host_id for r in requests] == ["host-2"]       # host-1 still has one out
    assert acc2.queued() == 1


def test_max_request_size_cuts_a_request_but_its_first_batch_always_goes():
    state, acc = sender(max_request_size=100), queued((A0, 1), (A1, 1))
    requests, _ = drain(state, acc)
    assert [len(r.batches) for r in requests] == [1] and acc.queued() == 1


def test_a_partition_without_a_known_leader_is_reported_and_stays_queued():
    state, acc = sender(), queued((A0, 1), (B0, 1))
    requests, unknown = drain(state, acc, {A0: ("host-1", "h1")})
    assert unknown == [B0] and [r.host_id for r in requests] == ["host-1"]
    assert acc.queued() == 1


def test_without_a_producer_id_new_batches_wait_and_retries_go():
    state = sender(producer_id=-1)
    assert state.needs_producer_id
    acc = queued((A0, 1), (B0, 1))
    assert drain(state, acc) == ([], []) and acc.queued() == 2
    retry = acc.drain(B0)
    retry.base_sequence, retry.producer_id = 4, 3              # sent under an old id
    acc.reenqueue(retry, 0)
    requests, _ = drain(state, acc)
    assert [b.tp for r in requests for b in r.batches] == [B0]
    state.set_producer_id(8, 0)
    [request], _ = drain(state, acc)
    assert request.batches[0].base_sequence == 0 and request.batches[0].producer_id == 8
    assert not sender(idempotent=False, producer_id=-1).needs_producer_id


@pytest.mark.parametrize("error, attempts, age_ms, outcome", [
    (NotLeaderOrFollowerError("moved"), 1, 0, Outcome.RETRY),
    (NotEnoughReplicasError("isr"), 1, 0, Outcome.RETRY),
    (OutOfOrderSequenceNumberError("gap"), 1, 0, Outcome.RETRY),
    (NotLeaderOrFollowerError("moved"), 1, 120_000, Outcome.FAIL),   # delivery.timeout.ms
    (InvalidTopicError("bad"), 1, 0, Outcome.FAIL),
    (RecordTooLargeError("big"), 1, 0, Outcome.SPLIT),
])
def test_what_becomes_of_a_batch_whose_answer_is_an_error(error, attempts, age_ms, outcome):
    state, acc = sender(), queued((A0, 2))
    [request], _ = drain(state, acc)
    batch = request.batches[0]
    batch.attempts = attempts
    assert state.on_error(batch, error, batch.created_ms + age_ms, closing=False) is outcome


def test_a_failed_idempotent_batch_needs_a_new_producer_id_and_a_single_big_record_fails():
    state, acc = sender(), queued((A0, 1))
    [request], _ = drain(state, acc)
    batch = request.batches[0]
    assert state.on_error(batch, RecordTooLargeError("one record"), 0, False) is Outcome.FAIL
    assert state.needs_producer_id and state.next_sequence == {}
    closing = sender()
    assert closing.on_error(batch, NotLeaderOrFollowerError("moved"), 0,
                            closing=True) is Outcome.FAIL


def test_the_sender_thread_outlives_metadata_it_cannot_get():
    """No controller answering for longer than a metadata refresh waits (an election, the
    controller's host cut off): the partitions wait and their batches expire at
    delivery.timeout.ms; the sender thread goes on (it used to die, and flush never
    returned)."""
    import threading

    from protocols.errors import KafkaTimeoutError
    from rafka.producer.config import PRODUCER_CONFIG
    from rafka.producer.sender_thread import SenderThread, now_ms

    class NoController:
        calls = 0

        def leader(self, tp):
            NoController.calls += 1
            raise KafkaTimeoutError("No controller in cluster 'x' after 30 s")

        def forget(self, tp):
            pass

    config = PRODUCER_CONFIG.parse({"delivery.timeout.ms": 4_000, "linger.ms": 0,
                                    "enable.idempotence": False, "acks": "1"})
    acc = RecordAccumulator(16_384, 0, 1 << 20, 4_000, now_ms)
    cond = threading.Condition()
    sender = SenderThread("ns", config, 1, False, NoController(), acc, cond)
    with cond:
        _, batch, _ = acc.append(A0, 0, None, b"v", (), 31)
        acc.flushing = 1
        cond.notify_all()
    assert batch.result.event.wait(20), "the batch never expired"
    assert isinstance(batch.result.error, KafkaTimeoutError) and NoController.calls > 0
    assert sender.thread.is_alive()
    with cond:
        sender.closed = True
        cond.notify_all()
    sender.thread.join(5)
