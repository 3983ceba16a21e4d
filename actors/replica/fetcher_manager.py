"""ReplicaFetcherManager: a replica host's follower side (Kafka's ReplicaFetcherManager).

Each follower replica of the host is placed in the ``ReplicaFetcher`` of the host holding its
leader: one fetcher, one task and one request in flight per (this host, leader host) pair,
however many partitions they share. The fetchers decide; this shell finds leader hosts
(``actors.replica.locate``), sends the requests, hands back answers, errors and timeouts,
and moves partitions between fetchers as leadership moves. A fetcher whose leader host stops
answering lets its partitions go to be located again (the leader's broker may have
restarted, with new hosts).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from actors.replica.fetcher import FIRST_BACKOFF_MS, ReplicaFetcher
from actors.replica.locate import locate_replica_async
from actors.replica.partition import PartitionReplica, ReplicaConfig, Role
from protocols.messages import (FetchManyRequest, decode_fetch_many_response,
                                encode_fetch_many_request)
from protocols.wire import decode, encode

log = logging.getLogger(__name__)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class _FetcherTask:
    """One ReplicaFetcher and the task that drives it against one leader host."""

    def __init__(self, manager: "ReplicaFetcherManager", key: str, leader_host: Any):
        self.manager = manager
        self.key = key
        self.leader_host = leader_host
        self.fetcher = ReplicaFetcher(manager.broker_id, manager.config, wall_ms)
        self.wake = asyncio.Event()
        self.requests_sent = 0
        self.last_request_bytes = 0
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
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
                if isinstance(request, FetchManyRequest):
                    payload = encode_fetch_many_request(request)
                    self.last_request_bytes = len(payload)
                    answer = decode_fetch_many_response(await asyncio.wait_for(
                        self.leader_host.fetch_many.remote(payload), timeout_s))
                    fetcher.on_fetch_response(answer)
                else:
                    answers = decode(await asyncio.wait_for(
                        self.leader_host.offsets_for_leader_epoch_many.remote(encode(request)),
                        timeout_s))
                    fetcher.on_epoch_end_offsets(request, answers)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("fetcher %s: request failed: %r", self.key, e)
                self.manager._leader_host_failed(self)
                return


class ReplicaFetcherManager:
    def __init__(self, namespace: str, broker_id: int, config: ReplicaConfig):
        self.namespace = namespace
        self.broker_id = broker_id
        self.config = config
        self._fetchers: dict[str, _FetcherTask] = {}
        self._placed: dict[tuple[str, int], str] = {}
        self._locating: dict[tuple[str, int], asyncio.Task] = {}

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
        elif key not in self._placed and key not in self._locating:
            self.follow(replica)

    def unfollow(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        locating = self._locating.pop(key, None)
        if locating is not None:
            locating.cancel()
        placed = self._placed.pop(key, None)
        if placed is not None:
            fetcher_task = self._fetchers.get(placed)
            if fetcher_task is not None:
                fetcher_task.fetcher.remove_partition(topic, partition)
                if not len(fetcher_task.fetcher):
                    fetcher_task.task.cancel()
                    del self._fetchers[placed]

    async def _locate_and_add(self, replica: PartitionReplica, after_ms: int) -> None:
        key = (replica.topic, replica.partition)
        epoch, leader = replica.leader_epoch, replica.leader_id
        failures = 0
        if after_ms:
            await asyncio.sleep(after_ms / 1000)
        while replica.role is Role.FOLLOWER and replica.leader_epoch == epoch:
            try:
                handle = await locate_replica_async(self.namespace, replica.topic,
                                                    replica.partition, leader)
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
        fetcher_task = self._fetchers.get(host_key)
        if fetcher_task is None:
            fetcher_task = self._fetchers[host_key] = _FetcherTask(self, host_key, handle.host)
        fetcher_task.fetcher.add_partition(replica)
        self._placed[key] = host_key
        fetcher_task.wake.set()

    def _leader_host_failed(self, fetcher_task: _FetcherTask) -> None:
        """Its request failed as a whole: let every partition find its leader's host again
        (after its backoff), as the old host may be gone for good."""
        if self._fetchers.get(fetcher_task.key) is not fetcher_task:
            return
        del self._fetchers[fetcher_task.key]
        delay = self.config.replica_fetch_backoff_ms
        for key, replica in list(fetcher_task.fetcher.partitions.items()):
            self._placed.pop(key, None)
            if replica.role is Role.FOLLOWER:
                self.follow(replica, after_ms=min(delay, FIRST_BACKOFF_MS * 4))

    def describe(self) -> list[dict]:
        """One entry per fetcher: its leader host, partitions, requests sent so far, its
        fetch session and the size of its last fetch request."""
        return [{"leader_host": key, "partitions": sorted(f.fetcher.partitions),
                 "requests_sent": f.requests_sent,
                 "session_id": f.fetcher.session.session_id,
                 "last_request_bytes": f.last_request_bytes}
                for key, f in self._fetchers.items()]

    def shutdown(self) -> None:
        for task in self._locating.values():
            task.cancel()
        for fetcher_task in self._fetchers.values():
            fetcher_task.task.cancel()
        self._locating.clear()
        self._fetchers.clear()
        self._placed.clear()
