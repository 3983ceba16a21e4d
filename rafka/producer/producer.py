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
when a producer id is needed) are ``rafka.producer.sender.SenderState``'s; the sender thread here
sends, waits and reports. InitProducerId is asked for by the sender thread without
blocking it or the constructor: until the id comes, only new idempotent batches wait.
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from actors.names import CONTROLLER
from actors.replica.channel import API_PRODUCE
from protocols.config import ConfigDef, at_least, between, one_of
from protocols.errors import (InvalidConfigError, KafkaError, KafkaTimeoutError, NetworkError,
                              RecordTooLargeError)
from protocols.messages import (ProduceManyRequest, ProduceResult,
                                decode_produce_many_response, encode_produce_many_request)
from protocols.arrow_records import as_binary, as_headers, header_sizes, timestamp_column
from protocols.partitioner import (StickyPartitionCache, partition_for_key,
                                   partitions_for_keys)
from protocols.records import MemoryRecordsBuilder
from protocols.topics import TopicPartition
from rafka.producer.accumulator import (RECORD_OVERHEAD, ProducerBatch, RecordAccumulator,
                               estimate_size)
from rafka.client.metadata import ClientMetadata
from rafka.client.network_client import ClientRequest, NetworkClient
from rafka.producer.futures import BatchSendFuture, FutureRecordMetadata, failed_future
from rafka.producer.sender import Outcome, SenderState
from rafka.client.serde import serializer

log = logging.getLogger(__name__)

PRODUCER_CONFIG = (
    ConfigDef()
    .define("acks", "string", "all", one_of("all", "-1", "0", "1"))
    .define("batch.size", "int", 16_384, at_least(0))
    .define("linger.ms", "long", 5, at_least(0))
    .define("buffer.memory", "long", 33_554_432, at_least(0))
    .define("max.block.ms", "long", 60_000, at_least(0))
    .define("max.in.flight.requests.per.connection", "int", 5, at_least(1))
    .define("retries", "int", 2_147_483_647, at_least(0))
    .define("retry.backoff.ms", "long", 100, at_least(0))
    .define("delivery.timeout.ms", "int", 120_000, at_least(0))
    .define("request.timeout.ms", "int", 30_000, at_least(0))
    .define("compression.type", "string", "none",
            one_of("none", "gzip", "snappy", "lz4", "zstd"))
    .define("max.request.size", "int", 1_048_576, at_least(0))
    .define("enable.idempotence", "boolean", True)
    .define("partitioner.ignore.keys", "boolean", False)
    .define("metadata.max.age.ms", "long", 300_000, at_least(0))
    .define("client.id", "string", "")
    .define("key.serializer", "callable", None)
    .define("value.serializer", "callable", None)
    .define("compression.level", "int", -1, between(-1, 22))
)

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def _rows(array, indices: np.ndarray):
    """``array``'s rows at ``indices`` (None stays None): a zero-copy slice when they run
    without a gap, as a batch of key-less or one-partition records does (Arrow's take
    copies every value: ~100 ns a record of 100 bytes)."""
    if array is None:
        return None
    first = int(indices[0])
    if int(indices[-1]) - first + 1 == len(indices) and (
            len(indices) < 3 or bool((np.diff(indices) == 1).all())):
        return array.slice(first, len(indices))
    return array.take(indices)


class Producer:
    def __init__(self, cluster, config: Mapping[str, Any] | None = None, **kwargs: Any):
        c = self.config = PRODUCER_CONFIG.parse(config, **kwargs)
        self.acks = _ACKS[c["acks"]]
        self.idempotent = c["enable.idempotence"]
        if self.idempotent:
            # Kafka's rules for an idempotent producer, stated only if the user set them.
            given = {PRODUCER_CONFIG.normalize_name(k) for k in {**(config or {}), **kwargs}}
            if self.acks != -1:
                if "enable.idempotence" in given:
                    raise InvalidConfigError("Must set acks to all in order to use the "
                                             "idempotent producer.")
                self.idempotent = False
            elif c["max.in.flight.requests.per.connection"] > 5:
                if "enable.idempotence" in given:
                    raise InvalidConfigError("Must set max.in.flight.requests.per.connection "
                                             "to at most 5 to use the idempotent producer.")
                self.idempotent = False
        self.cluster = cluster
        self.metadata = ClientMetadata(cluster, c["metadata.max.age.ms"])
        self._partitions_by_topic = self.metadata.partitions_by_topic
        self._key_ser = serializer(c["key.serializer"], "key.serializer")
        self._value_ser = serializer(c["value.serializer"], "value.serializer")
        self._value_ser_default = c["value.serializer"] is None
        self._max_request_size = c["max.request.size"]
        self._max_block_ms = c["max.block.ms"]
        self._retry_backoff_s = c["retry.backoff.ms"] / 1000
        self._ignore_keys = c["partitioner.ignore.keys"]
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        # A batch never outgrows one request; one the broker still finds too large
        # (MESSAGE_TOO_LARGE under a topic's smaller max.message.bytes) is split and sent
        # again (``_split``), as Kafka's sender does.
        self.accumulator = RecordAccumulator(min(c["batch.size"], c["max.request.size"]),
                                             c["linger.ms"], c["buffer.memory"],
                                             c["delivery.timeout.ms"], _now_ms)
        self.sticky = StickyPartitionCache()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._closed = False
        # The sender's decisions; only the sender thread touches it.
        self.sender = SenderState(c["max.in.flight.requests.per.connection"],
                                  c["max.request.size"], self.idempotent, c["retries"],
                                  c["delivery.timeout.ms"])
        self._in_flight: list[_InFlight] = []
        # The connections to leader hosts: the sender thread's alone (Kafka's NetworkClient).
        self._network = NetworkClient()
        self._sending = 0   # drained from the accumulator, not yet in flight
        # InitProducerId, asked by the sender thread without blocking it: the request in
        # flight, and when to ask again after a failed one.
        self._producer_id_future: concurrent.futures.Future | None = None
        self._producer_id_retry_at = 0.0
        self._sender = threading.Thread(target=self._run, name="rafka-producer-sender",
                                        daemon=True)
        self._sender.start()

    def _maybe_init_producer_id(self) -> None:
        """Ask the controller for a producer id when the sender needs one (Kafka's
        InitProducerId), without waiting for it: only new idempotent batches wait for the
        answer. A controller that is not there or dies under the request is asked again
        after retry.backoff.ms."""
        import ray
        if not self.sender.needs_producer_id or self._producer_id_future is not None \
                or time.monotonic() < self._producer_id_retry_at:
            return
        try:
            controller = ray.get_actor(CONTROLLER, namespace=self.cluster.namespace)
            self._producer_id_future = controller.init_producer_id.remote().future()
            self._producer_id_future.add_done_callback(lambda _: self._network.wakeup())
        except Exception as e:   # no controller at the moment (an election)
            log.debug("InitProducerId: %r", e)
            self._producer_id_retry_at = time.monotonic() + self._retry_backoff_s

    def _producer_id_answered(self) -> None:
        future, self._producer_id_future = self._producer_id_future, None
        try:
            self.sender.set_producer_id(*future.result())
        except Exception as e:   # the controller died under the request
            log.info("InitProducerId failed: %r; asking again", e)
            self._producer_id_retry_at = time.monotonic() + self._retry_backoff_s
        with self._cond:
            self._cond.notify_all()

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
        batch) and encoded column by column into whole batches of about ``batch.size``
        (``arrow_records``), with every producer setting applying as for ``send``. Returns
        one future; its result is a ``pyarrow.Table`` of each record's partition, offset and
        timestamp, in the order given. ``headers``: None, or per record a list of
        ``(key, value)`` pairs or None, or an Arrow list of (key, value) structs (Spark's
        headers column), encoded column by column too."""
        if self._closed:
            raise KafkaError("Cannot send after the producer is closed.")
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
        header_array = as_headers(headers, count)
        sizes = RECORD_OVERHEAD + np.maximum(
            pc.fill_null(pc.binary_length(value_array), 0).to_numpy(), 0)
        if key_array is not None:
            sizes = sizes + pc.fill_null(pc.binary_length(key_array), 0).to_numpy()
        if header_array is not None:
            sizes = sizes + header_sizes(header_array) - 1  # RECORD_OVERHEAD counts one
        if count and int(sizes.max()) > self._max_request_size:
            first = int(np.argmax(sizes > self._max_request_size))
            raise RecordTooLargeError(
                f"The message at index {first} is {int(sizes[first])} bytes when serialized "
                f"which is larger than {self._max_request_size}, the value of "
                "max.request.size.")
        partitions = self.metadata.cached_partitions(topic) or \
            self.metadata.partitions_for(topic, self._max_block_ms)
        parts = []
        for p, indices in self._plan(topic, partitions, partition, key_array, sizes):
            tp = self._tps.get((topic, p))
            if tp is None:
                tp = self._tps[(topic, p)] = TopicPartition(topic, p)
            builder = MemoryRecordsBuilder.from_columns(
                _rows(value_array, indices), _rows(key_array, indices), stamps[indices],
                _rows(header_array, indices))
            with self._lock:
                if not self.accumulator.has_room_for(builder.size_in_bytes):
                    self._wait_for_room(builder.size_in_bytes)
                batch = self.accumulator.append_built(tp, builder)
                self._cond.notify_all()
            parts.append((batch.result, p, indices, None))
        return BatchSendFuture(topic, count, stamps, parts)

    def _plan(self, topic: str, partitions: list[int], partition: int | None,
              key_array, sizes: np.ndarray):
        """``[(partition, record indices), ...]``: the whole batches ``send_batch`` makes,
        each of about batch.size, within max.request.size, records in their given order."""
        count = len(sizes)
        per_batch = max(1, min(self.accumulator.batch_size // max(1, int(sizes.mean())),
                               self._max_request_size // max(1, int(sizes.max()))))
        if partition is not None:
            if partition not in partitions:
                raise KafkaError(f"Invalid partition given with record: {partition} is not "
                                 f"in the range [0...{len(partitions)}].")
            groups = [(partition, np.arange(count))]
            return [(p, chunk) for p, indices in groups
                    for chunk in np.array_split(indices, -(-len(indices) // per_batch))]
        # Each record's partition: its key's (murmur2), else the sticky one, which takes a
        # whole batch of the key-less records and then moves on (KIP-480). Records are then
        # grouped per partition in the order given, so a partition's records keep it.
        target = np.full(count, -1, np.int64)
        if key_array is not None and not self._ignore_keys:
            keyed = pc.is_valid(key_array).to_numpy(zero_copy_only=False)
            target[keyed] = partitions_for_keys(key_array.filter(pa.array(keyed)),
                                                len(partitions))
        sticky = np.flatnonzero(target < 0)
        for start in range(0, len(sticky), per_batch):
            p = self.sticky.partition(topic, partitions, len(partitions))
            target[sticky[start:start + per_batch]] = p
            self.sticky.next_partition(topic, partitions, len(partitions), p)
        order = np.argsort(target, kind="stable")
        bounds = np.flatnonzero(np.diff(target[order])) + 1
        out = []
        for indices in np.split(order, bounds):
            out += [(int(target[indices[0]]), chunk)
                    for chunk in np.array_split(indices, -(-len(indices) // per_batch))]
        return out

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
                while self.accumulator.queued() or self._sending or self._in_flight:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise KafkaTimeoutError(f"Flush did not finish within {timeout} s")
                    self._cond.wait(0.05 if left is None else min(left, 0.05))
            finally:
                self.accumulator.flushing -= 1

    def partitions_for(self, topic: str) -> list[int]:
        return self.metadata.partitions_for(topic, self.config["max.block.ms"])

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (up to ``timeout`` seconds), then stop; records still
        unsent after that fail."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        except KafkaTimeoutError:
            pass
        with self._cond:
            self._closed = True
            self.accumulator.closing = True
            self._cond.notify_all()
        self._sender.join(timeout=5)
        with self._cond:
            for queue in self.accumulator.batches.values():
                while queue:
                    self._fail(queue.popleft(), KafkaError("Producer closed forcefully"))

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the sender thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._maybe_init_producer_id()
            with self._cond:
                if self._closed and not self._in_flight:
                    self._network.close()
                    return
                now = _now_ms()
                for batch in self.accumulator.expired(now):
                    self._fail(batch, KafkaTimeoutError(
                        f"Expiring {batch.record_count} record(s) for {batch.tp}: "
                        f"{now - batch.created_ms} ms has passed since batch creation "
                        "(delivery.timeout.ms)"))
                ready, next_ms = self.accumulator.ready(now)
                to_send = self._drain(ready) if not self._closed else []
                self._sending += len(to_send)
            for request in to_send:
                self._send_request(request)
                with self._lock:
                    self._sending -= 1
            pid_future = self._producer_id_future
            if self._in_flight or pid_future is not None:
                wait_s = 0.002 if next_ms is None else max(0.0, min(0.05, (next_ms - now) / 1000))
                answered = self._network.poll(0 if pid_future is not None and pid_future.done()
                                              else wait_s)
                if pid_future is not None and pid_future.done():
                    self._producer_id_answered()
                if answered:
                    self._complete(set(answered))
                self._expire_requests()
            else:
                if self.acks == 0:
                    self._network.poll(0)   # drop the answers no one waits for
                with self._cond:
                    if not self._closed and (self.sender.needs_producer_id
                                             or not self.accumulator.ready(_now_ms())[0]):
                        # Waiting for a linger deadline, a send, or (without a producer
                        # id) the next InitProducerId attempt.
                        wait_s = 0.1 if next_ms is None else max(0.0, (next_ms - now) / 1000)
                        if self.sender.needs_producer_id:
                            wait_s = min(wait_s, max(0.001, self._producer_id_retry_at
                                                     - time.monotonic()))
                        self._cond.wait(wait_s)

    def _drain(self, ready: list[TopicPartition]) -> list:
        """``SenderState.drain`` over the accumulator; a partition without a known leader
        has its metadata refreshed."""
        def leader_of(tp: TopicPartition):
            leader = self.metadata.leader(tp)
            return None if leader is None else (leader.handle.host_id, leader.handle.host)
        requests, unknown = self.sender.drain(ready, leader_of, self.accumulator)
        for tp in unknown:
            self.metadata.forget(tp)
        return requests

    def _send_request(self, request) -> None:
        c = self.config
        partitions = []
        for batch in request.batches:
            data = batch.builder.build(compression=c["compression.type"],
                                       producer_id=batch.producer_id,
                                       producer_epoch=batch.producer_epoch,
                                       base_sequence=batch.base_sequence)
            batch.attempts += 1
            partitions.append((batch.tp.topic, batch.tp.partition, data))
        produce = ProduceManyRequest(self.acks, c["request.timeout.ms"], tuple(partitions))
        try:
            future = self._network.send(request.host_id, request.host, API_PRODUCE,
                                        encode_produce_many_request(produce),
                                        expect_answer=self.acks != 0)
        except Exception as e:  # no connection to the host: retry through fresh metadata
            self.sender.request_done(request.host_id)
            for batch in request.batches:
                self._retry_or_fail(batch, NetworkError(repr(e)))
            return
        if self.acks == 0:
            # Fire and forget, as Kafka's acks=0: no answer is awaited, offsets are unknown.
            self.sender.request_done(request.host_id)
            for batch in request.batches:
                self._succeed(batch, None)
            return
        self._in_flight.append(_InFlight(future, request.batches, request.host_id,
                                         time.monotonic()))

    def _complete(self, done: set[ClientRequest]) -> None:
        finished = [e for e in self._in_flight if e.request in done]
        for entry in finished:
            try:
                results = [r for _, _, r in decode_produce_many_response(
                    entry.request.result())]
            except Exception as e:  # the leader's host died mid-request
                results = [ProduceResult(error=NetworkError(f"{type(e).__name__}: {e}"))
                           ] * len(entry.batches)
            self.sender.request_done(entry.host_id)
            for batch, result in zip(entry.batches, results):
                if result.error is None:
                    self._succeed(batch, result)
                else:
                    self._retry_or_fail(batch, result.error)
            # Only now: flush() returns once nothing is in flight, callbacks included.
            self._in_flight.remove(entry)
        with self._cond:
            self._cond.notify_all()

    def _expire_requests(self) -> None:
        """A request unanswered for request.timeout.ms is retried (its late answer, if any,
        is a duplicate the idempotent leader recognises)."""
        timeout = self.config["request.timeout.ms"] / 1000
        now = time.monotonic()
        stale = [e for e in self._in_flight if now - e.sent > timeout]
        for entry in stale:
            self._network.abandon(entry.request)
            self.sender.request_done(entry.host_id)
            for batch in entry.batches:
                self._retry_or_fail(batch, KafkaTimeoutError(
                    f"Expiring {batch.record_count} record(s) for {batch.tp}: no answer "
                    "within request.timeout.ms"))
            self._in_flight.remove(entry)

    def _split(self, batch: ProducerBatch) -> None:
        """The topic's max.message.bytes is below this batch: send its records in halves
        (again if need be); only a single record too large fails."""
        log.info("%s: splitting a batch of %d records the broker found too large",
                 batch.tp, batch.record_count)
        with self._cond:
            parts = self.accumulator.split_and_reenqueue(batch, _now_ms())
            batch.result.split_into([(start, part.result) for start, part in parts])
            self._cond.notify_all()

    def _succeed(self, batch: ProducerBatch, result) -> None:
        with self._cond:
            self.accumulator.release(batch)
            self._cond.notify_all()
        if result is None:      # acks=0: no answer, no offsets
            batch.result.complete(-1, -1, None)
        else:
            batch.result.complete(result.base_offset, result.log_append_time, None)

    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException) -> None:
        """``SenderState.on_error`` decides; this does it."""
        now = _now_ms()
        outcome = self.sender.on_error(batch, error, now, self._closed)
        if outcome is Outcome.SPLIT:
            self._split(batch)
        elif outcome is Outcome.RETRY:
            self.metadata.forget(batch.tp)
            with self._cond:
                self.accumulator.reenqueue(batch, now + self.config["retry.backoff.ms"])
                self._cond.notify_all()
        else:
            self._fail(batch, error)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self.accumulator.release(batch)
        batch.result.complete(-1, -1, error)


@dataclass(eq=False)
class _InFlight:
    """One produce request awaiting its answer: its batches, in the request's order."""
    request: ClientRequest
    batches: list[ProducerBatch]
    host_id: str
    sent: float  # time.monotonic()


def _python_values(data: Any):
    """What a configured serializer is given: Python values, also out of an Arrow array."""
    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        return data.to_pylist()
    return data


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


_new_future = tuple.__new__   # a FutureRecordMetadata without a Python-level __new__
