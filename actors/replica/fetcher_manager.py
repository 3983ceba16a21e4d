"""ReplicaFetcherManager: a replica host's follower side (Kafka's ReplicaFetcherManager).

Each follower replica of the host is placed in the ``ReplicaFetcher`` of the host holding its
leader: one fetcher, one task and one request in flight per (this host, leader host) pair,
however many partitions they share. The fetchers and their placement
(``fetcher_placement``) decide; this shell finds leader hosts (``actors.replica.locate``),
sends the requests over a replication connection to the leader host
(``actors.replica.channel``), hands back answers, errors and timeouts. A request that fails
or gets no answer in time backs its partitions off in their fetcher; a fetcher whose leader
host died (its actor is dead, or its connection is lost or refused) lets its partitions go
to be located again (the leader's broker may have restarted, with new hosts).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray.exceptions import ActorUnavailableError, RayActorError

from actors.replica.channel import (API_FETCH, API_OFFSETS_FOR_LEADER_EPOCH, ChannelClosed,
                                    ReplicationConnection, connect)
from actors.replica.fetcher import FIRST_BACKOFF_MS, ReplicaFetcher
from actors.replica.fetcher_placement import FetcherPlacement
from actors.replica.locate import LeaderHostLocator
from actors.replica.partition import PartitionReplica, ReplicaConfig, Role
from protocols.messages import (FetchManyRequest, decode_fetch_many_response,
                                encode_fetch_many_request)
from protocols.wire import decode, encode

log = logging.getLogger(__name__)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class _FetcherTask:
    """One ReplicaFetcher and the task that drives it against one leader host."""

    def __init__(self, manager: "ReplicaFetcherManager", key: str, leader_host: Any,
                 fetcher: ReplicaFetcher):
        self.manager = manager
        self.key = key
        self.leader_host = leader_host
        self.fetcher = fetcher
        self.wake = asyncio.Event()
        self.requests_sent = 0
        self.last_request_bytes = 0
        self.connection: ReplicationConnection | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            await self._fetch_until_done()
        finally:
            self.close()

    async def _fetch_until_done(self) -> None:
        fetcher = self.fetcher
        # An answer may take replica.fetch.wait.max.ms by design; well past that, the leader
        # host is gone or wedged.
        timeout_s = fetcher.config.replica_fetch_wait_max_ms / 1000 + 30
        while True:
            self.wake.clear()
            request = fetcher.next_request()
            if request is None:
                wakeup = fetcher.next_wakeup_ms()
                delay = None if wakeup is None else max(0.0, (wakeup - wall_ms()) / 1000)
                try:
                    await asyncio.wait_for(self.wake.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                continue
            self.requests_sent += 1
            try:
                connection = await self._connection(timeout_s)
                if isinstance(request, FetchManyRequest):
                    payload = encode_fetch_many_request(request)
                    self.last_request_bytes = len(payload)
                    answer = decode_fetch_many_response(await asyncio.wait_for(
                        connection.call(API_FETCH, payload), timeout_s))
                    fetcher.on_fetch_response(answer)
                else:
                    answers = decode(await asyncio.wait_for(
                        connection.call(API_OFFSETS_FOR_LEADER_EPOCH, encode(request)),
                        timeout_s))
                    fetcher.on_epoch_end_offsets(request, answers)
            except asyncio.CancelledError:
                raise
            except (RayActorError, ChannelClosed, ConnectionRefusedError) as e:
                if isinstance(e, ActorUnavailableError):  # restarting or unreachable: retry
                    fetcher.on_error(request)
                    continue
                log.debug("fetcher %s: leader host died: %r", self.key, e)
                self.manager._leader_host_failed(self)
                return
            except Exception as e:  # no answer in time, or a failed call: back off, retry
                log.debug("fetcher %s: request failed: %r", self.key, e)
                fetcher.on_error(request)

    async def _connection(self, timeout_s: float) -> ReplicationConnection:
        if self.connection is None or self.connection.closed:
            self.connection = await connect(self.leader_host, timeout_s)
        return self.connection

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


class ReplicaFetcherManager:
    def __init__(self, namespace: str, broker_id: int, config: ReplicaConfig):
        self.namespace = namespace
        self.broker_id = broker_id
        self.config = config
        # Which start of this follower the fetches are from (FetchManyRequest.replica_epoch).
        self.replica_epoch = -1
        self.placement: FetcherPlacement[str] = FetcherPlacement(
            lambda: ReplicaFetcher(broker_id, config, wall_ms, self.replica_epoch))
        self._tasks: dict[str, _FetcherTask] = {}
        self._locating: dict[tuple[str, int], asyncio.Task] = {}
        self.locator = LeaderHostLocator(namespace)

    def set_replica_epoch(self, replica_epoch: int) -> None:
        """The broker learnt its registration: every fetch from now on names it."""
        if replica_epoch > self.replica_epoch:
            self.replica_epoch = replica_epoch
            for fetcher in self.placement.fetchers.values():
                fetcher.replica_epoch = replica_epoch

    def follow(self, replica: PartitionReplica, after_ms: int = 0) -> None:
        """Fetch for ``replica`` (now a follower of a new leader or epoch) from its leader's
        host, leaving any fetcher it was in."""
        key = (replica.topic, replica.partition)
        self.unfollow(*key)
        self._locating[key] = asyncio.get_running_loop().create_task(
            self._locate_and_add(replica, after_ms))

    def ensure(self, replica: PartitionReplica) -> None:
        """Follow if it follows and is not placed yet; leave its fetcher if it leads or is
        offline."""
        key = (replica.topic, replica.partition)
        if replica.role is not Role.FOLLOWER:
            self.unfollow(*key)
        elif not self.placement.is_placed(*key) and key not in self._locating:
            self.follow(replica)

    def unfollow(self, topic: str, partition: int) -> None:
        locating = self._locating.pop((topic, partition), None)
        if locating is not None:
            locating.cancel()
        emptied = self.placement.remove(topic, partition)
        if emptied is not None:
            self._tasks.pop(emptied).task.cancel()

    async def _locate_and_add(self, replica: PartitionReplica, after_ms: int) -> None:
        key = (replica.topic, replica.partition)
        epoch, leader = replica.leader_epoch, replica.leader_id
        failures = 0
        if after_ms:
            await asyncio.sleep(after_ms / 1000)
        while replica.role is Role.FOLLOWER and replica.leader_epoch == epoch:
            try:
                handle = await self.locator.locate(replica.topic, replica.partition,
                                                   leader)
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the leader's broker is restarting or not there yet
                log.debug("%s: leader %d not found: %r", replica.name, leader, e)
                await asyncio.sleep(min(self.config.replica_fetch_backoff_ms,
                                        FIRST_BACKOFF_MS * 2 ** failures) / 1000)
                failures += 1
        else:
            self._locating.pop(key, None)
            return
        self._locating.pop(key, None)
        host_key = handle.host_id
        fetcher, created = self.placement.place(replica, host_key)
        if created:
            self._tasks[host_key] = _FetcherTask(self, host_key, handle.host, fetcher)
        self._tasks[host_key].wake.set()

    def partition_changed(self, topic: str, partition: int) -> None:
        """A follower's log start moved outside its fetcher (retention): its next request
        names it (``ReplicaFetcher.partition_changed``)."""
        host_key = self.placement.placed.get((topic, partition))
        fetcher = self.placement.fetchers.get(host_key) if host_key is not None else None
        if fetcher is not None:
            fetcher.partition_changed(topic, partition)

    def _leader_host_failed(self, fetcher_task: _FetcherTask) -> None:
        """Its leader host died: let every partition find its leader's host again (after
        its backoff), as the old host is gone for good."""
        if self._tasks.get(fetcher_task.key) is not fetcher_task:
            return
        del self._tasks[fetcher_task.key]
        delay = min(self.config.replica_fetch_backoff_ms, FIRST_BACKOFF_MS * 4)
        for replica in self.placement.release(fetcher_task.key):
            self.follow(replica, after_ms=delay)

    def describe(self) -> list[dict]:
        """One entry per fetcher: its leader host, partitions, requests sent so far, its
        fetch session, the size of its last fetch request and the replica epoch it names."""
        return [{"leader_host": key, "partitions": sorted(f.fetcher.partitions),
                 "requests_sent": f.requests_sent, "replica_epoch": f.fetcher.replica_epoch,
                 "session_id": f.fetcher.session.session_id,
                 "last_request_bytes": f.last_request_bytes}
                for key, f in self._tasks.items()]

    def shutdown(self) -> None:
        for task in self._locating.values():
            task.cancel()
        for fetcher_task in self._tasks.values():
            fetcher_task.task.cancel()
        self._locating.clear()
        self._tasks.clear()
        self.placement.clear()
