"""``rafka.Consumer``: Kafka's consumer on Ray actor handles.

    consumer = rafka.Consumer(cluster, {"group.id": "billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["events"])               # or assign([("events", 0), ...])
    for record in consumer:                      # or consumer.poll(timeout_ms=1000)
        print(record.offset, record.value)

With ``subscribe`` the partitions come from the group (``rafka.consumer.coordinator``):
poll drives the rebalances, starts each new partition at the group's committed offset (else
``auto.offset.reset``), and with ``enable.auto.commit`` commits the positions every
``auto.commit.interval.ms``, before a rebalance takes partitions away and on close.

The fetcher keeps one fetch in flight per leader replica host, for every assigned partition
that host leads (Kafka's FetchRequest per node: a long poll with ``fetch.min.bytes`` /
``fetch.max.wait.ms`` over the whole request, ``fetch.max.bytes`` over the response,
``max.partition.fetch.bytes`` per partition), in a fetch session (KIP-227: after the first
request, only the partitions whose position changed are named), sent over the host's
listener (``rafka.client.network_client``), so the next records are on
their way while the application handles the current ones; ``poll`` hands out at most
``max.poll.records``.
It follows leader changes through metadata, and after a leader change it checks its
position against the new leader's log by leader epoch (OffsetsForLeaderEpoch) so that a
truncated log is detected rather than silently skipped.
"""
from __future__ import annotations

import logging
import re
import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

import numpy as np

from actors.replica.channel import API_FETCH
from protocols.config import ConfigDef, at_least, one_of
from protocols.errors import (IllegalStateError, InvalidGroupIdError, InvalidOffsetError,
                              KafkaError, OffsetOutOfRangeError)
from protocols.fetch_session_handler import (FINAL_EPOCH, INVALID_SESSION_ID,
                                             FetchSessionHandler)
from protocols.messages import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, FetchManyRequest,
                                FetchRequest, OffsetAndMetadata, decode_fetch_many_response,
                                encode_fetch_many_request)
from protocols.records import TIMESTAMP_TYPE_MASK, iter_batches
from protocols.topics import TopicPartition
from protocols.wire import decode
from rafka.client.network_client import ClientRequest, NetworkClient
from rafka.client.metadata import ClientMetadata
from rafka.consumer.coordinator import ConsumerCoordinator, ConsumerRebalanceListener
from rafka.client.list_offsets import list_offsets
from rafka.client.serde import deserializer

log = logging.getLogger(__name__)

CONSUMER_CONFIG = (
    ConfigDef()
    .define("group.id", "string", "")
    .define("client.id", "string", "")
    .define("auto.offset.reset", "string", "latest", one_of("earliest", "latest", "none"))
    .define("fetch.min.bytes", "int", 1, at_least(0))
    .define("fetch.max.wait.ms", "int", 500, at_least(0))
    .define("max.partition.fetch.bytes", "int", 1_048_576, at_least(0))
    .define("fetch.max.bytes", "int", 52_428_800, at_least(0))
    .define("max.poll.records", "int", 500, at_least(1))
    .define("request.timeout.ms", "int", 30_000, at_least(0))
    .define("retry.backoff.ms", "long", 100, at_least(0))
    .define("metadata.max.age.ms", "long", 300_000, at_least(0))
    .define("check.crcs", "boolean", True)
    .define("isolation.level", "string", "read_uncommitted",
            one_of("read_uncommitted", "read_committed"))
    .define("key.deserializer", "callable", None)
    .define("value.deserializer", "callable", None)
    # Consumer groups (subscribe, commits).
    .define("enable.auto.commit", "boolean", True)
    .define("auto.commit.interval.ms", "int", 5000, at_least(0))
    .define("session.timeout.ms", "int", 45_000, at_least(1))
    .define("heartbeat.interval.ms", "int", 3000, at_least(1))
    .define("max.poll.interval.ms", "int", 300_000, at_least(1))
    .define("partition.assignment.strategy", "list", ["range"])
    .define("group.instance.id", "string", "")
)

class NoOffsetForPartitionError(InvalidOffsetError):
    """auto.offset.reset=none and the position is unknown or out of range."""


class ConsumerRecord(NamedTuple):
    """A named tuple, as kafka-python's: built a million times a second, so no dataclass."""
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple = ()
    leader_epoch: int = -1


_new_record = tuple.__new__


@dataclass(frozen=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


@dataclass(eq=False, slots=True)
class _Chunk:
    """The records of one fetched batch not yet polled, kept as columns: a ConsumerRecord is
    made only when poll hands it out. (ConsumerRecords are tuple subclasses, which CPython's
    collector tracks for as long as they live: tens of thousands of them waiting in a
    buffer were promoted to the oldest generation and made every full collection slower, a
    third of the consumer's time at a million records a second.)"""
    epoch: int                     # the batch's partition leader epoch
    timestamp_type: int
    offsets: list | range         # a range when they run without a gap (Arrow chunks)
    timestamps: list
    keys: list
    values: list
    headers: list | None           # None: no record has headers
    # The batch's last offset + 1: where the position goes once the chunk is handed out.
    # Compaction leaves batches whose last records, or all of them, are gone (Kafka's
    # cleaner keeps the batch's last offset), so it can lie past the last record; a chunk
    # with no records at all still moves the position past its batch, as Kafka's fetcher
    # moves to the batch's nextOffset, else the next fetch would ask for the same batch.
    next_offset: int
    start: int = 0                 # the next one to hand out
    # Kept as Arrow arrays (timestamps, keys, values, headers) once poll_arrow is used: no
    # Python object per record at all (offsets stay a list: positions are Python ints).
    arrow: bool = False


@dataclass
class _PartitionState:
    position: int | None = None
    paused: bool = False
    last_epoch: int = -1          # leader epoch of the last batch consumed
    leader_epoch: int = -1        # the leader epoch our fetches are sent in
    validated_epoch: int = -1     # position checked against this leader epoch
    in_flight: Any = None         # the _HostFetch this partition's next records come in
    buffered: deque = field(default_factory=deque)   # fetched, not yet polled: _Chunks
    last_fetched: int = 0         # how many records the last fetch brought
    retry_at: float = 0.0

    def next_fetch_offset(self) -> int:
        """Where the next fetch starts: after what is buffered, else at the position."""
        if self.buffered:
            return self.buffered[-1].next_offset
        return self.position

    def buffered_records(self) -> int:
        return sum(len(c.offsets) - c.start for c in self.buffered)


@dataclass(eq=False)
class _HostFetch:
    """A fetch in flight to one leader host (Kafka's FetchRequest to one node)."""
    request: ClientRequest | None
    partitions: list[TopicPartition]   # every partition it fetches (named or in the session)
    was_full: bool


def _offset_array(offsets) -> np.ndarray:
    if isinstance(offsets, range):
        return np.arange(offsets.start, offsets.stop, dtype=np.int64)
    return np.asarray(offsets, np.int64)


def _repeated_string(value: str, count: int):
    """``value`` ``count`` times as an Arrow string array, built from its buffers (a column
    of one topic's name per record: 10x faster than converting a million references)."""
    import pyarrow as pa
    data = value.encode()
    if (count + 1) * len(data) >= 2**31:   # past int32 offsets: let Arrow decide
        return pa.array([value] * count, pa.string())
    offsets = np.arange(0, (count + 1) * len(data), len(data) or 1, dtype=np.int32) \
        if data else np.zeros(count + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), count,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data * count)])


def _topic_column(topics: list[str], sizes: list[int]):
    """Each piece's topic repeated its size's times: one run per topic change."""
    import pyarrow as pa
    runs: list[list] = []
    for topic, size in zip(topics, sizes):
        if runs and runs[-1][0] == topic:
            runs[-1][1] += size
        else:
            runs.append([topic, size])
    arrays = [_repeated_string(topic, size) for topic, size in runs]
    return arrays[0] if len(arrays) == 1 else pa.chunked_array(arrays, pa.string())


def _arrow_table(pieces: list, headers: bool):
    """Spark's Kafka columns for ``(topic, partition, chunk, start, end)`` pieces."""
    import pyarrow as pa

    from protocols.arrow_records import HEADERS_TYPE, no_headers

    def column(name: str, type_):
        arrays = []
        for _, _, c, start, end in pieces:
            data = getattr(c, name)
            arrays.append(data.slice(start, end - start) if c.arrow
                          else pa.array(data[start:end], type_))
        # Chunked, not concatenated: a poll of 100,000 records would copy ~10 MB of keys
        # and values into one buffer for nothing (Spark takes the table batch by batch).
        return pa.chunked_array(arrays) if len(arrays) > 1 else arrays[0]

    def header_column():
        arrays = []
        for _, _, c, start, end in pieces:
            if c.headers is None:
                arrays.append(no_headers(end - start))
            elif c.arrow:
                arrays.append(c.headers.slice(start, end - start))
            else:
                arrays.append(pa.array([[{"key": k, "value": v} for k, v in h]
                                        for h in c.headers[start:end]], HEADERS_TYPE))
        return pa.chunked_array(arrays) if len(arrays) > 1 else arrays[0]
    if not pieces:
        empty = {"key": pa.binary(), "value": pa.binary(), "topic": pa.string(),
                 "partition": pa.int32(), "offset": pa.int64(),
                 "timestamp": pa.timestamp("ms"), "timestampType": pa.int32()}
        if headers:
            empty["headers"] = HEADERS_TYPE
        return pa.table({name: pa.array([], t) for name, t in empty.items()})
    sizes = [end - start for _, _, _, start, end in pieces]
    sample = pieces[0][2]
    binary = sample.arrow or all(isinstance(v, (bytes, type(None))) for v in
                                 sample.values[:1] + sample.keys[:1])
    table = {
        "key": column("keys", pa.binary() if binary else None),
        "value": column("values", pa.binary() if binary else None),
        "topic": _topic_column([t for t, *_ in pieces], sizes),
        "partition": pa.array(np.repeat([p for _, p, *_ in pieces], sizes), pa.int32()),
        "offset": pa.array(np.concatenate([_offset_array(c.offsets[start:end])
                                           for _, _, c, start, end in pieces]), pa.int64()),
        "timestamp": column("timestamps", pa.int64()).cast(pa.timestamp("ms")),
        "timestampType": pa.array(np.repeat([c.timestamp_type for _, _, c, *_ in pieces],
                                            sizes), pa.int32()),
    }
    if headers:
        table["headers"] = header_column()
    return pa.table(table)


class Consumer:
    def __init__(self, cluster, config: Mapping[str, Any] | None = None, **kwargs: Any):
        self.config = CONSUMER_CONFIG.parse(config, **kwargs)
        self.cluster = cluster
        self.metadata = ClientMetadata(cluster, self.config["metadata.max.age.ms"])
        # None: the bytes are handed out as they are (no call per record).
        self._key_de = None if self.config["key.deserializer"] is None else \
            deserializer(self.config["key.deserializer"], "key.deserializer")
        self._value_de = None if self.config["value.deserializer"] is None else \
            deserializer(self.config["value.deserializer"], "value.deserializer")
        self._parts: dict[TopicPartition, _PartitionState] = {}
        self._next_fetch = -1
        # One fetch in flight per leader replica host, each in its fetch session.
        self._fetches: dict[str, _HostFetch] = {}
        # The connections to leader hosts (Kafka's NetworkClient), and the group's Ray calls
        # in flight that end a wait for fetches.
        self._network = NetworkClient()
        self._watched: dict[Any, Any] = {}
        self._sessions: dict[str, FetchSessionHandler] = {}
        self._request_bytes: dict[str, int] = {}
        self._hosts: dict[str, Any] = {}
        self._closed = False
        self._arrow = False   # poll_arrow was used: buffer fetched batches as Arrow columns
        self._group: ConsumerCoordinator | None = None
        if self.config["group.id"]:
            self._group = ConsumerCoordinator(cluster, self.config, self.metadata,
                                              self._revoked, self._assigned, self._lost)
        self._subscribed = False
        self._listener = ConsumerRebalanceListener()
        self._next_auto_commit = time.monotonic() + self.config["auto.commit.interval.ms"] / 1000

    # ---- consumer groups -------------------------------------------------------------------
    def _require_group(self) -> ConsumerCoordinator:
        if self._group is None:
            raise InvalidGroupIdError("To use the group management or offset commit APIs, you "
                                      "must provide a valid group.id in the consumer "
                                      "configuration.")
        return self._group

    def subscribe(self, topics: Iterable[str] | re.Pattern | None = None, *,
                  pattern: str | re.Pattern | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join the consumer group ``group.id`` for these topics, or for every topic whose
        whole name matches ``pattern`` (a ``re.Pattern`` may also be passed as ``topics``).
        The partitions arrive with the next polls."""
        group = self._require_group()
        if isinstance(topics, re.Pattern):
            topics, pattern = None, topics
        if isinstance(topics, str):
            topics = [topics]
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes a list of topics or a pattern")
        if self._parts and not self._subscribed:
            raise IllegalStateError("Subscription to topics, partitions and pattern are "
                                    "mutually exclusive")
        if listener is not None:
            self._listener = listener
        if pattern is not None:
            group.subscribe(pattern=re.compile(pattern) if isinstance(pattern, str) else pattern)
        else:
            names = list(topics)
            for t in names:
                TopicPartition(t, 0)  # validates the name
            group.subscribe(names)
        self._subscribed = True

    def subscription(self) -> set[str]:
        return set(self._group.topics) if self._subscribed and self._group else set()

    def unsubscribe(self) -> None:
        """Leave the group; the partitions are revoked first (the listener hears it)."""
        if not self._subscribed:
            self._parts = {}
            return
        self._maybe_auto_commit_sync()
        self._revoked(set(self._parts))
        self._group.unsubscribe()
        self._subscribed = False

    def _revoked(self, partitions: set[TopicPartition]) -> None:
        self._maybe_auto_commit_sync(partitions)
        self._listener.on_partitions_revoked(set(partitions))
        for tp in partitions:
            self._parts.pop(tp, None)

    def _lost(self, partitions: set[TopicPartition]) -> None:
        self._listener.on_partitions_lost(set(partitions))
        for tp in partitions:
            self._parts.pop(tp, None)

    def _assigned(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._parts.setdefault(tp, _PartitionState())
        self._listener.on_partitions_assigned(set(partitions))
        unset = [tp for tp in partitions if tp in self._parts
                 and self._parts[tp].position is None]
        if unset:
            self._positions_from_committed(unset)

    def _positions_from_committed(self, partitions: list[TopicPartition]) -> None:
        committed = self._group.committed(partitions, self.config["request.timeout.ms"] / 1000)
        for tp, om in committed.items():
            st = self._parts.get(tp)
            if om is not None and st is not None and st.position is None:
                st.position = om.offset
                st.last_epoch = om.leader_epoch

    def _current_offsets(self, partitions: Iterable[TopicPartition] | None = None
                         ) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = self._parts if partitions is None else partitions
        return {tp: OffsetAndMetadata(st.position, st.last_epoch)
                for tp in wanted if (st := self._parts.get(tp)) is not None
                and st.position is not None}

    @staticmethod
    def _offsets_arg(offsets: Mapping) -> dict[TopicPartition, OffsetAndMetadata]:
        return {TopicPartition(*tp): (om if isinstance(om, OffsetAndMetadata)
                                      else OffsetAndMetadata(int(om)))
                for tp, om in offsets.items()}

    def commit(self, offsets: Mapping | None = None, timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (``{tp: offset or OffsetAndMetadata}``; default: the positions
        of every assigned partition) and wait. CommitFailedError when the group has
        rebalanced meanwhile."""
        group = self._require_group()
        group.complete_async_commits()
        chosen = self._current_offsets() if offsets is None else self._offsets_arg(offsets)
        timeout = self.config["request.timeout.ms"] if timeout_ms is None else timeout_ms
        group.commit_sync(chosen, timeout / 1000)

    def commit_async(self, offsets: Mapping | None = None, callback=None) -> None:
        """Commit without waiting; ``callback(offsets, error_or_None)`` runs in a later poll
        (or commit / close)."""
        group = self._require_group()
        chosen = self._current_offsets() if offsets is None else self._offsets_arg(offsets)
        group.commit_async(chosen, callback)

    def committed(self, partitions, timeout_ms: int | None = None):
        """The group's committed ``OffsetAndMetadata`` (None where nothing is committed) for
        a partition or a collection of them."""
        group = self._require_group()
        single = isinstance(partitions, tuple) and len(partitions) == 2 and \
            isinstance(partitions[0], str)
        wanted = [TopicPartition(*partitions)] if single else \
            [TopicPartition(*tp) for tp in partitions]
        timeout = self.config["request.timeout.ms"] if timeout_ms is None else timeout_ms
        answer = group.committed(wanted, timeout / 1000)
        return answer[wanted[0]] if single else answer

    def _auto_commit_enabled(self) -> bool:
        return self._group is not None and self.config["enable.auto.commit"]

    def _maybe_auto_commit_sync(self, partitions: Iterable[TopicPartition] | None = None
                                ) -> None:
        if not self._auto_commit_enabled():
            return
        try:
            self._group.commit_sync(self._current_offsets(partitions),
                                    self.config["request.timeout.ms"] / 1000)
        except KafkaError as e:
            log.warning("group %s: auto-commit failed: %r", self.config["group.id"], e)

    def _maybe_auto_commit(self) -> None:
        now = time.monotonic()
        if not self._auto_commit_enabled() or now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.config["auto.commit.interval.ms"] / 1000
        if self._subscribed and self._group.needs_rejoin():
            return
        offsets = self._current_offsets()
        if offsets:
            self._group.commit_async(offsets, None)

    # ---- assignment and positions ----------------------------------------------------------
    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        if self._subscribed:
            raise IllegalStateError("Subscription to topics, partitions and pattern are "
                                    "mutually exclusive")
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in wanted:
            self.metadata.partitions_for(tp.topic, 60_000)
        self._parts = {tp: self._parts.get(tp, _PartitionState()) for tp in wanted}

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def _state(self, tp) -> _PartitionState:
        tp = TopicPartition(*tp)
        try:
            return self._parts[tp]
        except KeyError:
            raise KafkaError(f"No current assignment for partition {tp}") from None

    def seek(self, tp, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"seek offset must not be negative, got {offset}")
        st = self._state(tp)
        st.position, st.buffered, st.in_flight = offset, deque(), None
        st.validated_epoch = st.leader_epoch  # a user's seek is taken as it is

    def seek_to_beginning(self, partitions: Iterable | None = None) -> None:
        for tp, off in self.beginning_offsets(partitions or list(self._parts)).items():
            self.seek(tp, off)

    def seek_to_end(self, partitions: Iterable | None = None) -> None:
        for tp, off in self.end_offsets(partitions or list(self._parts)).items():
            self.seek(tp, off)

    def position(self, tp) -> int:
        st = self._state(tp)
        if st.position is None:
            self._reset(TopicPartition(*tp), st)
        return st.position

    def pause(self, partitions: Iterable) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, partitions: Iterable) -> None:
        for tp in partitions:
            self._state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._parts.items() if st.paused}

    # ---- offsets ---------------------------------------------------------------------------
    def _list_offsets(self, wanted: Mapping[TopicPartition, int]
                      ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets, one request per leader host (``rafka.client.list_offsets``), retried until
        request.timeout.ms."""
        return list_offsets(self.metadata, wanted, self.config["request.timeout.ms"] / 1000,
                            backoff_s=self.config["retry.backoff.ms"] / 1000)

    def _list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
        return self._list_offsets({tp: timestamp})[tp]

    def beginning_offsets(self, partitions: Iterable) -> dict[TopicPartition, int]:
        found = self._list_offsets({TopicPartition(*tp): EARLIEST_TIMESTAMP
                                    for tp in partitions})
        return {tp: offset for tp, (offset, _) in found.items()}

    def end_offsets(self, partitions: Iterable) -> dict[TopicPartition, int]:
        found = self._list_offsets({TopicPartition(*tp): LATEST_TIMESTAMP
                                    for tp in partitions})
        return {tp: offset for tp, (offset, _) in found.items()}

    def offsets_for_times(self, timestamps: Mapping) -> dict[TopicPartition,
                                                             OffsetAndTimestamp | None]:
        found = self._list_offsets({TopicPartition(*tp): int(ts)
                                    for tp, ts in timestamps.items()})
        return {tp: None if offset < 0 else OffsetAndTimestamp(offset, at)
                for tp, (offset, at) in found.items()}

    def _reset(self, tp: TopicPartition, st: _PartitionState) -> None:
        if self._group is not None and not self._subscribed and st.last_epoch < 0 \
                and st.position is None and not st.buffered:
            # assign() with a group.id starts from the group's committed offset too.
            self._positions_from_committed([tp])
            if st.position is not None:
                return
        policy = self.config["auto.offset.reset"]
        if policy == "none":
            raise NoOffsetForPartitionError(f"Undefined offset with no reset policy for "
                                            f"partition: {tp}")
        st.position = self._list_offset(
            tp, EARLIEST_TIMESTAMP if policy == "earliest" else LATEST_TIMESTAMP)[0]
        st.buffered, st.in_flight = deque(), None

    # ---- fetching --------------------------------------------------------------------------
    def _validate_position(self, tp: TopicPartition, st: _PartitionState, leader) -> None:
        """After a leader change, make sure our position is on the new leader's log: if the
        log was truncated below it (by leader epoch), go back to where they agree."""
        import ray
        if st.last_epoch < 0 or st.validated_epoch == leader.leader_epoch:
            st.validated_epoch = leader.leader_epoch
            return
        answer = decode(ray.get(leader.handle.offsets_for_leader_epoch.remote(
            st.last_epoch, leader.leader_epoch)))
        if isinstance(answer, KafkaError):
            raise answer
        _, end_offset = answer
        if 0 <= end_offset < st.position:
            log.warning("%s: log truncation detected: position %d, the leader's log for epoch "
                        "%d ends at %d", tp, st.position, st.last_epoch, end_offset)
            if self.config["auto.offset.reset"] == "none":
                raise OffsetOutOfRangeError(f"Truncation detected for partition {tp} at "
                                            f"offset {st.position}, diverging at {end_offset}")
            st.position = end_offset
            st.buffered = deque()
        st.validated_epoch = leader.leader_epoch

    def _send_fetches(self) -> None:
        """Kafka's Fetcher.sendFetches: one fetch per leader host with none in flight, for
        every fetchable partition it leads (assigned, not paused, nothing buffered, not
        backing off), in that host's fetch session (KIP-227)."""
        now = time.monotonic()
        c = self.config
        wanted: dict[str, tuple[Any, dict]] = {}
        needed: set[str] = set()
        items = list(self._parts.items())
        if items:   # start where the last round stopped, so no partition starves
            self._next_fetch = (self._next_fetch + 1) % len(items)
            items = items[self._next_fetch:] + items[:self._next_fetch]
        max_poll = c["max.poll.records"]
        for tp, st in items:
            # A host is fetched from again (from after what is buffered) once one of its
            # partitions has less than half of what its last fetch brought, or less than
            # one poll's worth, left: the next records are on their way while the
            # application still has some. The fetch then carries each of the host's
            # partitions with less than a whole fetch's worth left, so one round trip
            # serves them all, and no partition buffers more than two fetches' worth.
            if st.paused or st.in_flight is not None or now < st.retry_at:
                continue
            left = st.buffered_records() if st.buffered else 0
            if left >= max(max_poll, st.last_fetched):
                continue
            if st.position is None:
                self._reset(tp, st)
            leader = self.metadata.leader(tp)
            if leader is None:
                self.metadata.forget(tp)
                st.retry_at = now + c["retry.backoff.ms"] / 1000
                continue
            host_id = leader.handle.host_id
            if host_id in self._fetches:
                continue
            try:
                self._validate_position(tp, st, leader)
            except OffsetOutOfRangeError:
                raise
            except Exception as e:
                self._backoff(tp, st, e)
                continue
            st.leader_epoch = leader.leader_epoch
            if left < max(max_poll, st.last_fetched // 2):
                needed.add(host_id)
            wanted.setdefault(host_id, (leader.handle.host, {}))[1][tp] = FetchRequest(
                -1, st.next_fetch_offset(), leader.leader_epoch, c["max.partition.fetch.bytes"],
                c["fetch.min.bytes"], c["fetch.max.wait.ms"])
        for host_id, (host, requests) in wanted.items():
            if host_id not in needed:
                continue
            self._hosts[host_id] = host
            session = self._sessions.setdefault(host_id, FetchSessionHandler())
            fetch = _HostFetch(None, list(requests), session.full)
            named, forgotten, session_id, epoch = session.build(requests)
            request = FetchManyRequest(-1, c["fetch.max.wait.ms"], c["fetch.min.bytes"],
                                       c["fetch.max.bytes"], named, session_id, epoch,
                                       forgotten)
            payload = encode_fetch_many_request(request)
            self._request_bytes[host_id] = len(payload)
            try:
                fetch.request = self._network.send(host_id, host, API_FETCH, payload)
            except Exception as e:  # no connection to the host
                session.handle_error()
                for tp in requests:
                    self._backoff(tp, self._parts[tp], e)
                continue
            self._fetches[host_id] = fetch
            for tp in requests:
                self._parts[tp].in_flight = fetch

    def fetch_request_sizes(self) -> dict[str, int]:
        """The size in bytes of the last fetch request sent to each leader host (in a fetch
        session, an idle consumer's does not grow with its partitions)."""
        return dict(self._request_bytes)

    def _backoff(self, tp: TopicPartition, st: _PartitionState, error: Exception) -> None:
        log.debug("%s: fetch failed (%r), refreshing metadata", tp, error)
        st.in_flight = None
        self.metadata.forget(tp)
        st.retry_at = time.monotonic() + self.config["retry.backoff.ms"] / 1000

    def _collect(self, timeout_s: float, also: list = ()) -> None:
        """Wait up to ``timeout_s`` for a fetch answer (or one of ``also``: the group's
        JoinGroup / SyncGroup in flight) and buffer whatever fetches are answered."""
        pending = {fetch.request: host_id for host_id, fetch in self._fetches.items()}
        if not pending and not also:
            if timeout_s > 0:
                time.sleep(min(timeout_s, self.config["retry.backoff.ms"] / 1000))
            return
        # The group's calls are Ray's: each wakes the network poll when it is answered.
        watched = {}
        for ref in also:
            future = self._watched.get(ref)
            if future is None:
                future = ref.future()
                future.add_done_callback(lambda _: self._network.wakeup())
            watched[ref] = future
        self._watched = watched
        if not any(r.done for r in pending) and not any(f.done() for f in watched.values()):
            self._network.poll(timeout_s)
        for request, host_id in pending.items():   # everything that is ready, not just one
            if request.done:
                self._complete_fetch(self._fetches.pop(host_id), self._sessions[host_id])

    def _complete_fetch(self, fetch: "_HostFetch", session: FetchSessionHandler) -> None:
        mine = {}   # the partitions whose answer this fetch still is (no seek, no reset)
        for tp in fetch.partitions:
            st = self._parts.get(tp)
            if st is not None and st.in_flight is fetch:
                st.in_flight = None
                mine[tp] = st
        try:
            response = decode_fetch_many_response(fetch.request.result())
        except Exception as e:   # the leader's host died under the request
            session.handle_error()
            for tp, st in mine.items():
                self._backoff(tp, st, e)
            return
        if not session.handle_response(response, fetch.was_full):
            log.debug("fetch session error %r: the next fetch is a full one", response.error)
            return
        for topic, partition, result in response.results:
            tp = TopicPartition(topic, partition)
            st = mine.get(tp)
            if st is None or st.next_fetch_offset() != result.fetch_offset:
                continue  # the user seeked meanwhile, or it was revoked
            if isinstance(result.error, OffsetOutOfRangeError):
                if not st.buffered:  # else: once the application has what is buffered
                    self._reset(tp, st)
                continue
            if result.error is not None:
                self._backoff(tp, st, result.error)
                continue
            self._buffer(tp, st, result.records, result.fetch_offset)

    def _buffer(self, tp: TopicPartition, st: _PartitionState, records: bytes,
                fetch_offset: int) -> None:
        key_de, value_de = self._key_de, self._value_de
        check_crcs = self.config["check.crcs"]
        before = st.buffered_records()
        for batch in iter_batches(records):
            if check_crcs:
                batch.ensure_valid()
            header = batch.header()
            next_offset = header.base_offset + header.last_offset_delta + 1
            if next_offset <= fetch_offset:
                continue
            if self._arrow and key_de is None and value_de is None:
                self._buffer_arrow(st, batch, header, fetch_offset, next_offset)
                continue
            offsets, timestamps, keys, values, headers = batch.record_columns()
            if offsets and offsets[0] < fetch_offset:   # the fetch began inside the batch
                i = bisect_left(offsets, fetch_offset)
                offsets, timestamps, keys, values = (offsets[i:], timestamps[i:], keys[i:],
                                                     values[i:])
                headers = headers[i:] if headers is not None else None
            if key_de is not None:
                keys = list(map(key_de, keys))
            if value_de is not None:
                values = list(map(value_de, values))
            st.buffered.append(_Chunk(
                header.partition_leader_epoch,
                1 if header.attributes & TIMESTAMP_TYPE_MASK else 0,
                offsets, timestamps, keys, values, headers, next_offset))
        st.last_fetched = st.buffered_records() - before

    @staticmethod
    def _buffer_arrow(st: _PartitionState, batch, header, fetch_offset: int,
                      next_offset: int) -> None:
        columns = batch.arrow_columns()
        array = columns["offset"].to_numpy()
        offsets, i = range(next_offset, next_offset), 0
        if len(array):
            first, last = int(array[0]), int(array[-1])
            # A batch's offsets run without a gap unless compaction removed some: then a
            # range stands for them (no Python int per record).
            offsets = (range(first, last + 1) if last - first + 1 == len(array)
                       else array.tolist())
            i = bisect_left(offsets, fetch_offset) if offsets[0] < fetch_offset else 0
        headers = columns.get("headers")
        st.buffered.append(_Chunk(
            header.partition_leader_epoch,
            1 if header.attributes & TIMESTAMP_TYPE_MASK else 0,
            offsets[i:], columns["timestamp"].slice(i), columns["key"].slice(i),
            columns["value"].slice(i), None if headers is None else headers.slice(i),
            next_offset, arrow=True))

    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Records from the assigned, unpaused partitions (at most max.poll.records),
        waiting up to ``timeout_ms`` for some to arrive."""
        return self._poll(timeout_ms, self._drain_buffered)

    def poll_arrow(self, timeout_ms: int = 0, max_records: int | None = None,
                   headers: bool = False):
        """``poll``, as a ``pyarrow.Table`` with Spark's Kafka columns: key, value (binary;
        what a configured deserializer makes of them otherwise), topic, partition, offset,
        timestamp, timestampType, and headers when asked for. At most ``max_records``
        (default max.poll.records) rows; an empty table when nothing came within
        ``timeout_ms``. Positions, commits and the group protocol move as with ``poll``."""
        limit = self.config["max.poll.records"] if max_records is None else max_records
        self._arrow = True   # fetched batches are buffered as Arrow columns from now on
        table = self._poll(timeout_ms, lambda: self._drain_arrow(limit, headers))
        return table if table else _arrow_table([], headers)

    def _poll(self, timeout_ms: int, drain):
        if self._closed:
            raise KafkaError("This consumer has already been closed.")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            group_refs = []
            if self._subscribed:
                group_refs = self._group.poll()
            elif self._group is not None:
                self._group.complete_async_commits()
            self._maybe_auto_commit()
            # Drain first, then fetch (Kafka's order): a partition whose buffer this poll
            # empties joins the next fetch to its host at once, instead of waiting out the
            # long poll of a fetch sent without it.
            records = drain()
            self._send_fetches()   # with records: prefetch while the application works
            if records:
                return records
            left = deadline - time.monotonic()
            if left <= 0:
                return records
            self._collect(left, group_refs)

    def _take(self, limit: int):
        """Up to ``limit`` buffered records, from the assigned unpaused partitions in order:
        ``(topic, partition, chunk, start, end)`` pieces, positions moved past them."""
        taken = 0
        for (topic, partition), st in self._parts.items():
            buffered = st.buffered
            while buffered and not st.paused:
                c = buffered[0]
                start = c.start
                if start < len(c.offsets):
                    if taken >= limit:
                        break
                    end = min(len(c.offsets), start + limit - taken)
                    taken += end - start
                    yield topic, partition, c, start, end
                else:   # no record left in it (compaction): only the position moves
                    end = start
                if end >= len(c.offsets):
                    buffered.popleft()
                    st.position = c.next_offset
                else:
                    c.start = end
                    st.position = c.offsets[end - 1] + 1
                if c.epoch > st.last_epoch:
                    st.last_epoch = c.epoch

    def _drain_buffered(self) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for topic, partition, c, start, end in self._take(self.config["max.poll.records"]):
            n = end - start
            timestamps, keys, values, headers = c.timestamps, c.keys, c.values, c.headers
            if c.arrow:   # buffered for poll_arrow: this poll takes them as Python objects
                timestamps, keys, values = (a.slice(start, n).to_pylist()
                                            for a in (timestamps.cast("int64"), keys, values))
                headers = None if headers is None else [
                    tuple((h["key"], h["value"]) for h in hs)
                    for hs in headers.slice(start, n).to_pylist()]
                start_, end_ = 0, n
            else:
                start_, end_ = start, end
            # One ConsumerRecord per record, built in C from the columns.
            out += map(_new_record, repeat(ConsumerRecord, n), zip(
                repeat(topic, n), repeat(partition, n), c.offsets[start:end],
                timestamps[start_:end_], repeat(c.timestamp_type, n), keys[start_:end_],
                values[start_:end_],
                repeat((), n) if headers is None else headers[start_:end_],
                repeat(c.epoch, n)))
        return out

    def _drain_arrow(self, limit: int, headers: bool):
        """``_drain_buffered``'s records as Arrow columns; None when nothing is buffered."""
        pieces = list(self._take(limit))
        return _arrow_table(pieces, headers) if pieces else None

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while not self._closed:
            yield from self.poll(1000)

    def close(self, autocommit: bool = True, timeout_ms: int = 30_000) -> None:
        """Commit (with ``enable.auto.commit``), give the partitions up (the listener hears
        it) and leave the group."""
        if self._closed:
            return
        try:
            if self._group is not None:
                if autocommit:
                    self._maybe_auto_commit_sync()
                if self._subscribed and self._parts:
                    self._listener.on_partitions_revoked(set(self._parts))
                self._group.close(timeout_ms / 1000)
            self._close_fetch_sessions(min(timeout_ms, 1000) / 1000)
        finally:
            self._network.close()
            self._closed = True
            self._parts = {}

    def _close_fetch_sessions(self, timeout_s: float) -> None:
        """Kafka's consumer closes its fetch sessions on close (a fetch with FINAL_EPOCH),
        so their slots in the leaders' caches are free at once, not after 2 minutes."""
        requests = []
        for host_id, session in self._sessions.items():
            if session.session_id == INVALID_SESSION_ID:
                continue
            request = FetchManyRequest(-1, 0, 0, 0, (), session.session_id, FINAL_EPOCH)
            try:
                requests.append(self._network.send(host_id, self._hosts[host_id], API_FETCH,
                                                   encode_fetch_many_request(request)))
            except Exception:  # no connection to the host; the session expires there
                pass
        deadline = time.monotonic() + timeout_s
        while not all(r.done for r in requests) and time.monotonic() < deadline:
            self._network.poll(deadline - time.monotonic())

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
