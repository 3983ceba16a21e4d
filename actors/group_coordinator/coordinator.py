"""GroupCoordinator: one broker's group coordinator, pure (Kafka's GroupCoordinator and the
in-memory half of its GroupMetadataManager). No Ray, no I/O; time is passed in.

It owns what the coordinator knows: which ``__consumer_offsets`` partitions it leads (and
which of them it is still loading), their groups (``Group``, the per-group decisions) and
committed offsets, the requests parked until their answers are due, and which generation of
each group is already in the log. Every request returns typed ``Effects`` for the shell
(``actor.py``) to perform:

- ``replies``: answers to requests, addressed by the request id each call hands out (a
  JoinGroup or SyncGroup may be answered much later, when another member's request or a
  deadline completes the rebalance);
- ``writes``: records to append to the group's ``__consumer_offsets`` partition (acks=all)
  before anything that depends on them is answered: Kafka's "store, then answer". The shell
  reports each write's outcome to ``on_write_done``, which gives the effects that follow (a
  failed write turns the answers waiting on it into Kafka's errors for it);
- ``ticks``: a group's next deadline (session expiry, the end of a rebalance), at which the
  shell calls ``tick``.

Loading is the shell's I/O: ``on_election`` says whether to read a partition, and
``on_loaded`` takes what was read.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from actors.group_coordinator.group import Group, GroupConfig, GroupState
from protocols.java_hash import coordinator_partition_for
from actors.group_coordinator.offsets import (group_metadata_key, group_metadata_value,
                                        offset_commit_key, offset_commit_value, replay)
from protocols.errors import (CoordinatorLoadInProgressError, CoordinatorNotAvailableError,
                              GroupIdNotFoundError, GroupSubscribedToTopicError,
                              IllegalGenerationError,
                              InvalidCommitOffsetSizeError, InvalidGroupIdError, KafkaError,
                              NonEmptyGroupError, NotCoordinatorError,
                              NotLeaderOrFollowerError, RebalanceInProgressError,
                              RecordTooLargeError, UnknownMemberIdError,
                              UnstableOffsetCommitError)
from protocols.messages import JoinResponse, OffsetAndMetadata, SyncResponse
from protocols.records import Record
from protocols.topics import OFFSETS_TOPIC, TopicPartition


class Kind(Enum):
    """The two requests a coordinator parks."""
    JOIN = "join"
    SYNC = "sync"


def _kind(response: Any) -> Kind:
    # Group answers members as {member id: JoinResponse | SyncResponse}.
    return Kind.JOIN if isinstance(response, JoinResponse) else Kind.SYNC


def _failed(kind: Kind, member_id: str, error: KafkaError) -> Any:
    return JoinResponse(error, member_id=member_id) if kind is Kind.JOIN \
        else SyncResponse(error)


def store_error(e: BaseException) -> KafkaError:
    """Kafka's mapping of a failed append to __consumer_offsets onto a coordinator error."""
    if isinstance(e, NotLeaderOrFollowerError):
        return NotCoordinatorError(f"This broker no longer leads the group's partition: {e}")
    if isinstance(e, RecordTooLargeError):
        return InvalidCommitOffsetSizeError(str(e))
    return CoordinatorNotAvailableError(f"Could not write to {OFFSETS_TOPIC}: {e!r}")


@dataclass
class Write:
    """Records to append to ``__consumer_offsets``-``partition`` while it is led in
    ``leader_epoch``; ``then`` (the core's) says what follows its outcome."""
    partition: int
    leader_epoch: int
    records: list[Record]
    then: Callable[[KafkaError | None], "Effects"] = field(repr=False)
    # A transactional offset commit's (transactional id, producer id, producer epoch): the
    # records go as that producer's transactional batch, committed or aborted by its
    # transaction's marker on this partition.
    transaction: tuple[str, int, int] | None = None


@dataclass
class Effects:
    replies: list[tuple[int, Any]] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    ticks: list[tuple[str, int]] = field(default_factory=list)   # (group id, deadline ms)

    def add(self, other: "Effects") -> "Effects":
        self.replies += other.replies
        self.writes += other.writes
        self.ticks += other.ticks
        return self


class GroupCoordinator:
    def __init__(self, broker_id: int, num_partitions: int, group_config: GroupConfig):
        self.broker_id = broker_id
        self.num_partitions = num_partitions
        self.group_config = group_config
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # Offsets committed in transactions not yet ended: producer id -> group -> values
        # (Kafka's pendingTransactionalOffsetCommits).
        self.pending_txn_offsets: dict[int, dict[str, dict[TopicPartition,
                                                          OffsetAndMetadata]]] = {}
        # __consumer_offsets partitions led here (partition -> leader epoch), and those of
        # them still being read.
        self.owned: dict[int, int] = {}
        self.loading: set[int] = set()
        # Parked JoinGroup / SyncGroup requests: (group, member, kind) -> request id.
        self._parked: dict[tuple[str, str, Kind], int] = {}
        self._ids = itertools.count(1)
        self._tick_at: dict[str, int] = {}
        # (generation, state) last written per group, so each is written once.
        self._stored: dict[str, tuple] = {}

    def new_request(self) -> int:
        return next(self._ids)

    # ---- partition ownership (from the broker) ---------------------------------------------
    def on_election(self, partition: int, leader_epoch: int) -> tuple[Effects, bool]:
        """This broker now leads the partition: (effects, whether to load it)."""
        if self.owned.get(partition) == leader_epoch:
            return Effects(), False
        effects = self.on_resignation(partition)
        self.owned[partition] = leader_epoch
        self.loading.add(partition)
        return effects, True

    def on_resignation(self, partition: int) -> Effects:
        """The partition moved away: its groups go, their parked requests hear
        NOT_COORDINATOR."""
        self.owned.pop(partition, None)
        self.loading.discard(partition)
        gone = NotCoordinatorError(f"Broker {self.broker_id} no longer coordinates groups in "
                                   f"{OFFSETS_TOPIC}-{partition}")
        effects = Effects()
        with_txn_offsets = {g for groups in self.pending_txn_offsets.values() for g in groups}
        for group_id in [g for g in set(self.groups) | set(self.offsets) | with_txn_offsets
                         if self.partition_for(g) == partition]:
            self.groups.pop(group_id, None)
            self.offsets.pop(group_id, None)
            for pending in self.pending_txn_offsets.values():
                pending.pop(group_id, None)
            self._tick_at.pop(group_id, None)
            self._stored.pop(group_id, None)
        for key in [k for k in self._parked if self.partition_for(k[0]) == partition]:
            effects.replies.append((self._parked.pop(key), _failed(key[2], key[1], gone)))
        return effects

    def on_loaded(self, partition: int, leader_epoch: int,
                  records: list[tuple[bytes | None, bytes | None]], now_ms: int) -> Effects:
        """The partition's records, read from its start: its groups and offsets (ignored
        if the partition moved meanwhile)."""
        effects = Effects()
        if self.owned.get(partition) != leader_epoch or partition not in self.loading:
            return effects
        self.loading.discard(partition)
        for group_id, stored in replay(records).items():
            self.offsets[group_id] = dict(stored.offsets)
            for producer_id, values in stored.pending.items():
                self.pending_txn_offsets.setdefault(producer_id, {})[group_id] = dict(values)
            if stored.metadata is not None:
                group = Group.from_stored(group_id, stored.metadata, self.group_config, now_ms)
                self.groups[group_id] = group
                self._stored[group_id] = (group.generation_id, group.state)
                effects.add(self._schedule_tick(group))
        return effects

    def partition_for(self, group_id: str) -> int:
        return coordinator_partition_for(group_id, self.num_partitions)

    def owns(self, partition: int) -> bool:
        return partition in self.owned

    def _check(self, group_id: str) -> None:
        """Raise unless this coordinator may serve the group now."""
        if not group_id:
            raise InvalidGroupIdError("The group id must not be empty")
        partition = self.partition_for(group_id)
        if partition not in self.owned:
            raise NotCoordinatorError(f"Broker {self.broker_id} is not the coordinator of "
                                      f"group {group_id}")
        if partition in self.loading:
            raise CoordinatorLoadInProgressError(
                f"Broker {self.broker_id} is loading the groups of {OFFSETS_TOPIC}-{partition}")

    def _member_group(self, group_id: str, member_id: str) -> Group:
        """The group a member's request is about; a group this coordinator does not have
        knows no members (Kafka answers UNKNOWN_MEMBER_ID, and the member joins afresh)."""
        self._check(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"Group {group_id} has no member {member_id}")
        return group

    # ---- writing, answering, timing ---------------------------------------------------------
    def _write(self, group_id: str, records: list[Record],
               then: Callable[[KafkaError | None], Effects],
               transaction: tuple[str, int, int] | None = None) -> Effects:
        partition = self.partition_for(group_id)
        epoch = self.owned.get(partition)
        if epoch is None:
            return then(NotCoordinatorError(f"Broker {self.broker_id} is not the "
                                            f"coordinator of group {group_id}"))
        return Effects(writes=[Write(partition, epoch, records, then, transaction)])

    def on_write_done(self, write: Write, error: BaseException | None) -> Effects:
        """A write's outcome (None: appended and replicated). A partition that moved while
        it was written fails it: another coordinator serves the group now."""
        if error is None and self.owned.get(write.partition) != write.leader_epoch:
            error = NotCoordinatorError(f"{OFFSETS_TOPIC}-{write.partition} moved while "
                                        "writing")
        return write.then(None if error is None else
                          error if isinstance(error, NotCoordinatorError) else
                          store_error(error))

    def _park(self, request: int, group_id: str, member_id: str, kind: Kind) -> Effects:
        """A request that waits for its answer; a retry of it replaces the one parked."""
        effects = Effects()
        key = (group_id, member_id, kind)
        old = self._parked.get(key)
        if old is not None:
            effects.replies.append((old, _failed(kind, member_id, RebalanceInProgressError(
                "Superseded by a newer request"))))
        self._parked[key] = request
        return effects

    def _deliver(self, group: Group, answers: dict, after: list | None = None) -> Effects:
        """Hand every due answer to its parked request (``after``: replies that go with
        them, unchanged). A generation that just became stable (or a group that emptied) is
        written to the log before anyone hears of it (Kafka's storeGroup before the
        SyncGroup answers); if that write fails, the answers become its error."""
        stored = (group.generation_id, group.state)
        if group.state in (GroupState.STABLE, GroupState.EMPTY) and group.generation_id > 0 \
                and self._stored.get(group.group_id) != stored:
            def then(error: KafkaError | None) -> Effects:
                if error is None:
                    self._stored[group.group_id] = stored
                    return self._answer(group, answers, after)
                return self._answer(group, {
                    m: (SyncResponse(error) if _kind(a) is Kind.SYNC
                        else JoinResponse(error, member_id=m) if a.error is None else a)
                    for m, a in answers.items()}, after)
            return self._write(group.group_id, [Record(
                group_metadata_key(group.group_id),
                group_metadata_value(group.to_stored()))], then)
        return self._answer(group, answers, after)

    def _answer(self, group: Group, answers: dict, after: list | None) -> Effects:
        effects = Effects()
        for member_id, answer in answers.items():
            request = self._parked.pop((group.group_id, member_id, _kind(answer)), None)
            if request is not None:
                effects.replies.append((request, answer))
        effects.replies += after or []
        return effects.add(self._schedule_tick(group))

    def _schedule_tick(self, group: Group) -> Effects:
        deadline = group.next_deadline()
        pending = self._tick_at.get(group.group_id)
        if deadline is None or (pending is not None and pending <= deadline):
            return Effects()
        self._tick_at[group.group_id] = deadline
        return Effects(ticks=[(group.group_id, deadline)])

    def tick(self, group_id: str, now_ms: int) -> Effects:
        """A group's deadline came."""
        self._tick_at.pop(group_id, None)
        group = self.groups.get(group_id)
        if group is None:
            return Effects()
        return self._deliver(group, group.tick(now_ms))

    def _error(self, request: int, error: Any) -> tuple[int, Effects]:
        return request, Effects(replies=[(request, error)])

    def _member_request(self, group_id: str, member_id: str,
                        serve: Callable[[int, Group], Effects],
                        refused: Callable[[KafkaError], Any] = lambda e: e
                        ) -> tuple[int, Effects]:
        """A request about a member of a group served here: ``serve(request id, group)``,
        or the error why not (as ``refused`` wraps it)."""
        request = self.new_request()
        try:
            group = self._member_group(group_id, member_id)
        except KafkaError as e:
            return self._error(request, refused(e))
        return request, serve(request, group)

    # ---- the group protocol ----------------------------------------------------------------
    def join_group(self, group_id: str, member_id: str, protocol_type: str, protocols: list,
                   now_ms: int, *, client_id: str = "", group_instance_id: str | None = None,
                   session_timeout_ms: int = 45_000,
                   rebalance_timeout_ms: int = 300_000) -> tuple[int, Effects]:
        request = self.new_request()
        try:
            self._check(group_id)
        except KafkaError as e:
            return self._error(request, JoinResponse(e, member_id=member_id))
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, self.group_config)
        member_id, answers = group.join(
            member_id, protocol_type, protocols, now_ms, client_id=client_id,
            group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms)
        if member_id == "" and "" in answers:   # refused before it got an id
            return self._error(request, answers[""])
        return request, self._park(request, group_id, member_id, Kind.JOIN).add(
            self._deliver(group, answers))

    def sync_group(self, group_id: str, member_id: str, generation_id: int,
                   assignments: dict | None, now_ms: int,
                   group_instance_id: str | None = None) -> tuple[int, Effects]:
        def serve(request: int, group: Group) -> Effects:
            answers = group.sync(member_id, generation_id, assignments, now_ms,
                                 group_instance_id)
            return self._park(request, group_id, member_id, Kind.SYNC).add(
                self._deliver(group, answers))
        return self._member_request(group_id, member_id, serve, refused=SyncResponse)

    def heartbeat(self, group_id: str, member_id: str, generation_id: int, now_ms: int,
                  group_instance_id: str | None = None) -> tuple[int, Effects]:
        def serve(request: int, group: Group) -> Effects:
            error = group.heartbeat(member_id, generation_id, now_ms, group_instance_id)
            return Effects(replies=[(request, error)]).add(self._schedule_tick(group))
        return self._member_request(group_id, member_id, serve)

    def leave_group(self, group_id: str, member_id: str, now_ms: int,
                    group_instance_id: str | None = None) -> tuple[int, Effects]:
        def serve(request: int, group: Group) -> Effects:
            error, answers = group.leave(member_id, now_ms, group_instance_id)
            return self._deliver(group, answers, after=[(request, error)])
        return self._member_request(group_id, member_id, serve)

    # ---- offsets ---------------------------------------------------------------------------
    def commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                       offsets: list, now_ms: int,
                       group_instance_id: str | None = None,
                       transaction: tuple[str, int, int] | None = None) -> tuple[int, Effects]:
        """OffsetCommit: ``offsets`` is ``[(topic, partition, offset, leader_epoch,
        metadata)]``; the answer is one error (or None) for the whole request, given once
        the commit is in the log. With ``transaction`` (TxnOffsetCommit: transactional id,
        producer id, epoch) the offsets are written in the producer's transaction and held
        pending until its marker commits them here (or aborts them)."""
        request = self.new_request()
        try:
            self._check(group_id)
            group = self.groups.get(group_id)
            if group is None:
                if generation_id >= 0:
                    # A commit to a group unknown here is from a past generation (Kafka).
                    raise IllegalGenerationError(f"Group {group_id} has no generation "
                                                 f"{generation_id}")
                # A group not managed here (assign() and admin tools: generation -1) is
                # created to hold its offsets.
                group = self.groups[group_id] = Group(group_id, self.group_config)
            # A transactional commit names its member only from KIP-447's clients on.
            if transaction is None or generation_id >= 0 or member_id \
                    or group_instance_id is not None:
                error = group.validate_commit(member_id, generation_id, group_instance_id)
                if error is not None:
                    raise error
        except KafkaError as e:
            return self._error(request, e)
        values = {TopicPartition(t, p): OffsetAndMetadata(o, e, m or "", now_ms)
                  for t, p, o, e, m in offsets}

        def then(error: KafkaError | None) -> Effects:
            if error is not None:
                return Effects(replies=[(request, error)])
            if transaction is None:
                self.offsets.setdefault(group_id, {}).update(values)
            else:
                self.pending_txn_offsets.setdefault(transaction[1], {}).setdefault(
                    group_id, {}).update(values)
            return Effects(replies=[(request, None)]).add(self._schedule_tick(group))
        if not values:
            return request, then(None)
        return request, self._write(group_id, [
            Record(offset_commit_key(group_id, *tp), offset_commit_value(v))
            for tp, v in values.items()], then, transaction)

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended on ``__consumer_offsets``-``partition`` (its
        marker is written there): its pending offsets of the partition's groups become
        committed, or are dropped (Kafka's handleTxnCompletion)."""
        pending = self.pending_txn_offsets.get(producer_id, {})
        for group_id in [g for g in pending if self.partition_for(g) == partition]:
            values = pending.pop(group_id)
            if commit:
                self.offsets.setdefault(group_id, {}).update(values)
        if not pending:
            self.pending_txn_offsets.pop(producer_id, None)

    def _pending(self, group_id: str) -> set[TopicPartition]:
        return {tp for groups in self.pending_txn_offsets.values()
                for tp in groups.get(group_id, {})}

    def fetch_offsets(self, group_id: str, partitions: list | None = None,
                      require_stable: bool = False) -> list | KafkaError:
        """OffsetFetch: ``[(topic, partition, offset, leader_epoch, metadata)]``, offset -1
        where nothing is committed; every committed partition when ``partitions`` is None.
        With ``require_stable`` (KIP-447, read_committed consumers) a partition with an
        offset pending in an open transaction is ``(topic, partition,
        UnstableOffsetCommitError)``: the consumer asks again once it ends."""
        try:
            self._check(group_id)
        except KafkaError as e:
            return e
        committed = self.offsets.get(group_id, {})
        wanted = committed.keys() if partitions is None else \
            [TopicPartition(*tp) for tp in partitions]
        unstable = self._pending(group_id) if require_stable else set()
        out: list = []
        for tp in wanted:
            v = committed.get(tp)
            if tp in unstable:
                out.append((tp.topic, tp.partition, UnstableOffsetCommitError(
                    f"Group {group_id} has an offset of {tp} pending in an open "
                    "transaction")))
            else:
                out.append((tp.topic, tp.partition, -1, -1, "") if v is None else
                           (tp.topic, tp.partition, v.offset, v.leader_epoch, v.metadata))
        return out

    # ---- administration --------------------------------------------------------------------
    def describe_group(self, group_id: str) -> dict | KafkaError:
        try:
            self._check(group_id)
        except KafkaError as e:
            return e
        group = self.groups.get(group_id)
        if group is None:
            return {"group_id": group_id, "state": "Dead", "protocol_type": "",
                    "protocol": "", "generation_id": -1, "leader": "", "members": []}
        return group.describe()

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every loaded group, offsets-only ones too."""
        out = {group_id: (group_id, "consumer", "Empty") for group_id in self.offsets}
        for group_id, group in self.groups.items():
            if group.state is not GroupState.DEAD:
                out[group_id] = (group_id, group.protocol_type or "consumer",
                                 group.state.value)
        return sorted(out.values())

    def delete_offsets(self, group_id: str, partitions: list) -> tuple[int, Effects]:
        """OffsetDelete (KIP-496): the group's committed offsets of ``partitions`` get
        tombstones. An empty group loses them all; a live consumer group keeps those of
        topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC for each); a live group
        of another protocol is NON_EMPTY_GROUP. The answer is ``[(topic, partition, error
        code)]`` once the tombstones are in the log, or the group's error."""
        request = self.new_request()
        try:
            self._check(group_id)
            group = self.groups.get(group_id)
            committed = self.offsets.get(group_id)
            if (group is None or group.state is GroupState.DEAD) and committed is None:
                raise GroupIdNotFoundError(f"Group {group_id} does not exist")
            live = group is not None and group.state not in (GroupState.EMPTY,
                                                             GroupState.DEAD)
            if live and not group.is_consumer_group:
                raise NonEmptyGroupError(f"Group {group_id} is not empty "
                                         f"({group.state.value}) and not a consumer group")
        except KafkaError as e:
            return self._error(request, e)
        answer = [(t, p, GroupSubscribedToTopicError.code
                   if live and group.is_subscribed_to(t) else 0) for t, p in partitions]
        gone = [TopicPartition(t, p) for t, p, code in answer
                if code == 0 and TopicPartition(t, p) in (committed or {})]

        def then(error: KafkaError | None) -> Effects:
            if error is not None:
                return Effects(replies=[(request, error)])
            for tp in gone:
                self.offsets.get(group_id, {}).pop(tp, None)
            if not self.offsets.get(group_id, True):
                self.offsets.pop(group_id, None)
            return Effects(replies=[(request, answer)])
        if not gone:
            return request, then(None)
        return request, self._write(group_id, [Record(offset_commit_key(group_id, *tp), None)
                                               for tp in gone], then)

    def delete_group(self, group_id: str) -> tuple[int, Effects]:
        """DeleteGroups: only an empty group; its offsets and metadata get tombstones, and
        it is gone once they are in the log."""
        request = self.new_request()
        try:
            self._check(group_id)
            group = self.groups.get(group_id)
            committed = self.offsets.get(group_id)
            if group is None and committed is None:
                raise GroupIdNotFoundError(f"Group {group_id} does not exist")
            if group is not None and group.state is not GroupState.EMPTY:
                raise NonEmptyGroupError(f"Group {group_id} is not empty "
                                         f"({group.state.value})")
        except KafkaError as e:
            return self._error(request, e)
        tombstones = [Record(offset_commit_key(group_id, *tp), None) for tp in committed or {}]
        tombstones.append(Record(group_metadata_key(group_id), None))

        def then(error: KafkaError | None) -> Effects:
            if error is None:
                if group is not None:
                    group.mark_dead()
                self.groups.pop(group_id, None)
                self.offsets.pop(group_id, None)
            return Effects(replies=[(request, error)])
        return request, self._write(group_id, tombstones, then)
