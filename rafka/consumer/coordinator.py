"""The consumer's side of the group protocol (Kafka's ConsumerCoordinator): finding the
group's coordinator, JoinGroup / SyncGroup, the heartbeat thread, offset commits.

Rebalancing is driven by ``Consumer.poll`` without blocking: a JoinGroup or SyncGroup
request is an object ref in flight, and poll waits on it together with its fetches, so one
thread can drive several consumers (as Kafka's poll does, a rebalance that does not finish
within one poll goes on in the next). The member's state is a pure ``Membership``
(``rafka.consumer.membership``: Kafka's MemberState, generation, rejoin and lost flags), touched only
under this coordinator's lock: poll's thread moves it through the rebalance, the heartbeat
thread only marks a rejoin or lost partitions; the assignment changes and the listener calls
happen in ``poll``, on the application's thread.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from protocols.assignors import Subscription, assignor_for
from protocols.consumer_protocol import (ConsumerProtocolError, ConsumerSubscription,
                                         decode_assignment, decode_subscription,
                                         encode_assignment, encode_subscription)
from protocols.messages import JoinResponse, OffsetAndMetadata, SyncResponse
from protocols.errors import (CoordinatorNotAvailableError, IllegalGenerationError,
                              KafkaError, KafkaTimeoutError, MemberIdRequiredError,
                              RebalanceInProgressError, UnknownMemberIdError)
from protocols.topics import TopicPartition
from protocols.wire import decode
from rafka.client.coordinator_client import COORDINATOR_MOVED, RETRY_SAME, CoordinatorClient
from rafka.consumer.membership import Membership, Next

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"


class CommitFailedError(KafkaError):
    """Kafka's CommitFailedException: the group rebalanced and the partitions may now be
    another member's; the commit cannot be retried."""
    name = "COMMIT_FAILED"


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """Kafka's ConsumerGroupMetadata: what a transactional producer's
    ``send_offsets_to_transaction`` is given, so that the group's coordinator refuses the
    offsets of a member the group has moved past (KIP-447's fencing by generation)."""
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class ConsumerRebalanceListener:
    """Override what you need. ``on_partitions_revoked`` runs before a rebalance takes
    partitions away (commit there), ``on_partitions_assigned`` after one hands partitions
    out, ``on_partitions_lost`` when the member was expelled (others may own them already:
    do not commit)."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.on_partitions_revoked(partitions)


class ConsumerCoordinator:
    def __init__(self, cluster, config: dict, metadata,
                 on_revoke: Callable[[set], None], on_assign: Callable[[set], None],
                 on_lost: Callable[[set], None], door=None):
        self.cluster = cluster
        self.config = config
        self.metadata = metadata
        self.group_id: str = config["group.id"]
        self.instance_id: str | None = config["group.instance.id"] or None
        self.client_id: str = config["client.id"] or "consumer"
        self._on_revoke, self._on_assign, self._on_lost = on_revoke, on_assign, on_lost
        self.assignors = {a.name: a for a in
                          (assignor_for(n) for n in config["partition.assignment.strategy"])}
        self.cooperative = all(a.rebalance_protocol == "COOPERATIVE"
                               for a in self.assignors.values())
        self._lock = threading.RLock()
        self.client = CoordinatorClient(cluster, metadata, self.group_id,
                                        config["request.timeout.ms"],
                                        config["retry.backoff.ms"], door=door)
        self.membership = Membership()   # under self._lock
        self._join_ref = None
        self._sync_ref = None
        self._retry_at = 0.0
        self.owned: set[TopicPartition] = set()
        # What the last generation gave us, sent as "owned" in the next JoinGroup even by
        # eager members (who revoked it), so sticky assignors can keep it.
        self._last_assigned: set[TopicPartition] = set()
        self.topics: set[str] = set()
        self.pattern: re.Pattern | None = None
        self._snapshot: dict[str, int] = {}   # partitions per subscribed topic at assignment
        self._next_metadata_check = 0.0
        self._async_commits: list = []
        self.last_poll = time.monotonic()
        self._closed = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # ---- subscription ----------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] = (), pattern: re.Pattern | None = None) -> None:
        with self._lock:
            self.pattern = pattern
            self.topics = set(topics) if pattern is None else self._matching_topics()
            self.membership.request_rejoin()
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                               name=f"rafka-heartbeat-{self.group_id}")
            self._heartbeat.start()

    def _matching_topics(self, image: dict | None = None) -> set[str]:
        """The topics the pattern subscribes to (whole names; internal topics never)."""
        image = image or self.metadata.refresh()
        return {t for t in image["topics"] if not t.startswith("__")
                and self.pattern.fullmatch(t)}

    def _retry_s(self) -> float:
        return self.config["retry.backoff.ms"] / 1000

    def _request_s(self) -> float:
        return self.config["request.timeout.ms"] / 1000

    def _call(self, method: str, *args, deadline: float) -> Any:
        return self.client.call(method, *args, deadline=deadline)

    def _coordinator(self):
        """The coordinator's handle: one round of FindCoordinator at most, so that poll
        does not block on it (KafkaTimeoutError when none answered)."""
        return self.client.handle(time.monotonic())

    # ---- rebalancing (driven by poll) ------------------------------------------------------
    def needs_rejoin(self) -> bool:
        with self._lock:
            return self.membership.needs_rejoin()

    def poll(self) -> list:
        """Advance the protocol without blocking; the refs returned are what poll may wait
        on. Raises the group's fatal errors (e.g. INCONSISTENT_GROUP_PROTOCOL)."""
        self.last_poll = time.monotonic()
        self.complete_async_commits()
        if not self.needs_rejoin():
            self._maybe_check_metadata()
        if not self.needs_rejoin() or not (self.topics or self.pattern):
            return []
        try:
            if self._join_ref is None and self._sync_ref is None:
                if time.monotonic() < self._retry_at:
                    return []
                self._prepare()
                self._send_join()
            if self._join_ref is not None:
                self._maybe_join_done()
            if self._sync_ref is not None:
                self._maybe_sync_done()
        except KafkaTimeoutError as e:     # no coordinator found yet: a later poll retries
            log.info("group %s: %s", self.group_id, e)
            self._join_ref = self._sync_ref = None
            self._retry_at = time.monotonic() + self._retry_s()
        return [r for r in (self._join_ref, self._sync_ref) if r is not None]

    def _prepare(self) -> None:
        """Once per rebalance, before JoinGroup: lost partitions are dropped; eager
        protocols commit and give up everything, cooperative ones nothing."""
        with self._lock:
            lost = self.membership.begin_rebalance()
        if lost is None:
            return
        if lost and self.owned:
            owned, self.owned = set(self.owned), set()
            self._on_lost(owned)
        elif not self.cooperative and self.owned:
            owned, self.owned = set(self.owned), set()
            self._on_revoke(owned)
        if self.pattern is not None:
            self.topics = self._matching_topics()

    def _send_join(self) -> None:
        coordinator = self._coordinator()
        # Kafka's ConsumerProtocol subscription: any Kafka client in the group reads it.
        subscription = encode_subscription(self.topics, self.owned or self._last_assigned)
        protocols = [(name, subscription) for name in self.assignors]
        with self._lock:
            self.membership.join_sent()
            member_id = self.membership.member_id
        self._join_ref = coordinator.join_group.remote(
            self.group_id, member_id, PROTOCOL_TYPE, protocols, self.client_id,
            self.instance_id, self.config["session.timeout.ms"],
            self.config["max.poll.interval.ms"])

    def _answer(self, ref, kind: type):
        import ray
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            return None
        try:
            answer = decode(ray.get(ref))
        except Exception as e:
            return kind(CoordinatorNotAvailableError(repr(e)))
        if isinstance(answer, KafkaError):   # the Ray door's refusal, or its broker's error
            return kind(self.client.seen(answer))
        return answer

    def _failed(self, error: KafkaError, during: str) -> None:
        """A JoinGroup or SyncGroup error: the membership resets what it must (or raises
        what a rejoin cannot cure); then rejoin, at once or after a backoff."""
        log.info("group %s: %s failed: %r", self.group_id, during, error)
        with self._lock:
            step = self.membership.rebalance_failed(error)
        if step is Next.FIND_COORDINATOR:
            self.client.unknown(error)
        if step is not Next.REJOIN:
            self._retry_at = time.monotonic() + self._retry_s()

    def _maybe_join_done(self) -> None:
        resp: JoinResponse | None = self._answer(self._join_ref, JoinResponse)
        if resp is None:
            return
        self._join_ref = None
        if isinstance(resp.error, MemberIdRequiredError):
            with self._lock:
                self.membership.member_id_required(resp.member_id)
            self._send_join()
            return
        if resp.error is not None:
            self._failed(resp.error, "JoinGroup")
            return
        with self._lock:
            self.membership.joined(resp.member_id, resp.generation_id)
        assignments = None
        if resp.leader_id == resp.member_id:
            assignments = self._assign(resp.protocol_name, resp.members, resp.generation_id)
        self._sync_ref = self._coordinator().sync_group.remote(
            self.group_id, resp.member_id, resp.generation_id, assignments, self.instance_id)

    def _assign(self, protocol: str, members, generation: int) -> dict:
        """The leader's job: run the chosen assignor over every member's subscription."""
        subscriptions = {}
        for member_id, instance_id, metadata in members:
            try:
                meta = decode_subscription(metadata)
            except ConsumerProtocolError as e:
                # A member whose client wrote something else: it gets nothing (the others
                # still get their share) and says why in the log.
                log.warning("group %s: member %s's subscription does not decode (%s); it "
                            "is assigned nothing", self.group_id, member_id, e)
                meta = ConsumerSubscription([])
            subscriptions[member_id] = Subscription(meta.topics, meta.owned_partitions,
                                                    instance_id)
        topics = {t for s in subscriptions.values() for t in s.topics}
        image = self.metadata.refresh()
        counts = {t: len(image["topics"][t]) for t in topics if t in image["topics"]}
        self._snapshot = counts
        result = self.assignors[protocol].assign(counts, subscriptions)
        log.info("group %s generation %d: %s assigned %s", self.group_id, generation,
                 protocol, {m: len(p) for m, p in result.items()})
        return {m: encode_assignment(p) for m, p in result.items()}

    def _maybe_sync_done(self) -> None:
        resp: SyncResponse | None = self._answer(self._sync_ref, SyncResponse)
        if resp is None:
            return
        self._sync_ref = None
        if resp.error is not None:
            self._failed(resp.error, "SyncGroup")
            return
        assigned = set(decode_assignment(resp.assignment or b""))
        with self._lock:
            self.membership.synced()
        self._next_metadata_check = time.monotonic() + self.config["metadata.max.age.ms"] / 1000
        self._complete(assigned)

    def _complete(self, assigned: set[TopicPartition]) -> None:
        self._last_assigned = set(assigned)
        if self.cooperative:
            revoked = self.owned - assigned
            added = assigned - self.owned
            if revoked:
                # KIP-429: give them up now; a follow-up rebalance hands them on.
                self.owned -= revoked
                self._on_revoke(revoked)
                with self._lock:
                    self.membership.request_rejoin()
            self.owned |= added
            self._on_assign(added)
        else:
            self.owned = set(assigned)
            self._on_assign(set(assigned))

    def _maybe_check_metadata(self) -> None:
        """New partitions of a subscribed topic (or, with a pattern, a new matching topic)
        start a rebalance, as a Kafka leader or pattern subscriber notices them."""
        now = time.monotonic()
        if now < self._next_metadata_check:
            return
        self._next_metadata_check = now + self.config["metadata.max.age.ms"] / 1000
        image = self.metadata.refresh()
        if self.pattern is not None:
            topics = self._matching_topics(image)
            if topics != self.topics:
                log.info("group %s: subscribed topics changed to %s", self.group_id,
                         sorted(topics))
                self.topics = topics
                with self._lock:
                    self.membership.request_rejoin()
                return
        if self._snapshot:
            counts = {t: len(image["topics"][t]) for t in self._snapshot
                      if t in image["topics"]}
            if counts != self._snapshot:
                log.info("group %s: partitions changed %s -> %s", self.group_id,
                         self._snapshot, counts)
                with self._lock:
                    self.membership.request_rejoin()

    # ---- heartbeats ------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        interval = self.config["heartbeat.interval.ms"] / 1000
        max_poll = self.config["max.poll.interval.ms"] / 1000
        while not self._closed.wait(interval):
            with self._lock:
                target = self.membership.heartbeat_target()
            if target is None:
                continue
            member, generation = target
            if time.monotonic() - self.last_poll > max_poll:
                log.warning("group %s: consumer poll timeout has expired (max.poll.interval.ms "
                            "%d): leaving the group", self.group_id,
                            self.config["max.poll.interval.ms"])
                self.leave_group("consumer poll timeout has expired")
                continue
            try:
                error = self._call("heartbeat", self.group_id, member, generation,
                                   self.instance_id, deadline=time.monotonic() + interval)
            except Exception as e:   # no coordinator found within the interval: next time
                log.debug("group %s: heartbeat: %r", self.group_id, e)
                continue
            if error is None:
                continue
            with self._lock:
                lost = self.membership.heartbeat_failed(error, generation)
            if lost:
                log.info("group %s: heartbeat: %r; partitions lost", self.group_id, error)
            elif not isinstance(error, COORDINATOR_MOVED + RETRY_SAME
                                + (RebalanceInProgressError,)):
                log.warning("group %s: heartbeat failed: %r", self.group_id, error)

    def leave_group(self, reason: str) -> None:
        with self._lock:
            member = self.membership.leave(owns_partitions=bool(self.owned))
        log.info("group %s: member %s leaving: %s", self.group_id, member, reason)
        if member and self.instance_id is None:   # static members stay (KIP-345)
            try:
                self._call("leave_group", self.group_id, member, None,
                           deadline=time.monotonic() + self._request_s())
            except Exception as e:   # best effort: the session timeout expels us anyway
                log.info("group %s: LeaveGroup failed: %r", self.group_id, e)
        with self._lock:
            self.membership.left(static=self.instance_id is not None)

    def unsubscribe(self) -> None:
        """The application gave up its partitions (revoked them itself) and the topics:
        leave the group; nothing counts as lost."""
        self.owned = set()
        self.leave_group("the consumer unsubscribed")
        with self._lock:
            self.topics, self.pattern = set(), None
            self.membership.unsubscribed()

    # ---- offsets ---------------------------------------------------------------------------
    def group_metadata(self) -> ConsumerGroupMetadata:
        with self._lock:
            return ConsumerGroupMetadata(self.group_id, self.membership.generation,
                                         self.membership.member_id, self.instance_id)

    def _commit_args(self, offsets: dict) -> tuple:
        in_group = bool(self.topics or self.pattern)
        with self._lock:
            member, generation = (self.membership.member_id, self.membership.generation) \
                if in_group else ("", -1)
        rows = [(tp.topic, tp.partition, om.offset, om.leader_epoch, om.metadata)
                for tp, om in offsets.items()]
        return self.group_id, member, generation, rows, self.instance_id

    def _commit_error(self, error: KafkaError) -> KafkaError:
        with self._lock:
            self.membership.commit_failed(error)
        if isinstance(error, RebalanceInProgressError):
            return RebalanceInProgressError(
                "Offset commit cannot be completed since the consumer is undergoing a "
                "rebalance for auto partition assignment. You can try completing the "
                "rebalance by calling poll() and then retry the operation.")
        if isinstance(error, (UnknownMemberIdError, IllegalGenerationError)):
            return CommitFailedError(
                "Commit cannot be completed since the group has already rebalanced and "
                f"assigned the partitions to another member ({error.name}). The time between "
                "subsequent calls to poll() may be longer than max.poll.interval.ms, or "
                "poll() is spending too long processing the returned records.")
        return error

    def commit_sync(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                    timeout_s: float) -> None:
        if not offsets:
            return
        error = self._call("commit_offsets", *self._commit_args(offsets),
                           deadline=time.monotonic() + timeout_s)
        if error is not None:
            raise self._commit_error(error)

    def commit_async(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                     callback: Callable | None) -> None:
        try:
            coordinator = self.client.handle(time.monotonic())
        except KafkaError as e:
            if callback is not None:
                self._async_commits.append((None, offsets, callback, e))
            return
        ref = coordinator.commit_offsets.remote(*self._commit_args(offsets))
        self._async_commits.append((ref, offsets, callback, None))

    def complete_async_commits(self, wait_s: float = 0.0) -> None:
        """Callbacks of finished async commits run here, on the polling thread (Kafka
        runs them in poll and commitSync)."""
        import ray
        if not self._async_commits:
            return
        refs = [c[0] for c in self._async_commits if c[0] is not None]
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=wait_s)[0]) if refs else set()
        still = []
        for ref, offsets, callback, error in self._async_commits:
            if ref is not None and ref not in ready:
                still.append((ref, offsets, callback, error))
                continue
            if ref is not None:
                try:
                    error = self.client.seen(decode(ray.get(ref)))
                except Exception as e:
                    error = CoordinatorNotAvailableError(repr(e))
                if isinstance(error, COORDINATOR_MOVED):
                    self.client.unknown(error)
                if error is not None:
                    error = self._commit_error(error)
            if callback is not None:
                callback(offsets, error)
            elif error is not None:
                log.warning("group %s: async commit failed: %r", self.group_id, error)
        self._async_commits = still

    def committed(self, partitions: Iterable[TopicPartition], timeout_s: float
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets. A read_committed consumer asks for stable ones
        only (KIP-447's require_stable): an offset still pending in an open transaction is
        asked for again, after retry.backoff.ms, until its transaction ends or the time is
        up, as Kafka's consumer does on UNSTABLE_OFFSET_COMMIT."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        stable = self.config["isolation.level"] == "read_committed"
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self._call("fetch_offsets", self.group_id, [list(tp) for tp in wanted],
                                stable, deadline=deadline)
            if isinstance(answer, KafkaError):
                raise answer
            unstable = [e for _, _, *found in answer if len(found) == 1 for e in found]
            if not unstable:
                return {TopicPartition(t, p): (None if o < 0 else OffsetAndMetadata(o, e, m))
                        for t, p, o, e, m in answer}
            if time.monotonic() + self._retry_s() > deadline:
                raise KafkaTimeoutError(f"Committed offsets of group {self.group_id} still "
                                        f"pending in a transaction: {unstable[0]}")
            time.sleep(self._retry_s())

    # ---- close -----------------------------------------------------------------------------
    def close(self, timeout_s: float) -> None:
        self.complete_async_commits(wait_s=timeout_s)
        self._closed.set()
        with self._lock:
            in_group = self.membership.in_group()
        if in_group:
            self.leave_group("the consumer is being closed")
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)


__all__ = ["CommitFailedError", "ConsumerCoordinator", "ConsumerRebalanceListener",
           "OffsetAndMetadata"]
