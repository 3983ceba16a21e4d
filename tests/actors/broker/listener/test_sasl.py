"""SASL listeners on the wire (``actors.broker.listener.sasl_authenticator``), real sockets in
one process: SaslHandshake v1 then SaslAuthenticate, as Kafka's Java client and librdkafka
send them; SaslHandshake v0 then the bare PLAIN token, as older clients do; a failed
authentication answered SASL_AUTHENTICATION_FAILED and the connection closed; anything but
ApiVersions before authentication closes the connection; the listener's settings, refused
with the setting to fix."""
from __future__ import annotations

import asyncio
import struct

import pytest

from actors.broker.config import ClusterConfig
from actors.broker.listener.api_versions import SUPPORTED
from actors.broker.listener.kafka_apis import KafkaApis
from actors.broker.listener.sasl_authenticator import listener_sasl
from actors.broker.listener.socket_server import SocketServer
from protocols.errors import InvalidConfigError
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.listeners import parse_listeners
from tests.actors.broker.listener.test_socket_server import IMAGE, no_creation, read_frame
from tests.kafka_wire import parse_response, request_bytes

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')
HANDSHAKE, AUTHENTICATE, METADATA = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, \
    ApiKey.METADATA


SALT = b"0123456789abcdef"


def scram_credential(user: str, mechanism: str):
    """The cluster's credentials in these tests: carol's password is carol-scram."""
    from protocols.kafka.scram import credential, salted_password
    if user != "carol":
        return None
    return credential(mechanism, salted_password(mechanism, "carol-scram", SALT, 4096), SALT,
                      4096)


def sasl_server(**config) -> SocketServer:
    broker = ClusterConfig.parse({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, **config}).broker
    listeners = parse_listeners(broker["listeners"])
    apis = KafkaApis(0, lambda: IMAGE, no_creation, auto_create=False)
    return SocketServer(0, listeners, apis.handle, SUPPORTED, 104_857_600, 60_000,
                        sasl=listener_sasl(broker, listeners, scram_credential),
                        failed_authentication_delay_ms=broker[
                            "connection.failed.authentication.delay.ms"])


def conversation(steps, **config):
    """Send each (api key, version, values) on one connection, reading each answer (a step
    ("sleep", None, seconds) waits); returns the answers' bodies and, after the last,
    whether the broker closed the connection."""
    async def run():
        s = sasl_server(**config)
        port = (await s.start())["SASL_PLAINTEXT"]
        s.enable_request_processing()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        bodies = []
        for i, (key, version, values) in enumerate(steps):
            if callable(values):               # a step computed from the answers so far
                values = values(bodies)
            if key == "sleep":
                await asyncio.sleep(values)
                bodies.append(None)
                continue
            if key is None:                      # a bare token (after SaslHandshake v0)
                writer.write(struct.pack(">i", len(values)) + values)
                try:
                    bodies.append(await read_frame(reader))
                except asyncio.IncompleteReadError:
                    bodies.append(None)          # closed without an answer
                    break
                continue
            if key == "raw":                     # bytes as they are
                writer.write(values)
                continue
            writer.write(request_bytes(key, version, values, correlation_id=i))
            try:
                frame = await asyncio.wait_for(read_frame(reader), 10)
            except (asyncio.IncompleteReadError, ConnectionError):
                bodies.append(None)              # closed without an answer
                break
            header, body = parse_response(frame, key, version)
            assert header.correlation_id == i
            bodies.append(body)
        try:   # a closed connection reads EOF at once; an open one has nothing to say
            closed = await asyncio.wait_for(reader.read(1), 2) == b""
        except asyncio.TimeoutError:
            closed = False
        principals = dict(s.principals)
        writer.close()
        await s.stop()
        return bodies, closed, principals, dict(s.closed_for)
    return asyncio.run(run())


def test_handshake_v1_then_authenticate_then_requests_as_the_user():
    bodies, closed, principals, _ = conversation([
        (ApiKey.API_VERSIONS, 3, {}),
        (HANDSHAKE, 1, {"mechanism": "PLAIN"}),
        (AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"}),
        (METADATA, 12, {"topics": None}),
    ])
    assert bodies[1].error_code == 0 and list(bodies[1].mechanisms) == [
        "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert bodies[2].error_code == 0 and bodies[2].error_message is None
    assert bodies[3].cluster_id == "c"
    assert not closed and principals == {"User:alice": 1}


def test_handshake_v0_then_the_bare_token():
    bodies, closed, _, _ = conversation([
        (HANDSHAKE, 0, {"mechanism": "PLAIN"}),
        (None, None, b"\0bob\0bob-secret"),
        (METADATA, 12, {"topics": None}),
    ])
    assert bodies[0].error_code == 0 and bodies[1] == b"" and bodies[2].cluster_id == "c"


def test_a_wrong_password_is_answered_then_the_connection_closed():
    """After connection.failed.authentication.delay.ms (Kafka's brake on guessing)."""
    import time
    started = time.monotonic()
    bodies, closed, _, closed_for = conversation([
        (HANDSHAKE, 1, {"mechanism": "PLAIN"}),
        (AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0bob-secret"}),
    ], **{"connection.failed.authentication.delay.ms": 1500})
    assert time.monotonic() - started >= 1.5
    assert bodies[1].error_code == 58     # SASL_AUTHENTICATION_FAILED
    assert bodies[1].error_message == "Authentication failed: Invalid username or password"
    assert closed and closed_for == {"authentication": 1}


def test_an_unsupported_mechanism_is_answered_with_those_enabled_then_closed():
    bodies, closed, _, _ = conversation([(HANDSHAKE, 1, {"mechanism": "GSSAPI"})])
    assert bodies[0].error_code == 33 and list(bodies[0].mechanisms) == [
        "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert closed


@pytest.mark.parametrize("first", [(METADATA, 12, {"topics": None}),
                                   (AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})])
def test_no_request_but_api_versions_before_the_handshake(first):
    bodies, closed, _, _ = conversation([first])
    if first[0] == METADATA:
        assert bodies == [None]                       # InvalidRequest: closed unanswered
    else:
        assert bodies[0].error_code == 34             # ILLEGAL_SASL_STATE
    assert closed


def test_a_handshake_after_authentication_or_on_plaintext_is_an_illegal_state():
    bodies, closed, _, _ = conversation([
        (HANDSHAKE, 1, {"mechanism": "PLAIN"}),
        (AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"}),
        (HANDSHAKE, 1, {"mechanism": "PLAIN"}),
    ])
    assert bodies[2].error_code == 34 and not closed


@pytest.mark.parametrize("given, error", [
    ({}, "SASL mechanism GSSAPI is not supported .*sasl.enabled.mechanisms"),
    ({"sasl.enabled.mechanisms": "PLAIN"},
     "SASL/PLAIN needs listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": "com.example.Other required;"},
     "names com.example.Other, not org.apache.kafka.common.security.plain.PlainLoginModule"),
])
def test_settings_that_cannot_make_a_sasl_listener(given, error):
    broker = ClusterConfig.parse({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", **given}).broker
    with pytest.raises(InvalidConfigError, match=error):
        listener_sasl(broker, parse_listeners(broker["listeners"]))
    with pytest.raises(InvalidConfigError, match="should be 1 module"):
        ClusterConfig.parse({"listener.name.x.plain.sasl.jaas.config": "a.B required; c.D "
                                                                       "required;"})


REAUTH = {"listener.name.sasl_plaintext.plain.connections.max.reauth.ms": 400}
LOGIN = [(HANDSHAKE, 1, {"mechanism": "PLAIN"}),
         (AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})]


def test_kip_368_a_session_ends_after_connections_max_reauth_ms():
    bodies, closed, _, closed_for = conversation(
        LOGIN + [(METADATA, 12, {"topics": None}), ("sleep", None, 0.5),
                 (METADATA, 12, {"topics": None})], **REAUTH)
    assert bodies[1].session_lifetime.total_seconds() * 1000 == 400
    assert bodies[2].cluster_id == "c" and bodies[4] is None
    assert closed and closed_for == {"session-expired": 1}


def test_kip_368_re_authentication_renews_the_session():
    bodies, closed, principals, _ = conversation(
        LOGIN + [("sleep", None, 0.25)] + LOGIN + [("sleep", None, 0.25),
                                                   (METADATA, 12, {"topics": None})], **REAUTH)
    assert bodies[4].error_code == 0 and bodies[4].session_lifetime.total_seconds() == 0.4
    assert bodies[6].cluster_id == "c" and not closed
    assert principals == {"User:alice": 1}


def test_kip_368_re_authentication_may_not_change_the_user():
    bodies, closed, _, _ = conversation(LOGIN + [
        (HANDSHAKE, 1, {"mechanism": "PLAIN"}),
        (AUTHENTICATE, 2, {"auth_bytes": b"\0bob\0bob-secret"})], **REAUTH)
    assert bodies[3].error_code == 58 and bodies[3].error_message == \
        "Cannot change principals during re-authentication from User.alice: User.bob"
    assert closed


def test_kip_368_a_client_on_saslauthenticate_v0_cannot_re_authenticate():
    """It never learnt the session's lifetime: its handshake is an illegal state, and the
    session still ends."""
    bodies, closed, _, _ = conversation([
        (HANDSHAKE, 1, {"mechanism": "PLAIN"}),
        (AUTHENTICATE, 0, {"auth_bytes": b"\0alice\0alice-secret"}),
        (HANDSHAKE, 1, {"mechanism": "PLAIN"}), ("sleep", None, 0.5),
        (METADATA, 12, {"topics": None})], **REAUTH)
    assert bodies[2].error_code == 34 and bodies[4] is None and closed


def test_a_wrong_bare_token_gets_no_answer_only_the_close():
    """After SaslHandshake v0 there is no failure answer: an empty frame would read as
    success to kafka-python, so the connection is only closed, as Kafka closes it."""
    bodies, closed, _, _ = conversation([(HANDSHAKE, 0, {"mechanism": "PLAIN"}),
                                         (None, None, b"\0alice\0wrong")])
    assert bodies == [bodies[0], None] and bodies[0].error_code == 0 and closed


def test_before_authentication_a_frame_is_no_larger_than_sasl_server_max_receive_size():
    """CVE-2022-34917: an anonymous client's claimed size is refused, not buffered; once
    authenticated, socket.request.max.bytes holds again."""
    bodies, closed, _, closed_for = conversation(
        [("raw", None, struct.pack(">i", 50_000_000) + b"x" * 1000),
         (ApiKey.API_VERSIONS, 3, {})])
    assert bodies[-1] is None and closed and closed_for == {"InvalidReceive": 1}
    many = {"topics": [{"name": f"t{i:06d}-" + "x" * 20} for i in range(25_000)]}
    bodies, closed, _, _ = conversation(LOGIN + [(METADATA, 12, many)])
    assert len(bodies[2].topics) == 25_000 and not closed


def scram_final(mechanism: str, password: str):
    """The client's final message, from the server's first (RFC 5802)."""
    from tests.protocols.kafka.test_scram import client_final
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]

    def final(server_first: bytes) -> bytes:
        return client_final(digest, password, "n=carol,r=client-nonce", server_first, 4096,
                            SALT)
    return final


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("password, ok", [("carol-scram", True), ("wrong", False)])
def test_scram_in_saslauthenticate_requests(mechanism, password, ok):
    final = scram_final(mechanism, password)
    bodies, closed, principals, _ = conversation([
        (HANDSHAKE, 1, {"mechanism": mechanism}),
        (AUTHENTICATE, 2, {"auth_bytes": b"n,,n=carol,r=client-nonce"}),
        (AUTHENTICATE, 2, lambda bodies: {"auth_bytes": final(bytes(bodies[1].auth_bytes))}),
        (METADATA, 12, {"topics": None})])
    assert bodies[1].error_code == 0 and bytes(bodies[1].auth_bytes).startswith(
        b"r=client-nonce")
    if ok:
        assert bodies[2].error_code == 0 and bytes(bodies[2].auth_bytes).startswith(b"v=")
        assert bodies[3].cluster_id == "c" and principals == {"User:carol": 1}
    else:
        assert bodies[2].error_code == 58 and bodies[2].error_message == (
            "Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}") and closed


def test_kip_368_each_mechanism_has_its_own_session_lifetime():
    """listener.name.<l>.<mechanism>.connections.max.reauth.ms for the mechanism chosen,
    the broker's connections.max.reauth.ms for the others."""
    config = {"listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": 700,
              "connections.max.reauth.ms": 3000}
    final = scram_final("SCRAM-SHA-256", "carol-scram")
    bodies, _, _, _ = conversation([
        (HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}),
        (AUTHENTICATE, 2, {"auth_bytes": b"n,,n=carol,r=client-nonce"}),
        (AUTHENTICATE, 2, lambda bodies: {"auth_bytes": final(bytes(bodies[1].auth_bytes))})],
        **config)
    assert bodies[2].error_code == 0 and bodies[2].session_lifetime.total_seconds() == 0.7
    bodies, _, _, _ = conversation(LOGIN, **config)
    assert bodies[1].error_code == 0 and bodies[1].session_lifetime.total_seconds() == 3


def test_scram_in_bare_tokens_after_handshake_v0():
    final = scram_final("SCRAM-SHA-256", "carol-scram")
    bodies, closed, _, _ = conversation([
        (HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"}),
        (None, None, b"n,,n=carol,r=client-nonce"),
        (None, None, lambda bodies: final(bodies[1])),
        (METADATA, 12, {"topics": None})])
    assert bodies[2].startswith(b"v=") and bodies[3].cluster_id == "c" and not closed
