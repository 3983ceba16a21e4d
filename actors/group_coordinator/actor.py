"""GroupCoordinatorActor: one broker's group coordinator (Kafka's GroupCoordinator and
GroupMetadataManager), as an async Ray actor named ``coordinator-<broker id>``.

A group lives in ``__consumer_offsets`` partition ``coordinator_partition_for(group_id)``; the
broker leading that partition hosts its coordinator. The broker tells this actor when it
gains (``on_election``) or loses (``on_resignation``) such a leadership: it then loads the
partition's groups and offsets from the local log (``COORDINATOR_LOAD_IN_PROGRESS`` while it
reads) or unloads them (``NOT_COORDINATOR`` from then on).

Every decision is the pure core's (``actors.group_coordinator.coordinator.GroupCoordinator``).
This shell performs the effects it returns: it completes each request's future with its
reply, appends writes to the log through the partition's leader replica (acks=all) and
reports their outcome, asks the broker's timer actor to call ``tick`` at a group's
deadline, and reads a partition when the core says to load it. Answers cross as msgpack
(``protocols.wire``), errors keeping their codes.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from actors.coordinator_load import LedPartitions
from actors.group_coordinator.coordinator import Effects, GroupCoordinator, Write
from actors.group_coordinator.group import GroupConfig
from actors.metrics.consumer_lag import committed_rows
from protocols.records import encode_batch
from protocols.topics import OFFSETS_TOPIC
from protocols.wire import decode, encode

log = logging.getLogger(__name__)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=10_000)
class GroupCoordinatorActor:
    def __init__(self, namespace: str, broker_id: int, broker_config: dict, timer: Any):
        self.namespace = namespace
        self.broker_id = broker_id
        self.commit_timeout_ms = broker_config["offsets.commit.timeout.ms"]
        self.load_buffer = broker_config["offsets.load.buffer.size"]
        self.core = GroupCoordinator(broker_id, broker_config["offsets.topic.num.partitions"],
                                     GroupConfig(
            initial_rebalance_delay_ms=broker_config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=broker_config["group.min.session.timeout.ms"],
            max_session_timeout_ms=broker_config["group.max.session.timeout.ms"],
            max_size=broker_config["group.max.size"]))
        self.timer = timer
        self.partitions = LedPartitions(namespace, OFFSETS_TOPIC, broker_id, self.load_buffer,
                                        transactional=True)
        self._replies: dict[int, asyncio.Future] = {}   # request id -> its answer
        self._me = None

    # ---- performing the core's effects ------------------------------------------------------
    def _perform(self, effects: Effects) -> None:
        for request, reply in effects.replies:
            future = self._replies.pop(request, None)
            if future is not None and not future.done():
                future.set_result(reply)
        loop = asyncio.get_running_loop()
        for write in effects.writes:
            loop.create_task(self._write(write))
        for group_id, deadline in effects.ticks:
            if self._me is None:
                self._me = ray.get_runtime_context().current_actor
            # Fire and forget: the timer actor calls tick when the deadline comes.
            self.timer.schedule.remote(max(1, deadline - wall_ms() + 1), self._me, "tick",
                                       group_id)

    async def _serve(self, call: tuple[int, Effects]) -> bytes:
        """A request's answer: its reply among the effects, or later (a parked JoinGroup or
        SyncGroup, a write to the log first)."""
        request, effects = call
        future = self._replies[request] = asyncio.get_running_loop().create_future()
        self._perform(effects)
        return encode(await future)

    async def _write(self, write: Write) -> None:
        error = None
        try:
            replica = await self.partitions.replica(write.partition)
            if write.transaction is None:
                batch, transactional_id = encode_batch(write.records), None
            else:
                # The producer's own transactional batch, without sequence numbers (a
                # coordinator's append; Kafka's AppendOrigin.COORDINATOR).
                transactional_id, producer_id, epoch = write.transaction
                batch = encode_batch(write.records, producer_id=producer_id,
                                     producer_epoch=epoch, transactional=True)
            result = decode(await replica.produce.remote(batch, -1, self.commit_timeout_ms,
                                                         transactional_id))
            error = result.error
        except Exception as e:  # the replica moved or died under the request
            error = e
            self.partitions.replica_failed(write.partition)
        self._perform(self.core.on_write_done(write, error))

    # ---- partition ownership (from the broker) ---------------------------------------------
    async def on_election(self, partition: int, leader_epoch: int) -> None:
        effects, load = self.core.on_election(partition, leader_epoch)
        if load:
            self.partitions.load(partition, leader_epoch, lambda records: self._perform(
                self.core.on_loaded(partition, leader_epoch, records, wall_ms())))
        self._perform(effects)

    async def on_resignation(self, partition: int) -> None:
        self.partitions.forget(partition)
        self._perform(self.core.on_resignation(partition))

    async def wait_loaded(self, partition: int) -> bool:
        await self.partitions.wait_loaded(partition)
        return self.core.owns(partition)

    async def tick(self, group_id: str) -> None:
        """Called by the broker's timer actor at a group's deadline."""
        self._perform(self.core.tick(group_id, wall_ms()))

    # ---- the group protocol ----------------------------------------------------------------
    async def join_group(self, group_id: str, member_id: str, protocol_type: str,
                         protocols: list, client_id: str = "",
                         group_instance_id: str | None = None,
                         session_timeout_ms: int = 45_000,
                         rebalance_timeout_ms: int = 300_000) -> bytes:
        return await self._serve(self.core.join_group(
            group_id, member_id, protocol_type, protocols, wall_ms(), client_id=client_id,
            group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms))

    async def sync_group(self, group_id: str, member_id: str, generation_id: int,
                         assignments: dict | None,
                         group_instance_id: str | None = None) -> bytes:
        return await self._serve(self.core.sync_group(
            group_id, member_id, generation_id, assignments, wall_ms(), group_instance_id))

    async def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                        group_instance_id: str | None = None) -> bytes:
        return await self._serve(self.core.heartbeat(group_id, member_id, generation_id,
                                                     wall_ms(), group_instance_id))

    async def leave_group(self, group_id: str, member_id: str,
                          group_instance_id: str | None = None) -> bytes:
        return await self._serve(self.core.leave_group(group_id, member_id, wall_ms(),
                                                       group_instance_id))

    # ---- offsets ---------------------------------------------------------------------------
    async def commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                             offsets: list, group_instance_id: str | None = None) -> bytes:
        """OffsetCommit (``GroupCoordinator.commit_offsets``)."""
        return await self._serve(self.core.commit_offsets(
            group_id, member_id, generation_id, offsets, wall_ms(), group_instance_id))

    async def fetch_offsets(self, group_id: str, partitions: list | None = None,
                            require_stable: bool = False) -> bytes:
        return encode(self.core.fetch_offsets(group_id, partitions, require_stable))

    async def txn_commit_offsets(self, transactional_id: str, group_id: str,
                                 producer_id: int, producer_epoch: int, member_id: str,
                                 generation_id: int, offsets: list,
                                 group_instance_id: str | None = None) -> bytes:
        """TxnOffsetCommit (``GroupCoordinator.commit_offsets`` in a transaction)."""
        return await self._serve(self.core.commit_offsets(
            group_id, member_id, generation_id, offsets, wall_ms(), group_instance_id,
            (transactional_id, producer_id, producer_epoch)))

    async def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's marker is written on ``__consumer_offsets``-``partition``."""
        self.core.complete_txn(partition, producer_id, commit)

    # ---- administration --------------------------------------------------------------------
    async def describe_group(self, group_id: str) -> bytes:
        return encode(self.core.describe_group(group_id))

    async def list_groups(self) -> bytes:
        return encode(self.core.list_groups())

    async def delete_offsets(self, group_id: str, partitions: list) -> bytes:
        """OffsetDelete (``GroupCoordinator.delete_offsets``)."""
        return await self._serve(self.core.delete_offsets(
            group_id, [tuple(tp) for tp in partitions]))

    async def delete_group(self, group_id: str) -> bytes:
        return await self._serve(self.core.delete_group(group_id))

    async def committed_offsets(self) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, offset) of every offset committed in the groups this
        coordinator owns: for the broker's consumer lag."""
        return committed_rows(self.core.offsets)

    async def owned_partitions(self) -> dict:
        return {"owned": dict(self.core.owned), "loading": sorted(self.core.loading)}

    async def ping(self) -> int:
        return self.broker_id
