"""A fetch for many partitions at once, on the leader's side: Kafka's
ReplicaManager.fetchMessages and its DelayedFetch, pure.

One request names many partitions of one host; each is read as ``PartitionReplica.fetch``
reads it (a follower's position updates the leader's view of it: ISR, HW). The request is
answered at once when ``min_bytes`` are there over all partitions, when any partition has an
error, or when it may not wait; otherwise one ``DelayedFetchMany`` waits in the host's
shared fetch purgatory, watched under every partition's key, until an append or a HW rise
on any of them makes ``min_bytes`` readable, leadership of one moves, or ``max_wait_ms``
runs out. ``max_bytes`` bounds the whole response: once it is spent, the remaining
partitions answer with no records (their positions still count, as in Kafka).

In a fetch session (``fetch_session.py``) the request reads the partitions of the session
that are not parked, the answer leaves out those with nothing new, and a partition with
nothing to read and nothing new to say is parked: the session's later fetches skip it until
an event on it. An idle session's fetch costs nothing per partition.
"""
from __future__ import annotations

from typing import Callable, Mapping

from actors.replica.fetch_session import FetchContext, FetchSessionCache, new_context
from actors.replica.partition import PartitionReplica, Role, fetch_limit
from actors.timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from protocols.errors import KafkaError, NotLeaderOrFollowerError
from protocols.messages import (FetchManyRequest, FetchManyResponse, FetchRequest, FetchResult,
                                OffsetsForLeaderEpochRequest)

Replicas = Mapping[tuple[str, int], PartitionReplica]


def _error_result(core: PartitionReplica | None, request: FetchRequest,
                  error: KafkaError) -> FetchResult:
    return FetchResult(error=error, leader_epoch=-1 if core is None else core.leader_epoch,
                       fetch_offset=request.fetch_offset)


def _not_here(topic: str, partition: int, broker_id: int) -> NotLeaderOrFollowerError:
    return NotLeaderOrFollowerError(f"Broker {broker_id} does not host {topic}-{partition}")


def read_partitions(replicas: Replicas, context: FetchContext, broker_id: int,
                    moved: list | None = None, partitions=None, purgatory=None,
                    as_region: bool = False) -> list:
    """Read the partitions of the request (``partitions``, else ``context.partitions``):
    ``[(topic, partition, FetchResult), ...]``. With ``moved`` (a list), as the request
    arrives: the positions are recorded and the partitions where one moved what the leader
    knows (its ISR or HW may change) are added to it; with ``purgatory`` too, the idle
    partitions of an incremental fetch are parked in its session. Without, when a delayed
    fetch completes: reads only. The answer is ``context.respond(results)``, made once,
    when it is sent. ``as_region``: consumers' records as FileRegions
    (``PartitionReplica.read_for_fetch``)."""
    budget = context.request.max_bytes
    first = moved is not None
    session = context.session
    # In an incremental fetch, what the session last told each partition's fetcher.
    told = session.partitions if session is not None else {}
    park = first and purgatory is not None and session is not None
    replica_epoch = context.request.replica_epoch
    results = []
    for topic, partition, req in (context.partitions if partitions is None else partitions):
        key = (topic, partition)
        core = replicas.get(key)
        try:
            if core is None:
                raise _not_here(topic, partition, broker_id)
            changed = False
            if first:
                changed = core.accept_fetch(req, replica_epoch)
                if changed:
                    moved.append(key)
            elif core.role is not Role.LEADER:
                raise NotLeaderOrFollowerError(f"Leadership of {core.name} moved while a "
                                               "fetch waited")
            else:
                core.check_fetch_epoch(req.current_leader_epoch)  # a new epoch meanwhile
            log = core.log
            limit = fetch_limit(log, req)
            end = log.log_end_offset if limit is None else limit
            cached = told.get(key)
            if (cached is not None and end == cached.request.fetch_offset
                    and cached.quiet(log.high_watermark, log.log_start_offset,
                                     log.last_stable_offset)):
                if park and not changed:
                    session.park(key, core, req.replica_id, purgatory)
                continue  # an idle partition of a session: no read, nothing to say
            result = core.read_or_out_of_range(req, as_region)
        except KafkaError as e:
            result = _error_result(core, req, e)
        if budget <= 0 and result.records:
            result.records = b""  # the response is full: this partition's turn comes next
        budget -= len(result.records)
        results.append((topic, partition, result))
    return results


def _answerable(results: list, min_bytes: int) -> bool:
    total = 0
    for _, _, result in results:
        if result.error is not None:
            return True
        total += len(result.records)
    return total >= min_bytes


class DelayedFetchMany(DelayedOperation):
    """``results``: what the request's arrival read. Every append, HW move and leadership
    change on a watched partition checks the operation; one that expires unchecked has
    nothing newer to say than that read, so it answers with it instead of reading every
    partition again (an idle session's fetch reads its partitions once, not twice)."""

    def __init__(self, replicas: Replicas, context: FetchContext, broker_id: int,
                 on_done: Callable[[FetchManyResponse], None], results: list | None = None,
                 partitions: list | None = None, as_region: bool = False):
        super().__init__(context.request.max_wait_ms)
        self.as_region = as_region
        self.replicas = replicas
        self.context = context
        self.partitions = list(context.partitions) if partitions is None else partitions
        self.broker_id = broker_id
        self.on_done = on_done
        self.results = results
        self.checked = False

    def add_partition(self, key: tuple[str, int], request: FetchRequest) -> None:
        """A parked partition of the session woke up while this fetch waited: read it too."""
        self.partitions.append((key[0], key[1], request))

    def try_complete(self) -> bool:
        self.checked = True
        readable = 0
        min_bytes = self.context.request.min_bytes
        for topic, partition, req in self.partitions:
            core = self.replicas.get((topic, partition))
            if core is None or core.role is not Role.LEADER:
                return self.force_complete()      # Kafka's case A: not the leader any more
            if 0 <= req.current_leader_epoch != core.leader_epoch:
                return self.force_complete()      # a new epoch: the fetcher must hear of it
            follower = req.replica_id >= 0
            limit = fetch_limit(core.log, req)
            if limit is None:
                limit = core.log.log_end_offset
            if limit < req.fetch_offset:
                return self.force_complete()      # truncated below the position: answer
            if limit > req.fetch_offset:
                try:
                    readable += len(core.log.read(req.fetch_offset, req.max_bytes,
                                                  max_offset=None if follower else limit))
                except KafkaError:
                    return self.force_complete()  # e.g. out of range now: answer with it
                if readable >= min_bytes:
                    return self.force_complete()
        return False

    def on_complete(self) -> None:
        session = self.context.session
        if session is not None and session.pending is self:
            session.pending = None
        results = self.results
        if self.checked or results is None:
            results = read_partitions(self.replicas, self.context, self.broker_id,
                                      partitions=self.partitions, as_region=self.as_region)
        self.on_done(self.context.respond(results))

    def on_expiration(self) -> None:
        pass


def fetch_many(replicas: Replicas, request: FetchManyRequest, purgatory: DelayedOperationPurgatory,
               broker_id: int, on_done: Callable[[FetchManyResponse], None],
               sessions: FetchSessionCache | None = None, node_id: str = "") -> list:
    """Serve the request: ``on_done`` gets the response exactly once, at once or when the
    delayed fetch completes. With ``sessions``, the request may open or continue a fetch
    session (KIP-227). Returns the partitions, ``[(topic, partition), ...]``, where a
    follower's position moved what the leader knows of it: their ISR may have changed (an
    idle in-sync follower's fetch moves nothing, so an idle session costs no ISR check).

    The host's event loop is the only thread where appends, HW moves and leadership changes
    happen, so the delayed fetch is watched without checking it again: this call's read
    has just found it incomplete. ``node_id``: this host's node; a request from a broker on
    it (``regions_on_node``) gets its consumers' records as FileRegions."""
    as_region = bool(request.regions_on_node) and request.regions_on_node == node_id
    context = new_context(sessions, request)
    if context.error is not None:
        on_done(context.respond([]))
        return []
    moved: list = []
    results = read_partitions(replicas, context, broker_id, moved, purgatory=purgatory,
                              as_region=as_region)
    session = context.session
    if (request.max_wait_ms <= 0 or _answerable(results, request.min_bytes)
            or not (context.partitions or (session is not None and session.parked))):
        on_done(context.respond(results))
        return moved
    # Only the partitions not parked wait: parked ones are heard through the session.
    waiting = [entry for entry in context.partitions
               if session is None or (entry[0], entry[1]) not in session.parked]
    op = DelayedFetchMany(replicas, context, broker_id, on_done, results, waiting, as_region)
    if session is not None:
        session.pending = op   # its parked partitions join the wait if they wake
    purgatory.watch(op, [(topic, partition) for topic, partition, _ in waiting])
    return moved


def offsets_for_leader_epochs(replicas: Replicas, request: OffsetsForLeaderEpochRequest,
                              broker_id: int) -> list:
    """A follower fetcher's OffsetsForLeaderEpoch for many partitions of this host: per
    partition ``(topic, partition, (epoch, end offset) or KafkaError)``."""
    answers = []
    for topic, partition, epoch, current_leader_epoch in request.partitions:
        core = replicas.get((topic, partition))
        try:
            if core is None:
                raise _not_here(topic, partition, broker_id)
            answers.append((topic, partition,
                            core.offsets_for_leader_epoch(epoch, current_leader_epoch)))
        except KafkaError as e:
            answers.append((topic, partition, e))
    return answers
