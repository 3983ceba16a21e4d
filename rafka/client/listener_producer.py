"""Records sent as Kafka's producer sends them, over the cluster's Kafka listener, for a
process that writes without Ray: a Spark task writing the rows of a job that names the
cluster by ``kafka.bootstrap.servers`` alone (``rafka.spark.sink``).

Many records at a time, as Arrow columns: ``send_batch`` cuts and encodes them as
``Producer.send_batch`` does (``rafka.producer.arrow_plan``: murmur2 of the key, else the
sticky partition; batches filled to ``batch.size`` when set, else to just under a topic's
default max.message.bytes, never past ``max.request.size``), and
``flush`` sends each partition's batches to its leader with Produce (v9, topic names; one
batch per partition in a request, Kafka's rule since v3), every leader's request out before
any answer is read, until each is acknowledged. Idempotent unless told otherwise, as
Kafka's producer (``enable.idempotence`` with ``acks=all``): a producer id from
InitProducerId and a sequence per partition, so a batch sent again after a lost answer or a
leader change is written once. Retriable errors are retried for ``delivery.timeout.ms``; a
batch the broker finds too large (a topic's smaller ``max.message.bytes``) is split in two
and sent again, each half with its records' sequences, as Kafka's sender splits it.
With ``transactional.id``, Kafka's transactional producer (``init_transactions``,
``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
``abort_transaction``; the coordinators' calls in ``rafka.client.listener_transactions``): a
Spark task's exactly-once write by ``kafka.bootstrap.servers`` alone.
PLAINTEXT only (``rafka.client.listener_client``).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from itertools import islice
from dataclasses import dataclass
from typing import Any, Mapping

from protocols.arrow_records import as_binary, timestamp_column
from protocols.errors import (DuplicateSequenceNumberError, IllegalStateError,
                              InvalidConfigError, KafkaError, KafkaTimeoutError, NetworkError,
                              OutOfOrderSequenceNumberError, RecordTooLargeError,
                              error_for_code)
from protocols.kafka.api_keys import ApiKey
from protocols.partitioner import StickyPartitionCache
from protocols.records import MemoryRecordsBuilder
from protocols.topics import TopicPartition
from rafka.client.listener_client import ListenerClient
from rafka.client.listener_transactions import ListenerTransactions
from rafka.producer.arrow_plan import (bulk_batch_size, encoded_batches, encoded_header_field,
                                       plan_batches, record_sizes)
from rafka.producer.config import ACKS, PRODUCER_CONFIG, idempotence
from rafka.producer.transaction_manager import State, TransactionAbortedError

PRODUCE_VERSION = 9
INIT_PRODUCER_ID_VERSION = 4

log = logging.getLogger(__name__)


class SentBatch:
    """``send_batch``'s records: ``result()`` is their count once ``flush`` has had every
    batch acknowledged, or raises the error that failed one."""

    def __init__(self, count: int, batches: int):
        self.count = count
        self._pending = batches
        self._error: BaseException | None = None

    def _done(self, error: BaseException | None = None) -> None:
        self._pending -= 1
        if error is not None and self._error is None:
            self._error = error

    def result(self, timeout: float | None = None) -> int:
        if self._error is not None:
            raise self._error
        if self._pending:
            raise KafkaTimeoutError(f"{self._pending} batch(es) not acknowledged yet: "
                                    "call flush() first")
        return self.count


@dataclass(eq=False)
class _Batch:
    tp: TopicPartition
    builder: MemoryRecordsBuilder
    sent: SentBatch
    records: bytes | None = None   # built once, with its sequence, then sent as it is
    sequence: int | None = None    # its first record's, once given (idempotence)
    # When a flush round first could send it: delivery.timeout.ms runs from then
    # (``send_batch`` only queues, so a task still reading its input does not use up its
    # batches' time).
    first_sent: float | None = None


class ListenerProducer(ListenerClient):
    """``send_batch`` and ``flush`` over one cluster's Kafka listeners."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any] | None = None):
        c = self.config = PRODUCER_CONFIG.parse(config or {})
        given = {PRODUCER_CONFIG.normalize_name(k) for k in (config or {})}
        super().__init__(bootstrap_servers, c["request.timeout.ms"] / 1000,
                         c["client.id"] or "rafka-producer")
        self.acks = ACKS[c["acks"]]
        self.idempotent = idempotence(c, given)
        self.transactional_id = c["transactional.id"] or None
        if self.transactional_id is not None and not self.idempotent:
            raise InvalidConfigError("Cannot set a transactional.id without also enabling "
                                     "idempotence.")
        self._batch_size = bulk_batch_size(c, given)
        self._sticky = StickyPartitionCache()
        self._queued: dict[TopicPartition, deque[_Batch]] = {}
        self._queued_bytes = 0
        self._producer_id, self._epoch = -1, -1
        self._sequences: dict[TopicPartition, int] = {}
        self._counted_at: dict[str, float] = {}   # when each topic's partitions were counted
        self._txn = None if self.transactional_id is None else \
            ListenerTransactions(self, self.transactional_id, c["transaction.timeout.ms"])

    # ---- the producer's calls ---------------------------------------------------------------
    def send_batch(self, topic: str, values, keys=None, partition: int | None = None,
                   timestamps=None, headers=None) -> SentBatch:
        """Queue the records (``Producer.send_batch``'s arguments: Arrow arrays or
        sequences of bytes; ``headers`` per record or Spark's headers column); sent by
        ``flush``, or at once when what is queued passes ``buffer.memory``."""
        c = self.config
        if self._txn is not None:
            self._txn.txn.check_send()
        value_array = as_binary(values)
        count = len(value_array)
        if count == 0:
            return SentBatch(0, 0)
        key_array = None if keys is None else as_binary(keys, count)
        stamps = timestamp_column(timestamps, count, time.time_ns() // 1_000_000)
        encoded_headers = encoded_header_field(headers, count)
        sizes = record_sizes(value_array, key_array, encoded_headers, c["max.request.size"])
        deadline = time.monotonic() + c["max.block.ms"] / 1000
        partitions = list(range(self._partition_count(topic, deadline)))
        plan = plan_batches(topic, partitions, partition, key_array, sizes,
                            batch_size=self._batch_size,
                            max_request_size=c["max.request.size"],
                            ignore_keys=c["partitioner.ignore.keys"], sticky=self._sticky)
        sent = SentBatch(count, len(plan))
        for p, _, builder in encoded_batches(plan, sizes, value_array, key_array, stamps,
                                             encoded_headers):
            tp = TopicPartition(topic, p)
            if self._txn is not None:
                self._txn.txn.maybe_add_partition(tp)
            self._queued.setdefault(tp, deque()).append(_Batch(tp, builder, sent))
            self._queued_bytes += builder.size_in_bytes
        if self._queued_bytes > c["buffer.memory"]:
            self.flush()
        return sent

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until each batch is acknowledged (or, acks=0,
        written to its leader's socket); the first batch that fails raises its error
        (what is queued behind it is dropped: its sequences would no longer follow, and a
        transaction it was in can only abort). ``timeout`` (seconds): KafkaTimeoutError
        when it passes, what is queued kept to be sent by the next call."""
        c = self.config
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while self._queued:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                self._send_round(c)
        except BaseException as e:
            self.discard(e)
            raise
        if self._queued:
            raise KafkaTimeoutError(f"Flush did not finish within {timeout} s")

    def discard(self, cause: BaseException | None = None) -> None:
        """Drop what is queued and not acknowledged (a write that failed): its calls fail
        with ``cause``; the connections are closed (answers may be left unread on them).
        The sequences may then have a gap, so the next batch starts a new producer id (a
        transactional producer's abort bumps its epoch instead)."""
        error = cause if cause is not None else KafkaError(
            "Not acknowledged: the write was abandoned")
        if self._txn is not None and self._queued:
            # Records of the transaction were dropped: it must not commit without them, and
            # a sent one left a gap in its partition's sequence that only the abort's new
            # epoch closes.
            txn = self._txn.txn
            sequenced = any(b.sequence is not None for q in self._queued.values() for b in q)
            if txn.state in (State.IN_TRANSACTION, State.COMMITTING_TRANSACTION):
                txn.on_batch_failed(error if isinstance(error, KafkaError)
                                    else KafkaError(repr(error)), sequenced)
            elif txn.state is State.ABORTABLE_ERROR and sequenced:
                txn.epoch_bump_required = True
        self._fail_queued(error)
        if self._txn is None:
            self._producer_id, self._epoch = -1, -1
            self._sequences.clear()
        super().close()

    def close(self) -> None:
        """Send what is queued (as Kafka's producer's close does), then close; a
        transactional producer's open transaction is aborted instead, and a commit under
        way finished, as Kafka's producer does (``ListenerTransactions.close``)."""
        try:
            if self._txn is None:
                self.flush()
                return
            try:
                self._txn.close(10.0)
            except (KafkaError, OSError) as e:
                log.warning("transactional id %s: the transaction could not be ended on "
                            "close: %r", self.transactional_id, e)
            self._fail_queued(KafkaError("Producer closed forcefully"))
        finally:
            super().close()

    # ---- transactions (Kafka's KafkaProducer transactional API) ---------------------------
    def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id`` with its coordinator: a producer id and a new
        epoch, fencing every older producer with the same id (its open transaction is
        aborted, or completed if it was committing). ``timeout`` in seconds (default
        max.block.ms)."""
        self._transactions().init(timeout)

    def begin_transaction(self) -> None:
        self._transactions().begin()

    def send_offsets_to_transaction(self, offsets: Mapping, group_metadata: Any,
                                    timeout: float | None = None) -> None:
        """Commit the group's ``offsets`` (``{tp: offset or OffsetAndMetadata}``) in this
        transaction: they count only if it commits. ``group_metadata``: the consumer's
        ``ConsumerGroupMetadata`` (its group's coordinator then refuses the offsets of a
        member the group has moved past: CommitFailedError), or a group id."""
        from rafka.consumer.coordinator import ConsumerGroupMetadata
        group = group_metadata if isinstance(group_metadata, ConsumerGroupMetadata) \
            else ConsumerGroupMetadata(str(group_metadata))
        self._transactions().send_offsets(offsets, group, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every record of the transaction, then commit it; raises the error that
        made it abortable (then call ``abort_transaction``)."""
        self._transactions().commit(timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent are dropped (their calls fail with
        TransactionAbortedError), those sent are never shown to read_committed readers."""
        self._transactions().abort(timeout)

    def _transactions(self) -> ListenerTransactions:
        if self._txn is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional "
                                    "producer.")
        return self._txn

    def _fail_queued(self, error: BaseException | None) -> None:
        error = error if error is not None else TransactionAbortedError(
            "Failing batch since transaction was aborted")
        for q in self._queued.values():
            for b in q:
                b.sent._done(error)
        self._queued.clear()
        self._queued_bytes = 0

    def _use_producer_id(self, producer_id: int, epoch: int) -> None:
        """The producer id and epoch (a new epoch starts the sequences: a batch still
        queued is given its sequence, and built, again)."""
        self._producer_id, self._epoch = producer_id, epoch
        self._sequences.clear()
        for q in self._queued.values():
            for b in q:
                b.sequence = b.records = None

    # ---- a round of requests ----------------------------------------------------------------
    def _send_round(self, c) -> None:
        """The first queued batches of every partition to its leader, then every answer."""
        now = time.monotonic()
        for q in self._queued.values():
            b = q[0]
            if b.first_sent is None:
                # Its time runs from the first round that could send it (a leader not known
                # yet, a partition not yet in the transaction: it still expires).
                b.first_sent = now
            elif now - b.first_sent > c["delivery.timeout.ms"] / 1000:
                raise KafkaTimeoutError(
                    f"Expiring {b.builder.count} record(s) for {b.tp.topic}-{b.tp.partition}:"
                    f"{int((now - b.first_sent) * 1000)} ms has passed since batch creation")
        request_timeout_s = c["request.timeout.ms"] / 1000
        deadline = now + request_timeout_s
        txn = self._txn
        if txn is not None:
            txn.raise_if_failed()
            txn.add_partitions(deadline)   # their batches wait until they are in it
            txn.raise_if_failed()          # as AddPartitionsToTxn may have answered
        elif self.idempotent and self._producer_id < 0:
            self._init_producer_id(deadline)
            if self._producer_id < 0:   # no broker could give one yet
                time.sleep(c["retry.backoff.ms"] / 1000)
                return
        unknown = {tp.topic for tp in self._queued if self._leaders.get(tp) not in self._brokers}
        if unknown:
            try:
                self._metadata(unknown, deadline)
            except (OSError, KafkaError) as e:
                if isinstance(e, KafkaError) and not e.retriable:
                    raise
        # Up to max.in.flight.requests.per.connection requests per leader: the k-th holds
        # the k-th queued batch of each of its partitions (Kafka's rule: one batch per
        # partition in a request), within max.request.size.
        in_flight = c["max.in.flight.requests.per.connection"]
        requests: dict[int, list[list[_Batch]]] = {}
        for tp, q in self._queued.items():
            leader = self._leaders.get(tp)
            if leader not in self._brokers or (txn is not None and not txn.partition_ready(tp)):
                continue
            mine = requests.setdefault(leader, [])
            for k, b in enumerate(islice(q, in_flight)):
                if k == len(mine):
                    mine.append([])
                mine[k].append(b)
        sent: list[tuple[int, int, float, list[_Batch]]] = []
        for leader, batches_of in requests.items():
            # A partition whose batch did not fit a request sends none after it this round:
            # its batches go out in order.
            held: set[TopicPartition] = set()
            for batches in batches_of:
                taken, size = [], 0
                for b in batches:
                    if b.tp in held:
                        continue
                    if taken and size + b.builder.size_in_bytes > c["max.request.size"]:
                        held.add(b.tp)
                        continue
                    taken.append(b)
                    size += b.builder.size_in_bytes
                if not taken:
                    break
                answer_by = time.monotonic() + request_timeout_s
                try:
                    sent.append((leader, self._send(
                        self._brokers[leader], ApiKey.PRODUCE, PRODUCE_VERSION,
                        self._produce_request(taken), answer_by), answer_by, taken))
                except OSError:
                    self._forget(b.tp for b in taken)
                    break
        progress = False
        refused: set[TopicPartition] = set()   # a batch not written: the later ones follow it
        for leader, correlation_id, answer_by, taken in sent:
            if self.acks == 0:   # no answer comes (Kafka's rule): written is done
                for b in taken:
                    self._acknowledged(b)
                progress = True
                continue
            try:
                body = self._receive(self._brokers[leader], ApiKey.PRODUCE, PRODUCE_VERSION,
                                     correlation_id, answer_by)
            except OSError:
                self._forget(b.tp for b in taken)
                refused.update(b.tp for b in taken)
                continue
            answered = {(t.name, int(p.index)): p for t in body.responses
                        for p in t.partition_responses}
            for b in taken:
                p = answered.get((b.tp.topic, b.tp.partition))
                code = NetworkError.code if p is None else p.error_code.value
                if code in (0, DuplicateSequenceNumberError.code):
                    self._acknowledged(b)
                    progress = True
                    continue
                if code == OutOfOrderSequenceNumberError.code and b.tp in refused:
                    continue   # behind a batch to be sent again: sent again after it
                if code == RecordTooLargeError.code and b.builder.count > 1:
                    self._split(b)
                    refused.add(b.tp)
                    progress = True
                    continue
                message = p.error_message if p is not None else None
                error = error_for_code(code, f"Produce to {b.tp.topic}-{b.tp.partition} at "
                                             f"broker {leader}"
                                       + (f": {message}" if message else ""))
                if not error.retriable:
                    raise error
                refused.add(b.tp)
                self._forget([b.tp])   # its leader learnt again; the same bytes sent again
        if not progress:
            time.sleep(c["retry.backoff.ms"] / 1000)

    def _split(self, b: _Batch) -> None:
        """The broker refused ``b`` as too large (MESSAGE_TOO_LARGE; Kafka's
        splitAndReenqueue): its records go back in its place as two batches, each record
        keeping its sequence, so the partition's order and idempotence hold; halved again
        if still too large."""
        log.info("splitting a batch of %d records for %s-%d the broker found too large",
                 b.builder.count, b.tp.topic, b.tp.partition)
        records = b.builder.records()
        half = len(records) // 2
        parts = []
        for start, chunk in ((0, records[:half]), (half, records[half:])):
            builder = MemoryRecordsBuilder()
            for _delta, timestamp, key, value, headers in chunk:
                builder.append(timestamp, key, value, headers)
            parts.append(_Batch(b.tp, builder, b.sent, first_sent=b.first_sent,
                                sequence=None if b.sequence is None
                                else (b.sequence + start) & 0x7FFFFFFF))
        q = self._queued[b.tp]
        i = q.index(b)
        del q[i]
        q.insert(i, parts[1])
        q.insert(i, parts[0])
        b.sent._pending += 1
        self._queued_bytes += sum(p.builder.size_in_bytes for p in parts) \
            - b.builder.size_in_bytes

    def _acknowledged(self, b: _Batch) -> None:
        q = self._queued[b.tp]
        q.remove(b)   # the head, but for a batch written past one to be sent again (acks=1)
        if not q:
            del self._queued[b.tp]
        self._queued_bytes -= b.builder.size_in_bytes
        b.sent._done()

    def _produce_request(self, batches: list[_Batch]) -> dict:
        c = self.config
        by_topic: dict[str, list] = {}
        now = time.monotonic()
        for b in batches:
            if b.first_sent is None:
                b.first_sent = now
            if b.records is None:
                if self.idempotent and b.sequence is None:
                    b.sequence = self._sequences.get(b.tp, 0)
                    self._sequences[b.tp] = (b.sequence + b.builder.count) & 0x7FFFFFFF
                b.records = b.builder.build(
                    compression=c["compression.type"], producer_id=self._producer_id,
                    producer_epoch=self._epoch,
                    base_sequence=-1 if b.sequence is None else b.sequence,
                    transactional=self._txn is not None)
            by_topic.setdefault(b.tp.topic, []).append(
                {"index": b.tp.partition, "records": b.records})
        return {"transactional_id": self.transactional_id, "acks": self.acks,
                "timeout": c["request.timeout.ms"],
                "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()]}

    def _init_producer_id(self, deadline: float) -> None:
        """A producer id and epoch from any broker (Kafka's InitProducerId without a
        transactional id)."""
        values = {"transactional_id": None, "transaction_timeout": 60_000,
                  "producer_id": -1, "producer_epoch": -1}
        try:
            body = self._ask_any(ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, values,
                                 deadline)
        except NetworkError:
            return   # asked again next round
        code = body.error_code.value
        if code != 0:
            error = error_for_code(code, "InitProducerId")
            if error.retriable:
                return
            raise error
        self._use_producer_id(int(body.producer_id), int(body.producer_epoch))

    def _partition_count(self, topic: str, deadline: float) -> int:
        """The topic's partition count, asked again once ``metadata.max.age.ms`` old (a
        producer kept by a streaming query's worker sees partitions added later)."""
        if time.monotonic() - self._counted_at.get(topic, -1e9) \
                > self.config["metadata.max.age.ms"] / 1000:
            self._counts.pop(topic, None)
        while True:
            try:
                count = self._counts.get(topic)
                if not count:
                    count = self._metadata([topic], deadline).get(topic)
                    self._counted_at[topic] = time.monotonic()
            except (OSError, KafkaError) as e:
                if isinstance(e, KafkaError) and not e.retriable:
                    raise
                count = None
            if count:
                return count
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after "
                                        f"{self.config['max.block.ms']} ms.")
            time.sleep(self.config["retry.backoff.ms"] / 1000)
