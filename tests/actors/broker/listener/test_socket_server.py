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


def test_a_produce_with_a_null_array_closes_its_connection_not_the_broker():
    """kio reads a null topic_data, which Kafka's schema does not allow: the connection is
    closed as for any request Kafka cannot parse (found by the tls_request fuzz target),
    and the listener goes on."""
    async def run():
        s = server(idle_ms=60_000)
        port = await serving(s)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        empty = request_bytes(0, 11, {"acks": 1, "timeout": 1000, "topic_data": []})
        assert empty[-2:] == b"\x01\x00"     # topic_data: a compact array of none, no tags
        writer.write(empty[:-2] + b"\x00\x00")  # ... made null
        assert await asyncio.wait_for(reader.read(1), 5) == b""
        assert s.closed_for == {"InvalidRequest": 1}
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes(18, 3, {}, 7))
        assert struct.unpack_from(">i", await read_frame(reader))[0] == 7
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
    groups = GroupApis(0, nothing, lambda key, key_type: nothing(),
                       lambda broker, listener: None)
    admin = AdminApis(0, lambda: IMAGE, nothing, nothing)
    txn = TxnApis(lambda: IMAGE, nothing, admin.controller_call)
    apis = KafkaApis(0, lambda: IMAGE, no_creation, auto_create=False, groups=groups,
                     admin=admin, txn=txn)
    assert set(apis.handlers) == set(SUPPORTED)
    assert all(isinstance(key, ApiKey) for key in SUPPORTED)


def produce_bytes(correlation_id: int, partitions: list[int], topic: str = "t") -> bytes:
    return request_bytes(0, 9, {"transactional_id": None, "acks": -1, "timeout": 30_000,
                                "topic_data": [{"name": topic, "partition_data": [
                                    {"index": p, "records": None} for p in partitions]}]},
                         correlation_id)


class Holding:
    """A handler around the real one that records, as each request starts, the requests
    in hand, and answers after ``delay_s(request)``."""

    def __init__(self, delay_s):
        self.apis = KafkaApis(0, lambda: IMAGE, no_creation, auto_create=False)
        self.delay_s = delay_s
        self.holding: set = set()
        self.held: list[set] = []

    async def __call__(self, request):
        self.holding.add(request.correlation_id)
        self.held.append(set(self.holding))
        await asyncio.sleep(self.delay_s(request))
        self.holding.discard(request.correlation_id)
        return await self.apis.handle(request)


async def pipelined(handle: Holding, frames: bytes, answers: int) -> list[int]:
    """The correlation ids of the answers to ``frames`` sent at once, in the order read."""
    s = SocketServer(0, [Endpoint("PLAINTEXT", "127.0.0.1", 0)], handle, SUPPORTED,
                     104_857_600, 60_000)
    port = await serving(s)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frames)
    ids = [struct.unpack_from(">i", await asyncio.wait_for(read_frame(reader), 10))[0]
           for _ in range(answers)]
    writer.close()
    await s.stop()
    return ids


def test_produce_requests_to_other_partitions_overlap_others_wait_and_answers_keep_order():
    """A connection's Produce requests naming partitions no request in hand names are
    handled at once (a client's per-partition requests each wait on replication); one
    naming a partition in hand, and any other request, waits for those before it; every
    answer goes out in request order. The earlier a request came, the longer it takes
    here, so that answers would cross."""
    handle = Holding(lambda request: 0.05 * (10 - request.correlation_id))
    ids = asyncio.run(pipelined(
        handle, produce_bytes(1, [0]) + produce_bytes(2, [1]) + produce_bytes(3, [2, 3])
        + produce_bytes(4, [3])                  # 3 is in hand: waits
        + request_bytes(18, 3, {}, 5)            # ApiVersions: waits for all
        + produce_bytes(6, [0]) + produce_bytes(7, [1]), 7))
    assert ids == [1, 2, 3, 4, 5, 6, 7]
    held = handle.held
    assert held[:3] == [{1}, {1, 2}, {1, 2, 3}]          # overlapping
    assert held[3] == {1, 2, 4}       # after 3 (its partition's), beside 1 and 2
    assert held[4] == {5}             # after every one before
    assert held[5:] == [{6}, {6, 7}]


def produce_v3(correlation_id: int, partitions: list[int], transactional_id=None) -> bytes:
    return request_bytes(0, 3, {"transactional_id": transactional_id, "acks": -1,
                                "timeout": 30_000, "topic_data": [{"name": "t", "partition_data": [
                                    {"index": p, "records": None} for p in partitions]}]},
                         correlation_id)


class Replicating(Holding):
    """The real handler first (a Produce's appends go out there), then ``delay_s``: as an
    acks=all Produce waits for its followers after its appends are sent."""

    async def __call__(self, request):
        self.holding.add(request.correlation_id)
        self.held.append(set(self.holding))
        answer = await self.apis.handle(request)
        await asyncio.sleep(self.delay_s(request))
        self.holding.discard(request.correlation_id)
        return answer


def test_a_produce_for_partitions_in_hand_begins_once_the_earlier_appends_are_sent():
    """Kafka handles a connection's requests one at a time, so an acks=all Produce waits
    for the one before it to be replicated. Here one naming the same partitions begins as
    soon as the earlier one's batches are on their way to the hosts (the hosts append a
    channel's frames in order): its replication overlaps the earlier one's. The answers
    still go out in request order, and any other request still waits for all before it."""
    handle = Replicating(lambda request: 0.05 * (10 - request.correlation_id))
    ids = asyncio.run(pipelined(
        handle, produce_v3(1, [0]) + produce_v3(2, [0]) + produce_v3(3, [0, 1])
        + request_bytes(18, 3, {}, 4) + produce_v3(5, [0]), 5))
    assert ids == [1, 2, 3, 4, 5]
    held = handle.held
    assert held[:3] == [{1}, {1, 2}, {1, 2, 3}]
    assert held[3] == {4}
    assert held[4] == {5}


def test_a_transactional_produce_for_partitions_in_hand_waits_for_the_earlier_answer():
    """A transaction's first batches on a partition wait for its coordinator's verification
    before they are appended, so the next Produce for the same partitions could be appended
    first: a transactional one begins only once the one before it is answered, as in
    Kafka."""
    handle = Replicating(lambda request: 0.05 * (10 - request.correlation_id))
    ids = asyncio.run(pipelined(
        handle, produce_v3(1, [0], "txn") + produce_v3(2, [0], "txn")
        + produce_v3(3, [1], "txn"), 3))
    assert ids == [1, 2, 3]
    assert handle.held == [{1}, {2}, {2, 3}]


def test_connections_closed_after_overlapping_produce_requests_leave_nothing_behind():
    """A connection closed by its client, or idle for connections.max.idle.ms, with
    Produce requests handled before: no connection or principal counted after."""
    async def run():
        s = server(idle_ms=300)
        port = await serving(s)
        idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
        idle_w.write(produce_v3(1, [0]))
        await read_frame(idle_r)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(produce_v3(1, [0]) + produce_v3(2, [0]))
        for _ in range(2):
            await read_frame(r)
        w.close()
        assert await asyncio.wait_for(idle_r.read(1), 5) == b""    # closed by the broker
        for _ in range(50):
            if s.connection_count == 0:
                break
            await asyncio.sleep(0.05)
        assert s.connection_count == 0 and s.principals == {}
        assert s.closed_for == {"idle": 1}
        idle_w.close()
        await s.stop()
    asyncio.run(run())


def test_no_more_than_max_overlapping_produce_requests_are_handled_at_once():
    from actors.broker.listener.socket_server import MAX_OVERLAPPING
    handle = Holding(lambda request: 0.05)
    ids = asyncio.run(pipelined(handle, b"".join(produce_bytes(i, [i]) for i in range(20)),
                                20))
    assert ids == list(range(20))
    assert max(len(h) for h in handle.held) == MAX_OVERLAPPING
