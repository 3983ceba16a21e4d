"""Fetch sessions (KIP-227) on the leader's side: Kafka's FetchSession, FetchSessionCache and
FetchManager.newContext, pure.

A fetcher's first request in a session is full: it names every partition, and the answer
carries a new session id. Each later request is incremental: it names only the partitions
added or changed since (a new fetch offset, leader epoch or log start offset) and those to
forget; the session remembers the rest, so an idle follower's request does not grow with the
partitions it follows. An incremental answer carries only the partitions with something new
to say: records, an error, a high watermark or log start offset other than the last one
sent.

An idle session costs the leader nothing per partition. A partition with nothing to say at
an incremental fetch (its fetcher at our log end, or a consumer at the HW; nothing new to
tell; for a follower, in sync) is *parked*: later fetches skip it, and the session listens
on the fetch purgatory for its key instead. Any event there (an append, a HW, log start,
ISR or leadership change) unparks it, and a fetch of the session waiting at that moment
takes it in. A parked follower counts as caught up at each of the session's fetches (its
``FollowerState`` reads the session's last fetch time), as if its position had been
recorded partition by partition, which is what Kafka does.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (per replica host: a
rafka host is where Kafka's broker-wide cache would stand). When it is full, a new session
takes the slot of one unused for ``EVICTION_MS``, else of the least valuable one if the new
one is worth more (a follower's over a consumer's, then more partitions), else the fetcher
goes on with full requests, without a session. Time is an injected clock in milliseconds.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from protocols.errors import (FetchSessionIdNotFoundError, InvalidFetchSessionEpochError,
                              KafkaError)
from protocols.fetch_session_handler import (FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID,
                                             next_epoch)
from protocols.messages import FetchManyRequest, FetchManyResponse, FetchRequest, FetchResult
from protocols.topics import TopicPartition
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused this long may be evicted
# for a new one.
EVICTION_MS = 120_000



@dataclass
class CachedPartition:
    """A partition of a session: where its fetcher reads from, and what it was last told."""

    request: FetchRequest
    high_watermark: int = -1   # -1: not told yet (the next answer must carry it)
    log_start_offset: int = -1
    last_stable_offset: int = -1

    def quiet(self, high_watermark: int, log_start_offset: int,
              last_stable_offset: int = -1) -> bool:
        """Nothing new to tell but possibly records (the caller checks those)."""
        return (high_watermark == self.high_watermark
                and log_start_offset == self.log_start_offset
                and last_stable_offset == self.last_stable_offset)

    def must_respond(self, result: FetchResult) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData: does the answer carry it? The
        cached view moves to what is sent."""
        respond = bool(result.records)
        if result.high_watermark != self.high_watermark:
            respond = True
            self.high_watermark = result.high_watermark
        if result.log_start_offset != self.log_start_offset:
            respond = True
            self.log_start_offset = result.log_start_offset
        if result.last_stable_offset != self.last_stable_offset:
            respond = True
            self.last_stable_offset = result.last_stable_offset
        if result.error is not None:
            respond = True
            self.high_watermark = -1  # tell it again next time: it may have moved meanwhile
        return respond


@dataclass(eq=False)   # by identity: it listens on the purgatory for its parked keys
class FetchSession:
    id: int
    privileged: bool  # a follower's (Kafka: isFromFollower); outranks consumers' in eviction
    partitions: dict[TopicPartition, CachedPartition]
    creation_ms: int
    last_used_ms: int
    epoch: int = 1    # the epoch the next incremental request must carry

    @property
    def size(self) -> int:
        return len(self.partitions)

    # ((topic, partition, FetchRequest), ...) of the partitions not parked, as of the last
    # change: an idle session's fetches (twice a second per follower fetcher) reuse it.
    _view: tuple | None = field(default=None, repr=False, compare=False)
    # Parked partitions: (their PartitionReplica, the fetcher's replica id) by key.
    parked: dict = field(default_factory=dict, repr=False, compare=False)
    purgatory: Any = field(default=None, repr=False, compare=False)
    # The DelayedFetchMany answering the session's latest request while it waits.
    pending: Any = field(default=None, repr=False, compare=False)

    def update(self, request: FetchManyRequest) -> None:
        """Apply an incremental request: add and change what it names, drop what it forgets.
        A changed partition is told its high watermark again (its fetcher may have dropped
        an earlier answer when its leader epoch moved)."""
        for topic, partition, req in request.partitions:
            self.unpark((topic, partition))
            self.partitions[(topic, partition)] = CachedPartition(req)
        for topic, partition in request.forgotten:
            self.unpark((topic, partition))
            self.partitions.pop((topic, partition), None)
        if request.partitions or request.forgotten:
            self._view = None

    def move_to_end(self, key: TopicPartition) -> None:
        self.partitions[key] = self.partitions.pop(key)
        self._view = None

    def fetch_partitions(self) -> tuple:
        if self._view is None:
            parked = self.parked
            self._view = tuple((t, p, c.request) for (t, p), c in self.partitions.items()
                               if (t, p) not in parked)
        return self._view

    def park(self, key: TopicPartition, core: Any, replica_id: int, purgatory: Any) -> None:
        """Skip ``key`` at the next fetches until an event on it (see the module's text)."""
        self.parked[key] = (core, replica_id)
        self.purgatory = purgatory
        purgatory.listen(key, self)
        if replica_id >= 0:
            core.park_follower(replica_id, self)
        self._view = None

    def unpark(self, key: TopicPartition) -> bool:
        entry = self.parked.pop(key, None)
        if entry is None:
            return False
        core, replica_id = entry
        self.purgatory.unlisten(key, self)
        if replica_id >= 0:
            core.unpark_follower(replica_id, self)
        self._view = None
        return True

    def on_key_event(self, key: TopicPartition) -> None:
        """The fetch purgatory's listener: something happened to a parked partition. A fetch
        of this session waiting now reads it too (it is checked right after this call)."""
        if not self.unpark(key):
            return
        pending = self.pending
        cached = self.partitions.get(key)
        if pending is not None and not pending.is_completed and cached is not None:
            pending.add_partition(key, cached.request)
            self.purgatory.watch_key(pending, key)

    def close(self) -> None:
        """The session ends (removed, evicted or emptied): nothing stays parked."""
        for key in list(self.parked):
            self.unpark(key)
        self.pending = None


class FetchSessionCache:
    def __init__(self, max_entries: int = 1000, clock: Callable[[], int] = lambda: 0,
                 eviction_ms: int = EVICTION_MS, rng: random.Random | None = None):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.clock = clock
        self._rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def partitions_cached(self) -> int:
        return sum(s.size for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def _new_id(self) -> int:
        # Random, as Kafka's: a fetcher that outlived a leader host's restart must not find
        # its old id taken by someone else's session.
        while True:
            session_id = self._rng.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(self, privileged: bool,
                             partitions: dict[TopicPartition, CachedPartition]) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no slot for it."""
        now = self.clock()
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(
                privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, partitions, now, now)
        self.sessions[session.id] = session
        return session.id

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's FetchSessionCache.tryEvict: a stale session first, else the least
        valuable one if the new session is worth at least as much."""
        stale = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        if now - stale.last_used_ms > self.eviction_ms:
            victim = stale
        else:
            # A follower's session may take only a consumer's slot; a consumer's, any less
            # valuable one (ordered as Kafka's EvictableKey: privileged, size, id).
            candidates = [s for s in self.sessions.values()
                          if not (privileged and s.privileged)]
            if not candidates:
                return False
            victim = min(candidates, key=lambda s: (s.privileged, s.size, s.id))
            if (privileged, size) < (victim.privileged, victim.size):
                return False
        del self.sessions[victim.id]
        victim.close()
        self.evictions += 1
        return True

    def touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.clock()


@dataclass
class FetchContext:
    """What one request reads and how its answer is cut: Kafka's Sessionless, Full,
    Incremental and SessionError FetchContexts in one shape."""

    cache: FetchSessionCache | None
    request: FetchManyRequest
    partitions: tuple = ()       # ((topic, partition, FetchRequest), ...) to read
    session: FetchSession | None = None  # an incremental request's session
    create_session: bool = False  # a full request asking for one (epoch 0)
    error: KafkaError | None = None

    def respond(self, results: list) -> FetchManyResponse:
        """The answer: a full one with every partition (and the new session, if one was
        asked for and a slot found), or an incremental one with only what is new."""
        if self.error is not None:
            return FetchManyResponse((), self.error)
        if self.session is not None:
            kept, with_records = [], []
            for topic, partition, result in results:
                cached = self.session.partitions.get((topic, partition))
                if cached is None or cached.must_respond(result):
                    kept.append((topic, partition, result))
                    if result.records and cached is not None:
                        with_records.append((topic, partition))
            # Kafka moves a partition that got records to the end of the session, so that a
            # response full at max_bytes does not starve the partitions behind it next time.
            for key in with_records:
                self.session.move_to_end(key)
            return FetchManyResponse(tuple(kept), None, self.session.id)
        if not self.create_session or self.cache is None:
            return FetchManyResponse(tuple(results))
        requests = {(t, p): r for t, p, r in self.partitions}
        partitions = {}
        for topic, partition, result in results:
            cached = partitions[(topic, partition)] = CachedPartition(requests[(topic, partition)])
            cached.must_respond(result)
        session_id = self.cache.maybe_create_session(self.request.replica_id >= 0, partitions)
        return FetchManyResponse(tuple(results), None, session_id)


def new_context(cache: FetchSessionCache | None, request: FetchManyRequest) -> FetchContext:
    """Kafka's FetchManager.newContext."""
    if request.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if request.session_id != INVALID_SESSION_ID and cache is not None:
            cache.remove(request.session_id)  # a full request closes the session it names
        return FetchContext(cache, request, request.partitions,
                            create_session=request.session_epoch == INITIAL_EPOCH)
    session = None if cache is None else cache.get(request.session_id)
    if session is None:
        return FetchContext(cache, request, error=FetchSessionIdNotFoundError(
            f"Fetch session {request.session_id} not found"))
    if session.epoch != request.session_epoch:
        return FetchContext(cache, request, error=InvalidFetchSessionEpochError(
            f"Fetch session {session.id} expected epoch {session.epoch}, but got "
            f"{request.session_epoch}"))
    session.update(request)
    if not session.partitions:
        cache.remove(session.id)  # Kafka: an emptied session ends; answer sessionless
        return FetchContext(cache, request, ())
    cache.touch(session)
    session.epoch = next_epoch(session.epoch)
    return FetchContext(cache, request, session.fetch_partitions(), session=session)
