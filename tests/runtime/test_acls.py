"""ACLs on a real cluster (issue 43, step 3): Kafka's StandardAuthorizer turned on with
``authorizer.class.name``, ``super.users`` signing in over SASL/PLAIN, ACLs granted with
Kafka's own kafka-acls.sh and with ``rafka acls``, and Kafka's clients (confluent-kafka,
kafka-python, the Java tools) allowed and refused per principal: produce, consume, group
join, offset commit, topic creation, config changes; a DENY winning over an ALLOW;
Metadata hiding a topic; an anonymous PLAINTEXT client refused everything."""
from __future__ import annotations

import pytest

from protocols.kafka.acl import (Acl, AclFilter, AclOperation, AclPermissionType,
                                 PatternType, ResourceType)
from tests.runtime.conftest import cluster_with
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
         "carol": "carol-secret", "mallory": "mallory-secret", "dave": "dave-secret",
         "erin": "erin-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


@pytest.fixture(scope="module")
def cluster(ray_session, tmp_path_factory):
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    with cluster_with(tmp_path_factory.mktemp("acls"), config) as c:
        yield c


def client(cluster, user: str) -> dict:
    return {"bootstrap.servers": cluster.listener_addresses("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}


def make_topics(cluster, *names: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(client(cluster, "admin"))
    for f in admin.create_topics([NewTopic(n, partitions, 2) for n in names]).values():
        f.result(30)


def door(user: str, mechanism: str = "PLAIN") -> dict:
    """rafka's own clients' settings for ``user`` (the Ray door's sign-in)."""
    return {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": USERS[user]}


def rafka_admin(cluster):
    """rafka.Admin as the super user: the cluster has an authorizer, so rafka's clients too
    are checked (an anonymous one is User:ANONYMOUS)."""
    return cluster.admin(door("admin"))


def grant(cluster, *acls: Acl) -> None:
    assert rafka_admin(cluster).create_acls(acls) == [None] * len(acls)


def produce(cluster, user: str, topic: str, n: int = 20):
    """(delivered, errors) of ``n`` records sent as ``user``."""
    from confluent_kafka import Producer
    producer = Producer({**client(cluster, user), "acks": "all",
                         "message.timeout.ms": 10_000})
    outcomes: list = []
    for i in range(n):
        producer.produce(topic, f"{user}-{i}".encode(),
                         on_delivery=lambda err, msg: outcomes.append(err))
    producer.flush(30)
    return ([e for e in outcomes if e is None],
            {e.name() for e in outcomes if e is not None})


def rafka_acls(cluster, *args: str) -> str:
    """``rafka acls`` finding the cluster as kafka-acls.sh does, by --bootstrap-server
    (its --cluster names the cluster resource)."""
    import subprocess
    import sys
    import tempfile

    import ray
    with tempfile.NamedTemporaryFile("w", suffix=".properties") as props:
        # kafka-acls.sh's --command-config, signing in at the Ray door as the super user.
        props.write("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\\n"
                    f'  required username="admin" password="{USERS["admin"]}";\n')
        props.flush()
        out = subprocess.run([sys.executable, "-m", "rafka", "acls", "--bootstrap-server",
                              cluster.listener_addresses("PLAINTEXT"), "--address",
                              ray.get_runtime_context().gcs_address, "--command-config",
                              props.name, *args],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_super_user_may_do_anything_and_an_unlisted_principal_nothing(cluster):
    from confluent_kafka.admin import AdminClient

    make_topics(cluster, "open-to-admin")
    delivered, errors = produce(cluster, "admin", "open-to-admin")
    assert len(delivered) == 20 and not errors
    delivered, errors = produce(cluster, "bob", "open-to-admin")
    assert not delivered and errors == {"TOPIC_AUTHORIZATION_FAILED"}
    # An anonymous client on the PLAINTEXT listener is User:ANONYMOUS: no ACL names it.
    anonymous = AdminClient({"bootstrap.servers": cluster.listener_addresses("PLAINTEXT")})
    assert "open-to-admin" not in anonymous.list_topics(timeout=30).topics
    named = anonymous.list_topics("open-to-admin", timeout=30).topics["open-to-admin"]
    assert named.error.name() == "TOPIC_AUTHORIZATION_FAILED"


def test_produce_and_consume_with_kafka_acls_sh_grants(cluster, tmp_path):
    """kafka-acls.sh --producer / --consumer, as Kafka's docs grant a pipeline's users:
    alice writes orders, carol reads it in group billing (joins, commits), bob neither."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from benchmarks.kafka_peer import classpath
    from tests.runtime.test_kafka_java_tools import KafkaTools

    make_topics(cluster, "orders")
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n')
    tools = KafkaTools(classpath(), tmp_path, cluster.listener_addresses("SASL_PLAINTEXT"))
    added = tools.tool("AclCommand", "--command-config", str(props), "--add",
                       "--allow-principal", "User:alice", "--producer", "--topic", "orders")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, " \
           "patternType=LITERAL)`" in added.stdout
    tools.tool("AclCommand", "--command-config", str(props), "--add",
               "--allow-principal", "User:carol", "--consumer", "--topic", "orders",
               "--group", "billing")
    listed = tools.tool("AclCommand", "--command-config", str(props), "--list",
                        "--topic", "orders").stdout
    for entry in ("(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)",
                  "(principal=User:alice, host=*, operation=CREATE, permissionType=ALLOW)",
                  "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)"):
        assert entry in listed

    delivered, errors = produce(cluster, "alice", "orders", 50)
    assert len(delivered) == 50 and not errors
    delivered, errors = produce(cluster, "bob", "orders")
    assert errors == {"TOPIC_AUTHORIZATION_FAILED"}

    carol = Consumer({**client(cluster, "carol"), "group.id": "billing",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
    carol.subscribe(["orders"])
    got: list = []
    wait_until(lambda: got.extend(m for m in carol.consume(100, 1) if m.error() is None)
               or len(got) >= 50, 90, "carol reads alice's records in group billing")
    carol.commit(asynchronous=False)
    committed = carol.committed([TopicPartition("orders", p) for p in (0, 1)], timeout=30)
    assert sum(max(tp.offset, 0) for tp in committed) == 50   # -1001: none committed
    carol.close()

    # bob may not read the topic, nor join carol's group.
    bob = Consumer({**client(cluster, "bob"), "group.id": "billing",
                    "auto.offset.reset": "earliest"})
    bob.subscribe(["orders"])
    errors = set()
    wait_until(lambda: errors.update(m.error().name() for m in bob.consume(10, 1)
                                     if m.error() is not None) or errors, 60,
               "bob refused")
    assert "GROUP_AUTHORIZATION_FAILED" in errors, errors
    bob.close()
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient
    bob_admin = AdminClient(client(cluster, "bob"))   # kept: its futures need it alive
    asked = bob_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("billing", [TopicPartition("orders", 0)])])
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        asked["billing"].result(30)

    # rafka acls lists what kafka-acls.sh granted, in its words.
    out = rafka_acls(cluster, "--list", "--topic", "orders", "--principal", "User:carol")
    assert out.startswith("ACLs for principal `User:carol`\nCurrent ACLs for resource "
                          "`ResourcePattern(resourceType=TOPIC, name=orders, "
                          "patternType=LITERAL)`: \n ")
    assert "User:alice" not in out
    tools.tool("AclCommand", "--command-config", str(props), "--remove",
               "--force", "--allow-principal", "User:alice", "--producer", "--topic",
               "orders")
    delivered, errors = produce(cluster, "alice", "orders")
    assert errors == {"TOPIC_AUTHORIZATION_FAILED"}


def test_a_deny_wins_over_an_allow_and_metadata_hides_what_may_not_be_described(cluster):
    from confluent_kafka.admin import AdminClient

    make_topics(cluster, "public-feed", "hidden-ledger")
    grant(cluster,
          Acl(TOPIC, "public-", PREFIXED, "User:*", "*", AclOperation.ALL, ALLOW),
          Acl(TOPIC, "public-feed", LITERAL, "User:mallory", "*", AclOperation.WRITE, DENY))
    delivered, errors = produce(cluster, "bob", "public-feed")
    assert len(delivered) == 20 and not errors
    delivered, errors = produce(cluster, "mallory", "public-feed")
    assert errors == {"TOPIC_AUTHORIZATION_FAILED"}

    visible = set(AdminClient(client(cluster, "bob")).list_topics(timeout=30).topics)
    assert "public-feed" in visible and "hidden-ledger" not in visible
    named = AdminClient(client(cluster, "bob")).list_topics("hidden-ledger", timeout=30)
    assert named.topics["hidden-ledger"].error.name() == "TOPIC_AUTHORIZATION_FAILED"
    # The same answer for a topic that is not there: existence is not given away.
    absent = AdminClient(client(cluster, "bob")).list_topics("no-such-ledger", timeout=30)
    assert absent.topics["no-such-ledger"].error.name() == "TOPIC_AUTHORIZATION_FAILED"


def test_topic_creation_and_config_changes_per_principal(cluster):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    grant(cluster,
          Acl(TOPIC, "alice-", PREFIXED, "User:alice", "*", AclOperation.CREATE, ALLOW),
          Acl(TOPIC, "alice-", PREFIXED, "User:alice", "*", AclOperation.ALTER_CONFIGS,
              ALLOW))
    alice = AdminClient(client(cluster, "alice"))
    made = alice.create_topics([NewTopic("alice-events", 1, 1), NewTopic("team-events", 1, 1)])
    made["alice-events"].result(30)
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        made["team-events"].result(30)
    assert "team-events" not in rafka_admin(cluster).list_topics()

    change = ConfigResource("topic", "alice-events", set_config={"retention.ms": "60000"})
    for f in alice.alter_configs([change]).values():
        f.result(30)
    assert rafka_admin(cluster).describe_configs(["alice-events"])["alice-events"][
        "retention.ms"] == 60000
    bob = AdminClient(client(cluster, "bob"))
    for f in bob.alter_configs([change]).values():
        with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
            f.result(30)
    # Deleting needs DELETE: refused, and the topic stays.
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        alice.delete_topics(["alice-events"])["alice-events"].result(30)
    assert "alice-events" in rafka_admin(cluster).list_topics()
    # DescribeConfigs needs DESCRIBE_CONFIGS, which ALTER_CONFIGS implies.
    described = alice.describe_configs([ConfigResource("topic", "alice-events")])
    assert list(described.values())[0].result(30)["retention.ms"].value == "60000"


def test_kafka_python_is_refused_with_kafkas_errors(cluster):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    make_topics(cluster, "kp-private")
    producer = KafkaProducer(
        bootstrap_servers=cluster.listener_addresses("SASL_PLAINTEXT").split(","),
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
        sasl_plain_username="bob", sasl_plain_password=USERS["bob"], acks="all",
        max_block_ms=20_000)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("kp-private", b"x").get(30)
    producer.close()


def test_acl_administration_needs_alter_on_the_cluster(cluster, tmp_path):
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation as Op,
                                       AclPermissionType as Perm, AdminClient,
                                       ResourcePatternType, ResourceType as RT)

    binding = AclBinding(RT.TOPIC, "x", ResourcePatternType.LITERAL, "User:bob", "*",
                         Op.READ, Perm.ALLOW)
    bob = AdminClient(client(cluster, "bob"))
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED"):
        bob.create_acls([binding])[binding].result(30)
    match_all = AclBindingFilter(RT.ANY, None, ResourcePatternType.ANY, None, None, Op.ANY,
                                 Perm.ANY)
    # (librdkafka's describe_acls drops the answer's error; Kafka's own tool shows it.)
    from benchmarks.kafka_peer import classpath
    from tests.runtime.test_kafka_java_tools import KafkaTools
    props = tmp_path / "bob.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="bob" password="{USERS["bob"]}";\n')
    tools = KafkaTools(classpath(), tmp_path, cluster.listener_addresses("SASL_PLAINTEXT"))
    refused = tools.tool("AclCommand", "--command-config", str(props), "--list",
                         check=False)
    assert refused.returncode != 0 and "ClusterAuthorizationException" in refused.stdout
    admin = AdminClient(client(cluster, "admin"))
    admin.create_acls([binding])[binding].result(30)
    assert binding in admin.describe_acls(match_all).result(30)
    deleted = admin.delete_acls([AclBindingFilter(
        RT.TOPIC, "x", ResourcePatternType.LITERAL, None, None, Op.ANY, Perm.ANY)])
    assert list(deleted.values())[0].result(30) == [binding]
    assert Acl(TOPIC, "x", LITERAL, "User:bob", "*", AclOperation.READ, ALLOW) not in \
        rafka_admin(cluster).describe_acls(AclFilter(TOPIC))


# ---- the Ray door: rafka's own clients (issue 43, step 4) --------------------------------
def test_rafka_admin_signs_in_at_the_ray_door_and_is_checked_as_its_principal(cluster):
    """rafka.Admin reaches the cluster through Ray, not a listener; with an authorizer on,
    it proves its user with the listener's SASL exchange (PLAIN, or SCRAM against the
    cluster's credentials) and each request is checked as Kafka checks the same one."""
    from protocols.errors import (ClusterAuthorizationFailedError, SaslAuthenticationError,
                                  TopicAuthorizationFailedError)
    from rafka import NewTopic

    root = rafka_admin(cluster)
    root.create_topics([NewTopic("door-ledger", 1, 2)])
    # No credentials: User:ANONYMOUS, whom no ACL names.
    anonymous = cluster.admin()
    assert "door-ledger" not in anonymous.list_topics()
    with pytest.raises(TopicAuthorizationFailedError):
        anonymous.create_topics([NewTopic("door-anonymous", 1, 1)])
    with pytest.raises(TopicAuthorizationFailedError):
        anonymous.delete_topics(["door-ledger"])
    with pytest.raises(ClusterAuthorizationFailedError):
        anonymous.describe_acls()
    # A wrong password is refused, with the listener's message.
    with pytest.raises(SaslAuthenticationError, match="Invalid username or password"):
        cluster.admin({**door("bob"), "sasl.password": "guess"}).list_topics()

    # A SCRAM user, made by the super user, signs in with Kafka's JAAS form.
    assert root.alter_user_scram_credentials(
        [("dora", "SCRAM-SHA-512", "dora-secret", 4096)]) == {"dora": None}
    dora = cluster.admin({
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                            'required username="dora" password="dora-secret";'})
    assert "door-ledger" not in dora.list_topics()
    with pytest.raises(TopicAuthorizationFailedError):
        dora.describe_configs(["door-ledger"])
    grant(cluster,
          Acl(TOPIC, "door-", PREFIXED, "User:dora", "*", AclOperation.DESCRIBE, ALLOW),
          Acl(TOPIC, "door-dora-", PREFIXED, "User:dora", "*", AclOperation.CREATE, ALLOW),
          Acl(TOPIC, "door-dora-", PREFIXED, "User:dora", "*", AclOperation.ALTER_CONFIGS,
              ALLOW))
    wait_until(lambda: "door-ledger" in dora.list_topics(), 30, "dora's grant at the broker")
    assert dora.describe_topics(["door-ledger"])["door-ledger"].partitions
    dora.create_topics([NewTopic("door-dora-events", 1, 1)])
    dora.alter_configs({"door-dora-events": {"retention.ms": 60_000}})
    assert dora.describe_configs(["door-dora-events"])["door-dora-events"][
        "retention.ms"] == 60_000
    with pytest.raises(TopicAuthorizationFailedError):
        dora.create_topics([NewTopic("door-ledger-2", 1, 1)])
    with pytest.raises(TopicAuthorizationFailedError):
        dora.alter_configs({"door-ledger": {"retention.ms": 60_000}})
    with pytest.raises(TopicAuthorizationFailedError):
        dora.delete_topics(["door-ledger"])
    with pytest.raises(ClusterAuthorizationFailedError):
        dora.create_acls([Acl(TOPIC, "door-ledger", LITERAL, "User:dora", "*",
                              AclOperation.ALL, ALLOW)])
    assert "door-ledger" in root.list_topics()
    # The super user's session is a session like any other: closed, it signs in again.
    root.close()
    assert "door-ledger" in root.list_topics()


def test_rafka_producer_and_consumer_are_checked_as_their_principal(cluster):
    """rafka.Producer and rafka.Consumer through the door: their produce and fetch requests
    are checked by the replica hosts (WRITE, READ), ListOffsets by the broker (DESCRIBE),
    an idempotent producer's InitProducerId by the controller's rules (IDEMPOTENT_WRITE, or
    WRITE on some topic), each refused with Kafka's error."""
    import rafka
    from protocols.errors import (ClusterAuthorizationFailedError, SaslAuthenticationError,
                                  TopicAuthorizationFailedError)

    rafka_admin(cluster).create_topics([rafka.NewTopic("door-orders", 2, 2)])
    grant(cluster, Acl(TOPIC, "dave-", PREFIXED, "User:dave", "*", AclOperation.WRITE, ALLOW))
    with rafka.Producer(cluster, door("admin")) as producer:
        producer.send("door-orders", b"from-admin", partition=0).get(30)
    with pytest.raises(SaslAuthenticationError):
        rafka.Producer(cluster, {**door("dave"), "sasl.password": "guess"})

    quick = {"delivery.timeout.ms": 8_000, "request.timeout.ms": 4_000}
    # erin may write no topic at all (a DENY on every topic wins over the ALLOW on public-*
    # that another test gives everyone): her idempotent producer gets no producer id.
    grant(cluster, Acl(TOPIC, "*", LITERAL, "User:erin", "*", AclOperation.WRITE, DENY),
          *[Acl(TOPIC, "door-orders", LITERAL, f"User:{u}", "*", AclOperation.DESCRIBE, ALLOW)
            for u in ("erin", "dave")])
    with rafka.Producer(cluster, {**door("erin"), **quick}) as producer:
        wait_until(lambda: producer.partitions_for("door-orders"), 30, "erin's DESCRIBE")
        with pytest.raises(ClusterAuthorizationFailedError):
            producer.send("door-orders", b"x").get(30)
        # Her metadata leaves out what she may not describe, and a topic she names is
        # refused at once, whether it exists or not (Kafka's Metadata).
        for topic in ("door-ledger", "door-no-such-topic"):
            with pytest.raises(TopicAuthorizationFailedError):
                producer.partitions_for(topic)
    # dave may write some topic, and describe this one, not write it: his batches reach the
    # leader's host, which refuses them.
    with rafka.Producer(cluster, {**door("dave"), **quick}) as producer:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("door-orders", b"x").get(30)
    grant(cluster, Acl(TOPIC, "door-orders", LITERAL, "User:dave", "*", AclOperation.WRITE,
                       ALLOW))

    def sent() -> bool:
        with rafka.Producer(cluster, {**door("dave"), **quick}) as producer:
            producer.send("door-orders", b"from-dave", partition=0).get(30)
        return True
    wait_until(sent, 60, "dave's WRITE at the hosts")

    everything = [("door-orders", 0), ("door-orders", 1)]
    # mallory may not even describe the topic: refused when she assigns it, or asks for
    # its offsets (ListOffsets needs DESCRIBE).
    with rafka.Consumer(cluster, door("mallory")) as consumer:
        with pytest.raises(TopicAuthorizationFailedError):
            consumer.assign(everything)
        with pytest.raises(TopicAuthorizationFailedError):
            consumer.end_offsets(everything)
    # bob may describe it, not read it: the leader's host refuses his fetches, and poll
    # raises it.
    grant(cluster, Acl(TOPIC, "door-orders", LITERAL, "User:bob", "*", AclOperation.DESCRIBE,
                       ALLOW))
    consumer = rafka.Consumer(cluster, {**door("bob"), "auto.offset.reset": "none"})
    try:
        wait_until(lambda: consumer.assign(everything) or True, 30, "bob's DESCRIBE")
        consumer.seek(everything[0], 0)
        consumer.seek(everything[1], 0)
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(10):
                consumer.poll(1_000)
    finally:
        consumer.close()
    grant(cluster, Acl(TOPIC, "door-orders", LITERAL, "User:bob", "*", AclOperation.READ,
                       ALLOW))

    def read_all() -> list:
        with rafka.Consumer(cluster, {**door("bob"), "auto.offset.reset": "earliest"}) as c:
            c.assign(everything)
            assert sum(c.end_offsets(everything).values()) >= 2   # READ implies DESCRIBE
            got: list = []
            for _ in range(20):
                got += c.poll(500)
                if len(got) >= 2:
                    break
            return [r.value for r in got]
    wait_until(lambda: read_all() == [b"from-admin", b"from-dave"], 60, "bob's READ")


def test_rafka_consumer_groups_and_transactions_are_checked_as_their_principal(cluster):
    """Through the door, a consumer group's requests need READ on the group (and its
    commits READ on the topics), a transactional producer's WRITE on its transactional id
    (and AddOffsetsToTxn READ on the group), rafka.Admin's group listing shows only the
    groups the principal may describe, and DeleteRecords needs DELETE: Kafka's checks and
    errors."""
    import rafka
    from protocols.errors import (GroupAuthorizationFailedError,
                                  TopicAuthorizationFailedError,
                                  TransactionalIdAuthorizationFailedError)
    from protocols.kafka.acl import AclOperation as Op

    root = rafka_admin(cluster)
    root.create_topics([rafka.NewTopic("door-ledger-in", 1, 2),
                        rafka.NewTopic("door-ledger-out", 1, 2)])
    with rafka.Producer(cluster, door("admin")) as producer:
        for i in range(3):
            producer.send("door-ledger-in", f"in-{i}".encode()).get(30)
    grant(cluster, Acl(TOPIC, "door-ledger-", PREFIXED, "User:erin", "*", Op.READ, ALLOW))
    settings = {**door("erin"), "group.id": "door-billing", "auto.offset.reset": "earliest",
                "enable.auto.commit": False}

    def consume() -> list:
        with rafka.Consumer(cluster, settings) as consumer:
            consumer.subscribe(["door-ledger-in"])
            got: list = []
            for _ in range(30):
                got += consumer.poll(500)
                if len(got) >= 3:
                    break
            consumer.commit()
            return [r.value for r in got]
    # READ on the topic but not on the group: the group refuses her.
    with pytest.raises(GroupAuthorizationFailedError):
        consume()
    grant(cluster, Acl(GROUP, "door-billing", LITERAL, "User:erin", "*", Op.READ, ALLOW))
    wait_until(lambda: consume() == [b"in-0", b"in-1", b"in-2"], 60, "erin's group READ")
    assert root.list_consumer_group_offsets("door-billing")[
        ("door-ledger-in", 0)].offset == 3
    # Her admin sees her group (READ implies DESCRIBE), not the others.
    listed = {g.group_id for g in cluster.admin(door("erin")).list_consumer_groups()}
    assert "door-billing" in listed
    assert listed <= {g.group_id for g in root.list_consumer_groups()}

    # A transactional producer needs WRITE on its transactional id.
    txn = {**door("erin"), "transactional.id": "door-txn", "request.timeout.ms": 5_000}
    with rafka.Producer(cluster, txn) as producer:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions(10)
    grant(cluster,
          Acl(ResourceType.TRANSACTIONAL_ID, "door-txn", LITERAL, "User:erin", "*", Op.WRITE,
              ALLOW),
          Acl(TOPIC, "door-ledger-out", LITERAL, "User:erin", "*", Op.WRITE, DENY))

    def may_init() -> bool:
        with rafka.Producer(cluster, txn) as producer:
            producer.init_transactions(30)
        return True
    wait_until(may_init, 60, "erin's WRITE on her transactional id")
    # Her WRITE on door-ledger-out is denied: AddPartitionsToTxn refuses the partition.
    with rafka.Producer(cluster, txn) as producer:
        producer.init_transactions(30)
        producer.begin_transaction()
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("door-ledger-out", b"out").get(30)
    # DeleteRecords needs DELETE on the topic.
    with pytest.raises(TopicAuthorizationFailedError):
        cluster.admin(door("erin")).delete_records({("door-ledger-in", 0): 1})
    assert root.delete_records({("door-ledger-in", 0): 1}) == {("door-ledger-in", 0): 1}


def test_spark_and_ray_data_jobs_sign_in_with_kafkas_options(cluster, spark_session):
    """A Spark job copying a topic passes Kafka's SASL options as Spark's Kafka connector
    takes them (``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``), to its reads, its
    offset lookups and its writes; Ray Data's read_topic / write_topic take them as client
    settings. Without them, the same job is refused."""
    import ray.data

    import rafka
    from rafka.ray import read_topic, write_topic
    from protocols.kafka.acl import AclOperation as Op

    root = rafka_admin(cluster)
    root.create_topics([rafka.NewTopic(n, 2, 2) for n in
                        ("door-spark-in", "door-spark-out", "door-ray-out")])
    with rafka.Producer(cluster, door("admin")) as producer:
        for i in range(10):
            producer.send("door-spark-in", f"r{i}".encode(), key=f"k{i}".encode())
        producer.flush(30)
    grant(cluster,
          Acl(TOPIC, "door-spark-in", LITERAL, "User:bob", "*", Op.READ, ALLOW),
          Acl(TOPIC, "door-spark-out", LITERAL, "User:bob", "*", Op.WRITE, ALLOW),
          Acl(TOPIC, "door-ray-out", LITERAL, "User:bob", "*", Op.WRITE, ALLOW))
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="bob" password="{USERS["bob"]}";')
    sasl = {"kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": jaas}

    def copy(options: dict) -> None:
        reader = spark_session.read.format("rafka").option("cluster", cluster.name) \
            .option("subscribe", "door-spark-in")
        writer = reader.options(**options).load().select("key", "value").write \
            .format("rafka").mode("append").option("cluster", cluster.name) \
            .option("topic", "door-spark-out")
        writer.options(**options).save()
    with pytest.raises(Exception, match="Topic authorization failed"):
        copy({})
    wait_until(lambda: copy(sasl) or True, 60, "bob's grants at the brokers")
    with rafka.Consumer(cluster, {**door("admin"), "auto.offset.reset": "earliest"}) as c:
        c.assign([("door-spark-out", 0), ("door-spark-out", 1)])
        assert sum(c.end_offsets([("door-spark-out", 0), ("door-spark-out", 1)]).values()) \
            >= 10

    settings = {"sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}
    with pytest.raises(Exception, match="Topic authorization failed"):
        read_topic(cluster, "door-spark-in")
    rows = read_topic(cluster, "door-spark-in", consumer_config=settings)
    assert sorted(r["value"] for r in rows.take_all()) == [f"r{i}".encode() for i in range(10)]
    written = write_topic(ray.data.from_items([{"value": b"v"}] * 5), cluster, "door-ray-out",
                          {**settings, "acks": "all"})
    assert written == 5


def test_rafka_producer_at_the_door_is_held_to_its_principals_quota(cluster):
    """Client quotas through the Ray door: the hosts hold a door client to the quota of the
    principal its broker signed it in as (here the user and its client.id, Kafka's most
    specific entity), as a listener holds a SASL client; a greedy producer's first 12 s
    deliver about the quota's worth, not its own pace, and it hears throttle times."""
    import time

    import rafka
    from tests.runtime.test_quotas import bytes_by_second
    quota = 400_000
    admin = rafka_admin(cluster)
    admin.create_topics([rafka.NewTopic("door-quota", 1, 1)])
    admin.alter_client_quotas([({"user": "admin", "client-id": "door-qp"},
                                {"producer_byte_rate": quota})])
    time.sleep(1)   # the hosts hear of it with the next metadata batch
    started = time.monotonic()
    done, delivered = bytes_by_second(started)
    with rafka.Producer(cluster, {**door("admin"), "client.id": "door-qp",
                                  "buffer.memory": 200_000, "acks": "1"}) as producer:
        while time.monotonic() - started < 12:
            producer.send("door-quota", b"d" * 1000).add_done_callback(done)
        producer.flush(60)
        assert producer.metrics()["produce-throttle-time-max"] > 0
    # A new client may burst up to the quota window's worth (11 windows of 1 s) before the
    # broker holds it: at most ~11 quotas in 12 s; unthrottled it sends 50-90 MB/s here.
    assert sum(delivered[s] for s in range(12)) <= 13 * quota, sorted(delivered.items())
