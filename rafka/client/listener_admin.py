"""A cluster's partitions and offsets asked over its Kafka listener, as Kafka's admin client
asks them (Metadata, then ListOffsets to each leader; a group's committed offsets with
OffsetFetch to its coordinator), for a process that should not pay for Ray: Spark's
planners are started cold for a session's first job of each kind, and
``import ray``, Ray's connection and the controller's actor class cost them ~0.6 s of the
~0.9 s each spent before; this costs a socket per broker and Kafka's schemas.

PLAINTEXT listeners only (``rafka.client.listener_client``); the answers are the same as
``rafka.Admin``'s: one broker serves both doors.
"""
from __future__ import annotations

import time
from typing import Iterable, Mapping

from protocols.errors import (KafkaError, LeaderNotAvailableError, NetworkError,
                              UnknownTopicOrPartitionError, error_for_code)
from protocols.kafka.api_keys import ApiKey
from protocols.messages import (EARLIEST_TIMESTAMP, ISOLATION_LEVELS, LATEST_TIMESTAMP,
                                OffsetAndMetadata)
from protocols.topics import GROUP_KEY_TYPE, TopicPartition
from rafka.admin import ListOffsetsResult
from rafka.client.listener_client import (BACKOFF_S, CONSUMER_REPLICA_ID, ListenerClient,
                                          parse_bootstrap, retriable)
from rafka.client.retry import retry_until

__all__ = ["ListenerAdmin", "parse_bootstrap"]

LIST_OFFSETS_VERSION = 5   # the last one without flexible fields; rafka 1-6, Kafka 4 1-10
OFFSET_FETCH_VERSION = 8   # groups in a list, require_stable (rafka 1-9, Kafka 4 1-10)


class ListenerAdmin(ListenerClient):
    """Metadata, ListOffsets and OffsetFetch over one cluster's Kafka listeners."""

    def __init__(self, bootstrap_servers: str, timeout_s: float = 60.0,
                 client_id: str = "rafka-planner"):
        super().__init__(bootstrap_servers, timeout_s, client_id)

    # ---- Kafka's requests -------------------------------------------------------------------
    def partition_counts(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Each topic's partition count (every topic when ``topics`` is None; a topic that
        does not exist is left out)."""
        deadline = time.monotonic() + self.timeout_s
        return retry_until(deadline, lambda _: self._metadata(topics, deadline),
                           backoff_s=BACKOFF_S, retriable=retriable)

    def list_offsets(self, specs: Mapping[tuple[str, int], int | str],
                     isolation_level: str = "read_uncommitted"
                     ) -> dict[TopicPartition, ListOffsetsResult]:
        """``rafka.Admin.list_offsets``' answer, asked of each partition's leader: earliest,
        latest (the high watermark, or the last stable offset at ``read_committed``) or the
        first offset at or after a time (-1 if none). A partition the cluster's metadata does
        not have fails at once, as Kafka's admin client fails it; a leader that moved or is
        still being elected is asked again until the timeout."""
        wanted = {TopicPartition(*tp): int({"earliest": EARLIEST_TIMESTAMP,
                                            "latest": LATEST_TIMESTAMP}.get(spec, spec))
                  for tp, spec in specs.items()}
        isolation = ISOLATION_LEVELS[isolation_level]
        found: dict[TopicPartition, ListOffsetsResult] = {}
        deadline = time.monotonic() + self.timeout_s

        def attempt(_left: float) -> KafkaError | None:
            """None once every partition is answered; an error to raise at once (what
            ``retry_until`` would retry: UNKNOWN_TOPIC_OR_PARTITION is retriable to a
            consumer, not to an admin)."""
            missing = [tp for tp in wanted if tp not in found]
            # Unknown to what it learnt (or led by a broker it does not know): ask again
            # before saying so.
            if any(self._leaders.get(tp) not in self._brokers for tp in missing):
                self._metadata({tp.topic for tp in missing}, deadline)
            unknown = [tp for tp in missing if tp.partition >= self._counts.get(tp.topic, 0)]
            if unknown:
                return UnknownTopicOrPartitionError(
                    f"This server does not host this topic-partition: {sorted(unknown)}")
            leaderless = [tp for tp in missing if self._leaders.get(tp) not in self._brokers]
            if leaderless:
                self._forget(leaderless)
                raise LeaderNotAvailableError(f"No leader known for {sorted(leaderless)}")
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in missing:
                by_leader.setdefault(self._leaders[tp], []).append(tp)
            # Every leader's request is sent before any answer is read.
            sent, retry = {}, None
            for leader, tps in by_leader.items():
                try:
                    sent[leader] = self._send(self._brokers[leader], *self._list_offsets_request(
                        {tp: wanted[tp] for tp in tps}, isolation), deadline)
                except OSError as e:
                    self._forget(tps)
                    retry = NetworkError(f"broker {leader}: {e}")
            for leader, correlation_id in sent.items():
                tps = by_leader[leader]
                try:
                    body = self._receive(self._brokers[leader], ApiKey.LIST_OFFSETS,
                                         LIST_OFFSETS_VERSION, correlation_id, deadline)
                except OSError as e:
                    self._forget(tps)
                    retry = NetworkError(f"broker {leader}: {e}")
                    continue
                answered = {TopicPartition(t.name, int(p.partition_index)): p
                            for t in body.topics for p in t.partitions}
                for tp in tps:
                    p = answered.get(tp)
                    code = NetworkError.code if p is None else p.error_code.value
                    if code == 0:
                        found[tp] = ListOffsetsResult(int(p.offset), int(p.timestamp))
                        continue
                    error = error_for_code(code, f"ListOffsets of {tp.topic}-{tp.partition} "
                                                 f"at broker {leader}")
                    if not error.retriable:
                        raise error
                    self._forget([tp])
                    retry = error
            if retry is not None:
                raise retry
            return None

        final = retry_until(deadline, attempt, backoff_s=BACKOFF_S, retriable=retriable)
        if final is not None:
            raise final
        return {tp: found[tp] for tp in wanted}

    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]],
                                    require_stable: bool = False
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """``rafka.Admin.list_consumer_group_offsets`` asked of the group's coordinator
        (OffsetFetch): the committed ``OffsetAndMetadata`` of each of ``partitions`` that has
        one. With ``require_stable``, an offset pending in an open transaction is asked for
        again (UNSTABLE_OFFSET_COMMIT) until the transaction ends or the timeout."""
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(int(partition))
        values = {"groups": [{"group_id": group_id, "topics": [
            {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}],
            "require_stable": require_stable}

        def error_of(body) -> KafkaError | None:
            group = body.groups[0]
            codes = [group.error_code.value] + [p.error_code.value for t in group.topics
                                                for p in t.partitions]
            code = next((c for c in codes if c), 0)
            return None if code == 0 else error_for_code(
                code, f"OffsetFetch of group {group_id!r}")

        body, error = self._coordinator_request(
            GROUP_KEY_TYPE, group_id, ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION, values,
            error_of, time.monotonic() + self.timeout_s, BACKOFF_S)
        if error is not None:
            raise error
        return {TopicPartition(t.name, int(p.partition_index)): OffsetAndMetadata(
                    int(p.committed_offset), int(p.committed_leader_epoch), p.metadata or "")
                for t in body.groups[0].topics for p in t.partitions
                if int(p.committed_offset) >= 0}

    @staticmethod
    def _list_offsets_request(times: Mapping[TopicPartition, int], isolation: int
                              ) -> tuple[int, int, dict]:
        by_topic: dict[str, list] = {}
        for tp, timestamp in times.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "current_leader_epoch": -1,
                 "timestamp": timestamp})
        return ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
            "replica_id": CONSUMER_REPLICA_ID, "isolation_level": isolation,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
