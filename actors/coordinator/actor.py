"""GroupCoordinatorActor: one broker's group coordinator (Kafka's GroupCoordinator and
GroupMetadataManager), as an async Ray actor named ``coordinator-<broker id>``.

A group lives in ``__consumer_offsets`` partition ``offsets_partition_for(group_id)``; the
broker leading that partition hosts its coordinator. The broker tells this actor when it
gains (``on_election``) or loses (``on_resignation``) such a leadership: it then loads the
partition's groups and offsets from the local log (``COORDINATOR_LOAD_IN_PROGRESS`` while it
reads) or unloads them (``NOT_COORDINATOR`` from then on).

The decisions are ``actors.coordinator.group.Group``'s. This shell parks JoinGroup and
SyncGroup requests until their answers are due, writes commits and group metadata to the
log through the partition's leader replica (acks=all) before answering, and asks the
broker's timer actor to call ``tick`` at the group's next deadline (session expiry, the end
of a rebalance). Answers cross as msgpack (``protocols.wire``), errors keeping their codes.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from actors.coordinator.group import (Group, GroupConfig, GroupState, JoinResponse,
                                      SyncResponse, offsets_partition_for)
from actors.coordinator.offsets import (OffsetAndMetadata, group_metadata_key,
                                        group_metadata_value, offset_commit_key,
                                        offset_commit_value, replay)
from actors.replica.locate import locate_replica_async
from protocols.errors import (CoordinatorLoadInProgressError, CoordinatorNotAvailableError,
                              GroupIdNotFoundError, IllegalGenerationError,
                              InvalidCommitOffsetSizeError,
                              InvalidGroupIdError, KafkaError, NonEmptyGroupError,
                              NotCoordinatorError, NotLeaderOrFollowerError,
                              RecordTooLargeError, RebalanceInProgressError,
                              UnknownMemberIdError)
from protocols.records import Record, encode_batch, iter_batches
from protocols.topics import OFFSETS_TOPIC, TopicPartition
from protocols.wire import decode, encode

log = logging.getLogger(__name__)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _store_error(e: Exception) -> KafkaError:
    """Kafka's mapping of a failed append to __consumer_offsets onto a coordinator error."""
    if isinstance(e, NotLeaderOrFollowerError):
        return NotCoordinatorError(f"This broker no longer leads the group's partition: {e}")
    if isinstance(e, RecordTooLargeError):
        return InvalidCommitOffsetSizeError(str(e))
    return CoordinatorNotAvailableError(f"Could not write to {OFFSETS_TOPIC}: {e!r}")


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=10_000)
class GroupCoordinatorActor:
    def __init__(self, namespace: str, broker_id: int, broker_config: dict, timer: Any):
        self.namespace = namespace
        self.broker_id = broker_id
        self.num_partitions = broker_config["offsets.topic.num.partitions"]
        self.commit_timeout_ms = broker_config["offsets.commit.timeout.ms"]
        self.load_buffer = broker_config["offsets.load.buffer.size"]
        self.group_config = GroupConfig(
            initial_rebalance_delay_ms=broker_config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=broker_config["group.min.session.timeout.ms"],
            max_session_timeout_ms=broker_config["group.max.session.timeout.ms"],
            max_size=broker_config["group.max.size"])
        self.timer = timer
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # __consumer_offsets partitions led here: partition -> leader epoch, and which of
        # them are still being read.
        self.owned: dict[int, int] = {}
        self.loading: dict[int, asyncio.Task] = {}
        self._replicas: dict[int, Any] = {}
        # Parked JoinGroup / SyncGroup requests: (group, member, kind) -> future.
        self._waiting: dict[tuple[str, str, str], asyncio.Future] = {}
        self._tick_at: dict[str, int] = {}
        # (generation, state) last written per group, so each is written once.
        self._stored: dict[str, tuple] = {}
        self._me = None

    # ---- partition ownership (from the broker) ---------------------------------------------
    async def on_election(self, partition: int, leader_epoch: int) -> None:
        if self.owned.get(partition) == leader_epoch:
            return
        self._unload(partition)
        self.owned[partition] = leader_epoch
        self.loading[partition] = asyncio.get_running_loop().create_task(
            self._load(partition, leader_epoch))

    async def on_resignation(self, partition: int) -> None:
        self._unload(partition)

    async def wait_loaded(self, partition: int) -> bool:
        task = self.loading.get(partition)
        if task is not None:
            await asyncio.shield(task)
        return partition in self.owned

    def _unload(self, partition: int) -> None:
        task = self.loading.pop(partition, None)
        if task is not None:
            task.cancel()
        self.owned.pop(partition, None)
        self._replicas.pop(partition, None)
        gone = NotCoordinatorError(f"Broker {self.broker_id} no longer coordinates groups in "
                                   f"{OFFSETS_TOPIC}-{partition}")
        for group_id in [g for g in set(self.groups) | set(self.offsets)
                         if self._partition(g) == partition]:
            self.groups.pop(group_id, None)
            self.offsets.pop(group_id, None)
            self._tick_at.pop(group_id, None)
            self._stored.pop(group_id, None)
            for key in [k for k in self._waiting if k[0] == group_id]:
                kind = key[2]
                answer = JoinResponse(gone, member_id=key[1]) if kind == "join" \
                    else SyncResponse(gone)
                future = self._waiting.pop(key)
                if not future.done():
                    future.set_result(answer)

    async def _load(self, partition: int, leader_epoch: int) -> None:
        """Read the partition from its start to its end and rebuild its groups; a failed
        read (the replica still starting) is tried again until the partition moves."""
        try:
            while True:
                try:
                    records = await self._read_partition(partition)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("coordinator %d: loading %s-%d failed (%r); retrying",
                                self.broker_id, OFFSETS_TOPIC, partition, e)
                    self._replicas.pop(partition, None)
                    await asyncio.sleep(0.5)
            now = wall_ms()
            loaded = replay(records)
            for group_id, stored in loaded.items():
                self.offsets[group_id] = dict(stored.offsets)
                if stored.metadata is not None:
                    group = Group.from_stored(group_id, stored.metadata, self.group_config, now)
                    self.groups[group_id] = group
                    self._stored[group_id] = (group.generation_id, group.state)
                    await self._schedule_tick(group)
            log.info("coordinator %d: loaded %s-%d (epoch %d): %d groups", self.broker_id,
                     OFFSETS_TOPIC, partition, leader_epoch, len(loaded))
        finally:
            if self.loading.get(partition) is asyncio.current_task():
                del self.loading[partition]

    async def _read_partition(self, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        replica = await self._replica(partition)
        state = await replica.describe.remote()
        offset, end = state["log_start_offset"], state["log_end_offset"]
        records: list[tuple[bytes | None, bytes | None]] = []
        while offset < end:
            data = await replica.read_local.remote(offset, self.load_buffer)
            last = None
            for batch in iter_batches(data):
                for off, _ts, key, value, _headers in batch.record_tuples():
                    if off >= offset:
                        records.append((key, value))
                last = batch.last_offset
            if last is None:
                break
            offset = last + 1
        return records

    def _partition(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self.num_partitions)

    async def _replica(self, partition: int):
        handle = self._replicas.get(partition)
        if handle is None:
            handle = self._replicas[partition] = await locate_replica_async(
                self.namespace, OFFSETS_TOPIC, partition, self.broker_id)
        return handle

    def _check(self, group_id: str) -> None:
        """Raise unless this coordinator may serve the group now."""
        if not group_id:
            raise InvalidGroupIdError("The group id must not be empty")
        partition = self._partition(group_id)
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

    def _group(self, group_id: str, create: bool = False) -> Group | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = Group(group_id, self.group_config)
        return group

    # ---- writing to __consumer_offsets -----------------------------------------------------
    async def _append(self, group_id: str, records: list[Record]) -> None:
        partition = self._partition(group_id)
        epoch = self.owned.get(partition)
        if epoch is None:
            raise NotCoordinatorError(f"Broker {self.broker_id} is not the coordinator of "
                                      f"group {group_id}")
        try:
            replica = await self._replica(partition)
            result = decode(await replica.produce.remote(
                encode_batch(records), -1, self.commit_timeout_ms))
        except Exception as e:
            raise _store_error(e) from None
        if result.error is not None:
            raise _store_error(result.error)
        if self.owned.get(partition) != epoch:
            raise NotCoordinatorError(f"Group {group_id}'s partition moved while writing")

    async def _store_group(self, group: Group) -> None:
        await self._append(group.group_id, [Record(group_metadata_key(group.group_id),
                                                   group_metadata_value(group.to_stored()))])

    # ---- answers and timers ----------------------------------------------------------------
    async def _deliver(self, group: Group, answers: dict, own: str | None = None,
                       own_kind: str = "") -> Any:
        """Hand every due answer to its parked request; return the caller's own. A
        generation that just became stable is written to the log before anyone hears of
        it (Kafka's storeGroup before the SyncGroup answers)."""
        stored = (group.generation_id, group.state)
        if group.state in (GroupState.STABLE, GroupState.EMPTY) and group.generation_id > 0 \
                and self._stored.get(group.group_id) != stored:
            try:
                await self._store_group(group)
                self._stored[group.group_id] = stored
            except KafkaError as e:
                answers = {m: (SyncResponse(e) if isinstance(a, SyncResponse)
                               else JoinResponse(e, member_id=m) if a.error is None else a)
                           for m, a in answers.items()}
        mine = None
        for member_id, answer in answers.items():
            kind = "join" if isinstance(answer, JoinResponse) else "sync"
            if member_id == own and kind == own_kind:
                mine = answer
                continue
            future = self._waiting.pop((group.group_id, member_id, kind), None)
            if future is not None and not future.done():
                future.set_result(answer)
        await self._schedule_tick(group)
        return mine

    async def _park(self, group: Group, member_id: str, kind: str, answers: dict) -> Any:
        """Deliver ``answers``; if the caller's own is not among them, wait for it."""
        key = (group.group_id, member_id, kind)
        future = None
        if not any(m == member_id and ("join" if isinstance(a, JoinResponse) else "sync")
                   == kind for m, a in answers.items()):
            old = self._waiting.pop(key, None)
            if old is not None and not old.done():  # a retry replaces the lost request
                old.set_result(JoinResponse(RebalanceInProgressError("Superseded by a "
                                            "newer request"), member_id=member_id)
                               if kind == "join" else SyncResponse(RebalanceInProgressError(
                                   "Superseded by a newer request")))
            future = self._waiting[key] = asyncio.get_running_loop().create_future()
        mine = await self._deliver(group, answers, member_id, kind)
        if future is None:
            return mine
        return await future

    async def _schedule_tick(self, group: Group) -> None:
        deadline = group.next_deadline()
        if deadline is None:
            return
        pending = self._tick_at.get(group.group_id)
        if pending is not None and pending <= deadline:
            return
        self._tick_at[group.group_id] = deadline
        if self._me is None:
            self._me = ray.get_runtime_context().current_actor
        delay = max(1, deadline - wall_ms() + 1)
        await self.timer.schedule.remote(delay, self._me, "tick", group.group_id)

    async def tick(self, group_id: str) -> None:
        """Called by the broker's timer actor at a group's deadline."""
        self._tick_at.pop(group_id, None)
        group = self.groups.get(group_id)
        if group is None:
            return
        await self._deliver(group, group.tick(wall_ms()))

    # ---- the group protocol ----------------------------------------------------------------
    async def join_group(self, group_id: str, member_id: str, protocol_type: str,
                         protocols: list, client_id: str = "",
                         group_instance_id: str | None = None,
                         session_timeout_ms: int = 45_000,
                         rebalance_timeout_ms: int = 300_000) -> bytes:
        try:
            self._check(group_id)
        except KafkaError as e:
            return encode(JoinResponse(e, member_id=member_id))
        group = self._group(group_id, create=True)
        member_id, answers = group.join(
            member_id, protocol_type, protocols, wall_ms(), client_id=client_id,
            group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms)
        if member_id == "" and "" in answers:   # refused before it got an id
            return encode(answers[""])
        return encode(await self._park(group, member_id, "join", answers))

    async def sync_group(self, group_id: str, member_id: str, generation_id: int,
                         assignments: dict | None,
                         group_instance_id: str | None = None) -> bytes:
        try:
            group = self._member_group(group_id, member_id)
        except KafkaError as e:
            return encode(SyncResponse(e))
        answers = group.sync(member_id, generation_id, assignments, wall_ms(),
                             group_instance_id)
        return encode(await self._park(group, member_id, "sync", answers))

    async def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                        group_instance_id: str | None = None) -> bytes:
        try:
            group = self._member_group(group_id, member_id)
        except KafkaError as e:
            return encode(e)
        error = group.heartbeat(member_id, generation_id, wall_ms(), group_instance_id)
        await self._schedule_tick(group)
        return encode(error)

    async def leave_group(self, group_id: str, member_id: str,
                          group_instance_id: str | None = None) -> bytes:
        try:
            group = self._member_group(group_id, member_id)
        except KafkaError as e:
            return encode(e)
        error, answers = group.leave(member_id, wall_ms(), group_instance_id)
        await self._deliver(group, answers)
        return encode(error)

    # ---- offsets ---------------------------------------------------------------------------
    async def commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                             offsets: list, group_instance_id: str | None = None) -> bytes:
        """OffsetCommit: ``offsets`` is ``[(topic, partition, offset, leader_epoch,
        metadata)]``; the answer one error (or None) for the whole request."""
        try:
            self._check(group_id)
            # A group not managed here (assign() and admin tools: generation -1) is created
            # to hold its offsets; any other commit to an unknown group is from a past
            # generation (Kafka's rule).
            group = self._group(group_id, create=generation_id < 0)
            if group is None:
                raise IllegalGenerationError(f"Group {group_id} has no generation "
                                             f"{generation_id}")
            error = group.validate_commit(member_id, generation_id, group_instance_id)
            if error is not None:
                raise error
            now = wall_ms()
            values = {TopicPartition(t, p): OffsetAndMetadata(o, e, m or "", now)
                      for t, p, o, e, m in offsets}
            if values:
                await self._append(group_id, [
                    Record(offset_commit_key(group_id, *tp), offset_commit_value(v))
                    for tp, v in values.items()])
            self.offsets.setdefault(group_id, {}).update(values)
            await self._schedule_tick(group)
            return encode(None)
        except KafkaError as e:
            return encode(e)

    async def fetch_offsets(self, group_id: str, partitions: list | None = None) -> bytes:
        """OffsetFetch: ``[(topic, partition, offset, leader_epoch, metadata)]``, offset -1
        where nothing is committed; every committed partition when ``partitions`` is None."""
        try:
            self._check(group_id)
        except KafkaError as e:
            return encode(e)
        committed = self.offsets.get(group_id, {})
        wanted = committed.keys() if partitions is None else \
            [TopicPartition(*tp) for tp in partitions]
        out = []
        for tp in wanted:
            v = committed.get(tp)
            out.append((tp.topic, tp.partition, -1, -1, "") if v is None else
                       (tp.topic, tp.partition, v.offset, v.leader_epoch, v.metadata))
        return encode(out)

    # ---- administration --------------------------------------------------------------------
    async def describe_group(self, group_id: str) -> bytes:
        try:
            self._check(group_id)
        except KafkaError as e:
            return encode(e)
        group = self.groups.get(group_id)
        if group is None:
            return encode({"group_id": group_id, "state": "Dead", "protocol_type": "",
                           "protocol": "", "generation_id": -1, "leader": "", "members": []})
        return encode(group.describe())

    async def list_groups(self) -> bytes:
        """(group id, protocol type, state) of every loaded group, offsets-only ones too."""
        out = {}
        for group_id in self.offsets:
            out[group_id] = (group_id, "consumer", "Empty")
        for group_id, group in self.groups.items():
            if group.state is not GroupState.DEAD:
                out[group_id] = (group_id, group.protocol_type or "consumer",
                                 group.state.value)
        return encode(sorted(out.values()))

    async def delete_group(self, group_id: str) -> bytes:
        """DeleteGroups: only an empty group; its offsets and metadata get tombstones."""
        try:
            self._check(group_id)
            group = self.groups.get(group_id)
            committed = self.offsets.get(group_id)
            if group is None and committed is None:
                raise GroupIdNotFoundError(f"Group {group_id} does not exist")
            if group is not None and group.state is not GroupState.EMPTY:
                raise NonEmptyGroupError(f"Group {group_id} is not empty "
                                         f"({group.state.value})")
            tombstones = [Record(offset_commit_key(group_id, *tp), None)
                          for tp in committed or {}]
            tombstones.append(Record(group_metadata_key(group_id), None))
            await self._append(group_id, tombstones)
            if group is not None:
                group.mark_dead()
            self.groups.pop(group_id, None)
            self.offsets.pop(group_id, None)
            return encode(None)
        except KafkaError as e:
            return encode(e)

    async def owned_partitions(self) -> dict:
        return {"owned": dict(self.owned), "loading": sorted(self.loading)}

    async def ping(self) -> int:
        return self.broker_id
