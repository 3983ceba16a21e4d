"""TransactionCoordinatorActor: one broker's transaction coordinator (Kafka's
TransactionCoordinator, TransactionStateManager and TransactionMarkerChannelManager), as an
async Ray actor named ``txn-coordinator-<broker id>``.

A transactional id lives in ``__transaction_state`` partition
``coordinator_partition_for(transactional_id)``; the broker leading that partition hosts its
coordinator. The broker tells this actor when it gains (``on_election``, with the leader
epoch as coordinator epoch) or loses (``on_resignation``) such a leadership: it then loads
the partition's transactional ids from the local log (``COORDINATOR_LOAD_IN_PROGRESS``
while it reads) or drops them (``NOT_COORDINATOR`` from then on).

Every decision is the pure core's (``actors.txn.coordinator.TransactionCoordinator``). This
shell performs the effects it returns: it completes each request's future with its reply,
appends each state change to ``__transaction_state`` through the partition's leader replica
(acks=all) and reports the outcome, writes markers through the data partitions' leaders
(their replica hosts' ``write_txn_markers_many``, one call per host) and reports each
partition's outcome, keeps the core supplied with producer ids from the controller (blocks
of ``PRODUCER_ID_BLOCK``, Kafka's AllocateProducerIds), and has the node's timer call
``abort_timed_out_transactions`` and ``expire_transactional_ids`` periodically. Answers
cross as msgpack (``protocols.wire``), errors keeping their codes.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from actors.coordinator_load import LedPartitions
from actors.names import broker_name, txn_coordinator_name
from actors.replica.locate import locate_replica_async
from actors.timer.actor import keep_scheduled
from actors.txn.coordinator import (PARTITION_GONE, Effects, MarkerSend,
                                    TransactionCoordinator, TxnConfig, TxnWrite)
from protocols.errors import KafkaError, NotLeaderOrFollowerError
from protocols.records import encode_batch
from protocols.topics import TRANSACTION_STATE_TOPIC, TopicPartition
from protocols.wire import decode, encode

log = logging.getLogger(__name__)
PRODUCER_ID_BLOCK = 1000
# Kafka's coordinator waits request.timeout.ms for its log appends and its markers.
REQUEST_TIMEOUT_MS = 30_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=10_000)
class TransactionCoordinatorActor:
    def __init__(self, namespace: str, broker_id: int, broker_config: dict):
        b = broker_config
        self.namespace = namespace
        self.broker_id = broker_id
        self.core = TransactionCoordinator(broker_id, TxnConfig(
            num_partitions=b["transaction.state.log.num.partitions"],
            max_timeout_ms=b["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=b["transactional.id.expiration.ms"],
            offsets_partitions=b["offsets.topic.num.partitions"]))
        self._periods = (b["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                         b["transaction.remove.expired.transaction.cleanup.interval.ms"])
        self.partitions = LedPartitions(namespace, TRANSACTION_STATE_TOPIC, broker_id,
                                        b["transaction.state.log.load.buffer.size"])
        self._replies: dict[int, asyncio.Future] = {}   # request id -> its answer
        # Data partitions' leader replicas, as markers last found them.
        self._leaders: dict[TopicPartition, Any] = {}
        self._broker_handle = None
        self._refill: asyncio.Task | None = None
        self._scheduled: asyncio.Task | None = None
        self._stopping = False

    # ---- performing the core's effects ------------------------------------------------------
    def _perform(self, effects: Effects) -> None:
        for request, reply in effects.replies:
            future = self._replies.pop(request, None)
            if future is not None and not future.done():
                future.set_result(reply)
        loop = asyncio.get_running_loop()
        for write in effects.writes:
            loop.create_task(self._write(write))
        for send in effects.markers:
            loop.create_task(self._send_markers(send))
        for transactional_id, request, deadline in effects.waits:
            loop.call_later(max(0.0, (deadline - wall_ms()) / 1000), lambda t=transactional_id,
                            r=request: self._perform(self.core.completion_wait_over(
                                t, r, wall_ms())))

    async def _serve(self, call: tuple[int, Effects]) -> bytes:
        """A request's answer: its reply among the effects, or once its write is done."""
        request, effects = call
        future = self._replies[request] = asyncio.get_running_loop().create_future()
        self._perform(effects)
        return encode(await future)

    async def _write(self, write: TxnWrite) -> None:
        if write.delay_ms:
            await asyncio.sleep(write.delay_ms / 1000)
        error = None
        try:
            replica = await self.partitions.replica(write.partition)
            result = decode(await replica.produce.remote(
                encode_batch([write.record]), -1, REQUEST_TIMEOUT_MS))
            error = result.error
        except Exception as e:  # the replica moved or died under the request
            error = e
            self.partitions.replica_failed(write.partition)
        self._perform(self.core.on_write_done(write, error, wall_ms()))

    async def _send_markers(self, send: MarkerSend) -> None:
        """WriteTxnMarkers: each partition's marker through its leader, one call per
        replica host; every partition's outcome goes back to the core."""
        if send.delay_ms:
            await asyncio.sleep(send.delay_ms / 1000)
        partitions = sorted(send.partitions)
        results: dict[TopicPartition, Any] = {}
        by_host: dict[str, tuple[Any, list[TopicPartition]]] = {}
        cached = [self._leaders.get(tp) for tp in partitions]
        if all(handle is not None for handle in cached):
            # The leaders the last markers reached (a producer's partitions are mostly the
            # same from one transaction to the next). One that has lost the leadership
            # answers NOT_LEADER_OR_FOLLOWER, is dropped, and is looked up for the retry.
            located = [(tp, handle.broker_id) for tp, handle in zip(partitions, cached)]
            handles: list = cached
        else:
            located = await self._located(partitions, results)
            handles = await asyncio.gather(*[self._leader(tp, leader)
                                             for tp, leader in located],
                                           return_exceptions=True)
        for (tp, _), handle in zip(located, handles):
            if isinstance(handle, BaseException):
                results[tp] = handle if isinstance(handle, KafkaError) \
                    else NotLeaderOrFollowerError(repr(handle))
            else:
                by_host.setdefault(handle.host_id, (handle.host, []))[1].append(tp)

        async def write(host: Any, tps: list[TopicPartition]) -> None:
            try:
                errors = decode(await host.write_txn_markers_many.remote(
                    [(tp.topic, tp.partition, send.producer_id, send.producer_epoch,
                      send.coordinator_epoch, send.commit) for tp in tps],
                    REQUEST_TIMEOUT_MS))
            except Exception as e:   # the host died under the request: retried
                errors = [NotLeaderOrFollowerError(f"{e!r}")] * len(tps)
            results.update(zip(tps, errors))
            for tp, error in zip(tps, errors):
                if error is not None:        # located afresh for the retry
                    self._leaders.pop(tp, None)
        await asyncio.gather(*[write(host, tps) for host, tps in by_host.values()])
        self._perform(self.core.on_markers_done(send, results, wall_ms()))

    async def _located(self, partitions: list[TopicPartition],
                       results: dict[TopicPartition, Any]) -> list[tuple[TopicPartition, int]]:
        """(partition, leader) for those the broker's metadata names a leader for; the
        others' outcomes go in ``results``."""
        try:
            leaders = await self._broker().partition_leaders.remote(
                [tuple(tp) for tp in partitions])
        except Exception as e:
            leaders = [NotLeaderOrFollowerError(f"Could not read the metadata: {e!r}")] \
                * len(partitions)
        located = []
        for tp, leader in zip(partitions, leaders):
            if isinstance(leader, KafkaError):
                results[tp] = leader
            elif leader is None:
                results[tp] = PARTITION_GONE
            elif leader < 0:
                results[tp] = NotLeaderOrFollowerError(f"{tp} has no leader")
            else:
                located.append((tp, leader))
        return located

    async def _leader(self, tp: TopicPartition, leader: int):
        """The leader replica's handle (its host), kept while that broker leads it."""
        cached = self._leaders.get(tp)
        if cached is not None and cached.broker_id == leader:
            return cached
        handle = self._leaders[tp] = await locate_replica_async(
            self.namespace, tp.topic, tp.partition, leader)
        return handle

    def _broker(self):
        if self._broker_handle is None:
            self._broker_handle = ray.get_actor(broker_name(self.broker_id),
                                                namespace=self.namespace)
        return self._broker_handle

    async def _producer_ids(self) -> None:
        """A block of producer ids from the controller, through this broker."""
        while self.core.needs_producer_ids:
            if self._refill is None or self._refill.done():
                self._refill = asyncio.get_running_loop().create_task(self._allocate())
            await asyncio.shield(self._refill)

    async def _allocate(self) -> None:
        answer = decode(await self._broker().allocate_producer_ids.remote(PRODUCER_ID_BLOCK))
        if isinstance(answer, KafkaError):
            raise answer
        self.core.add_producer_ids(answer, PRODUCER_ID_BLOCK)

    # ---- partition ownership (from the broker) ---------------------------------------------
    async def on_election(self, partition: int, coordinator_epoch: int) -> None:
        self._schedule_periodic_work()
        effects, load = self.core.on_election(partition, coordinator_epoch)
        if load:
            self.partitions.load(partition, coordinator_epoch, lambda records: self._perform(
                self.core.on_loaded(partition, coordinator_epoch, records, wall_ms())))
        self._perform(effects)

    async def on_resignation(self, partition: int, coordinator_epoch: int | None = None) -> None:
        self.partitions.forget(partition)
        self._perform(self.core.on_resignation(partition, coordinator_epoch))

    async def wait_loaded(self, partition: int) -> bool:
        await self.partitions.wait_loaded(partition)
        return self.core.owns(partition)

    def _schedule_periodic_work(self) -> None:
        if self._scheduled is not None:
            return
        me = ray.get_runtime_context().current_actor
        key = txn_coordinator_name(self.broker_id)
        abort_ms, expire_ms = self._periods
        self._scheduled = asyncio.get_running_loop().create_task(keep_scheduled(
            self.namespace,
            [(f"{key}:abort", abort_ms, me, "abort_timed_out_transactions"),
             (f"{key}:expire", expire_ms, me, "expire_transactional_ids")],
            lambda: not self._stopping))

    # ---- periodic work (the node's timer) --------------------------------------------------
    async def abort_timed_out_transactions(self) -> None:
        self._perform(self.core.abort_timed_out_transactions(wall_ms()))

    async def expire_transactional_ids(self) -> None:
        self._perform(self.core.expire_transactional_ids(wall_ms()))

    # ---- the transaction protocol ----------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> bytes:
        try:
            await self._producer_ids()
        except Exception as e:
            log.warning("txn coordinator %d: no producer ids from the controller: %r",
                        self.broker_id, e)
        return await self._serve(self.core.init_producer_id(
            transactional_id, txn_timeout_ms, None if expected is None else tuple(expected),
            wall_ms()))

    async def add_partitions_to_txn(self, transactional_id: str, producer_id: int,
                                    producer_epoch: int, partitions: list) -> bytes:
        return await self._serve(self.core.add_partitions_to_txn(
            transactional_id, producer_id, producer_epoch, partitions, wall_ms()))

    async def add_offsets_to_txn(self, transactional_id: str, producer_id: int,
                                 producer_epoch: int, group_id: str) -> bytes:
        return await self._serve(self.core.add_offsets_to_txn(
            transactional_id, producer_id, producer_epoch, group_id, wall_ms()))

    async def verify_partitions(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, partitions: list) -> bytes:
        answer = self.core.verify_partitions(transactional_id, producer_id, producer_epoch,
                                             partitions)
        return encode([(tp.topic, tp.partition, error) for tp, error in answer.items()])

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> bytes:
        return await self._serve(self.core.end_txn(transactional_id, producer_id,
                                                   producer_epoch, commit, wall_ms()))

    # ---- administration --------------------------------------------------------------------
    async def describe_transaction(self, transactional_id: str) -> bytes:
        return encode(self.core.describe_transaction(transactional_id))

    async def list_transactions(self, producer_ids: list = (), states: list = (),
                                duration_ms: int = -1) -> bytes:
        return encode(self.core.list_transactions(producer_ids, states, duration_ms,
                                                  wall_ms()))

    async def owned_partitions(self) -> dict:
        return {"owned": dict(self.core.owned), "loading": sorted(self.core.loading)}

    async def stop(self) -> None:
        self._stopping = True
        if self._scheduled is not None:
            self._scheduled.cancel()

    async def ping(self) -> int:
        return self.broker_id
