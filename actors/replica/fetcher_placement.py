"""Which fetcher each follower replica of a host is in: Kafka's AbstractFetcherManager's
fetcher map and partition map, pure.

A host has one ``ReplicaFetcher`` per leader host it follows partitions on (``key``: the
leader host's identity, whatever the shell uses for it). The shell finds the key (the
actors locate the leader's host through Ray; the simulator knows it), drives each fetcher's
requests, and asks this object where a partition goes when leadership moves, when a fetcher
runs empty (stop its task) and when a leader host is gone (place its partitions again).
"""
from __future__ import annotations

from typing import Callable, Generic, Hashable, TypeVar

from actors.replica.fetcher import ReplicaFetcher
from actors.replica.partition import PartitionReplica, Role
from protocols.topics import TopicPartition

K = TypeVar("K", bound=Hashable)


class FetcherPlacement(Generic[K]):
    def __init__(self, new_fetcher: Callable[[], ReplicaFetcher]):
        self._new_fetcher = new_fetcher
        self.fetchers: dict[K, ReplicaFetcher] = {}
        self.placed: dict[TopicPartition, K] = {}

    def is_placed(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.placed

    def place(self, replica: PartitionReplica, key: K) -> tuple[ReplicaFetcher, bool]:
        """Put a follower in the fetcher for its leader's host ``key`` (made if there is none
        yet: then the second value is True and the shell starts driving it). A partition
        moves by ``remove`` first, whose answer the shell must act on."""
        tp = (replica.topic, replica.partition)
        if self.placed.get(tp, key) != key:
            raise ValueError(f"{tp} is in the fetcher for {self.placed[tp]!r}: remove it first")
        fetcher = self.fetchers.get(key)
        created = fetcher is None
        if created:
            fetcher = self.fetchers[key] = self._new_fetcher()
        fetcher.add_partition(replica)
        self.placed[tp] = key
        return fetcher, created

    def remove(self, topic: str, partition: int) -> K | None:
        """Take the partition out of its fetcher. Returns the key of a fetcher this left
        empty: it is gone from here, and the shell stops driving it."""
        key = self.placed.pop((topic, partition), None)
        fetcher = self.fetchers.get(key) if key is not None else None
        if fetcher is None:
            return None
        fetcher.remove_partition(topic, partition)
        if len(fetcher):
            return None
        del self.fetchers[key]
        return key

    def release(self, key: K) -> list[PartitionReplica]:
        """The leader host ``key`` is gone for good (its process died): its fetcher goes, and
        the followers it held that still follow are returned, to be placed again once their
        leader's host is found."""
        fetcher = self.fetchers.pop(key, None)
        if fetcher is None:
            return []
        for tp in fetcher.partitions:
            self.placed.pop(tp, None)
        return [r for r in fetcher.partitions.values() if r.role is Role.FOLLOWER]

    def clear(self) -> None:
        self.fetchers.clear()
        self.placed.clear()
