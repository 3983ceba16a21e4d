"""The producer's sender thread (Kafka's Sender, the shell): it drains ready batches from the
accumulator into one request per leader replica host, sends them over the hosts' listeners
(``rafka.client.network_client``), waits for the answers and completes, retries, splits or
fails each batch as ``SenderState`` (``rafka.producer.sender``, the pure decisions) says.
InitProducerId is asked for without blocking the thread: until the id comes, only new
idempotent batches wait. A transactional producer's new partitions join its transaction
(AddPartitionsToTxn, asked by this thread) before their batches go; once the transaction
must abort, the batches not yet sent are failed (Kafka's abortUndrainedBatches).

The accumulator and its condition are shared with the application's threads (``send``,
``flush``); everything else here is the sender thread's alone.
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from actors.names import CONTROLLER
from actors.replica.channel import API_PRODUCE
from protocols.errors import (ClusterAuthorizationFailedError, KafkaError, KafkaTimeoutError,
                              NetworkError)
from protocols.messages import (ProduceManyRequest, ProduceResult,
                                decode_produce_many_response, produce_many_request_pieces)
from protocols.topics import TopicPartition
from rafka.client.metadata import ClientMetadata
from rafka.client.network_client import ClientRequest, NetworkClient
from rafka.client.throttle_sensor import ThrottleSensor
from rafka.producer.accumulator import ProducerBatch, RecordAccumulator
from rafka.producer.sender import Outcome, SenderState
from rafka.producer.transaction_manager import (State, TransactionAbortedError,
                                                TransactionManager, coordinator_error)

log = logging.getLogger(__name__)


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class SenderThread:
    def __init__(self, namespace: str, config: Mapping[str, Any], acks: int, idempotent: bool,
                 metadata: ClientMetadata, accumulator: RecordAccumulator,
                 cond: threading.Condition, transactions: TransactionManager | None = None,
                 txn_client: Any = None, door: Any = None):
        c = self.config = config
        self.namespace = namespace   # the cluster's: where the controller is looked up
        self.acks = acks
        self.metadata = metadata
        self.accumulator = accumulator
        self.cond = cond
        self.closed = False           # set by the producer's close, under ``cond``
        self._retry_backoff_s = c["retry.backoff.ms"] / 1000
        # The sender's decisions; only the sender thread touches it.
        self.state = SenderState(c["max.in.flight.requests.per.connection"],
                                 c["max.request.size"], idempotent, c["retries"],
                                 c["delivery.timeout.ms"],
                                 transactional=transactions is not None)
        # The transaction: shared with the application's threads, under ``cond``.
        self.transactions = transactions
        self.transactional_id = None if transactions is None else transactions.transactional_id
        self.txn_client = txn_client      # CoordinatorClient of the transactional id
        self._add_retry_at = 0.0
        self.in_flight: list[_InFlight] = []
        # The connections to leader hosts: the sender thread's alone (Kafka's NetworkClient).
        self.network = NetworkClient(door)
        # The throttle times the hosts answered (client quotas): produce-throttle-time-*.
        self.throttle = ThrottleSensor()
        # A guarded Ray door (rafka.client.ray_door): InitProducerId goes through it.
        self.door = door if door is not None and door.guarded else None
        self._producer_id_session: str | None = None
        self._producer_id_refused: KafkaError | None = None
        self.sending = 0   # drained from the accumulator, not yet in flight
        # InitProducerId, asked by the sender thread without blocking it: the request in
        # flight, and when to ask again after a failed one.
        self._producer_id_future: concurrent.futures.Future | None = None
        self._producer_id_retry_at = 0.0
        self.thread = threading.Thread(target=self.run, name="rafka-producer-sender",
                                       daemon=True)
        self.thread.start()

    def busy(self) -> bool:
        """Batches drained and not yet answered (call it holding ``cond``)."""
        return bool(self.sending or self.in_flight)

    def _maybe_init_producer_id(self) -> None:
        """Ask the controller for a producer id when the sender needs one (Kafka's
        InitProducerId), without waiting for it: only new idempotent batches wait for the
        answer. A controller that is not there or dies under the request is asked again
        after retry.backoff.ms."""
        import ray
        if self._producer_id_refused is not None:
            # Refused for good (not authorized): every batch fails with it, as in Kafka.
            with self.cond:
                for queue in self.accumulator.batches.values():
                    while queue:
                        self.fail(queue.popleft(), self._producer_id_refused)
            return
        if not self.state.needs_producer_id or self._producer_id_future is not None \
                or time.monotonic() < self._producer_id_retry_at:
            return
        try:
            if self.door is not None:
                self._producer_id_future, self._producer_id_session = self.door.submit(
                    "admin", "init_producer_id", [])
            else:
                controller = ray.get_actor(CONTROLLER, namespace=self.namespace)
                self._producer_id_future = controller.init_producer_id.remote().future()
            self._producer_id_future.add_done_callback(lambda _: self.network.wakeup())
        except Exception as e:   # no controller at the moment (an election)
            log.debug("InitProducerId: %r", e)
            self._producer_id_retry_at = time.monotonic() + self._retry_backoff_s

    def _producer_id_answered(self) -> None:
        future, self._producer_id_future = self._producer_id_future, None
        try:
            answer = future.result()
            if self.door is not None:
                answer = self.door.answer(answer, self._producer_id_session)
                if isinstance(answer, KafkaError):
                    raise answer
            self.state.set_producer_id(*answer)
        except ClusterAuthorizationFailedError as e:
            log.error("InitProducerId refused: %s", e)
            self._producer_id_refused = e
            self._producer_id_retry_at = float("inf")   # never asked again
        except Exception as e:   # the controller (or the door's broker) died under the request
            import ray
            if self.door is not None and isinstance(e, ray.exceptions.RayActorError):
                self.door.forget()
            log.info("InitProducerId failed: %r; asking again", e)
            self._producer_id_retry_at = time.monotonic() + self._retry_backoff_s
        with self.cond:
            self.cond.notify_all()

    def _maybe_add_partitions(self) -> None:
        """The transaction's new partitions join it (one AddPartitionsToTxn for them all),
        asked here so that their batches go as soon as it is answered. A transaction that
        must abort has its unsent batches failed instead."""
        txn = self.transactions
        with self.cond:
            if txn.state in (State.ABORTABLE_ERROR, State.ABORTING_TRANSACTION,
                             State.FATAL_ERROR):
                if self.accumulator.queued():
                    self._abort_undrained(txn.last_error)
                return
            if time.monotonic() < self._add_retry_at:
                return
            tps = txn.partitions_to_add()
            producer_id, epoch = txn.producer_id, txn.producer_epoch
        if not tps:
            return
        answer = coordinator_error(self.txn_client.call(
            "add_partitions_to_txn", self.transactional_id, producer_id, epoch,
            [(tp.topic, tp.partition) for tp in tps],
            deadline=time.monotonic() + self.config["request.timeout.ms"] / 1000))
        with self.cond:
            if txn.on_partitions_added(tps, answer):
                self._add_retry_at = time.monotonic() + self._retry_backoff_s
            elif answer is not None:
                log.warning("transactional id %s: AddPartitionsToTxn failed: %r",
                            self.transactional_id, answer)
            self.cond.notify_all()

    def _abort_undrained(self, error: BaseException | None) -> None:
        """Fail every batch not yet sent (call it holding ``cond``)."""
        error = error or TransactionAbortedError(
            "Failing batch since transaction was aborted")
        for queue in self.accumulator.batches.values():
            while queue:
                batch = queue.popleft()
                batch.closed = True     # no record joins it any more
                self.fail(batch, error)
        self.cond.notify_all()

    def run(self) -> None:
        while True:
            self._maybe_init_producer_id()
            if self.transactions is not None:
                self._maybe_add_partitions()
            with self.cond:
                if self.closed and not self.in_flight:
                    self.network.close()
                    return
                now = now_ms()
                for batch in self.accumulator.expired(now):
                    error = KafkaTimeoutError(
                        f"Expiring {batch.record_count} record(s) for {batch.tp}: "
                        f"{now - batch.created_ms} ms has passed since batch creation "
                        "(delivery.timeout.ms)")
                    self.fail(batch, error)
                    if self.transactions is not None:
                        self.transactions.on_batch_failed(error, batch.base_sequence >= 0)
                ready, next_ms = self.accumulator.ready(now)
                to_send = self._drain(ready) if not self.closed else []
                self.sending += len(to_send)
            for request in to_send:
                self._send_request(request)
                with self.cond:
                    self.sending -= 1
            pid_future = self._producer_id_future
            if self.in_flight or pid_future is not None:
                wait_s = 0.002 if next_ms is None else max(0.0, min(0.05, (next_ms - now) / 1000))
                answered = self.network.poll(0 if pid_future is not None and pid_future.done()
                                              else wait_s)
                if pid_future is not None and pid_future.done():
                    self._producer_id_answered()
                if answered:
                    self._complete(set(answered))
                self._expire_requests()
            else:
                if self.acks == 0:
                    self.network.poll(0)   # drop the answers no one waits for
                with self.cond:
                    if not self.closed and (self.state.needs_producer_id
                                             or not self.accumulator.ready(now_ms())[0]):
                        # Waiting for a linger deadline, a send, or (without a producer
                        # id) the next InitProducerId attempt.
                        wait_s = 0.1 if next_ms is None else max(0.0, (next_ms - now) / 1000)
                        if self.state.needs_producer_id:
                            wait_s = min(wait_s, max(0.001, self._producer_id_retry_at
                                                     - time.monotonic()))
                        self.cond.wait(wait_s)
                    elif self.transactions is not None and not to_send and not self.closed:
                        # Ready batches whose partitions are still joining the transaction.
                        self.cond.wait(max(0.001, min(0.05, self._add_retry_at
                                                      - time.monotonic())))

    def _drain(self, ready: list[TopicPartition]) -> list:
        """``SenderState.drain`` over the accumulator; a partition without a known leader
        has its metadata refreshed. Metadata that cannot be had (no controller answers: an
        election, a partitioned network) leaves this round's partitions waiting, their
        batches in the accumulator until delivery.timeout.ms, rather than ending the thread."""
        unavailable: list[KafkaError] = []

        def leader_of(tp: TopicPartition):
            if unavailable:
                return None
            try:
                leader = self.metadata.leader(tp)
            except KafkaError as e:
                unavailable.append(e)
                log.info("producer metadata unavailable: %r; retrying", e)
                return None
            return None if leader is None else (leader.handle.host_id, leader.handle.host)
        allowed = None if self.transactions is None else self.transactions.send_allowed
        requests, unknown = self.state.drain(ready, leader_of, self.accumulator, allowed)
        for tp in unknown:
            self.metadata.forget(tp)
        return requests

    def _send_request(self, request) -> None:
        c = self.config
        partitions = []
        for batch in request.batches:
            data = batch.builder.build_parts(compression=c["compression.type"],
                                             producer_id=batch.producer_id,
                                             producer_epoch=batch.producer_epoch,
                                             base_sequence=batch.base_sequence,
                                             transactional=self.transactional_id is not None)
            batch.attempts += 1
            partitions.append((batch.tp.topic, batch.tp.partition, data))
        produce = ProduceManyRequest(self.acks, c["request.timeout.ms"], tuple(partitions),
                                     self.transactional_id, c["client.id"])
        try:
            future = self.network.send(request.host_id, request.host, API_PRODUCE,
                                        produce_many_request_pieces(produce),
                                        expect_answer=self.acks != 0)
        except Exception as e:  # no connection to the host: retry through fresh metadata
            self.state.request_done(request.host_id)
            for batch in request.batches:
                self._retry_or_fail(batch, NetworkError(repr(e)))
            return
        if self.acks == 0:
            # Fire and forget, as Kafka's acks=0: no answer is awaited, offsets are unknown.
            self.state.request_done(request.host_id)
            for batch in request.batches:
                self._succeed(batch, None)
            return
        self.in_flight.append(_InFlight(future, request.batches, request.host_id,
                                         time.monotonic()))

    def _complete(self, done: set[ClientRequest]) -> None:
        finished = [e for e in self.in_flight if e.request in done]
        for entry in finished:
            try:
                answered, throttle_ms = decode_produce_many_response(entry.request.result())
                results = [r for _, _, r in answered]
                self.throttle.record(throttle_ms)
            except Exception as e:  # the leader's host died mid-request
                results = [ProduceResult(error=NetworkError(f"{type(e).__name__}: {e}"))
                           ] * len(entry.batches)
            self.state.request_done(entry.host_id)
            for batch, result in zip(entry.batches, results):
                if result.error is None:
                    self._succeed(batch, result)
                else:
                    self._retry_or_fail(batch, result.error)
            # Only now: flush() returns once nothing is in flight, callbacks included.
            self.in_flight.remove(entry)
        with self.cond:
            self.cond.notify_all()

    def _expire_requests(self) -> None:
        """A request unanswered for request.timeout.ms is retried (its late answer, if any,
        is a duplicate the idempotent leader recognises)."""
        timeout = self.config["request.timeout.ms"] / 1000
        now = time.monotonic()
        stale = [e for e in self.in_flight if now - e.sent > timeout]
        for entry in stale:
            self.network.abandon(entry.request)
            self.state.request_done(entry.host_id)
            for batch in entry.batches:
                self._retry_or_fail(batch, KafkaTimeoutError(
                    f"Expiring {batch.record_count} record(s) for {batch.tp}: no answer "
                    "within request.timeout.ms"))
            self.in_flight.remove(entry)

    def _split(self, batch: ProducerBatch) -> None:
        """The topic's max.message.bytes is below this batch: send its records in halves
        (again if need be); only a single record too large fails."""
        log.info("%s: splitting a batch of %d records the broker found too large",
                 batch.tp, batch.record_count)
        with self.cond:
            parts = self.accumulator.split_and_reenqueue(batch, now_ms())
            batch.result.split_into([(start, part.result) for start, part in parts])
            self.cond.notify_all()

    def _succeed(self, batch: ProducerBatch, result) -> None:
        with self.cond:
            self.accumulator.release(batch)
            self.cond.notify_all()
        if result is None:      # acks=0: no answer, no offsets
            batch.result.complete(-1, -1, None)
        else:
            batch.result.complete(result.base_offset, result.log_append_time, None)

    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException) -> None:
        """``SenderState.on_error`` decides; this does it."""
        now = now_ms()
        outcome = self.state.on_error(batch, error, now, self.closed)
        if outcome is Outcome.SPLIT:
            self._split(batch)
        elif outcome is Outcome.RETRY:
            self.metadata.forget(batch.tp)
            with self.cond:
                self.accumulator.reenqueue(batch, now + self.config["retry.backoff.ms"])
                self.cond.notify_all()
        else:
            self.fail(batch, error)
            if self.transactions is not None:
                with self.cond:
                    self.transactions.on_batch_failed(error, batch.base_sequence >= 0)

    def fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self.accumulator.release(batch)
        batch.result.complete(-1, -1, error)


@dataclass(eq=False)
class _InFlight:
    """One produce request awaiting its answer: its batches, in the request's order."""
    request: ClientRequest
    batches: list[ProducerBatch]
    host_id: str
    sent: float  # time.monotonic()
