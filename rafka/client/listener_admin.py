"""A cluster's partitions and offsets asked over its Kafka listener, as Kafka's admin client
asks them (Metadata, then ListOffsets to each leader), for a process that should not pay
for Ray: Spark's planners are started cold for a session's first job of each kind, and
``import ray``, Ray's connection and the controller's actor class cost them ~0.6 s of the
~0.9 s each spent before; this costs a socket per broker and Kafka's schemas.

PLAINTEXT listeners only (SASL and TLS are what rafka's clients through Ray do); the
answers are the same as ``rafka.Admin``'s: one broker serves both doors.
"""
from __future__ import annotations

import socket
import struct
import time
from contextlib import contextmanager
from typing import Iterable, Mapping

from protocols.errors import (InvalidConfigError, KafkaError, LeaderNotAvailableError,
                              NetworkError, UnknownTopicOrPartitionError, error_for_code)
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.client_codec import parse_response, request_frame
from protocols.messages import EARLIEST_TIMESTAMP, ISOLATION_LEVELS, LATEST_TIMESTAMP
from protocols.topics import TopicPartition
from rafka.admin import ListOffsetsResult
from rafka.client.retry import retry_until

METADATA_VERSION = 12      # served by rafka (0-13) and Kafka 4 (4-13)
LIST_OFFSETS_VERSION = 5   # the last one without flexible fields; rafka 1-6, Kafka 4 1-10
CONSUMER_REPLICA_ID = -1   # a consumer's ListOffsets: the high watermark, not the log's end
BACKOFF_S = 0.05
# Kafka's socket.connection.setup.timeout.ms: a listener that does not accept is left for
# the next one well before the call's own timeout.
CONNECT_TIMEOUT_S = 10.0


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``host:port,...`` as Kafka's ``bootstrap.servers`` takes it."""
    out = []
    for text in (s.strip() for s in servers.split(",")):
        if not text:
            continue
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise InvalidConfigError(f"Invalid url in bootstrap.servers: {text}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise InvalidConfigError("No resolvable bootstrap urls given in bootstrap.servers")
    return out


def _retriable(error: BaseException) -> bool:
    return isinstance(error, OSError) or (isinstance(error, KafkaError) and error.retriable)


class ListenerAdmin:
    """Metadata and ListOffsets over one cluster's Kafka listeners. Keeps its connections
    and the leaders it learnt; a leader that moved is learnt again."""

    def __init__(self, bootstrap_servers: str, timeout_s: float = 60.0,
                 client_id: str = "rafka-planner"):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._correlation_id = 0
        self._sockets: dict[tuple[str, int], socket.socket] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._counts: dict[str, int] = {}

    # ---- Kafka's requests -------------------------------------------------------------------
    def partition_counts(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Each topic's partition count (every topic when ``topics`` is None; a topic that
        does not exist is left out)."""
        deadline = time.monotonic() + self.timeout_s
        return retry_until(deadline, lambda _: self._metadata(topics, deadline),
                           backoff_s=BACKOFF_S, retriable=_retriable)

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

        final = retry_until(deadline, attempt, backoff_s=BACKOFF_S, retriable=_retriable)
        if final is not None:
            raise final
        return {tp: found[tp] for tp in wanted}

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    def __enter__(self) -> "ListenerAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- requests and answers -------------------------------------------------------------
    def _metadata(self, topics: Iterable[str] | None, deadline: float) -> dict[str, int]:
        names = None if topics is None else sorted(set(topics))
        values = {"topics": None if names is None else [{"name": n} for n in names],
                  "allow_auto_topic_creation": False}
        body = None
        errors: list[str] = []
        # The brokers it knows, then the bootstrap ones (a known broker may have left).
        for address in dict.fromkeys([*self._brokers.values(), *self.bootstrap]):
            try:
                correlation_id = self._send(address, ApiKey.METADATA, METADATA_VERSION,
                                            values, deadline)
                body = self._receive(address, ApiKey.METADATA, METADATA_VERSION,
                                     correlation_id, deadline)
                break
            except OSError as e:
                errors.append(f"{address[0]}:{address[1]}: {e}")
        if body is None:
            raise NetworkError(f"No Kafka listener answered Metadata ({'; '.join(errors)})")
        self._brokers = {int(b.node_id): (b.host, int(b.port)) for b in body.brokers}
        counts = {}
        for topic in body.topics:
            code = topic.error_code.value
            if code == UnknownTopicOrPartitionError.code:
                self._counts.pop(topic.name, None)
                self._forget([tp for tp in self._leaders if tp.topic == topic.name])
                continue
            if code != 0:
                raise error_for_code(code, f"Metadata of topic {topic.name}")
            counts[topic.name] = len(topic.partitions)
            for p in topic.partitions:
                tp = TopicPartition(topic.name, int(p.partition_index))
                if int(p.leader_id) >= 0 and p.error_code.value == 0:
                    self._leaders[tp] = int(p.leader_id)
                else:
                    self._leaders.pop(tp, None)
        self._counts.update(counts)
        return counts

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

    def _send(self, address: tuple[str, int], api_key: int, version: int, values: dict,
              deadline: float) -> int:
        """The request's correlation id, once written."""
        # Kafka's clients wrap the id within int32 (a streaming query asks for ever).
        self._correlation_id = self._correlation_id % 0x7FFFFFFF + 1
        frame = request_frame(api_key, version, values, self._correlation_id, self.client_id)
        with self._dropped_on_failure(address):
            sock = self._sockets.get(address)
            if sock is None:
                sock = socket.create_connection(
                    address, timeout=min(CONNECT_TIMEOUT_S, _left(deadline)))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets[address] = sock
            sock.settimeout(_left(deadline))
            sock.sendall(frame)
        return self._correlation_id

    def _receive(self, address: tuple[str, int], api_key: int, version: int,
                 correlation_id: int, deadline: float):
        """The answer's body; an OSError (and the connection dropped) when none came."""
        with self._dropped_on_failure(address):
            sock = self._sockets.get(address)
            if sock is None:
                raise ConnectionError(f"{address[0]}:{address[1]}: not connected")
            size = struct.unpack(">i", _recv(sock, 4, deadline))[0]
            header, body = parse_response(_recv(sock, size, deadline), api_key, version)
            if int(header.correlation_id) != correlation_id:
                raise ConnectionError(f"{address[0]}:{address[1]} answered correlation id "
                                      f"{int(header.correlation_id)}, not {correlation_id}")
        return body

    @contextmanager
    def _dropped_on_failure(self, address: tuple[str, int]):
        """A connection whose request or answer failed half way is closed: what is left on
        it would be read as the next answer."""
        try:
            yield
        except BaseException:
            sock = self._sockets.pop(address, None)
            if sock is not None:
                sock.close()
            raise

    def _forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._leaders.pop(tp, None)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _recv(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        sock.settimeout(_left(deadline))
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
