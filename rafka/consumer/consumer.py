"""``rafka.Consumer``: Kafka's consumer on Ray actor handles.

    consumer = rafka.Consumer(cluster, {"group.id": "billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["events"])               # or assign([("events", 0), ...])
    for record in consumer:                      # or consumer.poll(timeout_ms=1000)
        print(record.offset, record.value)

With ``subscribe`` the partitions come from the group (``rafka.consumer.coordinator``):
poll drives the rebalances, starts each new partition at the group's committed offset (else
``auto.offset.reset``), and with ``enable.auto.commit`` commits the positions every
``auto.commit.interval.ms``, before a rebalance takes partitions away and on close.

Fetching is the fetcher's (``rafka.consumer.fetcher``): one long-polled fetch in flight per
leader replica host, in a fetch session, prefetching while the application handles what
``poll`` handed out (at most ``max.poll.records``); after a leader change, a position is
checked against the new leader's log by leader epoch.
"""
from __future__ import annotations

import logging
import re
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

from protocols.errors import (IllegalStateError, InvalidGroupIdError, InvalidOffsetError,
                              KafkaError)
from protocols.messages import (EARLIEST_TIMESTAMP, ISOLATION_LEVELS, LATEST_TIMESTAMP,
                                OffsetAndMetadata, offsets_to_commit)
from protocols.topics import TopicPartition, validate_topic_name
from rafka.client.list_offsets import list_offsets
from rafka.client.metadata import ClientMetadata
from rafka.client.ray_door import RayDoor
from rafka.consumer.arrow_table import arrow_table
from rafka.consumer.config import CONSUMER_CONFIG
from rafka.consumer.consumer_record import ConsumerRecord
from rafka.consumer.coordinator import (ConsumerCoordinator, ConsumerGroupMetadata,
                                        ConsumerRebalanceListener)
from rafka.consumer.fetcher import Fetcher
from rafka.consumer.subscription_state import PartitionState

log = logging.getLogger(__name__)

class NoOffsetForPartitionError(InvalidOffsetError):
    """auto.offset.reset=none and the position is unknown or out of range."""


@dataclass(frozen=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


class Consumer:
    def __init__(self, cluster, config: Mapping[str, Any] | None = None, **kwargs: Any):
        self.config = CONSUMER_CONFIG.parse(config, **kwargs)
        self.cluster = cluster
        # Who it is at the Ray door (its SASL settings): checked on a cluster with an
        # authorizer.
        self.door = RayDoor(cluster, self.config, self.config["request.timeout.ms"] / 1000)
        self.door.sign_in()
        self.metadata = ClientMetadata(cluster, self.config["metadata.max.age.ms"], self.door)
        self._parts: dict[TopicPartition, PartitionState] = {}
        self._fetcher = Fetcher(self.config, self.metadata, self._reset, self.door)
        self._closed = False
        self._group: ConsumerCoordinator | None = None
        if self.config["group.id"]:
            self._group = ConsumerCoordinator(cluster, self.config, self.metadata,
                                              self._revoked, self._assigned, self._lost,
                                              self.door)
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
            # Kafka's consumer learns of a bad name from the metadata answer
            # (INVALID_TOPIC_EXCEPTION); checked here, it is said before the group is joined.
            names = [validate_topic_name(t) for t in topics]
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
            self._parts.setdefault(tp, PartitionState())
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

    def commit(self, offsets: Mapping | None = None, timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (``{tp: offset or OffsetAndMetadata}``; default: the positions
        of every assigned partition) and wait. CommitFailedError when the group has
        rebalanced meanwhile."""
        group = self._require_group()
        group.complete_async_commits()
        chosen = self._current_offsets() if offsets is None else offsets_to_commit(offsets)
        timeout = self.config["request.timeout.ms"] if timeout_ms is None else timeout_ms
        group.commit_sync(chosen, timeout / 1000)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group, generation and member this consumer is (Kafka's groupMetadata()): for a
        transactional producer's ``send_offsets_to_transaction``."""
        return self._require_group().group_metadata()

    def commit_async(self, offsets: Mapping | None = None, callback=None) -> None:
        """Commit without waiting; ``callback(offsets, error_or_None)`` runs in a later poll
        (or commit / close)."""
        group = self._require_group()
        chosen = self._current_offsets() if offsets is None else offsets_to_commit(offsets)
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
        self._parts = {tp: self._parts.get(tp, PartitionState()) for tp in wanted}

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def _state(self, tp) -> PartitionState:
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
        request.timeout.ms; for read_committed, latest is the last stable offset."""
        return list_offsets(self.metadata, wanted, self.config["request.timeout.ms"] / 1000,
                            door=self.door,
                            backoff_s=self.config["retry.backoff.ms"] / 1000,
                            isolation_level=ISOLATION_LEVELS[self.config["isolation.level"]])

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

    def _reset(self, tp: TopicPartition, st: PartitionState) -> None:
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
    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Records from the assigned, unpaused partitions (at most max.poll.records),
        waiting up to ``timeout_ms`` for some to arrive."""
        return self._poll(timeout_ms, lambda: self._fetcher.drain_buffered(self._parts))

    def poll_arrow(self, timeout_ms: int = 0, max_records: int | None = None,
                   headers: bool = False):
        """``poll``, as a ``pyarrow.Table`` with Spark's Kafka columns: key, value (binary;
        what a configured deserializer makes of them otherwise), topic, partition, offset,
        timestamp, timestampType, and headers when asked for. At most ``max_records``
        rows; by default every record buffered (what the last fetches brought: up to
        ``fetch.max.bytes`` a fetch, ``max.partition.fetch.bytes`` a partition), not
        ``max.poll.records``, whose 500 suit ``poll``'s records, not a table's columns. An
        empty table when nothing came within ``timeout_ms``. Positions, commits and the
        group protocol move as with ``poll``."""
        limit = sys.maxsize if max_records is None else max_records
        self._fetcher.arrow = True   # fetched batches are buffered as Arrow columns from now on
        table = self._poll(timeout_ms,
                           lambda: self._fetcher.drain_arrow(self._parts, limit, headers))
        return table if table else arrow_table([], headers)

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
            self._fetcher.send_fetches(self._parts)   # with records: prefetch while the application works
            if records:
                return records
            left = deadline - time.monotonic()
            if left <= 0:
                return records
            self._fetcher.collect(self._parts, left, group_refs)

    def metrics(self) -> dict[str, float]:
        """Kafka's consumer metrics this consumer keeps: ``fetch-throttle-time-avg`` and
        ``-max``, the ms the brokers throttled it for being over its client quota (NaN
        before any answer)."""
        avg, most = self._fetcher.throttle.measure()
        return {"fetch-throttle-time-avg": avg, "fetch-throttle-time-max": most}

    def fetch_request_sizes(self) -> dict[str, int]:
        """The size in bytes of the last fetch request sent to each leader host (in a fetch
        session, an idle consumer's does not grow with its partitions)."""
        return self._fetcher.request_sizes()

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
            self._fetcher.close_sessions(min(timeout_ms, 1000) / 1000)
        finally:
            self._fetcher.network.close()
            self.door.close()
            self._closed = True
            self._parts = {}

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
