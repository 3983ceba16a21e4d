"""The Kafka listener's socket shell (``actors.broker.listener.socket_server``) in one
process, with real sockets and the real request handlers over a fixed metadata image:
Kafka's connections.max.idle.ms, responses in request order when requests are pipelined,
and no request read before the broker enables request processing (Kafka's BrokerServer does
so after its initial metadata catch-up)."""
from __future__ import annotations

import asyncio
import struct

import pytest
from actors.broker.listener.admin_apis import AdminApis
from actors.broker.listener.api_versions import SUPPORTED
from actors.broker.listener.group_apis import GroupApis
from actors.broker.listener.kafka_apis import KafkaApis
from actors.broker.listener.socket_server import SocketServer
from actors.broker.listener.txn_apis import TxnApis
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.listeners import Endpoint
from tests.kafka_wire import request_bytes

IMAGE = {"cluster_id": "c", "brokers": {0: {"endpoints": [["PLAINTEXT", "127.0.0.1", 1]]}},
         "topics": {}, "topic_ids": {}}


async def no_creation(name: str):
    return None


def server(idle_ms: int) -> SocketServer:
    apis = KafkaApis(0, lambda: IMAGE, no_creation, auto_create=False)
    return SocketServer(0, [Endpoint("PLAINTEXT", "127.0.0.1", 0)], apis.handle, SUPPORTED,
                        104_857_600, idle_ms)


async def serving(s: SocketServer) -> int:
    """Start the listener and enable request processing, as a caught-up broker does; the
    port bound."""
    port = (await s.start())["PLAINTEXT"]
    s.enable_request_processing()
    return port


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def test_a_connection_idle_for_connections_max_idle_ms_is_closed_a_busy_one_is_not():
    async def run():
        s = server(idle_ms=300)
        port = await serving(s)
        idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
        busy_r, busy_w = await asyncio.open_connection("127.0.0.1", port)
        for i in range(8):   # a request every 100 ms for 0.8 s
            busy_w.write(request_bytes(18, 3, {}, i))
            assert struct.unpack_from(">i", await read_frame(busy_r))[0] == i
            await asyncio.sleep(0.1)
        assert await asyncio.wait_for(idle_r.read(1), 5) == b""    # closed by the broker
        assert s.closed_for == {"idle": 1} and s.connection_count == 1
        busy_w.close()
        idle_w.close()
        await s.stop()
    asyncio.run(run())


def test_pipelined_requests_are_answered_in_order():
    async def run():
        s = server(idle_ms=60_000)
        port = await serving(s)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(request_bytes(3 if i % 2 else 18, 12 if i % 2 else 3,
                                            {"topics": None}, i) for i in range(50)))
        ids = [struct.unpack_from(">i", await read_frame(reader))[0] for _ in range(50)]
        assert ids == list(range(50))
        writer.close()
        await s.stop()
    asyncio.run(run())


def test_a_listener_on_every_interface_answers_ipv4_and_ipv6_at_the_port_it_tells():
    """``listeners=PLAINTEXT://:0``: one port for both address families (each family's own
    free port before, so clients of the other family were refused at the advertised one)."""
    import socket

    async def run():
        apis = KafkaApis(0, lambda: IMAGE, no_creation, auto_create=False)
        s = SocketServer(0, [Endpoint("PLAINTEXT", "", 0)], apis.handle, SUPPORTED,
                         104_857_600, 60_000)
        port = await serving(s)
        families = ["127.0.0.1"] + (["::1"] if socket.has_ipv6 else [])
        for host in families:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request_bytes(18, 3, {}, 5))
            assert struct.unpack_from(">i", await read_frame(reader))[0] == 5
            writer.close()
        await s.stop()
    asyncio.run(run())


def test_a_request_sent_before_processing_is_enabled_is_answered_once_it_is():
    """The listener is bound before the broker registers (its address is part of the
    registration); what clients send meanwhile waits, unread, and is answered in order
    once the broker has caught up with the cluster's metadata."""
    async def run():
        s = server(idle_ms=60_000)
        port = (await s.start())["PLAINTEXT"]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes(18, 3, {}, 1) + request_bytes(3, 12, {"topics": None}, 2))
        assert not s.processing
        with pytest.raises(asyncio.TimeoutError):   # not answered before it is enabled
            await asyncio.wait_for(reader.read(1), 0.5)
        s.enable_request_processing()
        ids = [struct.unpack_from(">i", await asyncio.wait_for(read_frame(reader), 5))[0]
               for _ in range(2)]
        assert ids == [1, 2] and s.processing
        writer.close()
        await s.stop()
    asyncio.run(run())


def test_every_api_served_has_one_handler_and_every_handler_an_api_served():
    """KafkaApis' dispatch table and the versions table ApiVersions answers from name the
    same APIs, once the listener has the group and transaction coordinators and the
    controller to ask."""
    async def nothing():
        return None
    groups = GroupApis(0, nothing, lambda key, key_type: nothing(), lambda broker: None)
    admin = AdminApis(0, lambda: IMAGE, nothing, nothing)
    txn = TxnApis(lambda: IMAGE, nothing, admin.controller_call)
    apis = KafkaApis(0, lambda: IMAGE, no_creation, auto_create=False, groups=groups,
                     admin=admin, txn=txn)
    assert set(apis.handlers) == set(SUPPORTED)
    assert all(isinstance(key, ApiKey) for key in SUPPORTED)
