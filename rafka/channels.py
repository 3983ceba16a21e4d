"""A client's connections to replica hosts: produce and fetch requests go to a leader host's
listener (``actors.replica.channel``) as Kafka's clients send theirs to a broker's, not
through a Ray actor call.

Why: an actor call's answer crosses Ray's core worker, its gRPC threads and the object
store's bookkeeping at both ends; on a busy two-core machine that is a millisecond or more
of each acks=all record's end-to-end latency, twice (the produce, then the consumer's
fetch). A framed message on a socket is one write and one read.

One event loop thread per process serves every producer and consumer in it, with one
connection per host, shared: requests on a connection are told apart by correlation id and
served concurrently by the host, so a consumer's long poll never holds up a producer's
request. Callers get ``concurrent.futures.Future``s. A host that is gone, or a connection
that breaks, fails the requests in flight on it with ``ChannelClosed`` (a ConnectionError:
retriable, the client refreshes its metadata and tries again, as after a dead actor); the
next request opens a new connection.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from typing import Any

from actors.replica.channel import ReplicationConnection, connect

# Asking a host where it listens and opening the connection: a live host answers in
# milliseconds; a host that does not within this is treated as gone.
CONNECT_TIMEOUT_S = 30.0


class HostChannels:
    """The connections of this process's clients to replica hosts, on one loop thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="rafka-channels",
                                        daemon=True)
        self._thread.start()
        # host_id -> the connection (or its opening), touched only on the loop.
        self._connections: dict[str, asyncio.Future[ReplicationConnection]] = {}

    def call(self, host_id: str, host: Any, api: int, payload: bytes
             ) -> concurrent.futures.Future:
        """Send ``payload`` as request ``api`` to the host (``host_id``, its actor handle);
        the future resolves to the answer's payload."""
        return asyncio.run_coroutine_threadsafe(self._call(host_id, host, api, payload),
                                                self.loop)

    async def _call(self, host_id: str, host: Any, api: int, payload: bytes) -> bytes:
        return await (await self._connection(host_id, host)).call(api, payload)

    async def _connection(self, host_id: str, host: Any) -> ReplicationConnection:
        opening = self._connections.get(host_id)
        if opening is None or (opening.done() and (opening.cancelled()
                                                   or opening.exception() is not None
                                                   or opening.result().closed)):
            opening = self._connections[host_id] = asyncio.ensure_future(
                connect(host, CONNECT_TIMEOUT_S))
        # Shielded: one caller giving up does not abandon the opening the others wait for.
        return await asyncio.shield(opening)

    def disconnect(self) -> None:
        """Close every connection: requests in flight on them fail with ``ChannelClosed``
        (their clients retry), and the next request to a host connects again."""
        asyncio.run_coroutine_threadsafe(self._disconnect(), self.loop).result()

    async def _disconnect(self) -> None:
        openings, self._connections = list(self._connections.values()), {}
        for opening in openings:
            if opening.done() and not opening.cancelled() and opening.exception() is None:
                opening.result().close()
            else:
                opening.cancel()

    def connected_hosts(self) -> set[str]:
        """The hosts with an open connection (for tests and tools)."""
        return set(asyncio.run_coroutine_threadsafe(self._open_hosts(), self.loop).result())

    async def _open_hosts(self) -> set[str]:
        return {host_id for host_id, opening in self._connections.items()
                if opening.done() and not opening.cancelled()
                and opening.exception() is None and not opening.result().closed}


_lock = threading.Lock()
_channels: tuple[int, HostChannels] | None = None


def host_channels() -> HostChannels:
    """This process's ``HostChannels``, started on first use (anew in a forked child, whose
    copy of the parent's loop thread does not run)."""
    global _channels
    with _lock:
        if _channels is None or _channels[0] != os.getpid():
            _channels = (os.getpid(), HostChannels())
        return _channels[1]
