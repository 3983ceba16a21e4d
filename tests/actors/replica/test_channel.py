"""The replication channel between replica hosts (actors.replica.channel), on real sockets."""
import asyncio
import struct

import pytest

from actors.replica.channel import (API_FETCH, API_OFFSETS_FOR_LEADER_EPOCH, HEADER,
                                    MAX_FRAME_BYTES, TICKET_TTL_S, ChannelClosed, ChannelError,
                                    ReplicationConnection, ReplicationListener)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def _listener(**handlers):
    async def echo(payload: bytes) -> bytes:
        return b"fetched:" + payload

    async def fail(payload: bytes) -> bytes:
        raise ValueError("no such partition")

    listener = ReplicationListener({API_FETCH: echo, API_OFFSETS_FOR_LEADER_EPOCH: fail,
                                    **handlers})
    address, port = await listener.start("127.0.0.1")
    return listener, address, port


def test_answers_carry_the_request_they_answer():
    async def main():
        gate = asyncio.Event()

        async def slow(payload: bytes) -> bytes:
            await gate.wait()
            return b"slow"
        listener, address, port = await _listener()
        listener.handlers[3] = slow
        connection = await ReplicationConnection.open(address, port, listener.token)
        slow_call = asyncio.ensure_future(connection.call(3, b""))
        # Served concurrently: a long poll does not hold up the next request's answer.
        assert await connection.call(API_FETCH, b"x" * 100_000) == b"fetched:" + b"x" * 100_000
        gate.set()
        assert await slow_call == b"slow"
        connection.close()
        listener.close()
    run(main())


def test_a_failed_handler_is_an_error_answer_and_the_connection_goes_on():
    async def main():
        listener, address, port = await _listener()
        connection = await ReplicationConnection.open(address, port, listener.token)
        with pytest.raises(ChannelError, match="no such partition"):
            await connection.call(API_OFFSETS_FOR_LEADER_EPOCH, b"")
        with pytest.raises(ChannelError, match="unknown api 9"):
            await connection.call(9, b"")
        assert await connection.call(API_FETCH, b"a") == b"fetched:a"
        connection.close()
        listener.close()
    run(main())


def test_a_connection_without_the_token_is_closed():
    async def main():
        listener, address, port = await _listener()
        with pytest.raises(ChannelClosed):
            await ReplicationConnection.open(address, port, b"wrong token!!!!!")
        assert listener.connections == 1
        listener.close()
    run(main())


def test_a_ray_door_ticket_admits_one_connection_as_its_caller_to_the_door_handlers():
    """A Ray door client's connection (actors.broker.ray_door): admitted by a ticket its
    broker asked for, once; served only the door's handlers, which are told who asks."""
    async def main():
        async def door_fetch(payload: bytes, caller) -> bytes:
            return f"{caller} fetched:".encode() + payload
        listener, address, port = await _listener()
        listener.door_handlers[API_FETCH] = door_fetch
        ticket = listener.admit("User:alice")
        connection = await ReplicationConnection.open(address, port, ticket)
        assert await connection.call(API_FETCH, b"a") == b"User:alice fetched:a"
        with pytest.raises(ChannelError, match="unknown api"):   # not a door handler
            await connection.call(API_OFFSETS_FOR_LEADER_EPOCH, b"")
        with pytest.raises(ChannelClosed):                        # used up
            await ReplicationConnection.open(address, port, ticket)
        # The token's holders (the hosts, the brokers' listeners) are served as before.
        internal = await ReplicationConnection.open(address, port, listener.token)
        assert await internal.call(API_FETCH, b"a") == b"fetched:a"
        for c in (connection, internal):
            c.close()
        listener.close()
    run(main())


def test_a_ray_door_ticket_not_used_within_its_time_is_refused():
    async def main():
        now = [0.0]
        listener = ReplicationListener({API_FETCH: None}, clock=lambda: now[0])
        address, port = await listener.start("127.0.0.1")
        ticket = listener.admit("User:alice")
        now[0] = TICKET_TTL_S
        with pytest.raises(ChannelClosed):
            await ReplicationConnection.open(address, port, ticket)
        listener.close()
    run(main())


def test_a_frame_over_socket_request_max_bytes_closes_the_connection():
    async def main():
        listener, address, port = await _listener()
        reader, writer = await asyncio.open_connection(address, port)
        writer.write(HEADER.pack(MAX_FRAME_BYTES + 1, 1, 0))
        assert await reader.read() == b""   # closed without an answer
        writer.close()
        # The listener serves the next connection as before.
        connection = await ReplicationConnection.open(address, port, listener.token)
        assert await connection.call(API_FETCH, b"b") == b"fetched:b"
        connection.close()
        listener.close()
    run(main())


def test_calls_in_flight_fail_when_the_leader_host_goes_away():
    async def main():
        async def never(payload: bytes) -> bytes:
            await asyncio.Event().wait()
        listener, address, port = await _listener()
        listener.handlers[API_FETCH] = never
        connection = await ReplicationConnection.open(address, port, listener.token)
        call = asyncio.ensure_future(connection.call(API_FETCH, b""))
        await asyncio.sleep(0.05)
        listener.close()
        with pytest.raises(ChannelClosed):
            await call
        assert connection.closed
        with pytest.raises(ChannelClosed):
            await connection.call(API_FETCH, b"")
    run(main())


def test_an_answer_after_the_caller_gave_up_is_dropped():
    async def main():
        gate = asyncio.Event()

        async def late(payload: bytes) -> bytes:
            if payload == b"late":
                await gate.wait()
            return payload
        listener, address, port = await _listener()
        listener.handlers[API_FETCH] = late
        connection = await ReplicationConnection.open(address, port, listener.token)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(connection.call(API_FETCH, b"late"), 0.1)
        gate.set()
        assert await connection.call(API_FETCH, b"next") == b"next"
        assert not connection._pending
        connection.close()
        listener.close()
    run(main())


def test_refused_when_nothing_listens():
    async def main():
        listener, address, port = await _listener()
        listener.close()
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionRefusedError):
            await ReplicationConnection.open(address, port, listener.token)
    run(main())


def test_frame_layout():
    # length counts what follows it: correlation id, api, payload.
    assert HEADER.pack(5 + 3, 42, API_FETCH) + b"abc" == struct.pack(">IIB", 8, 42, 1) + b"abc"


# ---- security.inter.broker.protocol=SSL ------------------------------------------------------

def _tls_listener(tmp_path, **extra):
    """A listener served over TLS with a broker keystore made here (a CA's certificate for
    the broker), as ``channel_tls`` builds it from the broker's settings."""
    from actors.broker.config import ClusterConfig
    from actors.replica.channel import channel_tls
    from tests import tls_certs
    ca = tls_certs.authority()
    broker = tls_certs.issue(ca, "CN=rafka-broker,O=rafka", server=True)
    keystore = tls_certs.write(tmp_path / "broker.pem", broker.key_pem() + broker.cert_pem())
    config = ClusterConfig.parse({"security.inter.broker.protocol": "SSL",
                                  "ssl.keystore.type": "PEM",
                                  "ssl.keystore.location": keystore, **extra}).broker

    async def echo(payload: bytes) -> bytes:
        return b"fetched:" + payload
    return ReplicationListener({API_FETCH: echo}, *channel_tls(config))


def test_over_tls_the_caller_trusts_the_certificate_the_host_gave_it(tmp_path):
    async def main():
        listener = _tls_listener(tmp_path)
        address, port = await listener.start("127.0.0.1")
        assert listener.certificate.startswith("-----BEGIN CERTIFICATE-----")
        connection = await ReplicationConnection.open(address, port, listener.token,
                                                      listener.certificate)
        assert await connection.call(API_FETCH, b"x" * 200_000) == b"fetched:" + b"x" * 200_000
        connection.close()
        listener.close()
    run(main())


def test_over_tls_another_certificate_or_plaintext_gets_nowhere(tmp_path):
    import ssl

    async def main():
        listener = _tls_listener(tmp_path)
        address, port = await listener.start("127.0.0.1")
        other = _tls_listener(tmp_path / "..")   # a keystore of another CA, same names
        with pytest.raises(ssl.SSLCertVerificationError):
            await ReplicationConnection.open(address, port, listener.token,
                                             other.certificate)
        # A caller speaking plaintext never gets its token read.
        with pytest.raises((ChannelClosed, ConnectionError)):
            await ReplicationConnection.open(address, port, listener.token)
        listener.close()
    run(main())


@pytest.mark.parametrize("settings", [
    {"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"},
    {"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_CCM"},
    {"ssl.enabled.protocols": "TLSv1.3"}])
def test_over_tls_the_brokers_protocols_and_cipher_suites_decide(tmp_path, settings):
    async def main():
        listener = _tls_listener(tmp_path, **settings)
        address, port = await listener.start("127.0.0.1")
        connection = await ReplicationConnection.open(address, port, listener.token,
                                                      listener.certificate)
        assert await connection.call(API_FETCH, b"y") == b"fetched:y"
        connection.close()
        listener.close()
    run(main())


def test_over_tls_settings_no_connection_can_use_stop_the_broker_at_start(tmp_path):
    from protocols.errors import InvalidConfigError
    with pytest.raises(InvalidConfigError, match=r"the replicas' channel \(inter-broker "
                                                 r"listener SSL, SSL\): no TLS connection "
                                                 r"can be made with these settings"):
        _tls_listener(tmp_path, **{"ssl.enabled.protocols": "TLSv1.1"})


def _channel_tls(tmp_path, settings: dict):
    from actors.broker.config import ClusterConfig
    from actors.replica.channel import channel_tls
    return channel_tls(ClusterConfig.parse(settings).broker)


def test_the_inter_broker_listeners_own_ssl_settings_serve_the_channel(tmp_path):
    """As Kafka picks its inter-broker listener: inter.broker.listener.name, its protocol
    from listener.security.protocol.map, its listener.name.<l>.ssl.* settings. SASL_SSL
    is TLS on the channel (a caller is admitted by its token, not by SASL)."""
    from tests import tls_certs
    ca = tls_certs.authority()
    broker = tls_certs.issue(ca, "CN=rafka-internal,O=rafka", server=True)
    keystore = tls_certs.write(tmp_path / "internal.pem", broker.key_pem() + broker.cert_pem())
    context, certificate = _channel_tls(tmp_path, {
        "listeners": "INTERNAL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.internal.ssl.keystore.type": "PEM",
        "listener.name.internal.ssl.keystore.location": keystore})
    assert context is not None and certificate == broker.cert_pem().decode()
    # security.inter.broker.protocol names the listener of that name: SASL_PLAINTEXT is
    # plaintext, SASL_SSL TLS with the SASL_SSL listener's keystore.
    assert _channel_tls(tmp_path, {"security.inter.broker.protocol": "SASL_PLAINTEXT"}) == \
        (None, None)
    context, certificate = _channel_tls(tmp_path, {
        "security.inter.broker.protocol": "SASL_SSL",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": keystore})
    assert certificate == broker.cert_pem().decode()


def test_kafkas_inter_broker_settings_refused_as_kafka_refuses_them(tmp_path):
    from protocols.errors import InvalidConfigError
    with pytest.raises(InvalidConfigError, match="Only one of inter.broker.listener.name and "
                                                 "security.inter.broker.protocol should be set"):
        _channel_tls(tmp_path, {"inter.broker.listener.name": "PLAINTEXT",
                                "security.inter.broker.protocol": "SSL"})
    with pytest.raises(InvalidConfigError, match="No enum constant SASL_TLS"):
        _channel_tls(tmp_path, {"security.inter.broker.protocol": "SASL_TLS"})
    with pytest.raises(InvalidConfigError, match="inter.broker.listener.name must be a "
                                                 "listener name defined in advertised.listeners"
                                                 r"\. The valid options based on currently "
                                                 "configured listeners are PLAINTEXT$"):
        _channel_tls(tmp_path, {"inter.broker.listener.name": "SSL"})


def test_crosses_network_is_a_peer_neither_loopback_nor_the_listeners_address():
    from actors.replica.channel import crosses_network
    assert not crosses_network("127.0.0.1", "10.0.0.5")
    assert not crosses_network("::1", "10.0.0.5")
    assert not crosses_network("10.0.0.5", "10.0.0.5")     # a host on the same node
    assert crosses_network("10.0.0.6", "10.0.0.5")


def test_a_plaintext_connection_from_another_machine_is_warned_of_once(caplog):
    """The channel's token and records in clear on the network: said once, as a Kafka
    listener exposed without TLS or SASL is. (One machine here: the listener on every
    interface, the caller from an address of this machine that is not loopback.)"""
    import logging

    from actors.replica.channel import API_HELLO, _read_frame, _send
    from ray._private.services import get_node_ip_address
    other = get_node_ip_address()
    listener = ReplicationListener({})

    async def main():
        _, port = await listener.start("0.0.0.0")
        for local in ("127.0.0.1", other, other):
            reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                           local_addr=(local, 0))
            _send(writer, 1, API_HELLO, listener.token)
            await _read_frame(reader)   # admitted
            writer.close()
        listener.close()
    with caplog.at_level(logging.WARNING, logger="actors.replica.channel"):
        run(main())
    warnings = [r.getMessage() for r in caplog.records if "over plaintext" in r.getMessage()]
    assert len(warnings) == 1 and f"a connection from {other} over plaintext" in warnings[0]
    assert "security.inter.broker.protocol=SSL" in warnings[0]
