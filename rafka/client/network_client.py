"""Kafka's NetworkClient for rafka's producer and consumer: their produce and fetch requests
go to a leader host's listener (``actors.replica.channel``), as Kafka's clients send theirs
to a broker's, not as Ray actor calls.

Why a socket: an actor call's answer crosses Ray's core worker, its gRPC threads and (above
100 KB) the object store at both ends; on a busy two-core machine that was milliseconds of
each acks=all record's end-to-end latency, paid twice (the produce, then the consumer's
fetch).

Why owned by one thread, as Kafka's (the producer's sender thread, the consumer's polling
thread): the thread that waits for an answer reads it itself. A reader thread of its own
would have to win the GIL from the application (up to ``sys.getswitchinterval()``, 5 ms,
per wake-up) for every piece of every answer before handing it over; here a waiting thread
sleeps in ``select`` and, once an answer begins to arrive, reads the whole frame with the
GIL released in each ``recv_into``.

A connection is opened on a host's first request: the host is asked where it listens and
for its token (one Ray call per host per process, remembered), then the connection says the
token. A connection that breaks, or a host that stops answering in the middle of a frame,
fails every request in flight on it with ``ChannelClosed`` (a ConnectionError: retriable;
the client refreshes its metadata and sends again, as after a dead actor); the next request
to that host connects again. ``wakeup`` (any thread) ends a ``poll`` early.
"""
from __future__ import annotations

import itertools
import selectors
import socket
import ssl
import threading
import time
from typing import Any

from actors.replica.channel import (API_ERROR, API_HELLO, HEADER, JOIN_BELOW, ChannelClosed,
                                    ChannelError, decode_header)

# Asking a host where it listens and opening the connection: a live host answers in
# milliseconds; one that does not within this is treated as gone.
CONNECT_TIMEOUT_S = 30.0
# Once a frame begins to arrive the rest is on its way: a host that sends none of it for
# this long (stopped mid-answer) is treated as gone.
READ_TIMEOUT_S = 30.0

# host_id -> (address, port, token, certificate or None): where each host listens, shared by
# the process's clients (forgotten when a connection to it fails).
_addresses: dict[str, tuple[str, int, bytes, str | None]] = {}
_addresses_lock = threading.Lock()


def _listener_of(host_id: str, host: Any) -> tuple[str, int, bytes, str | None]:
    with _addresses_lock:
        found = _addresses.get(host_id)
    if found is None:
        import ray
        found = tuple(ray.get(host.replication_address.remote(), timeout=CONNECT_TIMEOUT_S))
        with _addresses_lock:
            _addresses[host_id] = found
    return found


class ClientRequest:
    """One request sent: ``done`` once answered or failed; ``result()`` is the answer's
    payload or raises the error."""
    __slots__ = ("host_id", "correlation_id", "done", "_answer", "_error")

    def __init__(self, host_id: str, correlation_id: int):
        self.host_id = host_id
        self.correlation_id = correlation_id
        self.done = False
        self._answer: bytes | bytearray = b""
        self._error: BaseException | None = None

    def result(self) -> bytes | bytearray:
        if not self.done:
            raise RuntimeError("the request has not been answered yet")
        if self._error is not None:
            raise self._error
        return self._answer


class _Connection:
    def __init__(self, host_id: str, sock: socket.socket):
        self.host_id = host_id
        self.sock = sock
        self.pending: dict[int, ClientRequest] = {}

    def send(self, correlation_id: int, api: int, payload: bytes | list) -> None:
        """Frame and send ``payload``: bytes, or buffers to send one after the other
        (``produce_many_request_pieces``), written where they lie with ``sendmsg``."""
        views = [v for v in (memoryview(p).cast("B") for p in (
            payload if isinstance(payload, list) else (payload,))) if v.nbytes]
        size = sum(v.nbytes for v in views)
        header = memoryview(HEADER.pack(size + HEADER.size - 4, correlation_id, api))
        if size < JOIN_BELOW:
            self.sock.sendall(b"".join([header, *views]))
        elif isinstance(self.sock, ssl.SSLSocket) or not hasattr(self.sock, "sendmsg"):
            for view in (header, *views):   # TLS has no sendmsg, nor Windows: one by one
                self.sock.sendall(view)
        else:   # copying megabytes costs more than giving the kernel each buffer
            _send_all(self.sock, [header, *views])

    def read_frame(self) -> tuple[int, int, bytearray]:
        body, correlation_id, api = decode_header(bytes(self._read_exactly(HEADER.size)))
        return correlation_id, api, self._read_exactly(body)

    def _read_exactly(self, n: int) -> bytearray:
        buffer = bytearray(n)
        view = memoryview(buffer)
        got = 0
        while got < n:
            read = self.sock.recv_into(view[got:], n - got)
            if read == 0:
                raise ChannelClosed("the host closed the connection")
            got += read
        return buffer


# The buffers one sendmsg takes, well under the kernel's IOV_MAX (1024).
_BUFFERS_PER_CALL = 512


def _send_all(sock: socket.socket, views: list[memoryview]) -> None:
    """``sendall`` of the buffers one after another (none empty), as few system calls as
    the socket takes them in, within the socket's timeout for all of them (as sendall)."""
    timeout = sock.gettimeout()
    deadline = None if timeout is None else time.monotonic() + timeout
    first = 0
    try:
        while first < len(views):
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out")
                sock.settimeout(left)
            sent = sock.sendmsg(views[first:first + _BUFFERS_PER_CALL])
            while first < len(views) and sent >= views[first].nbytes:
                sent -= views[first].nbytes
                first += 1
            if sent:
                views[first] = views[first][sent:]
    finally:
        sock.settimeout(timeout)


class NetworkClient:
    """One client's connections to replica hosts. Not thread-safe but for ``wakeup``: one
    thread sends, polls and closes."""

    def __init__(self, door: Any = None) -> None:
        # A guarded RayDoor (rafka.client.ray_door): each connection is admitted by a
        # ticket for the client's principal, not by the hosts' token.
        self._door = door if door is not None and door.guarded else None
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._connections: dict[str, _Connection] = {}
        self._ids = itertools.count(1)
        self._completed: list[ClientRequest] = []
        self._closed = False

    def send(self, host_id: str, host: Any, api: int, payload: bytes | list,
             expect_answer: bool = True) -> ClientRequest | None:
        """Send ``payload`` as request ``api`` to the host (``host_id``, its actor handle).
        Raises when no connection can be made; a connection that breaks fails the request
        (it is then done, with ``ChannelClosed``). Without ``expect_answer`` (acks=0) the
        answer is dropped and None returned."""
        connection = self._connections.get(host_id) or self._connect(host_id, host)
        correlation_id = next(self._ids) & 0xFFFFFFFF
        request = None
        if expect_answer:
            request = connection.pending[correlation_id] = ClientRequest(host_id,
                                                                         correlation_id)
        try:
            connection.send(correlation_id, api, payload)
        except OSError as e:
            self._lost(connection, e)
        return request

    def abandon(self, request: ClientRequest) -> None:
        """The caller gave up on ``request`` (request.timeout.ms): a late answer is dropped."""
        connection = self._connections.get(request.host_id)
        if connection is not None:
            connection.pending.pop(request.correlation_id, None)

    def poll(self, timeout_s: float) -> list[ClientRequest]:
        """Wait up to ``timeout_s`` for answers; returns the requests completed (answered
        or failed) since the last poll, as soon as there is one, or on ``wakeup``."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while not self._completed:
            left = deadline - time.monotonic()
            events = self._selector.select(max(0.0, left))
            woken = False
            for key, _ in events:
                if key.data is None:
                    woken = True
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except BlockingIOError:
                        pass
                else:
                    self._read(key.data)
                    # Over TLS, what the socket already decrypted is not readable to the
                    # selector: the next frame may be there already.
                    pending = getattr(key.data.sock, "pending", None)
                    while pending is not None and pending() > 0 and \
                            self._connections.get(key.data.host_id) is key.data:
                        self._read(key.data)
            if woken or left <= 0 or (not events and time.monotonic() >= deadline):
                break
        completed, self._completed = self._completed, []
        return completed

    def wakeup(self) -> None:
        """End the current (or next) ``poll`` early; callable from any thread."""
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already woken, or closed

    def connected_hosts(self) -> set[str]:
        return set(self._connections)

    def disconnect(self) -> None:
        """Close every connection: requests in flight fail with ``ChannelClosed``; the next
        request to a host connects again."""
        for connection in list(self._connections.values()):
            self._lost(connection, ChannelClosed("disconnected"))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.disconnect()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    # ---- inside --------------------------------------------------------------------------
    def _connect(self, host_id: str, host: Any) -> _Connection:
        if self._closed:
            raise ChannelClosed("the client is closed")
        try:
            address, port, token, certificate = (
                _listener_of(host_id, host) if self._door is None else
                self._door.admit(host))
            sock = socket.create_connection((address, port), CONNECT_TIMEOUT_S)
            if certificate is not None:   # security.inter.broker.protocol=SSL
                from protocols.kafka.ssl_context import pinned_client_context
                try:
                    sock = pinned_client_context(certificate).wrap_socket(sock)
                except BaseException:
                    sock.close()
                    raise
        except BaseException:
            with _addresses_lock:
                _addresses.pop(host_id, None)
            raise
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(READ_TIMEOUT_S)
            connection = _Connection(host_id, sock)
            connection.send(0, API_HELLO, token)
            if connection.read_frame()[1] != API_HELLO:
                raise ChannelClosed(f"host {host_id} refused the connection")
        except BaseException:
            sock.close()
            with _addresses_lock:
                _addresses.pop(host_id, None)
            raise
        self._selector.register(sock, selectors.EVENT_READ, connection)
        self._connections[host_id] = connection
        return connection

    def _read(self, connection: _Connection) -> None:
        try:
            correlation_id, api, payload = connection.read_frame()
        except (OSError, ChannelClosed) as e:
            self._lost(connection, e)
            return
        request = connection.pending.pop(correlation_id, None)
        if request is None:
            return   # acks=0's answer, or one given up on
        if api == API_ERROR:
            request._error = ChannelError(bytes(payload).decode(errors="replace"))
        else:
            request._answer = payload
        request.done = True
        self._completed.append(request)

    def _lost(self, connection: _Connection, error: BaseException) -> None:
        if self._connections.get(connection.host_id) is connection:
            del self._connections[connection.host_id]
        try:
            self._selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        connection.sock.close()
        with _addresses_lock:
            _addresses.pop(connection.host_id, None)
        failure = error if isinstance(error, ChannelClosed) else \
            ChannelClosed(f"connection to host {connection.host_id} lost: {error!r}")
        for request in connection.pending.values():
            request._error = failure
            request.done = True
            self._completed.append(request)
        connection.pending.clear()
