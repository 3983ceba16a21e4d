"""The consumer's fetching (Kafka's Fetcher, with its FetchCollector): one fetch in flight per
leader replica host for every fetchable partition it leads, each in its fetch session
(KIP-227), sent over the host's listener (``rafka.client.network_client``); the answers
buffered per partition as columns, handed out by ``poll`` as records or Arrow tables; a
partition's position checked against a new leader's log by leader epoch
(OffsetsForLeaderEpoch), so that a truncated log is detected rather than silently skipped.

The partitions' states (``PartitionState``) belong to the consumer, which passes them to
each call: assignment, seeks and resets are the consumer's.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Callable, Mapping

from actors.replica.channel import API_FETCH
from protocols.errors import KafkaError, OffsetOutOfRangeError, TopicAuthorizationFailedError
from protocols.fetch_session_handler import (FINAL_EPOCH, INVALID_SESSION_ID,
                                             FetchSessionHandler)
from protocols.messages import (ISOLATION_LEVELS, READ_COMMITTED, FetchManyRequest,
                                FetchRequest, decode_fetch_many_response,
                                encode_fetch_many_request)
from protocols.topics import TopicPartition
from protocols.wire import decode
from rafka.client.metadata import ClientMetadata
from rafka.client.network_client import ClientRequest, NetworkClient
from rafka.client.serde import deserializer
from rafka.client.throttle_sensor import ThrottleSensor
from rafka.consumer.arrow_table import arrow_table
from rafka.consumer.consumer_record import ConsumerRecord
from rafka.consumer.fetch_buffer import buffer_fetched, take
from rafka.consumer.subscription_state import PartitionState

log = logging.getLogger(__name__)

_new_record = tuple.__new__


@dataclass(eq=False)
class HostFetch:
    """A fetch in flight to one leader host (Kafka's FetchRequest to one node)."""
    request: ClientRequest | None
    partitions: list[TopicPartition]   # every partition it fetches (named or in the session)
    was_full: bool


class Fetcher:
    def __init__(self, config: Mapping[str, Any], metadata: ClientMetadata,
                 reset: Callable[[TopicPartition, PartitionState], None], door: Any = None):
        """``reset(tp, state)``: the consumer's offset reset, for a partition with no
        position (the group's committed offset, else ``auto.offset.reset``)."""
        self.config = config
        self.metadata = metadata
        self._reset = reset
        # None: the bytes are handed out as they are (no call per record).
        self._key_de = None if config["key.deserializer"] is None else \
            deserializer(config["key.deserializer"], "key.deserializer")
        self._value_de = None if config["value.deserializer"] is None else \
            deserializer(config["value.deserializer"], "value.deserializer")
        self._next_fetch = -1
        # read_committed reads up to the last stable offset and skips aborted transactions
        # (``SkippedBatches``).
        self._isolation = ISOLATION_LEVELS[config["isolation.level"]]
        # One fetch in flight per leader replica host, each in its fetch session.
        self._fetches: dict[str, HostFetch] = {}
        # The connections to leader hosts (Kafka's NetworkClient), and the group's Ray calls
        # in flight that end a wait for fetches.
        self.network = NetworkClient(door)
        # The throttle times the hosts answered (client quotas): fetch-throttle-time-*.
        self.throttle = ThrottleSensor()
        self._watched: dict[Any, Any] = {}
        self._sessions: dict[str, FetchSessionHandler] = {}
        self._request_bytes: dict[str, int] = {}
        self._hosts: dict[str, Any] = {}
        self.arrow = False   # poll_arrow was used: buffer fetched batches as Arrow columns
        # A fetch answer's TOPIC_AUTHORIZATION_FAILED, raised once the answers are in.
        self.refused: KafkaError | None = None

    def _validate_position(self, tp: TopicPartition, st: PartitionState, leader) -> None:
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

    def send_fetches(self, parts: dict[TopicPartition, PartitionState]) -> None:
        """Kafka's Fetcher.sendFetches: one fetch per leader host with none in flight, for
        every fetchable partition it leads (assigned, not paused, nothing buffered, not
        backing off), in that host's fetch session (KIP-227)."""
        now = time.monotonic()
        c = self.config
        wanted: dict[str, tuple[Any, dict]] = {}
        needed: set[str] = set()
        items = list(parts.items())
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
                c["fetch.min.bytes"], c["fetch.max.wait.ms"], isolation_level=self._isolation)
        for host_id, (host, requests) in wanted.items():
            if host_id not in needed:
                continue
            self._hosts[host_id] = host
            session = self._sessions.setdefault(host_id, FetchSessionHandler())
            fetch = HostFetch(None, list(requests), session.full)
            named, forgotten, session_id, epoch = session.build(requests)
            request = FetchManyRequest(-1, c["fetch.max.wait.ms"], c["fetch.min.bytes"],
                                       c["fetch.max.bytes"], named, session_id, epoch,
                                       forgotten, client_id=c["client.id"])
            payload = encode_fetch_many_request(request)
            self._request_bytes[host_id] = len(payload)
            try:
                fetch.request = self.network.send(host_id, host, API_FETCH, payload)
            except Exception as e:  # no connection to the host
                session.handle_error()
                for tp in requests:
                    self._backoff(tp, parts[tp], e)
                continue
            self._fetches[host_id] = fetch
            for tp in requests:
                parts[tp].in_flight = fetch

    def request_sizes(self) -> dict[str, int]:
        """The size in bytes of the last fetch request sent to each leader host (in a fetch
        session, an idle consumer's does not grow with its partitions)."""
        return dict(self._request_bytes)

    def _backoff(self, tp: TopicPartition, st: PartitionState, error: Exception) -> None:
        log.debug("%s: fetch failed (%r), refreshing metadata", tp, error)
        st.in_flight = None
        self.metadata.forget(tp)
        st.retry_at = time.monotonic() + self.config["retry.backoff.ms"] / 1000

    def collect(self, parts: dict[TopicPartition, PartitionState], timeout_s: float,
                also: list = ()) -> None:
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
                future.add_done_callback(lambda _: self.network.wakeup())
            watched[ref] = future
        self._watched = watched
        if not any(r.done for r in pending) and not any(f.done() for f in watched.values()):
            self.network.poll(timeout_s)
        for request, host_id in pending.items():   # everything that is ready, not just one
            if request.done:
                self._complete_fetch(parts, self._fetches.pop(host_id),
                                     self._sessions[host_id])
        refused, self.refused = self.refused, None
        if refused is not None:
            raise refused

    def _complete_fetch(self, parts: dict[TopicPartition, PartitionState], fetch: HostFetch,
                        session: FetchSessionHandler) -> None:
        mine = {}   # the partitions whose answer this fetch still is (no seek, no reset)
        for tp in fetch.partitions:
            st = parts.get(tp)
            if st is not None and st.in_flight is fetch:
                st.in_flight = None
                mine[tp] = st
        try:
            # Records read where they arrived: the answer's buffer is the consumer's.
            response = decode_fetch_many_response(fetch.request.result(), views=True)
        except Exception as e:   # the leader's host died under the request
            session.handle_error()
            for tp, st in mine.items():
                self._backoff(tp, st, e)
            return
        self.throttle.record(response.throttle_time_ms)
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
            if isinstance(result.error, TopicAuthorizationFailedError):
                # Raised from poll, as Kafka's consumer raises it; the next poll asks again.
                self._backoff(tp, st, result.error)
                self.refused = result.error
                continue
            if result.error is not None:
                self._backoff(tp, st, result.error)
                continue
            buffer_fetched(st, result.records, result.fetch_offset,
                           result.aborted_transactions,
                           read_committed=self._isolation == READ_COMMITTED,
                           check_crcs=self.config["check.crcs"],
                           as_arrow=self.arrow and self._key_de is None
                           and self._value_de is None,
                           key_de=self._key_de, value_de=self._value_de)

    def drain_buffered(self, parts: dict[TopicPartition, PartitionState]
                       ) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for topic, partition, c, start, end in take(parts, self.config["max.poll.records"]):
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

    def drain_arrow(self, parts: dict[TopicPartition, PartitionState], limit: int,
                    headers: bool):
        """``drain_buffered``'s records as Arrow columns; None when nothing is buffered."""
        pieces = list(take(parts, limit))
        return arrow_table(pieces, headers) if pieces else None

    def close_sessions(self, timeout_s: float) -> None:
        """Kafka's consumer closes its fetch sessions on close (a fetch with FINAL_EPOCH),
        so their slots in the leaders' caches are free at once, not after 2 minutes."""
        requests = []
        for host_id, session in self._sessions.items():
            if session.session_id == INVALID_SESSION_ID:
                continue
            request = FetchManyRequest(-1, 0, 0, 0, (), session.session_id, FINAL_EPOCH,
                                       client_id=self.config["client.id"])
            try:
                requests.append(self.network.send(host_id, self._hosts[host_id], API_FETCH,
                                                   encode_fetch_many_request(request)))
            except Exception:  # no connection to the host; the session expires there
                pass
        deadline = time.monotonic() + timeout_s
        while not all(r.done for r in requests) and time.monotonic() < deadline:
            self.network.poll(deadline - time.monotonic())
