"""The listener's connections to its broker's replica hosts: Produce, Fetch, ListOffsets and
OffsetsForLeaderEpoch from Kafka's clients reach the leader's host over the hosts' framed
channel (``actors.replica.channel``), the way rafka's own producer and consumer reach it,
not as Ray actor calls.

Why: an actor call's answer above 100 KB goes through Ray's object store. Measured on this
machine (2 cores, a 3-broker cluster, confluent-kafka reading a topic): a host had a 2 MB
fetch answer encoded in 1-20 ms, and the broker had it 40-190 ms later. The same bytes on the
channel are one socket write. The answer is the same either way (``fetch_many`` and
``produce_many`` serve both doors), except that a fetch's records come as where they lie in
the segment files, sent from them by the broker (``file_regions``).

A connection per host, opened on the first request (the host is asked where it listens and
for its token, one Ray call), shared by every Kafka connection of this broker; requests on it
are served concurrently. One that breaks fails the requests in flight on it (each partition
answered NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata and retries) and the next
request connects again.
"""
from __future__ import annotations

import asyncio
from typing import Any

from actors.replica.channel import ReplicationConnection, connect

CONNECT_TIMEOUT_S = 30.0


class HostChannels:
    def __init__(self, connect_timeout_s: float = CONNECT_TIMEOUT_S):
        self.connect_timeout_s = connect_timeout_s
        self._connections: dict[Any, ReplicationConnection] = {}   # host handle -> its
        self._opening: dict[Any, asyncio.Future] = {}

    async def call(self, host: Any, api: int, payload: bytes | list) -> bytes:
        """The host's answer to ``payload`` on channel API ``api``."""
        connection = self._connections.get(host)
        if connection is None or connection.closed:
            connection = await self._open(host)
        return await connection.call(api, payload)

    def send(self, host: Any, api: int, payload: bytes | list
             ) -> tuple[asyncio.Future, bool]:
        """``call`` begun now: its answer's future, and whether the frame is already
        written (the host's connection open), or will be once the connection opens."""
        connection = self._connections.get(host)
        if connection is not None and not connection.closed:
            return connection.send(api, payload), True
        return asyncio.ensure_future(self.call(host, api, payload)), False

    async def _open(self, host: Any) -> ReplicationConnection:
        opening = self._opening.get(host)
        if opening is None:
            opening = self._opening[host] = asyncio.ensure_future(
                connect(host, self.connect_timeout_s))
            opening.add_done_callback(lambda _: self._opening.pop(host, None))
        connection = await asyncio.shield(opening)
        self._connections[host] = connection
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
