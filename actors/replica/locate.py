"""Where a partition replica lives, seen from outside its host.

A replica is not an actor of its own: it lives in one of its broker's replica hosts. Its
broker says which (``BrokerActor.replica_host``); a ``ReplicaHandle`` then stands for the
replica wherever a handle is wanted: ``handle.fetch.remote(request)`` is the host's
``fetch.remote(topic, partition, request)``. Every caller (clients, admin, the group
coordinator, a follower fetching from its leader, the Spark source, Ray Data, the CLI)
finds replicas through this module, synchronously from a driver or thread, or with
``await`` from an actor's event loop.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import ray

from actors.names import broker_name
from protocols.errors import UnknownTopicOrPartitionError


@dataclass(frozen=True)
class _BoundMethod:
    host: Any
    method: str
    topic: str
    partition: int

    def remote(self, *args, **kwargs):
        return getattr(self.host, self.method).remote(self.topic, self.partition,
                                                      *args, **kwargs)


@dataclass(frozen=True)
class ReplicaHandle:
    """One hosted replica: its host's actor handle and its topic-partition."""
    host: Any
    topic: str
    partition: int
    broker_id: int

    @property
    def host_id(self) -> str:
        """Which host: replicas with the same ``host_id`` are served by one actor, so one
        request can carry them all (a fetcher's, a producer's)."""
        return self.host._actor_id.hex()

    def __getattr__(self, method: str) -> _BoundMethod:
        # Only a replica's methods, never dunders or privates: pickle and copy probe those
        # on a half-built object.
        if method.startswith("_"):
            raise AttributeError(method)
        return _BoundMethod(self.host, method, self.topic, self.partition)


def _absent(topic: str, partition: int, broker_id: int) -> UnknownTopicOrPartitionError:
    return UnknownTopicOrPartitionError(
        f"No replica of {topic}-{partition} on broker {broker_id}")


def _broker(namespace: str, broker_id: int):
    try:
        return ray.get_actor(broker_name(broker_id), namespace=namespace)
    except ValueError:
        return None


def locate_replica(namespace: str, topic: str, partition: int, broker_id: int,
                   timeout_s: float = 30.0) -> ReplicaHandle:
    """The replica of topic-partition on ``broker_id`` (from a driver or a thread);
    UNKNOWN_TOPIC_OR_PARTITION when that broker is down or holds no such replica."""
    broker = _broker(namespace, broker_id)
    host = None
    if broker is not None:
        try:
            host = ray.get(broker.replica_host.remote(topic, partition), timeout=timeout_s)
        except ray.exceptions.RayError:
            host = None
    if host is None:
        raise _absent(topic, partition, broker_id)
    return ReplicaHandle(host, topic, partition, broker_id)


def locate_replicas(namespace: str, wanted: list[tuple[str, int, int]],
                    timeout_s: float = 30.0) -> dict[tuple[str, int, int], ReplicaHandle]:
    """``locate_replica`` for many ``(topic, partition, broker_id)`` at once, asking each
    broker once: the handles found (a replica whose broker is down or holds none of it is
    left out)."""
    by_broker: dict[int, list[tuple[str, int]]] = {}
    for topic, partition, broker_id in wanted:
        by_broker.setdefault(broker_id, []).append((topic, partition))
    refs = {}
    for broker_id, tps in by_broker.items():
        broker = _broker(namespace, broker_id)
        if broker is not None:
            refs[broker_id] = broker.replica_hosts.remote(tps)
    out = {}
    deadline = time.monotonic() + timeout_s
    for broker_id, ref in refs.items():
        try:
            hosts = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.RayError:
            continue
        for (topic, partition), host in zip(by_broker[broker_id], hosts):
            if host is not None:
                out[(topic, partition, broker_id)] = ReplicaHandle(host, topic, partition,
                                                                   broker_id)
    return out


async def locate_replica_async(namespace: str, topic: str, partition: int,
                               broker_id: int) -> ReplicaHandle:
    """``locate_replica`` for code on an actor's event loop."""
    broker = _broker(namespace, broker_id)
    host = None if broker is None else await broker.replica_host.remote(topic, partition)
    if host is None:
        raise _absent(topic, partition, broker_id)
    return ReplicaHandle(host, topic, partition, broker_id)


class LeaderHostLocator:
    """``locate_replica_async`` for many callers on one event loop, asking each broker once
    for every replica wanted of it meanwhile (``BrokerActor.replica_hosts``): a host's
    followers of a new topic's thousands of partitions locate their leaders in a few calls,
    not one Ray lookup and one call each. Broker handles are kept; one whose call fails is
    looked up afresh next time (the broker restarted, or is gone)."""

    def __init__(self, namespace: str, timeout_s: float = 30.0):
        self.namespace = namespace
        self.timeout_s = timeout_s   # a broker not answering by then: every one absent
        self._brokers: dict[int, Any] = {}
        self._pending: dict[int, list[tuple[str, int, asyncio.Future]]] = {}
        self._asking: set[asyncio.Task] = set()   # the loop keeps only weak references

    async def locate(self, topic: str, partition: int, broker_id: int) -> ReplicaHandle:
        """The replica of topic-partition on ``broker_id``; UNKNOWN_TOPIC_OR_PARTITION when
        that broker is down or holds no such replica (yet)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        pending = self._pending.get(broker_id)
        if pending is None:
            pending = self._pending[broker_id] = []
            # Asked once the callers ready now have all enqueued.
            loop.call_soon(self._start_asking, broker_id)
        pending.append((topic, partition, future))
        return await future

    def _start_asking(self, broker_id: int) -> None:
        task = asyncio.get_running_loop().create_task(self._ask(broker_id))
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)

    async def _ask(self, broker_id: int) -> None:
        wanted = self._pending.pop(broker_id, [])
        hosts: list = []
        try:
            broker = self._brokers.get(broker_id)
            if broker is None:
                broker = _broker(self.namespace, broker_id)
            if broker is not None:
                hosts = await asyncio.wait_for(
                    broker.replica_hosts.remote([(t, p) for t, p, _ in wanted]),
                    self.timeout_s)
                self._brokers[broker_id] = broker
        except Exception:   # noqa: BLE001 - its broker is restarting or gone: all absent
            self._brokers.pop(broker_id, None)
            hosts = []
        for i, (topic, partition, future) in enumerate(wanted):
            if future.done():
                continue   # its caller gave up
            host = hosts[i] if i < len(hosts) else None
            if host is None:
                future.set_exception(_absent(topic, partition, broker_id))
            else:
                future.set_result(ReplicaHandle(host, topic, partition, broker_id))
