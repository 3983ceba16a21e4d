"""A client of a cluster's Kafka listeners, for a process that should not pay for Ray:
its connections (one per broker, kept), the brokers and partition leaders it learnt from
Metadata, and a request's frame out and its answer in (``protocols.kafka.client_codec``).
``ListenerAdmin`` (ListOffsets, OffsetFetch), ``ListenerFetcher`` (Fetch) and
``ListenerProducer`` (InitProducerId, Produce, and a transaction's calls) ask through it;
a group's or a transactional id's coordinator is found with FindCoordinator.

PLAINTEXT listeners only (SASL and TLS are what rafka's clients through Ray do).
"""
from __future__ import annotations

import socket
import struct
import time
from contextlib import contextmanager
from typing import Iterable

from protocols.errors import (CoordinatorNotAvailableError, InvalidConfigError, KafkaError,
                              NetworkError, NotCoordinatorError, UnknownTopicOrPartitionError,
                              error_for_code)
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.client_codec import parse_response, request_frame
from protocols.topics import TopicPartition

METADATA_VERSION = 12      # served by rafka (0-13) and Kafka 4 (4-13)
FIND_COORDINATOR_VERSION = 4   # one request, a list of keys (KIP-699)
CONSUMER_REPLICA_ID = -1   # a consumer's request: up to the high watermark, not the log's end
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


def retriable(error: BaseException) -> bool:
    return isinstance(error, OSError) or (isinstance(error, KafkaError) and error.retriable)


class ListenerClient:
    """Connections to one cluster's Kafka listeners, and the brokers and leaders learnt from
    Metadata; a leader that moved is learnt again."""

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
        self._coordinators: dict[tuple[int, str], int] = {}   # (key type, key): node id

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    def __enter__(self) -> "ListenerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- requests and answers -------------------------------------------------------------
    def _metadata(self, topics: Iterable[str] | None, deadline: float) -> dict[str, int]:
        names = None if topics is None else sorted(set(topics))
        values = {"topics": None if names is None else [{"name": n} for n in names],
                  "allow_auto_topic_creation": False}
        body = self._ask_any(ApiKey.METADATA, METADATA_VERSION, values, deadline)
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
            frame = _recv(sock, size, deadline)
            # Every response header begins with it: checked before the body is read as the
            # answer expected (an answer left unread by a failed call is another API's).
            answered = struct.unpack_from(">i", frame)[0] if size >= 4 else None
            if answered != correlation_id:
                raise ConnectionError(f"{address[0]}:{address[1]} answered correlation id "
                                      f"{answered}, not {correlation_id}")
            return parse_response(frame, api_key, version)[1]

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

    def _coordinator(self, key_type: int, key: str, deadline: float) -> tuple[str, int]:
        """The address of ``key``'s coordinator (a group's, or a transactional id's), asked
        of any broker with FindCoordinator and kept until it moves."""
        node = self._coordinators.get((key_type, key))
        if node is not None and node in self._brokers:
            return self._brokers[node]
        found = self._ask_any(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                              {"key_type": key_type, "coordinator_keys": [key]},
                              deadline).coordinators[0]
        if found.error_code.value != 0:
            raise error_for_code(found.error_code.value,
                                 f"FindCoordinator of {key!r}: {found.error_message}")
        node = int(found.node_id)
        self._brokers[node] = (found.host, int(found.port))
        self._coordinators[(key_type, key)] = node
        return self._brokers[node]

    def _ask_any(self, api_key: int, version: int, values: dict, deadline: float):
        """The answer of the first broker that gives one: those it knows, then the
        bootstrap ones (a known broker may have left); NetworkError when none did."""
        errors: list[str] = []
        for address in dict.fromkeys([*self._brokers.values(), *self.bootstrap]):
            try:
                correlation_id = self._send(address, api_key, version, values, deadline)
                return self._receive(address, api_key, version, correlation_id, deadline)
            except OSError as e:
                errors.append(f"{address[0]}:{address[1]}: {e}")
        name = ApiKey(api_key).name.title().replace("_", "")
        raise NetworkError(f"No Kafka listener answered {name} ({'; '.join(errors)})")

    def _coordinator_request(self, key_type: int, key: str, api_key: int, version: int,
                             values: dict, error_of, deadline: float, backoff_s: float,
                             retry=retriable):
        """``(body, error)``: the request asked of ``key``'s coordinator, and asked again
        after ``backoff_s`` while the answer's error (``error_of(body)``: None, or the
        KafkaError it holds) is one to ``retry`` and ``deadline`` allows; a coordinator
        that moved or did not answer is looked up again. The body is None when no answer
        came."""
        while True:
            body = None
            try:
                address = self._coordinator(key_type, key, deadline)
                correlation_id = self._send(address, api_key, version, values, deadline)
                body = self._receive(address, api_key, version, correlation_id, deadline)
                error = error_of(body)
            except OSError as e:       # no answer: a timeout, a connection lost
                error = NetworkError(f"{ApiKey(api_key).name} to the coordinator of {key!r}: "
                                     f"{e or type(e).__name__}")
            except KafkaError as e:    # FindCoordinator's own error
                error = e
            if error is None:
                return body, None
            if body is None or isinstance(error, (NotCoordinatorError,
                                                  CoordinatorNotAvailableError)):
                self._coordinators.pop((key_type, key), None)
            if not retry(error) or time.monotonic() + backoff_s >= deadline:
                return body, error
            time.sleep(backoff_s)

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
