"""The producer's futures, as Kafka's: one ProduceRequestResult per batch (one event, one
lock), and a light FutureRecordMetadata per record pointing at it, so a send does not pay
for a Condition of its own. The interface is ``concurrent.futures.Future``'s: ``result``,
``exception``, ``done``, ``add_done_callback``."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from protocols.errors import KafkaTimeoutError


@dataclass(frozen=True)
class RecordMetadata:
    """Where a sent record landed (Kafka's RecordMetadata): what its future resolves to."""
    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1


class ProduceRequestResult:
    __slots__ = ("event", "lock", "base_offset", "log_append_time", "error", "callbacks",
                 "parts")

    def __init__(self):
        self.event = threading.Event()
        self.lock = threading.Lock()
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.callbacks: list = []
        # After a split (MESSAGE_TOO_LARGE): [(index of the part's first record, its
        # result)]; a record's metadata then comes from its part.
        self.parts: list[tuple[int, ProduceRequestResult]] | None = None

    def split_into(self, parts: list[tuple[int, "ProduceRequestResult"]]) -> None:
        """The batch was split and its records go out in ``parts``: this result completes
        once every part has (its callbacks run then), with the first error among them."""
        self.parts = parts
        pending = [len(parts)]
        lock = threading.Lock()

        def part_done(_future) -> None:
            with lock:
                pending[0] -= 1
                if pending[0]:
                    return
            error = next((r.error for _, r in parts if r.error is not None), None)
            self.complete(-1, -1, error)
        for _, part in parts:
            with part.lock:
                if not part.event.is_set():
                    part.callbacks.append((None, part_done))
                    continue
            part_done(None)

    def leaf(self, index: int) -> tuple["ProduceRequestResult", int]:
        """The result that answered record ``index`` and its index there (a split batch's
        part, however often it was split)."""
        result = self
        while result.parts is not None:
            start, part = next((s, p) for s, p in reversed(result.parts) if index >= s)
            result, index = part, index - start
        return result, index

    def complete(self, base_offset: int, log_append_time: int,
                 error: BaseException | None) -> None:
        with self.lock:
            if self.event.is_set():
                return
            self.base_offset, self.log_append_time, self.error = \
                base_offset, log_append_time, error
            self.event.set()
            callbacks, self.callbacks = self.callbacks, []
        for future, fn in callbacks:
            try:
                fn(future)
            except Exception:  # a callback's failure is the callback's, as in Kafka
                import logging
                logging.getLogger(__name__).exception("error in a send callback")


class FutureRecordMetadata(tuple):
    """(batch result, index in the batch, topic, partition, timestamp, key size, value
    size): a tuple so that making one per record costs no Python-level __init__."""

    __slots__ = ()

    def __new__(cls, result: ProduceRequestResult, index: int, topic: str, partition: int,
                timestamp: int, key_size: int, value_size: int):
        return tuple.__new__(cls, (result, index, topic, partition, timestamp, key_size,
                                   value_size))

    _result = property(lambda self: self[0])

    def done(self) -> bool:
        return self._result.event.is_set()

    def cancelled(self) -> bool:
        return False

    def _wait(self, timeout: float | None) -> None:
        if not self._result.event.wait(timeout):
            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} s for the record's "
                                    "metadata")

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._result.leaf(self[1])[0].error

    def result(self, timeout: float | None = None):
        self._wait(timeout)
        r, index, topic, partition, create_time, key_size, value_size = self
        r, index = r.leaf(index)
        if r.error is not None:
            raise r.error
        offset = -1 if r.base_offset < 0 else r.base_offset + index
        timestamp = r.log_append_time if r.log_append_time >= 0 else create_time
        return RecordMetadata(topic, partition, offset, timestamp, key_size, value_size)

    get = result  # Kafka's name

    def add_done_callback(self, fn: Callable[["FutureRecordMetadata"], Any]) -> None:
        r = self._result
        with r.lock:
            if not r.event.is_set():
                r.callbacks.append((self, fn))
                return
        fn(self)


def failed_future(error: BaseException, topic: str, partition: int = -1
                  ) -> FutureRecordMetadata:
    result = ProduceRequestResult()
    result.complete(-1, -1, error)
    return FutureRecordMetadata(result, 0, topic, partition, -1, -1, -1)


class BatchSendFuture:
    """``Producer.send_batch``'s one future for many records: done when every batch they
    went out in is answered. Its result is a ``pyarrow.Table`` with each record's
    ``partition``, ``offset`` and ``timestamp``, in the order the records were given; the
    first error of any batch is raised instead."""

    def __init__(self, topic: str, count: int, timestamps, parts: list):
        # parts: [(ProduceRequestResult, partition, numpy indices of its records in the
        # call, their positions in the batch or None for 0, 1, ...)]
        self.topic = topic
        self.count = count
        self._timestamps = timestamps          # numpy int64, one per record
        self._parts = parts
        self._lock = threading.Lock()
        self._pending = len(parts)
        self._event = threading.Event()
        self._callbacks: list = []
        if not parts:
            self._event.set()
        for result, *_ in parts:
            with result.lock:
                if not result.event.is_set():
                    result.callbacks.append((None, self._part_done))
                    continue
            self._part_done(None)

    def _part_done(self, _future) -> None:
        with self._lock:
            self._pending -= 1
            if self._pending:
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def done(self) -> bool:
        return self._event.is_set()

    def cancelled(self) -> bool:
        return False

    def _wait(self, timeout: float | None) -> None:
        if not self._event.wait(timeout):
            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} s for the "
                                    f"metadata of {self.count} records")

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        for result, *_ in self._parts:
            for leaf in _leaves(result):
                if leaf.error is not None:
                    return leaf.error
        return None

    def result(self, timeout: float | None = None):
        import numpy as np
        import pyarrow as pa
        error = self.exception(timeout)
        if error is not None:
            raise error
        partitions = np.empty(self.count, np.int32)
        offsets = np.empty(self.count, np.int64)
        timestamps = self._timestamps.copy()
        for result, partition, indices, positions in self._parts:
            partitions[indices] = partition
            if positions is None:
                positions = np.arange(len(indices))
            if result.parts is None:
                offsets[indices] = result.base_offset + positions \
                    if result.base_offset >= 0 else -1
                if result.log_append_time >= 0:
                    timestamps[indices] = result.log_append_time
                continue
            for index, i in zip(indices.tolist(), positions.tolist()):   # split: rare
                leaf, j = result.leaf(i)
                offsets[index] = leaf.base_offset + j if leaf.base_offset >= 0 else -1
                if leaf.log_append_time >= 0:
                    timestamps[index] = leaf.log_append_time
        return pa.table({"partition": partitions, "offset": offsets,
                         "timestamp": pa.array(timestamps, pa.timestamp("ms"))})

    get = result

    def add_done_callback(self, fn: Callable[["BatchSendFuture"], Any]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        fn(self)


def _leaves(result: ProduceRequestResult):
    if result.parts is None:
        yield result
        return
    for _, part in result.parts:
        yield from _leaves(part)
