"""ReplicaFetcher: one follower host's fetching from one leader host, pure (Kafka's
ReplicaFetcherThread / AbstractFetcherThread, without the thread).

It holds the follower replicas that follow partitions led on one leader host and says what
to send next: OffsetsForLeaderEpoch for the partitions that must truncate first (KIP-101,
KIP-279), else one long-polled ``FetchManyRequest`` for all the others. Answers come back
per partition and go to each replica's own core (``PartitionReplica``), which keeps the HW,
truncation and leader-epoch rules. A partition whose answer is an error (or whose request
failed as a whole) backs off alone, exponentially from 50 ms up to
``replica.fetch.backoff.ms``; the others keep fetching. Fetches run in a fetch session
(KIP-227, ``protocols.fetch_session_handler``): after the first full request, each names
only the partitions whose position changed, so an idle fetcher's request does not grow with
the partitions it holds. Building it does not either: only the partitions something happened
to (an answer, a backoff, added or removed, a log start moved by retention) are looked at
again. The shell (``actors.replica.replica_host``) sends the requests, calls back with answers,
errors and timeouts, and adds and removes partitions as leadership moves. Time is an
injected clock in milliseconds.
"""
from __future__ import annotations

from typing import Callable

from actors.replica.partition import PartitionReplica, ReplicaConfig, Role
from protocols.errors import KafkaError, OffsetOutOfRangeError
from protocols.fetch_session_handler import FetchSessionHandler
from protocols.messages import (FetchManyRequest, FetchManyResponse, FetchRequest,
                                OffsetsForLeaderEpochRequest)

FIRST_BACKOFF_MS = 50


class ReplicaFetcher:
    def __init__(self, broker_id: int, config: ReplicaConfig, clock: Callable[[], int],
                 replica_epoch: int = -1):
        self.broker_id = broker_id
        # This follower's start (FetchManyRequest.replica_epoch); the host may learn it
        # after its fetchers started.
        self.replica_epoch = replica_epoch
        self.config = config
        self.clock = clock
        self.partitions: dict[tuple[str, int], PartitionReplica] = {}
        # The leader epoch each partition was added in: an answer for another epoch is not
        # this fetcher's to apply.
        self._epochs: dict[tuple[str, int], int] = {}
        self._backoff_until: dict[tuple[str, int], int] = {}
        self._failures: dict[tuple[str, int], int] = {}
        self.session = FetchSessionHandler()
        # What each partition asks for next, as of the last look at it: the ready ones'
        # FetchRequests, and the OffsetsForLeaderEpoch entries of those that must truncate.
        self._ready: dict[tuple[str, int], FetchRequest] = {}
        self._truncating: dict[tuple[str, int], tuple] = {}
        # The partitions to look at again before the next request: something happened to
        # them (an answer, a backoff, added or removed). A dict, for a stable order.
        self._changed: dict[tuple[str, int], None] = {}
        # Those looked at again since the last fetch request was built (a truncation round
        # in between sends no fetch: the next fetch must still name what moved before it).
        self._unbuilt: dict[tuple[str, int], None] = {}
        self._in_flight_full = True   # whether the fetch in flight is a full one

    def __len__(self) -> int:
        return len(self.partitions)

    def add_partition(self, replica: PartitionReplica) -> None:
        key = (replica.topic, replica.partition)
        self.partitions[key] = replica
        self._epochs[key] = replica.leader_epoch
        self._backoff_until.pop(key, None)
        self._failures.pop(key, None)
        self._changed[key] = None

    def remove_partition(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        for d in (self.partitions, self._epochs, self._backoff_until, self._failures):
            d.pop(key, None)
        self._changed[key] = None

    def partition_changed(self, topic: str, partition: int) -> None:
        """Something outside the fetcher moved what the partition asks for (its log start,
        by retention): look at it again before the next request."""
        if (topic, partition) in self.partitions:
            self._changed[(topic, partition)] = None

    def _current(self, topic: str, partition: int) -> PartitionReplica | None:
        """The replica if it still follows in the epoch it was added in."""
        key = (topic, partition)
        r = self.partitions.get(key)
        if r is None or r.role is not Role.FOLLOWER or r.leader_epoch != self._epochs[key]:
            return None
        return r

    # ---- what to send ----------------------------------------------------------------------
    def next_request(self) -> OffsetsForLeaderEpochRequest | FetchManyRequest | None:
        """Truncation first, for the partitions that need it; else one fetch for all the
        ready partitions; None when no partition is ready (see ``next_wakeup_ms``)."""
        now = self.clock()
        changed = self._changed
        for key in self._backoff_until:   # a backoff may have run out
            changed[key] = None
        self._changed = {}
        unbuilt = self._unbuilt
        for key in changed:
            self._look_again(key, now)
            unbuilt[key] = None
        if self._truncating:
            return OffsetsForLeaderEpochRequest(self.broker_id, tuple(self._truncating.values()))
        if not self._ready:
            return None
        was_full = self.session.full
        named, forgotten, session_id, epoch = self.session.build(self._ready, unbuilt)
        self._unbuilt = {}
        self._in_flight_full = was_full
        c = self.config
        return FetchManyRequest(self.broker_id, c.replica_fetch_wait_max_ms,
                                c.replica_fetch_min_bytes, c.replica_fetch_response_max_bytes,
                                named, session_id, epoch, forgotten, self.replica_epoch)

    def _look_again(self, key: tuple[str, int], now: int) -> None:
        """What the partition asks for now: nothing (gone, backing off, not following in
        the epoch it was added in), truncation, or a fetch."""
        self._ready.pop(key, None)
        self._truncating.pop(key, None)
        r = self.partitions.get(key)
        if r is None:
            return
        until = self._backoff_until.get(key)
        if until is not None:
            if until > now:
                return
            del self._backoff_until[key]
        if r.role is not Role.FOLLOWER or r.leader_epoch != self._epochs[key]:
            return
        epoch = r.truncation_request()
        if epoch is not None:
            self._truncating[key] = (r.topic, r.partition, epoch, r.leader_epoch)
            return
        request = r.fetch_request()
        if request is not None:
            self._ready[key] = request

    def next_wakeup_ms(self) -> int | None:
        """When the earliest backed-off partition may go again (None: none is waiting)."""
        now = self.clock()
        waits = [t for key, t in self._backoff_until.items()
                 if t > now and key in self.partitions]
        return min(waits) if waits else None

    # ---- answers ---------------------------------------------------------------------------
    def on_epoch_end_offsets(self, request: OffsetsForLeaderEpochRequest,
                             answers) -> None:
        for topic, partition, answer in answers:
            self._changed[(topic, partition)] = None
            r = self._current(topic, partition)
            if r is None:
                continue
            if isinstance(answer, KafkaError):
                self._back_off((topic, partition))
                continue
            epoch, end_offset = answer
            sent_in = next((current for t, p, _, current in request.partitions
                            if (t, p) == (topic, partition)), None)
            r.on_leader_epoch_end_offset(epoch, end_offset, leader_epoch=sent_in)
            self._failures.pop((topic, partition), None)

    def on_fetch_response(self, response: FetchManyResponse) -> None:
        """Apply the answer to the last fetch. A session error applies nothing: the next
        request is a full one, sent at once."""
        if not self.session.handle_response(response, was_full=self._in_flight_full):
            return
        for topic, partition, result in response.results:
            self._changed[(topic, partition)] = None
            r = self._current(topic, partition)
            if r is None:
                continue
            r.on_fetch_result(result)
            if result.error is not None and not isinstance(result.error, OffsetOutOfRangeError):
                self._back_off((topic, partition))
            else:
                self._failures.pop((topic, partition), None)

    def on_error(self, request: OffsetsForLeaderEpochRequest | FetchManyRequest) -> None:
        """The request failed as a whole (the leader host is gone or restarting, or the
        request timed out): every partition in it backs off."""
        if isinstance(request, FetchManyRequest):
            self.session.handle_error()
            # Every partition it was for (an incremental request names only some of them).
            keys = list(self._ready)
        else:
            keys = [(topic, partition) for topic, partition, *_ in request.partitions]
        for key in keys:
            if key in self.partitions:
                self._back_off(key)

    def _back_off(self, key: tuple[str, int]) -> None:
        failures = self._failures.get(key, 0)
        # From 50 ms up to replica.fetch.backoff.ms: right after a leader change the leader
        # is usually just a moment behind us.
        delay = min(self.config.replica_fetch_backoff_ms, FIRST_BACKOFF_MS * 2 ** failures)
        self._backoff_until[key] = self.clock() + delay
        self._failures[key] = failures + 1
        self._changed[key] = None
