"""What a client knows of the cluster: partitions per topic and each partition's leader
(broker, leader epoch, replica handle), refreshed from the controller on demand, as
Kafka clients refresh metadata on NOT_LEADER_OR_FOLLOWER and friends."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from protocols.errors import KafkaTimeoutError, UnknownTopicOrPartitionError
from protocols.topics import TopicPartition


@dataclass(frozen=True)
class LeaderInfo:
    broker_id: int
    leader_epoch: int
    handle: Any


class ClientMetadata:
    def __init__(self, cluster, max_age_ms: int = 300_000, door: Any = None):
        self.cluster = cluster
        # A guarded Ray door (rafka.client.ray_door): the image comes through it, with only
        # the topics the client's principal may describe, as Kafka's Metadata answers.
        self.door = door if door is not None and door.guarded else None
        self.max_age_s = max_age_ms / 1000
        self._lock = threading.Lock()
        # The current image: replaced on refresh, never changed in place, so ``is`` tells
        # whether something derived from it is current.
        self.image: dict = {}
        self._fetched_at = 0.0
        self._handles: dict[tuple[str, int, int], Any] = {}
        # topic -> (the image they come from, its partitions); current while that image is.
        self.partitions_by_topic: dict[str, tuple[dict, list[int]]] = {}

    def refresh(self) -> dict:
        if self.door is None:
            image = self.cluster.metadata()
        else:
            image = self.door.call("read", "image", [])
            if isinstance(image, BaseException):
                raise image
        with self._lock:
            self.image = image
            self._fetched_at = time.monotonic()
        return image

    def _current(self) -> dict:
        if not self.image or time.monotonic() - self._fetched_at > self.max_age_s:
            return self.refresh()
        return self.image

    def partitions_for(self, topic: str, max_block_ms: int = 60_000) -> list[int]:
        """The topic's partitions, waiting up to max.block.ms for it to appear."""
        image = self._current()
        cached = self.partitions_by_topic.get(topic)
        if cached is not None and cached[0] is image:
            return cached[1]
        deadline = time.monotonic() + max_block_ms / 1000
        if topic not in image["topics"] and self.door is not None:
            self._raise_if_refused(topic)
        while topic not in image["topics"]:
            if time.monotonic() > deadline:
                if max_block_ms == 0:
                    raise UnknownTopicOrPartitionError(f"Topic {topic} not present in metadata")
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after "
                                        f"{max_block_ms} ms.")
            time.sleep(0.1)
            image = self.refresh()
        partitions = sorted(image["topics"][topic])
        self.partitions_by_topic[topic] = (image, partitions)
        return partitions

    def _raise_if_refused(self, topic: str) -> None:
        """TOPIC_AUTHORIZATION_FAILED for a topic the principal may not describe (whether it
        exists or not), as Kafka's Metadata answers a topic asked for by name."""
        from protocols.kafka.acl import AclOperation
        refused = self.door.call("read", "topic_refusals", [int(AclOperation.DESCRIBE), [topic]])
        if isinstance(refused, BaseException):
            raise refused
        if topic in refused:
            raise refused[topic]

    def brokers(self) -> list[int]:
        """The live brokers' ids."""
        return sorted(self._current()["brokers"])

    def cached_partitions(self, topic: str) -> list[int] | None:
        """The topic's partitions from the current image without reading the clock (a
        producer's send asks this for every record; age is checked on the sender's side)."""
        cached = self.partitions_by_topic.get(topic)
        if cached is not None and cached[0] is self.image:
            return cached[1]
        return None

    def leader(self, tp: TopicPartition) -> LeaderInfo | None:
        """The partition's leader as last known, or None (no leader or unknown)."""
        image = self._current()
        p = image["topics"].get(tp.topic, {}).get(tp.partition)
        if p is None or p["leader"] < 0:
            return None
        key = (tp.topic, tp.partition, p["leader"])
        handle = self._handles.get(key)
        if handle is None:
            try:
                handle = self.cluster.replica(tp.topic, tp.partition, p["leader"])
            except UnknownTopicOrPartitionError:
                return None
            self._handles[key] = handle
        return LeaderInfo(p["leader"], p["leader_epoch"], handle)

    def leaders(self, tps: list[TopicPartition], timeout_s: float = 30.0
                ) -> dict[TopicPartition, LeaderInfo]:
        """``leader`` for many partitions, locating those not known yet with one call per
        broker (answered within ``timeout_s``); a partition without a known leader is left
        out."""
        from actors.replica.locate import locate_replicas
        image = self._current()
        if self.door is not None:
            for topic in {tp.topic for tp in tps} - set(image["topics"]):
                self._raise_if_refused(topic)
        found = {}
        for tp in tps:
            p = image["topics"].get(tp.topic, {}).get(tp.partition)
            if p is not None and p["leader"] >= 0:
                found[tp] = (p["leader"], p["leader_epoch"])
        missing = [(tp.topic, tp.partition, b) for tp, (b, _) in found.items()
                   if (tp.topic, tp.partition, b) not in self._handles]
        if missing:
            self._handles.update(locate_replicas(self.cluster.namespace, missing, timeout_s))
        handles = {tp: self._handles.get((tp.topic, tp.partition, b))
                   for tp, (b, _) in found.items()}
        return {tp: LeaderInfo(b, epoch, handles[tp]) for tp, (b, epoch) in found.items()
                if handles[tp] is not None}

    def knows(self, tp: TopicPartition) -> bool:
        """Whether the partition is in the current metadata."""
        return tp.partition in self._current()["topics"].get(tp.topic, {})

    def forget(self, tp: TopicPartition) -> None:
        """The leader did not answer as one: look it up again next time."""
        with self._lock:
            self._fetched_at = 0.0
            for key in [k for k in self._handles if k[:2] == (tp.topic, tp.partition)]:
                del self._handles[key]
