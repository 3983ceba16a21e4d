"""SSL listeners (``actors.broker.listener.tls``): Kafka's ssl.* settings read as Kafka
reads them (PEM in files or in the settings, PKCS12, an encrypted key), ssl.client.auth, a
connection's principal through ssl.principal.mapping.rules, and zero-copy fetch answers
copied instead over TLS, as Kafka's are; real sockets, one process."""
from __future__ import annotations

import asyncio
import ssl
import struct

import pytest

from actors.broker.config import ClusterConfig, for_listener
from actors.broker.listener.api_versions import SUPPORTED
from actors.broker.listener.file_regions import open_region
from actors.broker.listener.kafka_apis import KafkaApis
from actors.broker.listener.socket_server import SocketServer
from actors.broker.listener.tls import listener_tls
from protocols.kafka.ssl_context import server_context
from protocols.errors import InvalidConfigError
from protocols.kafka.listeners import parse_listeners, parse_protocol_map
from tests import tls_certs
from tests.actors.broker.listener.test_file_regions import DATA, region_of, serve_once
from tests.actors.broker.listener.test_socket_server import IMAGE, no_creation, read_frame
from tests.kafka_wire import request_bytes


@pytest.fixture(scope="module")
def pki():
    ca = tls_certs.authority()
    return {"ca": ca, "broker": tls_certs.issue(ca, "CN=broker-0,O=rafka", server=True),
            "alice": tls_certs.issue(ca, "CN=alice,OU=ServiceUsers,O=Org"),
            "stranger": tls_certs.issue(tls_certs.authority("CN=other CA"), "CN=mallory")}


def ssl_config(**given) -> dict:
    return for_listener(ClusterConfig.parse(given).broker, "Listener SSL")


def client_context(pki, who: str | None = None, tmp_path=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=pki["ca"].cert_pem().decode())
    if who is not None:
        chain = tmp_path / f"{who}.pem"
        chain.write_bytes(pki[who].cert_pem() + pki[who].key_pem())
        context.load_cert_chain(str(chain))
    return context


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> str | None:
    """The subject of the client's certificate as the server saw it, over a real socket."""
    from actors.broker.listener.tls import peer_subject

    async def run():
        seen = []

        async def handle(reader, writer):
            seen.append(peer_subject(writer.get_extra_info("ssl_object")))
            writer.write(b"ok")
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                       server_hostname="127.0.0.1")
        if await reader.read() != b"ok":   # TLS 1.3: a refused client learns it reading
            raise ConnectionError("the server closed the connection in its handshake")
        writer.close()
        server.close()
        return seen[0]
    return asyncio.run(run())


def test_a_pem_keystore_file_holds_key_and_chain(pki, tmp_path):
    keystore = tls_certs.write(tmp_path / "broker.pem",
                               pki["broker"].key_pem() + pki["broker"].cert_pem())
    context = server_context(ssl_config(**{"ssl.keystore.type": "PEM",
                                           "ssl.keystore.location": keystore}), "Listener SSL")
    assert handshake(context, client_context(pki)) is None   # ssl.client.auth=none


def test_pem_in_the_settings_with_an_encrypted_key(pki, tmp_path):
    cfg = ssl_config(**{"ssl.keystore.type": "PEM",
                        "ssl.keystore.key": pki["broker"].key_pem("s3cret").decode(),
                        "ssl.keystore.certificate.chain": pki["broker"].cert_pem().decode(),
                        "ssl.key.password": "s3cret",
                        "ssl.truststore.type": "PEM",
                        "ssl.truststore.certificates": pki["ca"].cert_pem().decode(),
                        "ssl.client.auth": "required"})
    assert handshake(server_context(cfg, "Listener SSL"), client_context(pki, "alice", tmp_path)) == \
        "CN=alice,OU=ServiceUsers,O=Org"
    cfg["ssl.key.password"] = ClusterConfig.parse({"ssl.key.password": "wrong"}).broker[
        "ssl.key.password"]
    with pytest.raises(InvalidConfigError, match="Listener SSL: cannot read the keystore's "
                                                 "private key"):
        server_context(cfg, "Listener SSL")


def test_pkcs12_stores_and_kafkas_default_type_jks_reading_a_pkcs12_file(pki, tmp_path):
    keystore = tls_certs.write(tmp_path / "broker.p12", pki["broker"].pkcs12("kpass", pki["ca"]))
    truststore = tls_certs.write(tmp_path / "ca.p12", pki["ca"].pkcs12("tpass"))
    for store_type in ("PKCS12", "JKS"):
        cfg = ssl_config(**{"ssl.keystore.type": store_type, "ssl.keystore.location": keystore,
                            "ssl.keystore.password": "kpass",
                            "ssl.truststore.type": store_type,
                            "ssl.truststore.location": truststore,
                            "ssl.truststore.password": "tpass",
                            "ssl.client.auth": "requested"})
        context = server_context(cfg, "Listener SSL")
        assert handshake(context, client_context(pki, "alice", tmp_path)) == \
            "CN=alice,OU=ServiceUsers,O=Org"
        assert handshake(context, client_context(pki)) is None   # requested: may show none
    with pytest.raises(InvalidConfigError, match="cannot open the keystore .* as PKCS12"):
        server_context(ssl_config(**{"ssl.keystore.type": "PKCS12",
                                     "ssl.keystore.location": keystore,
                                     "ssl.keystore.password": "nope"}), "Listener SSL")


def test_settings_that_cannot_make_a_listener_say_which_and_why(pki, tmp_path):
    jks = tls_certs.write(tmp_path / "broker.jks", b"\xfe\xed\xfe\xed" + b"\0" * 64)
    cases = [
        ({}, "needs a keystore"),
        ({"ssl.keystore.location": jks, "ssl.keystore.password": "x"},
         "is a JKS keystore, which this broker cannot read; convert it to PKCS12"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "missing.pem")},
         "cannot read the keystore .*missing.pem: No such file"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.key": pki["broker"].key_pem().decode()},
         "without ssl.keystore.certificate.chain"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.location": jks,
          "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_NO_SUCH_SUITE"},
         "ssl.cipher.suites names TLS_NO_SUCH_SUITE, which this broker's OpenSSL does not"),
    ]
    for given, error in cases:
        with pytest.raises(InvalidConfigError, match=error):
            server_context(ssl_config(**given), "Listener SSL")
    with pytest.raises(InvalidConfigError, match="ssl.client.auth"):
        ClusterConfig.parse({"ssl.client.auth": "sometimes"})
    from actors.replica.channel import channel_tls
    with pytest.raises(InvalidConfigError, match=r"the replicas' channel \(inter-broker "
                                                 r"listener SSL, SSL\): TLS needs a keystore"):
        channel_tls(ClusterConfig.parse({"security.inter.broker.protocol": "SSL"}).broker)
    with pytest.raises(InvalidConfigError, match="ssl.principal.mapping.rules"):
        listener_tls({**ClusterConfig.parse({"ssl.principal.mapping.rules": "DEFAUL"}).broker},
                     parse_listeners("SSL://:0"))


def test_secrets_print_as_hidden():
    broker = ClusterConfig.parse({"ssl.keystore.password": "s3cret",
                                  "listener.name.external.ssl.key.password": "s3cret"}).broker
    assert "s3cret" not in repr(broker) and "s3cret" not in str(broker)
    assert broker["ssl.keystore.password"].value == "s3cret"
    assert broker["listener.name.external.ssl.key.password"].value == "s3cret"


def test_a_listeners_own_settings_come_first():
    broker = ClusterConfig.parse({"ssl.client.auth": "none",
                                  "listener.name.mtls.ssl.client.auth": "required"}).broker
    assert for_listener(broker, "MTLS")["ssl.client.auth"] == "required"
    assert for_listener(broker, "Listener SSL")["ssl.client.auth"] == "none"
    with pytest.raises(InvalidConfigError, match="ssl.client.auth"):
        ClusterConfig.parse({"listener.name.mtls.ssl.client.auth": "always"})
    with pytest.raises(InvalidConfigError, match="Unknown configuration"):
        ClusterConfig.parse({"listener.name.mtls.ssl.keystore.locaton": "x"})


def test_mutual_tls_listener_names_each_connection_by_its_certificate(pki, tmp_path):
    """Two SSL listeners of one broker (listener.security.protocol.map), the second
    requiring a client certificate, its subject mapped by ssl.principal.mapping.rules to
    the principal Kafka's DefaultKafkaPrincipalBuilder gives."""
    keystore = tls_certs.write(tmp_path / "broker.pem",
                               pki["broker"].key_pem() + pki["broker"].cert_pem())
    broker = ClusterConfig.parse({
        "listener.security.protocol.map": "SSL:SSL,MTLS:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pki["ca"].cert_pem().decode(),
        "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT"}).broker
    listeners = parse_listeners("SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
                                protocol_map=parse_protocol_map(
                                    broker["listener.security.protocol.map"]))

    async def run():
        apis = KafkaApis(0, lambda: IMAGE, no_creation, auto_create=False)
        s = SocketServer(0, listeners, apis.handle, SUPPORTED, 104_857_600, 60_000,
                         listener_tls(broker, listeners))
        ports = await s.start()
        s.enable_request_processing()

        async def api_versions(port, context):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
            writer.write(request_bytes(18, 3, {}, 7))
            frame = await read_frame(reader)
            return struct.unpack_from(">i", frame)[0], writer

        anonymous = await api_versions(ports["SSL"], client_context(pki))
        alice = await api_versions(ports["MTLS"], client_context(pki, "alice", tmp_path))
        assert anonymous[0] == alice[0] == 7
        assert s.principals == {"User:ANONYMOUS": 1, "User:alice": 1}
        # No certificate, or one no trusted CA signed: the handshake fails (TLS 1.3 tells
        # the client at its first read), and the broker carries on.
        for who in (None, "stranger"):
            context = client_context(pki, who, tmp_path)
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                await api_versions(ports["MTLS"], context)
        # A plaintext client on an SSL port: its request is not a TLS hello, the broker
        # closes the connection without an answer.
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["SSL"])
        writer.write(request_bytes(18, 3, {}, 8))
        try:
            answer = await asyncio.wait_for(reader.read(), 10)
        except ConnectionResetError:
            answer = b""
        assert answer == b""
        assert s.principals == {"User:ANONYMOUS": 1, "User:alice": 1}
        await s.stop()
    asyncio.run(run())


def test_a_fetch_answers_file_regions_are_copied_over_tls(pki, tmp_path):
    """Zero-copy needs the socket to take the file's bytes as they are; TLS must encrypt
    them, so asyncio's sendfile copies through the TLS transport (as Kafka's does)."""
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(DATA)
    keystore = tls_certs.write(tmp_path / "broker.pem",
                               pki["broker"].key_pem() + pki["broker"].cert_pem())
    server = server_context(ssl_config(**{"ssl.keystore.type": "PEM",
                                          "ssl.keystore.location": keystore}), "Listener SSL")
    client = client_context(pki)
    client.check_hostname = False
    first = open_region(region_of(segment, 0, 5000))
    second = open_region(region_of(segment, 9000, 7000))
    got, failed, sent = serve_once([b"head", first, b"middle" * 20_000, second, b"tail"],
                                   tls=(server, client))
    assert failed == [] and sent == [12_000]
    assert got == b"head" + DATA[:5000] + b"middle" * 20_000 + DATA[9000:16000] + b"tail"


def test_without_a_truststore_client_auth_checks_against_the_platforms_cas(pki, tmp_path):
    """As Kafka falls back to the JVM's trusted CAs: a certificate from the test's own CA is
    not among them."""
    context = server_context(ssl_config(**{
        "ssl.keystore.type": "PEM", "ssl.keystore.key": pki["broker"].key_pem().decode(),
        "ssl.keystore.certificate.chain": pki["broker"].cert_pem().decode(),
        "ssl.client.auth": "required"}), "Listener SSL")
    with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
        handshake(context, client_context(pki, "alice", tmp_path))


def test_cipher_suites_by_kafkas_names_and_tls13_off_without_its_suites(pki, tmp_path):
    keystore = tls_certs.write(tmp_path / "broker.pem",
                               pki["broker"].key_pem() + pki["broker"].cert_pem())
    from protocols.kafka.ssl_context import openssl_cipher
    assert openssl_cipher("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == \
        "ECDHE-RSA-AES128-GCM-SHA256"
    assert openssl_cipher("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == \
        "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert openssl_cipher("TLS_RSA_WITH_AES_256_CBC_SHA") == "AES256-SHA"
    context = server_context(ssl_config(**{
        "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}), "Listener SSL")
    assert [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"] == \
        ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    assert handshake(context, client_context(pki)) is None      # the EC key's suite, TLSv1.2
    only13 = client_context(pki)
    only13.minimum_version = ssl.TLSVersion.TLSv1_3
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(context, only13)


def test_a_listeners_enabled_protocols_refuse_a_client_of_another(pki, tmp_path):
    """ssl.enabled.protocols=TLSv1.3 on a listener: a TLSv1.2-only client gets no
    connection, a TLSv1.3 one does; Kafka's default (TLSv1.2,TLSv1.3) takes either."""
    keystore = tls_certs.write(tmp_path / "broker.pem",
                               pki["broker"].key_pem() + pki["broker"].cert_pem())
    store = {"ssl.keystore.type": "PEM", "ssl.keystore.location": keystore}
    only12 = client_context(pki)
    only12.maximum_version = ssl.TLSVersion.TLSv1_2
    tls13 = server_context(ssl_config(**store, **{"ssl.enabled.protocols": "TLSv1.3"}),
                           "Listener SSL")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(tls13, only12)
    assert handshake(tls13, client_context(pki)) is None
    assert handshake(server_context(ssl_config(**store), "Listener SSL"), only12) is None


def test_subjects_are_written_as_javas_x500principal_writes_them(tmp_path):
    """Kafka maps the name Java's X500Principal.getName() gives: checked against Java itself
    (the JDK the Kafka tools' tests use), for standard keywords, escapes and attributes Java
    writes as an OID and hex DER (emailAddress, serialNumber)."""
    import shutil
    import subprocess

    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from actors.broker.listener.tls import rfc2253
    name = x509.Name([
        x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "com"),
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Org+<x>;"),
        x509.NameAttribute(NameOID.EMAIL_ADDRESS, "alice@example.com"),
        x509.NameAttribute(NameOID.SERIAL_NUMBER, "1234"),
        x509.NameAttribute(NameOID.COMMON_NAME, ' a#b=c, d"\u00e9 ')])
    der = tmp_path / "name.der"
    der.write_bytes(name.public_bytes())
    source = tmp_path / "Name.java"
    source.write_text(
        "public class Name { public static void main(String[] a) throws Exception {"
        " System.out.print(new javax.security.auth.x500.X500Principal(java.nio.file.Files"
        ".readAllBytes(java.nio.file.Path.of(a[0]))).getName()); } }")
    java = shutil.which("java")
    assert java, "java is not on PATH (Java 17 is part of this machine's set-up)"
    out = subprocess.run([java, str(source), str(der)], capture_output=True, timeout=120,
                         check=True).stdout.decode()
    assert rfc2253(name) == out
    assert out.startswith("CN=\\ a\\#b\\=c\\, d\\\"\u00e9\\ ,2.5.4.5=#130431323334,")


def test_relative_store_locations_are_made_absolute_where_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    broker = ClusterConfig.parse({"ssl.keystore.location": "certs/broker.p12",
                                  "listener.name.mtls.ssl.truststore.location": "ca.p12"}).broker
    assert broker["ssl.keystore.location"] == str(tmp_path / "certs/broker.p12")
    assert broker["listener.name.mtls.ssl.truststore.location"] == str(tmp_path / "ca.p12")


def test_sasl_ssl_asks_for_a_certificate_only_by_its_own_setting(pki, tmp_path):
    """As Kafka's ChannelBuilders: SASL authenticates a SASL_SSL client, so a broker-wide
    ssl.client.auth does not apply there; listener.name.<listener>.ssl.client.auth does."""
    keystore = tls_certs.write(tmp_path / "broker.pem",
                               pki["broker"].key_pem() + pki["broker"].cert_pem())
    given = {"ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
             "ssl.truststore.type": "PEM",
             "ssl.truststore.certificates": pki["ca"].cert_pem().decode(),
             "ssl.client.auth": "required"}
    listeners = parse_listeners("SSL://:0,SASL_SSL://:0")
    contexts = listener_tls(ClusterConfig.parse(given).broker, listeners)
    assert contexts["SSL"][0].verify_mode == ssl.CERT_REQUIRED
    assert contexts["SASL_SSL"][0].verify_mode == ssl.CERT_NONE
    own = ClusterConfig.parse({**given, "listener.name.sasl_ssl.ssl.client.auth": "required"})
    assert listener_tls(own.broker, listeners)["SASL_SSL"][0].verify_mode == ssl.CERT_REQUIRED
