"""The producer's sender decisions, pure (Kafka's Sender and the idempotence half of its
TransactionManager): which batches go in the next requests, their sequence numbers, the
in-flight limit per leader host, the producer id, and what an answer's error means for a
batch. No Ray, no threads, no clock of its own: the producer's sender thread
(``rafka.producer.producer``) owns it, sends what it drains and reports what comes back.

Retry or fail follows Kafka's classification, the one every client uses
(``rafka.client.retry.is_retriable``: a ``KafkaError`` says whether it is retriable; a lost or
silent actor is a retriable network error), plus the producer's own case of an
out-of-order sequence (an earlier batch of the partition failed and is being retried).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from protocols.errors import OutOfOrderSequenceNumberError, RecordTooLargeError
from protocols.topics import TopicPartition
from rafka.producer.accumulator import ProducerBatch, RecordAccumulator
from rafka.client.retry import is_retriable


class Outcome(Enum):
    """What becomes of a batch whose answer was an error."""
    RETRY = "send it again after retry.backoff.ms"
    SPLIT = "send its records in halves"
    FAIL = "complete its records with the error"


# leader_of(tp): (host id, host handle) of the partition's leader, or None when unknown.
LeaderOf = Callable[[TopicPartition], "tuple[str, Any] | None"]


@dataclass
class Request:
    """One produce request to drain: the first batch of each of its partitions."""
    host_id: str
    host: Any
    batches: list[ProducerBatch] = field(default_factory=list)
    size: int = 0


@dataclass
class SenderState:
    max_in_flight: int                 # max.in.flight.requests.per.connection, per host
    max_request_size: int
    idempotent: bool
    retries: int
    delivery_timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1
    # A transactional producer's id and epoch come from its transaction coordinator
    # (``init_transactions``), never from the sender; a failed batch is the transaction's
    # to handle (``TransactionManager``: abort, then a new epoch).
    transactional: bool = False
    next_sequence: dict[TopicPartition, int] = field(default_factory=dict)
    in_flight_per_host: dict[str, int] = field(default_factory=dict)
    _drain_start: int = 0

    # ---- the producer id -------------------------------------------------------------------
    @property
    def needs_producer_id(self) -> bool:
        """An idempotent producer without an id: new batches wait for one (batches that
        already carry a sequence, retries, go on)."""
        return self.idempotent and self.producer_id < 0 and not self.transactional

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """InitProducerId's answer: sequences start again at 0 under the new id."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.next_sequence.clear()

    # ---- what to send ----------------------------------------------------------------------
    def drain(self, ready: list[TopicPartition], leader_of: LeaderOf,
              accumulator: RecordAccumulator,
              allowed: Callable[[TopicPartition], bool] | None = None
              ) -> tuple[list[Request], list[TopicPartition]]:
        """Kafka's RecordAccumulator.drain: for each leader host, one request with the
        first batch of each of its ready partitions, up to max.request.size (the first batch
        always goes), while fewer than max.in.flight.requests.per.connection requests are
        in flight to that host. The starting partition rotates, so none starves behind a
        full request. A transactional producer's partition waits until it is in the
        transaction (``allowed``). Returns the requests (counted in flight) and the ready
        partitions whose leader is unknown (their metadata is stale)."""
        requests: dict[str, Request] = {}
        unknown: list[TopicPartition] = []
        if ready:
            self._drain_start = (self._drain_start + 1) % len(ready)
            ready = ready[self._drain_start:] + ready[:self._drain_start]
        waiting_for_id = self.needs_producer_id
        for tp in ready:
            if allowed is not None and not allowed(tp):
                continue
            leader = leader_of(tp)
            if leader is None:
                unknown.append(tp)
                continue
            host_id, host = leader
            if self.in_flight_per_host.get(host_id, 0) >= self.max_in_flight:
                continue
            first = accumulator.first(tp)
            if waiting_for_id and first.base_sequence < 0:
                continue
            request = requests.get(host_id)
            if request is None:
                request = requests[host_id] = Request(host_id, host)
            elif request.size + first.size > self.max_request_size:
                continue
            batch = accumulator.drain(tp)
            if self.idempotent and batch.base_sequence < 0:
                batch.producer_id, batch.producer_epoch = self.producer_id, self.producer_epoch
                batch.base_sequence = self.next_sequence.get(tp, 0)
                self.next_sequence[tp] = (batch.base_sequence + batch.record_count) % 2**31
            request.batches.append(batch)
            request.size += batch.size
        for host_id in requests:
            self.in_flight_per_host[host_id] = self.in_flight_per_host.get(host_id, 0) + 1
        return list(requests.values()), unknown

    def request_done(self, host_id: str) -> None:
        """A request to the host was answered, timed out or never left."""
        self.in_flight_per_host[host_id] -= 1

    # ---- answers ---------------------------------------------------------------------------
    def on_error(self, batch: ProducerBatch, error: BaseException, now_ms: int,
                 closing: bool) -> Outcome:
        """A batch's answer was ``error``. A batch the broker finds too large is split; a
        retriable error is retried while retries and delivery.timeout.ms allow (and the
        producer is not closing); anything else fails the batch, and an idempotent batch
        that fails leaves a gap in its partition's sequence that cannot be closed: a new
        producer id is needed."""
        if isinstance(error, RecordTooLargeError) and batch.record_count > 1:
            return Outcome.SPLIT
        retriable = is_retriable(error) or isinstance(error, OutOfOrderSequenceNumberError)
        if (retriable and batch.attempts <= self.retries
                and now_ms - batch.created_ms < self.delivery_timeout_ms and not closing):
            return Outcome.RETRY
        if self.idempotent and batch.base_sequence >= 0 and not self.transactional:
            self.producer_id = self.producer_epoch = -1
            self.next_sequence.clear()
        return Outcome.FAIL
