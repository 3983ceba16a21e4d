"""SSL and SASL listeners on a real cluster (issue 43, steps 1 and 2): Kafka's own clients
over TLS with a CA made in the test: confluent-kafka (librdkafka) producing and consuming
(the fetch answers' file regions copied through TLS), mutual TLS naming each connection by
its certificate through ssl.principal.mapping.rules, a client with no certificate or an
untrusted one refused; SASL/PLAIN on SASL_PLAINTEXT and SASL_SSL with users from the
listener's JAAS config (confluent-kafka, kafka-python), a wrong password refused; and Kafka's
Java tools with a client.properties (``--command-config``), as Kafka users configure them.
The replica hosts' own channel over TLS (``security.inter.broker.protocol=SSL``): followers,
the listeners and rafka's own clients reach the hosts through it. One cluster, five
listeners."""
from __future__ import annotations

import pytest
import ray

from tests import tls_certs
from tests.runtime.conftest import cluster_with
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca = tls_certs.authority()
    broker = tls_certs.issue(ca, "CN=rafka-broker,O=rafka", server=True)
    alice = tls_certs.issue(ca, "CN=alice,OU=ServiceUsers,O=Org")
    mallory = tls_certs.issue(tls_certs.authority("CN=other CA"), "CN=mallory,OU=ServiceUsers")
    return {
        "root": root,
        "ca.pem": tls_certs.write(root / "ca.pem", ca.cert_pem()),
        "broker.pem": tls_certs.write(root / "broker.pem",
                                      broker.key_pem() + broker.cert_pem()),
        "broker.p12": tls_certs.write(root / "broker.p12", broker.pkcs12("changeit", ca)),
        "alice.crt": tls_certs.write(root / "alice.crt", alice.cert_pem()),
        "alice.key": tls_certs.write(root / "alice.key", alice.key_pem()),
        "alice.pem": tls_certs.write(root / "alice.pem", alice.key_pem() + alice.cert_pem()),
        "mallory.crt": tls_certs.write(root / "mallory.crt", mallory.cert_pem()),
        "mallory.key": tls_certs.write(root / "mallory.key", mallory.key_pem()),
    }


@pytest.fixture(scope="module")
def cluster(ray_session, pki, tmp_path_factory):
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        # KIP-368 on one listener: its sessions last 2 s unless renewed.
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": 2000,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki["broker.pem"],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki["ca.pem"],
        # The mutual-TLS listener's own keystore (PKCS12) and client authentication.
        "listener.name.mtls.ssl.keystore.type": "PKCS12",
        "listener.name.mtls.ssl.keystore.location": pki["broker.p12"],
        "listener.name.mtls.ssl.keystore.password": "changeit",
        "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT",
        # The replica hosts' channel over TLS too, with the broker's keystore.
        "security.inter.broker.protocol": "SSL",
    }
    with cluster_with(tmp_path_factory.mktemp("tls"), config) as c:
        yield c


def ssl_client(cluster, pki, listener: str = "SSL", who: str | None = None) -> dict:
    config = {"bootstrap.servers": cluster.listener_addresses(listener),
              "security.protocol": "SSL", "ssl.ca.location": pki["ca.pem"]}
    if who is not None:
        config.update({"ssl.certificate.location": pki[f"{who}.crt"],
                       "ssl.key.location": pki[f"{who}.key"]})
    return config


def principals(cluster) -> dict:
    out: dict = {}
    for b in sorted(cluster.metadata()["brokers"]):
        for name, n in ray.get(cluster.broker(b).describe.remote())[
                "kafka_connections_by_principal"].items():
            out[name] = out.get(name, 0) + n
    return out


def test_confluent_kafka_produces_and_consumes_over_ssl(cluster, pki):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(ssl_client(cluster, pki))
    for f in admin.create_topics([NewTopic("tls-events", 3, 3)]).values():
        f.result(30)
    # Every broker advertises its SSL listener to a client that came in on it.
    brokers = admin.list_topics(timeout=30).brokers
    assert {f"{b.host}:{b.port}" for b in brokers.values()} == \
        set(cluster.listener_addresses("SSL").split(","))
    producer = Producer({**ssl_client(cluster, pki), "acks": "all"})
    sent = {f"v{i}".encode() * (1 + i % 40) for i in range(2000)}
    for value in sent:
        producer.produce("tls-events", value, key=value[:4])
    assert producer.flush(60) == 0
    consumer = Consumer({**ssl_client(cluster, pki), "group.id": "tls-readers",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["tls-events"])
    got: list = []
    wait_until(lambda: got.extend(m.value() for m in consumer.consume(500, 1)
                                  if m.error() is None) or len(got) >= len(sent), 90,
               "every record read back over TLS")
    consumer.close()
    assert sorted(got) == sorted(sent)
    # The fetch answers' records came from the segment files, copied through TLS.
    assert sum(ray.get(cluster.broker(b).describe.remote())["kafka_fetch_bytes_sent_from_files"]
               for b in cluster.metadata()["brokers"]) > 0


def test_mutual_tls_names_the_client_by_its_certificate_and_refuses_others(cluster, pki):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    alice = AdminClient(ssl_client(cluster, pki, "MTLS", "alice"))
    assert alice.list_topics(timeout=30).brokers
    wait_until(lambda: principals(cluster).get("User:alice", 0) >= 1, 30,
               "alice's connection named User:alice (ssl.principal.mapping.rules)")
    for who in (None, "mallory"):
        refused = AdminClient({**ssl_client(cluster, pki, "MTLS", who),
                               "socket.connection.setup.timeout.ms": 5000})
        with pytest.raises(KafkaException):
            refused.list_topics(timeout=8)
    assert "User:mallory" not in principals(cluster)


def test_kafka_java_tools_over_ssl_and_mutual_tls(cluster, pki):
    from tests.runtime.test_kafka_java_tools import KafkaTools
    from benchmarks.kafka_peer import classpath

    root = pki["root"]
    ssl_props = root / "ssl.properties"
    ssl_props.write_text("security.protocol=SSL\nssl.truststore.type=PEM\n"
                         f"ssl.truststore.location={pki['ca.pem']}\n")
    mtls_props = root / "mtls.properties"
    mtls_props.write_text(ssl_props.read_text() + "ssl.keystore.type=PEM\n"
                          f"ssl.keystore.location={pki['alice.pem']}\n")
    tools = KafkaTools(classpath(), root, cluster.listener_addresses("SSL"))
    tools.tool("TopicCommand", "--command-config", str(ssl_props), "--create", "--topic",
               "tls-java", "--partitions", "2", "--replication-factor", "2")
    mtls = KafkaTools(classpath(), root, cluster.listener_addresses("MTLS"))
    listed = mtls.tool("TopicCommand", "--command-config", str(mtls_props), "--list").stdout
    assert "tls-java" in listed.split()
    # Without its certificate the Java client cannot get past the handshake.
    refused = mtls.tool("TopicCommand", "--command-config", str(ssl_props), "--list",
                        check=False, timeout=120)
    assert refused.returncode != 0


def test_the_keystore_password_is_hidden_wherever_the_settings_show(cluster, pki):
    import rafka
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
    from protocols.config import Password
    for c in (cluster, rafka.Cluster.connect(cluster.name)):
        secret = c.config["listener.name.mtls.ssl.keystore.password"]
        assert isinstance(secret, Password) and secret.value == "changeit"
        assert "changeit" not in repr(c.config) and "changeit" not in str(c.config)
    # A broker's DescribeConfigs (kafka-configs.sh --describe --entity-type brokers) marks
    # secrets sensitive and never sends their values, as Kafka does.
    admin = AdminClient(ssl_client(cluster, pki))
    broker = sorted(cluster.metadata()["brokers"])[0]
    [future] = admin.describe_configs([ConfigResource(ResourceType.BROKER,
                                                      str(broker))]).values()
    entries = future.result(30)
    for name in ("listener.name.mtls.ssl.keystore.password",
                 "listener.name.sasl_ssl.plain.sasl.jaas.config", "ssl.keystore.password"):
        assert entries[name].is_sensitive and entries[name].value is None, name
    assert not entries["ssl.keystore.location"].is_sensitive
    assert entries["ssl.keystore.location"].value == pki["broker.pem"]
    assert entries["security.inter.broker.protocol"].value == "SSL"
    assert entries["ssl.client.auth"].is_default   # not set: Kafka's DEFAULT_CONFIG
    assert not any("changeit" in (e.value or "") or "alice-secret" in (e.value or "")
                   for e in entries.values())


def sasl_client(cluster, pki, listener: str, user: str = "alice",
                password: str = "alice-secret") -> dict:
    config = {"bootstrap.servers": cluster.listener_addresses(listener),
              "security.protocol": listener, "sasl.mechanism": "PLAIN",
              "sasl.username": user, "sasl.password": password}
    if listener == "SASL_SSL":
        config["ssl.ca.location"] = pki["ca.pem"]
    return config


def closed_for_authentication(cluster) -> int:
    return sum(ray.get(cluster.broker(b).describe.remote())["kafka_connections_closed"].get(
        "authentication", 0) for b in cluster.metadata()["brokers"])


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_kafka_with_sasl_plain(cluster, pki, listener):
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"sasl-{listener.lower()}"
    admin = AdminClient(sasl_client(cluster, pki, listener))
    for f in admin.create_topics([NewTopic(topic, 2, 2)]).values():
        f.result(30)
    assert {f"{b.host}:{b.port}" for b in admin.list_topics(timeout=30).brokers.values()} == \
        set(cluster.listener_addresses(listener).split(","))
    producer = Producer({**sasl_client(cluster, pki, listener), "acks": "all"})
    for i in range(200):
        producer.produce(topic, f"r{i}".encode())
    assert producer.flush(60) == 0
    consumer = Consumer({**sasl_client(cluster, pki, listener, "admin", "admin-secret"),
                         "group.id": f"{topic}-readers", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list = []
    wait_until(lambda: got.extend(m.value() for m in consumer.consume(200, 1)
                                  if m.error() is None) or len(got) >= 200, 90,
               "every record read back")
    assert sorted(got) == sorted(f"r{i}".encode() for i in range(200))
    seen = principals(cluster)
    assert seen.get("User:admin", 0) >= 1 and seen.get("User:alice", 0) >= 1
    consumer.close()
    before = closed_for_authentication(cluster)
    wrong = AdminClient({**sasl_client(cluster, pki, listener, "alice", "guess"),
                         "socket.connection.setup.timeout.ms": 5000})
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=8)
    assert closed_for_authentication(cluster) > before


def test_kafka_python_with_sasl_plain(cluster, pki):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    config = dict(bootstrap_servers=cluster.listener_addresses("SASL_PLAINTEXT").split(","),
                  security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                  sasl_plain_username="alice", sasl_plain_password="alice-secret")
    producer = KafkaProducer(acks="all", **config)
    producer.send("sasl-kafka-python", b"hello").get(60)
    producer.close()
    consumer = KafkaConsumer(**config, auto_offset_reset="earliest")
    tp = TopicPartition("sasl-kafka-python", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records = consumer.poll(timeout_ms=20_000).get(tp, [])
    consumer.close()
    assert [r.value for r in records] == [b"hello"]


def test_kafka_python_over_ssl_and_a_plaintext_client_refused(cluster, pki):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    config = dict(bootstrap_servers=cluster.listener_addresses("SSL").split(","),
                  security_protocol="SSL", ssl_cafile=str(pki["ca.pem"]))
    producer = KafkaProducer(acks="all", **config)
    for i in range(20):
        producer.send("ssl-kafka-python", f"r{i}".encode(), partition=0)
    producer.flush(60)
    producer.close()
    consumer = KafkaConsumer(**config, auto_offset_reset="earliest")
    tp = TopicPartition("ssl-kafka-python", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records: list = []
    wait_until(lambda: records.extend(consumer.poll(timeout_ms=2000).get(tp, [])) or
               len(records) >= 20, 60, "kafka-python reading over SSL")
    consumer.close()
    assert [r.value for r in records] == [f"r{i}".encode() for i in range(20)]
    # A client speaking plaintext to the SSL listener gets no answer it can read.
    plaintext = AdminClient({"bootstrap.servers": cluster.listener_addresses("SSL"),
                             "socket.connection.setup.timeout.ms": 5000})
    with pytest.raises(KafkaException):
        plaintext.list_topics(timeout=8)


def admin_properties(pki):
    """A Java client's settings to sign in as admin with SASL/PLAIN over SASL_SSL."""
    props = pki["root"] / "sasl-admin.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki['ca.pem']}\n")
    return props


def test_kafka_java_tools_over_sasl_ssl(cluster, pki):
    from benchmarks.kafka_peer import classpath
    from tests.runtime.test_kafka_java_tools import KafkaTools

    root = pki["root"]
    props = admin_properties(pki)
    tools = KafkaTools(classpath(), root, cluster.listener_addresses("SASL_SSL"))
    tools.tool("TopicCommand", "--command-config", str(props), "--create", "--topic",
               "sasl-java", "--partitions", "1", "--replication-factor", "1")
    assert "sasl-java" in tools.tool("TopicCommand", "--command-config", str(props),
                                     "--list").stdout.split()
    wrong = root / "wrong.properties"
    wrong.write_text(props.read_text().replace('password="admin-secret"', 'password="x"'))
    refused = tools.tool("TopicCommand", "--command-config", str(wrong), "--list",
                         check=False, timeout=120)
    assert refused.returncode != 0 and "Authentication failed" in refused.stdout + \
        refused.stderr


def test_librdkafka_re_authenticates_before_its_session_ends(cluster, pki):
    """connections.max.reauth.ms=2000 on SASL_PLAINTEXT: a producer sending for 7 s renews
    its sessions (KIP-368, librdkafka 2.2+) rather than having its connections closed."""
    import time

    from confluent_kafka import Producer

    def expired() -> int:
        return sum(ray.get(cluster.broker(b).describe.remote())["kafka_connections_closed"]
                   .get("session-expired", 0) for b in cluster.metadata()["brokers"])
    before = expired()
    producer = Producer({**sasl_client(cluster, pki, "SASL_PLAINTEXT"), "acks": "all",
                         "linger.ms": 50})
    delivered: list = []
    end = time.monotonic() + 7
    i = 0
    while time.monotonic() < end:
        producer.produce("sasl-reauth", f"r{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0.05)
        i += 1
    assert producer.flush(60) == 0
    assert len(delivered) == i and not any(delivered)
    assert expired() == before


def test_scram_users_made_by_rafka_and_by_kafka_configs_sign_in(cluster, pki):
    """SCRAM credentials in the cluster's metadata (KIP-554): alice's set with rafka's
    Admin (SCRAM-SHA-256), bob's with Kafka's own kafka-configs.sh over SASL_SSL
    (SCRAM-SHA-512, AlterUserScramCredentials); both sign in with librdkafka, a wrong
    password or mechanism does not; ``rafka configs`` describes and deletes them, and a
    deleted credential no longer signs in."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from benchmarks.kafka_peer import classpath
    from tests.runtime.test_kafka_java_tools import KafkaTools
    from tests.runtime.test_tools import rafka_cli

    admin = cluster.admin()
    assert admin.alter_user_scram_credentials([("alice", "SCRAM-SHA-256", "alice-scram",
                                                8192)]) == {"alice": None}
    root = pki["root"]
    props = admin_properties(pki)
    tools = KafkaTools(classpath(), root, cluster.listener_addresses("SASL_SSL"))
    tools.tool("kafka.admin.ConfigCommand", "--command-config", str(props), "--alter",
               "--entity-type", "users", "--entity-name", "bob", "--add-config",
               "SCRAM-SHA-512=[password=bob-scram]")
    assert admin.describe_user_scram_credentials() == {
        "alice": [("SCRAM-SHA-256", 8192)], "bob": [("SCRAM-SHA-512", 4096)]}
    # kafka-configs.sh describes a user's quotas (DescribeClientQuotas: none) and SCRAM
    # credentials.
    described = tools.tool("kafka.admin.ConfigCommand", "--command-config", str(props),
                           "--describe", "--entity-type", "users", "--entity-name",
                           "bob").stdout
    assert "SCRAM credential configs for user-principal 'bob' are " \
           "SCRAM-SHA-512=iterations=4096" in described

    def signs_in(listener, mechanism, user, password) -> bool:
        client = AdminClient({**sasl_client(cluster, pki, listener, user, password),
                              "sasl.mechanism": mechanism,
                              "socket.connection.setup.timeout.ms": 5000})
        try:
            return bool(client.list_topics(timeout=10).brokers)
        except KafkaException:
            return False
    assert signs_in("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-scram")
    assert signs_in("SASL_SSL", "SCRAM-SHA-256", "alice", "alice-scram")
    assert signs_in("SASL_SSL", "SCRAM-SHA-512", "bob", "bob-scram")
    # Kafka's Java client signing in with SCRAM-SHA-512 over SASL_SSL.
    scram_props = root / "bob-scram.properties"
    scram_props.write_text(props.read_text().replace("sasl.mechanism=PLAIN", "sasl.mechanism="
                                                     "SCRAM-SHA-512").replace(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret"',
        'org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="bob" password="bob-scram"'))
    listed = tools.tool("TopicCommand", "--command-config", str(scram_props), "--list")
    assert listed.returncode == 0
    # rafka configs --add-config, as kafka-configs.sh takes it.
    out = rafka_cli(cluster, "configs", "--alter", "--entity-type", "users", "--entity-name",
                    "carol", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=c-scram]")
    assert out.returncode == 0, out.stdout + out.stderr
    assert signs_in("SASL_SSL", "SCRAM-SHA-256", "carol", "c-scram")
    assert not signs_in("SASL_SSL", "SCRAM-SHA-256", "carol", "alice-scram")
    assert admin.describe_user_scram_credentials(["carol"]) == {
        "carol": [("SCRAM-SHA-256", 8192)]}
    assert not signs_in("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-secret")
    assert not signs_in("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "alice-scram")
    out = rafka_cli(cluster, "configs", "--describe", "--entity-type", "users",
                    "--entity-name", "bob")
    assert out.stdout == "SCRAM credential configs for user-principal 'bob' are " \
                         "SCRAM-SHA-512=iterations=4096\n", out.stdout + out.stderr
    out = rafka_cli(cluster, "configs", "--alter", "--entity-type", "users",
                    "--entity-name", "bob", "--delete-config", "SCRAM-SHA-512")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not signs_in("SASL_SSL", "SCRAM-SHA-512", "bob", "bob-scram")
    assert admin.describe_user_scram_credentials() == {"alice": [("SCRAM-SHA-256", 8192)],
                                                       "carol": [("SCRAM-SHA-256", 8192)]}


def test_without_an_authorizer_acls_are_refused_security_disabled(cluster):
    """No authorizer.class.name: CreateAcls and DeleteAcls answer each entry, and
    DescribeAcls the request, SECURITY_DISABLED, as Kafka does (the ACLs would guard
    nothing)."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType)

    admin = AdminClient({"bootstrap.servers": cluster.listener_addresses("PLAINTEXT")})
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(Exception, match="SECURITY_DISABLED"):
        admin.create_acls([binding])[binding].result(30)
    selector = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    with pytest.raises(Exception, match="SECURITY_DISABLED"):
        list(admin.delete_acls([selector]).values())[0].result(30)


def test_the_replicas_channel_is_tls_for_followers_listeners_and_rafka_clients(cluster):
    """security.inter.broker.protocol=SSL: every host serves its channel over TLS with the
    broker's keystore; RF=3 acks=all records reach every follower (their fetches over TLS),
    rafka's producer and consumer and a Kafka client on a PLAINTEXT listener read and write
    through it, and a caller speaking plaintext to a host gets nowhere."""
    import socket

    import rafka
    from actors.replica.channel import API_HELLO, encode_frame
    from confluent_kafka import Consumer, Producer

    cluster.admin().create_topics([rafka.NewTopic("channel-tls", 3, 3)])
    with rafka.Producer(cluster, {"acks": "all", "linger.ms": 2}) as producer:
        for f in [producer.send("channel-tls", f"r{i}".encode(), key=f"k{i}".encode())
                  for i in range(300)]:
            f.result(30)
    kafka_producer = Producer({"bootstrap.servers": cluster.listener_addresses("PLAINTEXT"),
                               "acks": "all"})
    for i in range(300, 400):
        kafka_producer.produce("channel-tls", f"r{i}".encode())
    assert kafka_producer.flush(60) == 0

    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("channel-tls", p) for p in range(3)])
    got: list = []
    wait_until(lambda: got.extend(r.value for r in consumer.poll(500)) or len(got) >= 400,
               60, "rafka's consumer reads every record over the TLS channel")
    consumer.close()
    assert sorted(got) == sorted(f"r{i}".encode() for i in range(400))
    kafka_consumer = Consumer({"bootstrap.servers": cluster.listener_addresses("PLAINTEXT"),
                               "group.id": "channel-tls", "auto.offset.reset": "earliest"})
    kafka_consumer.subscribe(["channel-tls"])
    seen: list = []
    wait_until(lambda: seen.extend(m.value() for m in kafka_consumer.consume(200, 1)
                                   if m.error() is None) or len(seen) >= 400, 60,
               "a Kafka consumer reads every record (the listener reaches the hosts over TLS)")
    kafka_consumer.close()
    # Every replica caught up: the followers fetched over TLS.
    for partition in cluster.admin().describe_topics(["channel-tls"])["channel-tls"].partitions:
        assert sorted(partition.isr) == sorted(partition.replicas) and len(partition.isr) == 3

    hosts = [h for b in cluster.metadata()["brokers"]
             for h in ray.get(cluster.broker(b).replica_hosts.remote(
                 [("channel-tls", p) for p in range(3)]))]
    for host in hosts:
        address, port, token, certificate = ray.get(host.replication_address.remote())
        assert certificate is not None and "BEGIN CERTIFICATE" in certificate
    address, port, token, _ = ray.get(hosts[0].replication_address.remote())
    with socket.create_connection((address, port), 10) as plain:
        plain.settimeout(10)
        plain.sendall(encode_frame(0, API_HELLO, token))
        assert plain.recv(64) == b""      # no TLS handshake: closed, the token unheard
