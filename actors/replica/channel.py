"""The replication channel: follower hosts fetch from leader hosts over a TCP connection.

Kafka's followers fetch over the inter-broker listener, not through a general RPC layer.
Here the same holds for the same reason: a Ray actor call between two otherwise idle hosts
costs ~2-3 ms of CPU at each end (measured: a 500 ms long poll every half second adds
0.44% of a core to the caller and 0.6% to the callee), a framed message on a socket ~0.1 ms
(0.07% and 0.1%). Every follower fetcher sends one long-polled request per
``replica.fetch.wait.max.ms``, so on a cluster at rest this is most of what it costs, and
on a busy one it is the round trip acks=all waits for.

Producers and consumers send their produce and fetch requests the same way
(``rafka.client.network_client``), as Kafka's clients talk to a broker's listener: an actor
call's reply crosses Ray's core worker and its threads at each end, which on a busy
two-core machine is milliseconds of an acks=all record's end-to-end latency.

Ray stays the control plane: a caller asks the host for its address with an actor call
(``ReplicaHostActor.replication_address``, ``connect``), which also hands it a token the
host made at random; the connection's first frame must carry it, so only a caller Ray let
in can use it. Everything else (locating leaders, LeaderAndIsr, metadata, groups) is Ray's.

With ``security.inter.broker.protocol=SSL`` the channel is TLS, the host serving with the
broker's keystore (``ssl.keystore.*``): the token and every record cross the network
encrypted. The host hands its certificate out with its address and token, and callers trust
that certificate and no other (``protocols.kafka.ssl_context.pinned_client_context``): what
vouches for it is Ray's control plane, as for the token, so no CA or host name has to match.

A frame is ``length(4) correlation_id(4) api(1) payload``, big-endian, ``length`` counting
what follows it, at most ``socket.request.max.bytes``. The server answers every request with
the request's correlation id, ``API_ERROR`` and a message when the handler failed; requests
on one connection are served concurrently. A handler answering ``Throttled`` (a client over
its quota) has its answer sent and then the connection muted, no request read from it, for
the throttle time (Kafka's KIP-219). This module imports no ray.
"""
from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import secrets
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

HEADER = struct.Struct(">IIB")
API_HELLO = 0
API_FETCH = 1               # FetchManyRequest -> FetchManyResponse (protocols.messages)
API_OFFSETS_FOR_LEADER_EPOCH = 2
API_PRODUCE = 3             # ProduceManyRequest -> ProduceManyResponse
API_LIST_OFFSETS = 4        # [(topic, partition, timestamp, epoch, isolation)] -> [answer]
API_LISTENER_FETCH = 5      # API_FETCH for a broker's listener (which counts BytesOut)
API_ERROR = 255
MAX_FRAME_BYTES = 104_857_600  # Kafka's socket.request.max.bytes
# How much a connection buffers before it stops reading (asyncio pauses the socket at twice
# this): above the largest fetch answer (replica.fetch.response.max.bytes, 10 MiB), so that
# one answer is read in one go rather than paused and resumed every 128 KiB (the default).
READ_LIMIT = 16 * 1024 * 1024
# Smaller payloads are sent joined to their header in one write; larger ones in two, as
# copying megabytes costs more than a second system call.
JOIN_BELOW = 65_536

# A handler answers bytes, buffers to send one after the other, or either as ``Throttled``.
Handler = Callable[[bytes], Awaitable["bytes | list | Throttled"]]
# A Ray door client's requests (``actors.broker.ray_door``): the payload and who sent it.
DoorHandler = Callable[[bytes, object], Awaitable["bytes | list | Throttled"]]
# How long a ticket the broker asked for waits for its connection.
TICKET_TTL_S = 60.0


@dataclass(frozen=True)
class Throttled:
    """A handler's answer to a client over its quota: sent at once, then its connection
    muted for ``throttle_ms``."""

    answer: bytes | list
    throttle_ms: int


def unthrottled(answer: bytes | list | Throttled) -> bytes:
    """A handler's answer as bytes (for a caller other than the channel: a Ray call); one
    given as buffers (``fetch_many_response_pieces``) joined."""
    answer = answer.answer if isinstance(answer, Throttled) else answer
    return b"".join(answer) if isinstance(answer, list) else answer


class ChannelError(Exception):
    """The leader host answered a request with an error (its handler raised)."""


class ChannelClosed(ConnectionError):
    """The connection is gone: the other end closed it, died, or sent a bad frame."""


def decode_header(header: bytes) -> tuple[int, int, int]:
    """(the payload's length, correlation id, api) of a frame's header."""
    length, correlation_id, api = HEADER.unpack(header)
    body = length - (HEADER.size - 4)
    if body < 0 or length > MAX_FRAME_BYTES:
        raise ChannelClosed(f"frame of {length} bytes (socket.request.max.bytes is "
                            f"{MAX_FRAME_BYTES})")
    return body, correlation_id, api


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    body, correlation_id, api = decode_header(await reader.readexactly(HEADER.size))
    return correlation_id, api, await reader.readexactly(body)


def encode_frame(correlation_id: int, api: int, payload: bytes) -> bytes:
    return HEADER.pack(len(payload) + HEADER.size - 4, correlation_id, api) + payload


def write_chunks(writer: asyncio.StreamWriter, chunks: list) -> None:
    """A message's pieces, the small ones joined and each of ``JOIN_BELOW`` bytes or more
    written as it is: record sets go to the socket without first being copied into one
    buffer with the rest (asyncio's ``writelines`` joins them all)."""
    small: list = []
    for chunk in chunks:
        if len(chunk) < JOIN_BELOW:
            small.append(chunk)
            continue
        if small:
            writer.write(b"".join(small))
            small = []
        writer.write(chunk)
    if small:
        writer.write(b"".join(small))


def _send(writer: asyncio.StreamWriter, correlation_id: int, api: int,
          payload: bytes | list) -> None:
    """Frame ``payload``: bytes, or buffers sent one after the other
    (``produce_many_request_pieces``)."""
    # As bytes: a view of wider items would be measured and re-sliced in items.
    views = [memoryview(p).cast("B") for p in (payload if isinstance(payload, list)
                                                else (payload,))]
    size = sum(v.nbytes for v in views)
    write_chunks(writer, [HEADER.pack(size + HEADER.size - 4, correlation_id, api), *views])


def channel_tls(broker_config) -> tuple[ssl.SSLContext | None, str | None]:
    """The channel's TLS context and certificate chain (PEM) when the inter-broker listener
    is SSL or SASL_SSL (``inter_broker_listener``), from that listener's ``ssl.*`` settings;
    (None, None) under PLAINTEXT. Callers show no certificate: the token is what admits
    them."""
    from actors.broker.config import for_listener, inter_broker_listener
    listener, protocol = inter_broker_listener(broker_config)
    if protocol not in ("SSL", "SASL_SSL"):
        return None, None
    from protocols.kafka.ssl_context import (keystore_pem, pinned_client_context,
                                             server_context, test_handshake)
    where = f"the replicas' channel (inter-broker listener {listener}, {protocol})"
    cfg = {**broker_config, **for_listener(broker_config, listener), "ssl.client.auth": "none"}
    context, certificate = server_context(cfg, where), keystore_pem(cfg, where)[1].decode()
    # Refused here, at the broker's start, rather than by every connection later.
    test_handshake(context, pinned_client_context(certificate), where)
    return context, certificate


def crosses_network(peer: str, address: str) -> bool:
    """Whether a connection from ``peer`` to a listener on ``address`` came from another
    machine: neither loopback nor the listener's own address."""
    import ipaddress
    try:
        ip = ipaddress.ip_address(peer)
    except ValueError:
        return True
    if ip.is_loopback:
        return False
    try:
        return ip != ipaddress.ip_address(address)
    except ValueError:   # a listener on a host name or every interface
        return True


class ReplicationListener:
    """A host's end: serves ``handlers[api](payload)`` to connections that said the token;
    over TLS with ``context`` (its certificate chain, PEM, in ``certificate``).

    A client of the Ray door is admitted by a ticket instead (``admit``: once, for one
    connection, within ``TICKET_TTL_S``), and its connection is served
    ``door_handlers[api](payload, caller)`` only: what it may do is checked there."""

    def __init__(self, handlers: dict[int, Handler], context: ssl.SSLContext | None = None,
                 certificate: str | None = None,
                 door_handlers: dict[int, DoorHandler] | None = None,
                 clock: Callable[[], float] | None = None):
        self.handlers = handlers
        self.door_handlers = door_handlers or {}
        self.context = context
        self.certificate = certificate if context is not None else None
        self.token = secrets.token_bytes(16)
        self._tickets: dict[bytes, tuple[object, float]] = {}
        self._clock = clock or time.monotonic
        self.connections = 0   # accepted so far
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        # Connections muted for a throttled client, until when (time.monotonic()).
        self._muted_until: dict[asyncio.StreamWriter, float] = {}
        self._tasks: set[asyncio.Task] = set()
        self._address = ""
        self._warned_plaintext = False

    async def start(self, host: str) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, host, 0, limit=READ_LIMIT,
                                                  ssl=self.context)
        self._address = host
        return host, self._server.sockets[0].getsockname()[1]

    def _check_exposure(self, writer: asyncio.StreamWriter) -> None:
        """Warn, once, when a connection from another machine comes over plaintext: its
        token and records cross the network in clear (a listener's safe default, as the
        Kafka listeners warn when exposed)."""
        if self.context is not None or self._warned_plaintext:
            return
        peer = writer.get_extra_info("peername")
        if isinstance(peer, tuple) and crosses_network(peer[0], self._address):
            self._warned_plaintext = True
            log.warning("replication channel on %s: a connection from %s over plaintext; "
                        "its token and the records it carries cross the network in clear. "
                        "Set security.inter.broker.protocol=SSL (or inter.broker.listener."
                        "name to an SSL listener) to encrypt the replicas' channel",
                        self._address, peer[0])

    def admit(self, caller: object) -> bytes:
        """A ticket admitting one connection as ``caller`` (a Ray door client)."""
        now = self._clock()
        for ticket, (_, expires) in list(self._tickets.items()):
            if expires <= now:
                del self._tickets[ticket]
        ticket = secrets.token_bytes(32)
        self._tickets[ticket] = (caller, now + TICKET_TTL_S)
        return ticket

    def _admitted(self, payload: bytes) -> tuple[bool, object]:
        """(admitted, its caller: None for the token's holders)."""
        if hmac.compare_digest(payload, self.token):
            return True, None
        found = self._tickets.pop(bytes(payload), None)
        if found is None or found[1] <= self._clock():
            return False, None
        return True, found[0]

    def _handler(self, api: int, caller: object):
        if caller is None:
            return self.handlers.get(api)
        door = self.door_handlers.get(api)
        return None if door is None else lambda payload: door(payload, caller)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            correlation_id, api, payload = await _read_frame(reader)
            admitted, caller = (False, None) if api != API_HELLO else self._admitted(payload)
            if not admitted:
                log.warning("replication channel: a connection without the token or a "
                            "ticket, closed")
                return
            _send(writer, correlation_id, API_HELLO, b"")
            self._check_exposure(writer)
            while True:
                correlation_id, api, payload = await _read_frame(reader)
                # A frame read while an earlier answer throttled the client waits too (the
                # read was already waiting when the mute began).
                muted = self._muted_until.get(writer, 0.0) - time.monotonic()
                if muted > 0:
                    await asyncio.sleep(muted)
                task = asyncio.ensure_future(self._answer(
                    writer, correlation_id, api, payload, self._handler(api, caller)))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, OSError):
            # The follower went away (or, over TLS, sent a bad record): its requests'
            # answers have no one to go to.
            pass
        finally:
            self._writers.discard(writer)
            self._muted_until.pop(writer, None)
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, correlation_id: int, api: int,
                      payload: bytes, handler) -> None:
        try:
            if handler is None:
                raise ChannelError(f"unknown api {api}")
            answer = await handler(payload)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the follower backs off and asks again, as after a timeout
            log.debug("replication channel: api %d failed: %r", api, e)
            api, answer = API_ERROR, repr(e).encode()
        if isinstance(answer, Throttled):
            if answer.throttle_ms > 0 and writer in self._writers:
                self._muted_until[writer] = max(self._muted_until.get(writer, 0.0),
                                                time.monotonic() + answer.throttle_ms / 1000)
            answer = answer.answer
        if not writer.is_closing():
            _send(writer, correlation_id, api, answer)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()


async def connect(host, timeout_s: float) -> "ReplicationConnection":
    """A connection to a replica host's listener: ``host`` (its Ray actor handle) is asked
    where it listens, for its token and its certificate (None: plaintext), then the
    connection is opened and says the token."""
    address, port, token, certificate = await asyncio.wait_for(
        host.replication_address.remote(), timeout_s)
    return await asyncio.wait_for(ReplicationConnection.open(address, port, token,
                                                             certificate), timeout_s)


class ReplicationConnection:
    """A fetcher's end: ``await call(api, payload)`` for the answer's payload. Raises
    ``ChannelClosed`` when the connection is gone (every call in flight with it),
    ``ChannelError`` when the leader host's handler failed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._closed: Exception | None = None
        self._read_task = asyncio.ensure_future(self._read_answers())

    @classmethod
    async def open(cls, host: str, port: int, token: bytes, certificate: str | None = None
                   ) -> "ReplicationConnection":
        context = None
        if certificate is not None:
            from protocols.kafka.ssl_context import pinned_client_context
            context = pinned_client_context(certificate)
        reader, writer = await asyncio.open_connection(host, port, limit=READ_LIMIT,
                                                       ssl=context)
        connection = cls(reader, writer)
        try:
            await connection.send(API_HELLO, token)
        except BaseException:
            connection.close()
            raise
        return connection

    async def call(self, api: int, payload: bytes | list) -> bytes:
        return await self.send(api, payload)

    def send(self, api: int, payload: bytes | list) -> asyncio.Future:
        """``call`` with its frame written before this returns: the answer's future."""
        if self._closed is not None:
            raise ChannelClosed(str(self._closed))
        correlation_id = next(self._ids) & 0xFFFFFFFF
        future = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        # A caller that gives up (a timeout) leaves no entry behind; a late answer is dropped.
        future.add_done_callback(lambda _: self._pending.pop(correlation_id, None))
        _send(self._writer, correlation_id, api, payload)
        return future

    async def _read_answers(self) -> None:
        try:
            while True:
                correlation_id, api, payload = await _read_frame(self._reader)
                future = self._pending.get(correlation_id)
                if future is None or future.done():
                    continue
                if api == API_ERROR:
                    future.set_exception(ChannelError(payload.decode(errors="replace")))
                else:
                    future.set_result(payload)
        except asyncio.CancelledError:
            self._fail(ChannelClosed("closed"))
            raise
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            self._fail(e if isinstance(e, ChannelClosed)
                       else ChannelClosed(f"replication connection lost: {e!r}"))

    def _fail(self, error: Exception) -> None:
        self._closed = error
        for future in list(self._pending.values()):
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._writer.close()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def close(self) -> None:
        if self._closed is None:
            self._fail(ChannelClosed("closed"))
        self._read_task.cancel()
