"""``rafka.Producer``: Kafka's producer on Ray actor handles.

    with rafka.Producer(cluster, {"acks": "all", "linger.ms": 5}) as producer:
        future = producer.send("events", b"value", key=b"user-1")
        metadata = future.result(timeout=10)     # RecordMetadata(topic, partition, offset, ...)

The pipeline is Kafka's: serializers, the partitioner (murmur2 of the key, sticky for null
keys), the RecordAccumulator (``batch.size``, ``linger.ms``, ``buffer.memory`` with
``max.block.ms``), and a sender thread that drains ready batches into one request per leader
replica host (Kafka's ProduceRequest: the first batch of every ready partition the host
leads, up to ``max.request.size``, answered per partition; sent over the host's listener,
``rafka.client.network_client``) with at most
``max.in.flight.requests.per.connection`` requests in flight per host, retrying retriable
errors (refreshing metadata when the leader moved) with ``retry.backoff.ms`` until
``delivery.timeout.ms``. With ``enable.idempotence`` (Kafka's
default) the cluster hands out a producer id; each partition's batches carry consecutive
sequence numbers, so a retry is never written twice and order holds with 5 in flight.

The sender's decisions (what to drain, sequence numbers, in-flight limits, retry or fail,
when a producer id is needed) are ``rafka.producer.sender.SenderState``'s; the sender thread
(``rafka.producer.sender_thread``) sends, waits and reports. ``send_batch``'s partitioning and
batching of Arrow columns is ``rafka.producer.arrow_plan``'s.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from protocols.arrow_records import as_binary, timestamp_column
from protocols.errors import (IllegalStateError, InvalidConfigError, KafkaError,
                              KafkaTimeoutError, RecordTooLargeError)
from protocols.partitioner import StickyPartitionCache, partition_for_key
from protocols.topics import TRANSACTION_KEY_TYPE, TopicPartition
from rafka.client.metadata import ClientMetadata
from rafka.client.ray_door import RayDoor
from rafka.client.serde import serializer
from rafka.producer.accumulator import RECORD_OVERHEAD, RecordAccumulator, estimate_size
from rafka.producer.arrow_plan import (bulk_batch_size, encoded_batches, encoded_header_field,
                                       plan_batches, record_sizes)
from rafka.producer.config import ACKS, PRODUCER_CONFIG, idempotence
from rafka.producer.futures import BatchSendFuture, FutureRecordMetadata, failed_future
from rafka.producer.sender_thread import SenderThread, now_ms
from rafka.producer.transaction_manager import State as TxnState
from rafka.producer.transaction_manager import TransactionManager
from rafka.producer.transactions import Transactions, coordinator_client

log = logging.getLogger(__name__)

class Producer:
    def __init__(self, cluster, config: Mapping[str, Any] | None = None, **kwargs: Any):
        c = self.config = PRODUCER_CONFIG.parse(config, **kwargs)
        given = {PRODUCER_CONFIG.normalize_name(k) for k in {**(config or {}), **kwargs}}
        self.acks = ACKS[c["acks"]]
        self.idempotent = idempotence(c, given)
        self.transactional_id = c["transactional.id"] or None
        if self.transactional_id is not None and not self.idempotent:
            raise InvalidConfigError("Cannot set a transactional.id without also enabling "
                                     "idempotence.")
        self.cluster = cluster
        # Who it is at the Ray door (its SASL settings): checked on a cluster with an
        # authorizer.
        self.door = RayDoor(cluster, c, c["request.timeout.ms"] / 1000)
        self.door.sign_in()
        self.metadata = ClientMetadata(cluster, c["metadata.max.age.ms"], self.door)
        self._partitions_by_topic = self.metadata.partitions_by_topic
        self._key_ser = serializer(c["key.serializer"], "key.serializer")
        self._value_ser = serializer(c["value.serializer"], "value.serializer")
        self._value_ser_default = c["value.serializer"] is None
        self._max_request_size = c["max.request.size"]
        self._max_block_ms = c["max.block.ms"]
        self._ignore_keys = c["partitioner.ignore.keys"]
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        # A batch never outgrows one request; one the broker still finds too large
        # (MESSAGE_TOO_LARGE under a topic's smaller max.message.bytes) is split and sent
        # again (``SenderThread._split``), as Kafka's sender does.
        self.accumulator = RecordAccumulator(min(c["batch.size"], c["max.request.size"]),
                                             c["linger.ms"], c["buffer.memory"],
                                             c["delivery.timeout.ms"], now_ms)
        self._bulk_batch_size = bulk_batch_size(c, given)
        self.sticky = StickyPartitionCache()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._closed = False
        # The transaction's state (``transaction_manager``), shared with the sender thread
        # under ``self._lock``, and the calls to its coordinators (``transactions``).
        self._txn = None if self.transactional_id is None else \
            TransactionManager(self.transactional_id, c["transaction.timeout.ms"])
        txn_client = None if self._txn is None else coordinator_client(
            cluster, self.metadata, self.transactional_id, c, TRANSACTION_KEY_TYPE, self.door)
        self._sender = SenderThread(cluster.namespace, c, self.acks, self.idempotent,
                                    self.metadata, self.accumulator, self._cond,
                                    self._txn, txn_client, self.door)
        self._txn_calls = None if self._txn is None else Transactions(
            self, self._txn, txn_client)

    # ---- the application's side ------------------------------------------------------------
    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
             timestamp: int | None = None, headers: Any = None) -> FutureRecordMetadata:
        """Queue one record; the future resolves to its RecordMetadata (or the error)."""
        if self._closed:
            raise KafkaError("Cannot send after the producer is closed.")
        # bytes pass through the default serializers untouched: the common case, made cheap.
        value_bytes = value if type(value) is bytes and self._value_ser_default \
            else self._value_ser(value)
        key_bytes = None if key is None else self._key_ser(key)
        if not headers:
            header_list: tuple = ()
        else:
            pairs = headers.items() if hasattr(headers, "items") else headers
            header_list = tuple((k, self._value_ser(v)) for k, v in pairs)
        ts = time.time_ns() // 1_000_000 if timestamp is None else int(timestamp)
        # estimate_size's sum, inlined for the header-less record: send runs per record.
        size = estimate_size(key_bytes, value_bytes, header_list) if header_list else \
            RECORD_OVERHEAD + (len(key_bytes) if key_bytes else 0) + \
            (len(value_bytes) if value_bytes else 0)
        if size > self._max_request_size:
            return failed_future(RecordTooLargeError(
                f"The message is {size} bytes when serialized which is larger than "
                f"{self._max_request_size}, the value of max.request.size."), topic)
        # ClientMetadata.cached_partitions, inlined: send runs per record.
        cached = self._partitions_by_topic.get(topic)
        partitions = cached[1] if cached is not None and cached[0] is self.metadata.image \
            else self.metadata.partitions_for(topic, self._max_block_ms)
        sticky = False
        if partition is not None:
            if partition not in partitions:
                raise KafkaError(f"Invalid partition given with record: {partition} is not in "
                                 f"the range [0...{len(partitions)}].")
        elif key_bytes is not None and not self._ignore_keys:
            partition = partition_for_key(key_bytes, len(partitions))
        else:
            sticky = True
            partition = self.sticky.current.get(topic)
            if partition is None:
                partition = self.sticky.partition(topic, partitions, len(partitions))
        tp = self._tps.get((topic, partition))
        if tp is None:
            tp = self._tps[(topic, partition)] = TopicPartition(topic, partition)
        accumulator = self.accumulator
        with self._lock:
            if self._txn is not None:
                self._txn.check_send()
                self._txn.maybe_add_partition(tp)
            used = accumulator.used_bytes
            if used and used + size > accumulator.buffer_memory:
                self._wait_for_room(size)
            new_batch, batch, index = accumulator.append(tp, ts, key_bytes, value_bytes,
                                                         header_list, size)
            if new_batch:
                if sticky and len(accumulator.batches[tp]) > 1:
                    # The sticky partition's batch filled up: the next records go elsewhere.
                    self.sticky.next_partition(topic, partitions, len(partitions), partition)
                self._cond.notify_all()   # the sender has a new linger deadline to honour
        return _new_future(FutureRecordMetadata, (
            batch.result, index, topic, partition, ts,
            len(key_bytes) if key_bytes is not None else -1,
            len(value_bytes) if value_bytes is not None else -1))

    def send_batch(self, topic: str, values: Any, keys: Any = None,
                   partition: int | None = None, timestamps: Any = None,
                   headers: Any = None) -> BatchSendFuture:
        """Queue many records at once: ``values`` (and ``keys``) as Arrow binary or string
        arrays or sequences of bytes, str or None; ``timestamps`` None (now), one int, or one
        per record. Records are partitioned as ``send`` partitions them (the partition
        given; else murmur2 of the key; else the sticky partition, moving on with each full
        batch) and encoded column by column into whole batches filled up to ``batch.size``,
        or to just under a topic's default max.message.bytes when batch.size is not set
        (``arrow_plan.BULK_BATCH_BYTES``), never past max.request.size, with every other
        producer setting applying as for ``send``. Returns
        one future; its result is a ``pyarrow.Table`` of each record's partition, offset and
        timestamp, in the order given. ``headers``: None, or per record a list of
        ``(key, value)`` pairs or None, or an Arrow list of (key, value) structs (Spark's
        headers column), encoded column by column too."""
        if self._closed:
            raise KafkaError("Cannot send after the producer is closed.")
        if self._txn is not None:
            with self._lock:
                self._txn.check_send()
        if not self._value_ser_default:
            values = [self._value_ser(v) for v in _python_values(values)]
        value_array = as_binary(values)
        count = len(value_array)
        if count == 0:
            return BatchSendFuture(topic, 0, np.zeros(0, np.int64), [])
        key_array = None
        if keys is not None:
            if self.config["key.serializer"] is not None:
                keys = [None if k is None else self._key_ser(k) for k in _python_values(keys)]
            key_array = as_binary(keys, count)
        stamps = timestamp_column(timestamps, count, time.time_ns() // 1_000_000)
        if headers is not None and not isinstance(headers, (pa.Array, pa.ChunkedArray)):
            # As ``send`` takes them: pairs or a mapping, values through the serializer.
            headers = [None if h is None else
                       [(k, self._value_ser(v))
                        for k, v in (h.items() if hasattr(h, "items") else h)]
                       for h in headers]
        encoded_headers = encoded_header_field(headers, count)
        sizes = record_sizes(value_array, key_array, encoded_headers, self._max_request_size)
        partitions = self.metadata.cached_partitions(topic) or \
            self.metadata.partitions_for(topic, self._max_block_ms)
        plan = plan_batches(topic, partitions, partition, key_array, sizes,
                            batch_size=self._bulk_batch_size,
                            max_request_size=self._max_request_size,
                            ignore_keys=self._ignore_keys, sticky=self.sticky)
        parts = []
        for p, indices, builder in encoded_batches(plan, sizes, value_array, key_array, stamps,
                                                   encoded_headers):
            tp = self._tps.get((topic, p))
            if tp is None:
                tp = self._tps[(topic, p)] = TopicPartition(topic, p)
            with self._lock:
                if self._txn is not None:
                    self._txn.check_send()
                    self._txn.maybe_add_partition(tp)
                if not self.accumulator.has_room_for(builder.size_in_bytes):
                    self._wait_for_room(builder.size_in_bytes)
                batch = self.accumulator.append_built(tp, builder)
                self._cond.notify_all()
            parts.append((batch.result, p, indices, None))
        return BatchSendFuture(topic, count, stamps, parts)

    def _wait_for_room(self, size: int) -> None:
        """buffer.memory is full: block (holding the condition) up to max.block.ms."""
        deadline = time.monotonic() + self._max_block_ms / 1000
        while not self.accumulator.has_room_for(size):
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError(
                    f"Failed to allocate {size} bytes within the configured max blocking "
                    f"time {self._max_block_ms} ms (buffer.memory)")
            self._cond.wait(left)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait for every answer."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self.accumulator.flushing += 1
            self._cond.notify_all()
            try:
                while self.accumulator.queued() or self._sender.busy():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise KafkaTimeoutError(f"Flush did not finish within {timeout} s")
                    self._cond.wait(0.05 if left is None else min(left, 0.05))
            finally:
                self.accumulator.flushing -= 1

    # ---- transactions (Kafka's KafkaProducer transactional API: ``transactions``) ---------
    def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id`` with its coordinator: a producer id and a new epoch,
        fencing every older producer with the same id, whose open transaction is aborted
        (or completed, if it was committing). Call it once, first. ``timeout`` in seconds
        (default max.block.ms); on KafkaTimeoutError it may be called again."""
        self._transactions().init(timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: what is sent until commit or abort belongs to it."""
        self._transactions().begin()

    def send_offsets_to_transaction(self, offsets: Mapping, group_metadata: Any,
                                    timeout: float | None = None) -> None:
        """Commit a consumer group's ``offsets`` (``{tp: offset or OffsetAndMetadata}``, the
        next records to read) in this transaction: they count only if it commits.
        ``group_metadata``: the consumer's ``group_metadata()`` (its coordinator then
        refuses the offsets of a member the group has moved past: CommitFailedError), or a
        group id."""
        self._transactions().send_offsets(offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every record of the transaction, then commit it: its records become
        visible to read_committed consumers and its offsets the group's. Raises the error
        that made the transaction abortable (then call ``abort_transaction``), or
        KafkaTimeoutError (then call it again)."""
        self._transactions().commit(timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent are dropped (their futures fail with
        TransactionAbortedError), those sent are never shown to read_committed consumers,
        offsets sent in it are forgotten."""
        self._transactions().abort(timeout)

    def _transactions(self) -> Transactions:
        if self._txn_calls is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional "
                                    "producer.")
        return self._txn_calls

    def metrics(self) -> dict[str, float]:
        """Kafka's producer metrics this producer keeps: ``produce-throttle-time-avg`` and
        ``-max``, the ms the brokers throttled it for being over its client quota (NaN
        before any answer)."""
        avg, most = self._sender.throttle.measure()
        return {"produce-throttle-time-avg": avg, "produce-throttle-time-max": most}

    def partitions_for(self, topic: str) -> list[int]:
        return self.metadata.partitions_for(topic, self.config["max.block.ms"])

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (up to ``timeout`` seconds), then stop; records still
        unsent after that fail."""
        if self._closed:
            return
        txn = self._txn
        if txn is not None and (txn.state in (
                TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                TxnState.ABORTING_TRANSACTION, TxnState.COMMITTING_TRANSACTION)
                or txn.bump_pending()):
            # As Kafka's producer does on close: a commit under way is finished, an open
            # transaction aborted rather than left to transaction.timeout.ms, holding back
            # read_committed consumers.
            try:
                if txn.state is TxnState.COMMITTING_TRANSACTION:
                    self._txn_calls.commit(10.0 if timeout is None else timeout)
                else:
                    self._txn_calls.abort(10.0 if timeout is None else timeout)
            except KafkaError as e:
                log.warning("transactional id %s: the transaction could not be ended on "
                            "close: %r", self.transactional_id, e)
        try:
            self.flush(timeout)
        except KafkaTimeoutError:
            pass
        with self._cond:
            self._closed = self._sender.closed = True
            self.accumulator.closing = True
            self._cond.notify_all()
        self._sender.thread.join(timeout=5)
        with self._cond:
            for queue in self.accumulator.batches.values():
                while queue:
                    self._sender.fail(queue.popleft(), KafkaError("Producer closed forcefully"))
        self.door.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

def _python_values(data: Any):
    """What a configured serializer is given: Python values, also out of an Arrow array."""
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        return data.to_pylist()
    return data


_new_future = tuple.__new__   # a FutureRecordMetadata without a Python-level __new__
