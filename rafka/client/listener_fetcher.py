"""One partition's records fetched over the cluster's Kafka listener, as Kafka's consumer
fetches them (Fetch to the partition's leader, the leader found by Metadata), for a process
that reads without Ray: a Spark task reading an offset range its planner found over the
same listener (``rafka.connectors.range_reader.read_tables_over_listener``).

Version 12 names topics rather than their ids (served by rafka, 4-17, and Kafka 4, 4-17); no
fetch session (a range's reader asks for one partition at a time, so a session would
save nothing). PLAINTEXT only (``rafka.client.listener_client``).
"""
from __future__ import annotations

from dataclasses import dataclass

from protocols.errors import (LeaderNotAvailableError, NetworkError,
                              UnknownTopicOrPartitionError, error_for_code)
from protocols.kafka.api_keys import ApiKey
from protocols.topics import TopicPartition
from rafka.client.listener_client import CONSUMER_REPLICA_ID, ListenerClient

FETCH_VERSION = 12
NO_SESSION, FINAL_EPOCH = 0, -1   # a full fetch outside any fetch session (KIP-227)


@dataclass(frozen=True)
class FetchedPartition:
    """What a leader answered for one partition: its record batches from the fetch offset
    (bytes; the last one may be partial, as Kafka sends it), the offsets bounding what a
    reader may see, and the aborted transactions among them (``(producer id, first
    offset)``, at read_committed)."""
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple


class ListenerFetcher(ListenerClient):
    """Fetch of one partition at a time from its leader's listener."""

    def __init__(self, bootstrap_servers: str, timeout_s: float = 60.0,
                 client_id: str = "rafka-range-reader"):
        super().__init__(bootstrap_servers, timeout_s, client_id)

    def fetch(self, tp: TopicPartition, offset: int, *, deadline: float,
              partition_max_bytes: int, max_bytes: int, isolation_level: int = 0,
              max_wait_ms: int = 500, min_bytes: int = 1) -> FetchedPartition:
        """The leader's answer for ``tp`` from ``offset`` (waiting up to ``max_wait_ms`` for
        ``min_bytes``). Kafka's error for the partition is raised: a retriable one
        (a leader that moved, one being elected, a broker gone) after forgetting the
        leader, so that the next call learns it again."""
        leader = self._leader(tp, deadline)
        address = self._brokers[leader]
        values = {
            "replica_id": CONSUMER_REPLICA_ID, "max_wait": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": isolation_level,
            "session_id": NO_SESSION, "session_epoch": FINAL_EPOCH,
            "topics": [{"topic": tp.topic, "partitions": [
                {"partition": tp.partition, "current_leader_epoch": -1,
                 "fetch_offset": offset, "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}
        try:
            correlation_id = self._send(address, ApiKey.FETCH, FETCH_VERSION, values, deadline)
            body = self._receive(address, ApiKey.FETCH, FETCH_VERSION, correlation_id,
                                 deadline)
        except OSError as e:
            self._forget([tp])
            raise NetworkError(f"Fetch of {tp.topic}-{tp.partition} from broker {leader}: "
                               f"{e}") from e
        code = int(body.error_code.value)
        parts = [p for t in body.responses if t.topic == tp.topic
                 for p in t.partitions if int(p.partition_index) == tp.partition]
        if code == 0 and not parts:
            code = NetworkError.code   # an answer without the partition asked for
        elif code == 0:
            code = parts[0].error_code.value
        if code != 0:
            error = error_for_code(code, f"Fetch of {tp.topic}-{tp.partition} at offset "
                                         f"{offset} from broker {leader}")
            if error.retriable:
                self._forget([tp])
            raise error
        p = parts[0]
        return FetchedPartition(
            bytes(p.records or b""), int(p.high_watermark), int(p.last_stable_offset),
            int(p.log_start_offset),
            tuple((int(a.producer_id), int(a.first_offset))
                  for a in (p.aborted_transactions or ())))

    def _leader(self, tp: TopicPartition, deadline: float) -> int:
        if self._leaders.get(tp) not in self._brokers:
            self._metadata([tp.topic], deadline)
        if tp.partition >= self._counts.get(tp.topic, 0):
            # Retriable to a consumer (the topic may be being created), as Kafka's has it.
            raise UnknownTopicOrPartitionError(
                f"This server does not host this topic-partition: {tp.topic}-{tp.partition}")
        leader = self._leaders.get(tp)
        if leader not in self._brokers:
            raise LeaderNotAvailableError(f"No leader known for {tp.topic}-{tp.partition}")
        return leader
