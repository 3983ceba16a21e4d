"""The broker's Kafka listener (Kafka's SocketServer): a thin asyncio shell around the
sans-IO codec (``protocols.kafka.codec``) and the request handlers (``KafkaApis``).

Responses go out in request order. Kafka mutes a connection while its request is handled;
here a connection's Produce requests overlap, up to ``MAX_OVERLAPPING`` (a client's
max.in.flight): each waits on its followers' replication for acks=all, and librdkafka sends
one request per partition, so a transaction or a flush spanning two partitions led by one
broker waited twice. A Produce naming a partition an earlier one in hand names begins once
the earlier one's batches are on their way to the hosts, in order (``request_order``; a
transactional one's, once it is answered); every other request waits for the requests
before it, as in Kafka: their order is the client's to rely on (an idempotent producer's
sequence numbers).
A connection is closed, with a log line saying why, when a frame's size is over
``socket.request.max.bytes``, when a request names an API or version this broker does not
serve or does not decode, when a handler fails, or when it has been idle for
``connections.max.idle.ms``; the broker and its other connections carry on.

The listener is bound when the broker starts (its address is part of its registration), but
no request is read until ``enable_request_processing``: the broker calls it once its
metadata names it, as Kafka's BrokerServer enables its SocketServer only after the initial
metadata catch-up. A broker answering before then told clients a cluster without itself (a
Metadata answer naming as controller a broker not in its broker list left librdkafka's admin
client waiting for a controller, for minutes).

An SSL or SASL_SSL listener (``tls``) handshakes TLS before its first read. A SASL
listener's connection (``sasl``) may ask only ApiVersions, SaslHandshake and
SaslAuthenticate until it is authenticated (``sasl_authenticator``); a failed
authentication is answered, then the connection closed, as in Kafka. Each connection's
principal (the SASL user, else the client certificate's subject through
ssl.principal.mapping.rules, else User:ANONYMOUS) and listener name go with each of its
requests.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import ssl
import struct
import time
from typing import Any, Awaitable, Callable, Mapping

from actors import hop_trace
from actors.broker.client_quota_manager import NANOS_TO_PERCENTAGE_PER_SECOND, BrokerQuotas
from actors.broker.listener import request_order
from actors.broker.listener.file_regions import OpenRegion, close_regions
from actors.broker.listener.sasl_authenticator import Authenticator
from actors.broker.listener.tls import principal_of
from actors.metrics.request_metrics import RequestMetrics, request_name
from actors.replica.channel import write_chunks
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.codec import (CloseConnection, FrameDecoder, NoResponse, Request,
                                   encode_response, parse_request)
from protocols.kafka.listeners import Endpoint
from protocols.kafka.sasl import SaslConfig
from protocols.kafka.acl import host_address
from protocols.kafka.ssl_principal import ANONYMOUS, NoMatchingRule, SslPrincipalMapper

log = logging.getLogger(__name__)

# A read takes what the connection has buffered up to this: a producer's megabyte request in
# a few reads, each a turn of the connection's loop, rather than sixteen.
READ_BYTES = 1 << 18
# What a connection buffers before it stops reading its socket (asyncio's StreamReader limit:
# twice this): a muted (throttled) connection's or an unauthenticated one's unread bytes wait
# in the socket, pushing back on the client.
BUFFER_LIMIT = 1 << 16
# Requests of one connection handled at once (librdkafka's and the Java client's
# max.in.flight.requests.per.connection default).
MAX_OVERLAPPING = 5


def overlap_keys(request: Request) -> frozenset | None:
    """The partitions a request may be handled beside others for (a Produce's: by topic,
    or topic id, and index), or None: it waits for every request before it."""
    if request.api_key != ApiKey.PRODUCE or request.body is None:
        return None
    keys = []
    for topic in request.body.topic_data or ():
        name = getattr(topic, "name", None)
        if name is None:
            name = getattr(topic, "topic_id", None)
        if topic.partition_data is None:   # refused by the handler, after those before it
            return None
        keys.extend((name, int(p.index)) for p in topic.partition_data)
    return frozenset(keys)


# Over TLS a file region is read and written through the TLS layer in pieces this big.
TLS_COPY_BYTES = 1 << 20


async def copy_region(writer: asyncio.StreamWriter, region: OpenRegion) -> int:
    """A file region's bytes written through the transport (TLS: the kernel cannot send
    the file, as Kafka copies over TLS), a piece at a time; the bytes the file had."""
    sent = 0
    while sent < region.size:
        piece = os.pread(region.file.fileno(), min(TLS_COPY_BYTES, region.size - sent),
                         region.position + sent)
        if not piece:
            break
        writer.write(piece)
        sent += len(piece)
        await writer.drain()
    return sent


async def write_response(writer: asyncio.StreamWriter, chunks: list) -> int:
    """A response's pieces; a record set that is an open file region (zero-copy fetch,
    ``file_regions``) goes from the file with ``sendfile`` once what is before it is out,
    or through TLS by ``copy_region`` (asyncio's own copy for TLS transports pauses the
    connection's reading and fails when the client closes mid-answer). A file cut shorter
    than its region ends the connection: the response cannot be finished. Returns the
    bytes sent from files."""
    from_files = 0
    tls = writer.get_extra_info("ssl_object") is not None
    try:
        pending: list = []
        for chunk in chunks:
            if not isinstance(chunk, OpenRegion):
                pending.append(chunk)
                continue
            write_chunks(writer, pending)
            pending = []
            await writer.drain()
            sent = await copy_region(writer, chunk) if tls else \
                await asyncio.get_running_loop().sendfile(
                    writer.transport, chunk.file, chunk.position, chunk.size)
            if sent != chunk.size:
                raise ConnectionResetError(
                    f"{chunk.file.name} ended {chunk.size - sent} bytes into a fetch "
                    "answer's records (the log was truncated): the response cannot be "
                    "finished")
            from_files += sent
        write_chunks(writer, pending)
    finally:
        close_regions(chunks)
    return from_files


def throttle_of(response: Any) -> int:
    """The throttle time (ms) a handler put in its answer (Kafka's throttle_time_ms)."""
    throttle = getattr(response, "throttle_time", None)
    return int(throttle.total_seconds() * 1000) if throttle else 0


def may_start(keys: frozenset | None, in_hand: list[tuple[frozenset | None, bool]]) -> bool:
    """Whether a request with ``keys`` may be handled now beside the requests in hand, each
    given by its keys and whether its appends are on their way (``request_order``)."""
    if not in_hand:
        return True
    if keys is None or len(in_hand) >= MAX_OVERLAPPING:
        return False
    return all(other is not None and (sent or not keys & other) for other, sent in in_hand)


def every_interface(port: int) -> socket.socket:
    """One socket on every interface, IPv4 and IPv6 alike (dual stack), or IPv4's only where
    the machine has no IPv6. One socket, one port: asyncio given no host binds one socket
    per address family, and with port 0 each gets its own free port, so the port advertised
    (one of them) refused the other family's clients."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        address: tuple = ("::", port)
    except OSError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address = ("0.0.0.0", port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


class SocketServer:
    def __init__(self, broker_id: int, listeners: list[Endpoint],
                 handle: Callable[[Request], Awaitable[Any]],
                 supported: Mapping[int, tuple[int, int]], max_request_bytes: int,
                 idle_ms: int,
                 tls: Mapping[str, tuple[ssl.SSLContext, SslPrincipalMapper]] | None = None,
                 sasl: Mapping[str, SaslConfig] | None = None,
                 failed_authentication_delay_ms: int = 100,
                 quotas: BrokerQuotas | None = None):
        self.broker_id = broker_id
        self.listeners = listeners
        # Per SSL listener's name: its TLS context and ssl.principal.mapping.rules.
        self.tls = dict(tls or {})
        # Per SASL listener's name: its mechanisms and users.
        self.sasl = dict(sasl or {})
        self.failed_authentication_delay_s = failed_authentication_delay_ms / 1000
        self.principals: dict[str, int] = {}   # open connections per principal
        self.handle = handle
        self.supported = supported
        self.max_request_bytes = max_request_bytes
        self.idle_s = idle_ms / 1000
        self.bound: dict[str, int] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task] = set()
        self.closed_for: dict[str, int] = {}   # why connections were closed, counted
        self.bytes_sent_from_files = 0          # fetch answers' records, by sendfile
        self.request_metrics = RequestMetrics()   # each request's TotalTimeMs
        # Client quotas: request_percentage recorded here, and a throttled client's
        # connection muted (KIP-219).
        self.quotas = quotas
        self._processing = asyncio.Event()

    def enable_request_processing(self) -> None:
        self._processing.set()

    @property
    def processing(self) -> bool:
        return self._processing.is_set()

    async def start(self) -> dict[str, int]:
        """Bind every listener; returns {listener name: port bound}."""
        for endpoint in self.listeners:
            accept = functools.partial(self._connection, endpoint.name)
            context = self.tls[endpoint.name][0] if endpoint.name in self.tls else None
            if endpoint.host:
                server = await asyncio.start_server(accept, endpoint.host, endpoint.port,
                                                    limit=BUFFER_LIMIT, backlog=1024,
                                                    ssl=context)
            else:
                server = await asyncio.start_server(
                    accept, sock=every_interface(endpoint.port), limit=BUFFER_LIMIT,
                    backlog=1024, ssl=context)
            self._servers.append(server)
            self.bound[endpoint.name] = server.sockets[0].getsockname()[1]
        return dict(self.bound)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        for server in self._servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 5)
            except Exception:   # stopping: a server slow to close is left to the process
                pass
        self._servers = []

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def _principal(self, listener: str, writer: asyncio.StreamWriter) -> str:
        """Who the connection is (Kafka's KafkaPrincipal): over SSL the client
        certificate's subject through ssl.principal.mapping.rules, else ANONYMOUS."""
        if listener not in self.tls or listener in self.sasl:   # SASL_SSL: SASL's user
            return ANONYMOUS
        return principal_of(writer.get_extra_info("ssl_object"), self.tls[listener][1])

    async def _connection(self, listener: str, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = host_address(peer[0]) if isinstance(peer, tuple) else ""
        try:
            principal = self._principal(listener, writer)
        except (NoMatchingRule, ValueError) as e:   # no rule maps the subject
            self._closing(peer, "authentication", f"failed authentication: {e}",
                          logging.INFO)
            writer.close()
            return
        task = asyncio.current_task()
        self._connections.add(task)
        self._count(principal, 1)
        auth = Authenticator(self.sasl[listener], lambda: time.monotonic() * 1000) \
            if listener in self.sasl else None
        # Before authentication a frame may be no larger than sasl.server.max.receive.size
        # (Kafka's fix for CVE-2022-34917: an anonymous client's claimed size is not held).
        decoder = FrameDecoder(self.max_request_bytes if auth is None else
                               self.sasl[listener].max_receive_size)
        # (request, its handling, when it came), in order.
        answers: asyncio.Queue = asyncio.Queue()
        # Until when the connection is muted (a throttled client's, KIP-219): no request
        # of it is read meanwhile.
        muted = [0.0]
        responder = asyncio.ensure_future(self._respond(answers, writer, muted))
        # Each request in hand: its keys, its handling, and when a later one for the same
        # partitions may begin (``_begin``).
        in_hand: list[tuple[frozenset | None, asyncio.Future, asyncio.Future]] = []
        read: asyncio.Future | None = None
        try:
            await self._processing.wait()   # the client's bytes wait in the socket meanwhile
            while True:
                if read is None:
                    read = asyncio.ensure_future(reader.read(READ_BYTES))
                done, _ = await asyncio.wait({read, responder}, timeout=self.idle_s,
                                             return_when=asyncio.FIRST_COMPLETED)
                if responder in done:
                    read.cancel()
                    responder.result()           # a handler's failure ends the connection
                if read not in done:
                    # Idle: no request in hand and no byte for connections.max.idle.ms.
                    if any(not f.done() for _, f, _ in in_hand):
                        continue
                    read.cancel()
                    self._closing(peer, "idle", f"idle for connections.max.idle.ms "
                                  f"({int(self.idle_s * 1000)} ms)", logging.DEBUG)
                    return
                data, read = read.result(), None
                wait = muted[0] - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if decoder.pending:
                        self._closing(peer, "eof-mid-request", "the client disconnected "
                                      f"with {decoder.pending} bytes of a request unread",
                                      logging.INFO)
                    else:                        # a half-closed client still hears
                        await self._answered(answers, responder)
                    return
                for frame in decoder.feed(data):
                    outcome, parsing = None, 0
                    if auth is not None and not auth.complete:
                        request, response, outcome = auth.receive(
                            frame, lambda f: parse_request(f, self.supported, listener,
                                                           principal, host))
                    else:
                        parsing = time.perf_counter_ns()
                        request = parse_request(frame, self.supported, listener, principal,
                                                host)
                        parsing = time.perf_counter_ns() - parsing
                        if auth is not None and auth.reauthenticating(request):
                            request, response, outcome = auth.take(request)
                        elif auth is not None and auth.expired():
                            self._closing(peer, "session-expired", "its SASL session ended "
                                          "(connections.max.reauth.ms) without "
                                          "re-authentication", logging.INFO)
                            return
                    if outcome is not None:
                        if outcome.close:
                            # Kafka's connection.failed.authentication.delay.ms: a password
                            # guesser waits for each answer.
                            await asyncio.sleep(self.failed_authentication_delay_s)
                        # A failed bare token (SaslHandshake v0) has no answer: only the close.
                        if request is not None or not outcome.close:
                            answered: asyncio.Future = asyncio.Future()
                            answered.set_result(response)
                            answers.put_nowait((request, answered, time.monotonic(), 0))
                        if outcome.close:
                            await self._answered(answers, responder)
                            self._closing(peer, "authentication", "failed authentication: "
                                          f"{outcome.error}", logging.INFO)
                            return
                        if auth.complete:
                            decoder.max_bytes = self.max_request_bytes
                            if auth.principal != principal:
                                self._count(principal, -1)
                                principal = auth.principal
                                self._count(principal, 1)
                        continue
                    if hop_trace.ON:
                        hop_trace.received[id(request)] = time.monotonic_ns()
                    keys = overlap_keys(request)
                    while True:
                        in_hand = [(k, f, s) for k, f, s in in_hand if not f.done()]
                        if may_start(keys, [(k, s.done()) for k, _, s in in_hand]):
                            break
                        await asyncio.wait([f for _, f, _ in in_hand]
                                           + [s for _, _, s in in_hand if not s.done()]
                                           + [responder],
                                           return_when=asyncio.FIRST_COMPLETED)
                        if responder.done():
                            responder.result()
                    handling, sent = self._begin(request, keys)
                    in_hand.append((keys, handling, sent))
                    answers.put_nowait((request, handling, time.monotonic(), parsing))
        except CloseConnection as e:
            # What was asked before the bad bytes is still answered.
            await self._answered(answers, responder)
            self._closing(peer, type(e).__name__, str(e), logging.WARNING)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception as e:   # a handler's bug: this connection goes, the broker stays
            log.exception("broker %d: closing connection from %s: %r", self.broker_id,
                          peer, e)
            self.closed_for["error"] = self.closed_for.get("error", 0) + 1
        finally:
            responder.cancel()
            if read is not None:
                read.cancel()
            for _, handling, _ in in_hand:
                handling.cancel()
            self._connections.discard(task)
            self._count(principal, -1)
            writer.close()

    def _begin(self, request: Request, keys: frozenset | None
               ) -> tuple[asyncio.Future, asyncio.Future]:
        """The request's handling, and when a later one for the same partitions may begin:
        a Produce's, once its appends are on their way (``request_order``); any other's,
        once it is handled."""
        if keys is None:
            handling = asyncio.ensure_future(self.handle(request))
            return handling, handling
        sent = asyncio.get_running_loop().create_future()

        def done(_=None) -> None:
            if not sent.done():
                sent.set_result(None)
        token = request_order.expect_appends_sent(done)
        try:
            handling = asyncio.ensure_future(self.handle(request))
        finally:
            request_order.reset(token)
        handling.add_done_callback(done)
        return handling, sent

    def _count(self, principal: str, change: int) -> None:
        left = self.principals.get(principal, 0) + change
        if left:
            self.principals[principal] = left
        else:
            self.principals.pop(principal, None)

    async def _respond(self, answers: asyncio.Queue, writer: asyncio.StreamWriter,
                       muted: list[float]) -> None:
        """Each request's response, in the order the requests came; a throttled client's
        connection muted for its throttle time once the answer is out."""
        while True:
            request, handling, came, parsing_ns = await answers.get()
            try:
                response = await handling
                if request is None:        # a bare SASL token's answer (SaslHandshake v0)
                    writer.write(struct.pack(">i", len(response)) + response)
                    await writer.drain()
                    continue
                throttle_ms = 0
                if isinstance(response, NoResponse):   # acks=0, throttled
                    throttle_ms, response = response.throttle_ms, None
                encoding = time.perf_counter_ns()
                if response is not None:   # acks=0: no answer
                    throttle_ms = max(throttle_ms, throttle_of(response))
                    encoded = encode_response(request, response)
                    if hop_trace.ON:
                        hop_trace.written(id(request))
                    self.bytes_sent_from_files += await write_response(writer, encoded)
                    await writer.drain()
                self.request_metrics.observe(request_name(request.api_key),
                                             (time.monotonic() - came) * 1000)
                if self.quotas is not None and parsing_ns:
                    # request_percentage: this broker's work on the request (reading and
                    # writing it; the waits for replication and long polls are no work).
                    spent = parsing_ns + time.perf_counter_ns() - encoding
                    throttle_ms = max(throttle_ms, self.quotas.record(
                        self.quotas.request, request.principal, request.client_id,
                        spent * NANOS_TO_PERCENTAGE_PER_SECOND))
                if throttle_ms:
                    muted[0] = max(muted[0], time.monotonic() + throttle_ms / 1000)
            finally:
                if hop_trace.ON and request is not None:
                    hop_trace.forget(id(request))
                answers.task_done()

    @staticmethod
    async def _answered(answers: asyncio.Queue, responder: asyncio.Future) -> None:
        """Once every response queued is written, or the responder failed."""
        joined = asyncio.ensure_future(answers.join())
        try:
            await asyncio.wait({joined, responder}, timeout=30,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            joined.cancel()

    def _closing(self, peer, kind: str, why: str, level: int) -> None:
        self.closed_for[kind] = self.closed_for.get(kind, 0) + 1
        log.log(level, "broker %d: closing connection from %s: %s", self.broker_id, peer, why)
