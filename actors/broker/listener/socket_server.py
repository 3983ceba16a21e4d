"""The broker's Kafka listener (Kafka's SocketServer): a thin asyncio shell around the
sans-IO codec (``protocols.kafka.codec``) and the request handlers (``KafkaApis``).

One task per connection reads frames and handles them one at a time, so responses go out in
request order (Kafka mutes a connection while its request is handled, for the same reason).
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
"""
from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, Awaitable, Callable, Mapping

from protocols.kafka.codec import (CloseConnection, FrameDecoder, Request, encode_response,
                                   parse_request)
from protocols.kafka.listeners import Endpoint

log = logging.getLogger(__name__)

READ_BYTES = 1 << 16


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
                 idle_ms: int):
        self.broker_id = broker_id
        self.listeners = listeners
        self.handle = handle
        self.supported = supported
        self.max_request_bytes = max_request_bytes
        self.idle_s = idle_ms / 1000
        self.bound: dict[str, int] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task] = set()
        self.closed_for: dict[str, int] = {}   # why connections were closed, counted
        self._processing = asyncio.Event()

    def enable_request_processing(self) -> None:
        self._processing.set()

    @property
    def processing(self) -> bool:
        return self._processing.is_set()

    async def start(self) -> dict[str, int]:
        """Bind every listener; returns {listener name: port bound}."""
        for endpoint in self.listeners:
            if endpoint.host:
                server = await asyncio.start_server(self._connection, endpoint.host,
                                                    endpoint.port, limit=READ_BYTES,
                                                    backlog=1024)
            else:
                server = await asyncio.start_server(
                    self._connection, sock=every_interface(endpoint.port), limit=READ_BYTES,
                    backlog=1024)
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

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        decoder = FrameDecoder(self.max_request_bytes)
        try:
            await self._processing.wait()   # the client's bytes wait in the socket meanwhile
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(READ_BYTES), self.idle_s)
                except asyncio.TimeoutError:
                    self._closing(peer, "idle", f"idle for connections.max.idle.ms "
                                  f"({int(self.idle_s * 1000)} ms)", logging.DEBUG)
                    return
                if not data:
                    if decoder.pending:
                        self._closing(peer, "eof-mid-request", "the client disconnected "
                                      f"with {decoder.pending} bytes of a request unread",
                                      logging.INFO)
                    return
                for frame in decoder.feed(data):
                    request = parse_request(frame, self.supported)
                    response = await self.handle(request)
                    if response is not None:   # acks=0: no answer
                        writer.writelines(encode_response(request, response))
                        await writer.drain()
        except CloseConnection as e:
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
            self._connections.discard(task)
            writer.close()

    def _closing(self, peer, kind: str, why: str, level: int) -> None:
        self.closed_for[kind] = self.closed_for.get(kind, 0) + 1
        log.log(level, "broker %d: closing connection from %s: %s", self.broker_id, peer, why)
