"""The Ray door's decisions (``actors.broker.ray_door``): sessions and their ends, what each
Admin request needs (Kafka's checks for the same request), and what of the metadata a
principal sees."""
import itertools

import pytest

from actors.broker.ray_door import (ANONYMOUS, Access, RayDoorSessions, controller_refusal,
                                    door_sasl_config, topic_refusals, visible_image)
from protocols.errors import (ClusterAuthorizationFailedError, InvalidRequestError,
                              SaslAuthenticationError, TopicAuthorizationFailedError)
from protocols.kafka.acl import CLUSTER_NAME, AclOperation, ResourceType
from protocols.kafka.sasl import SaslConfig

IDLE_MS = 600_000


def sessions(**kw) -> RayDoorSessions:
    ids = (f"id-{n}" for n in itertools.count())
    return RayDoorSessions(IDLE_MS, lambda: next(ids), **kw)


def test_no_session_is_user_anonymous_as_on_a_plaintext_listener():
    assert sessions().principal(None, 0) == ANONYMOUS == "User:ANONYMOUS"


def test_a_session_names_its_principal_until_idle_for_connections_max_idle_ms():
    door = sessions()
    session = door.open("User:alice", 0, now_ms=1_000)
    assert door.principal(session, 1_000 + IDLE_MS) == "User:alice"    # used: idle again
    assert door.principal(session, 1_000 + 2 * IDLE_MS) == "User:alice"
    with pytest.raises(SaslAuthenticationError, match="authenticate again"):
        door.principal(session, 1_001 + 3 * IDLE_MS)
    with pytest.raises(SaslAuthenticationError):       # and it is gone for good
        door.principal(session, 0)


def test_a_session_ends_at_its_connections_max_reauth_ms_however_busy():
    door = sessions()
    session = door.open("User:alice", 5_000, now_ms=0)
    assert door.principal(session, 4_999) == "User:alice"
    with pytest.raises(SaslAuthenticationError):
        door.principal(session, 5_000)


def test_unknown_and_closed_sessions_are_refused():
    door = sessions()
    with pytest.raises(SaslAuthenticationError):
        door.principal("guessed", 0)
    session = door.open("User:alice", 0, 0)
    door.close(session)
    with pytest.raises(SaslAuthenticationError):
        door.principal(session, 0)


def test_the_least_recently_used_session_goes_first_beyond_the_limit():
    door = sessions(max_sessions=2)
    a, b = door.open("User:a", 0, 0), door.open("User:b", 0, 0)
    door.principal(a, 1)                                  # a used: b is older now
    c = door.open("User:c", 0, 2)
    assert door.principal(a, 3) == "User:a" and door.principal(c, 3) == "User:c"
    with pytest.raises(SaslAuthenticationError):
        door.principal(b, 3)


def test_an_exchange_is_kept_between_steps_until_idle():
    door = sessions()
    server = object()
    exchange = door.begin(server, 0)
    assert door.exchange(exchange, IDLE_MS) is server
    assert door.exchange(exchange, 2 * IDLE_MS + 1) is None
    exchange = door.begin(server, 0)
    door.finish(exchange)
    assert door.exchange(exchange, 0) is None


def allowing(*grants):
    """An authorize function allowing exactly ``(operation, resource type, name)``."""
    return lambda op, rt, name: (op, rt, name) in grants


def access(*grants, by_type=()) -> Access:
    """Those grants, and ``(operation, resource type)`` pairs allowed on some resource."""
    return Access(allowing(*grants), lambda op, rt: (op, rt) in by_type)


TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER


@pytest.mark.parametrize("grants, refused", [
    ((), TopicAuthorizationFailedError),
    (((AclOperation.CREATE, TOPIC, "t"),), None),
    (((AclOperation.CREATE, CLUSTER, CLUSTER_NAME),), None),
    (((AclOperation.CREATE, TOPIC, "other"),), TopicAuthorizationFailedError),
])
def test_create_topics_needs_create_on_the_cluster_or_the_topic(grants, refused):
    error = controller_refusal(access(*grants), "create_topic", ["t", 1, 1, {}, None])
    assert error is None if refused is None else isinstance(error, refused)


@pytest.mark.parametrize("method, args, needs, error", [
    ("create_partitions", ["t", 3, None], (AclOperation.ALTER, TOPIC, "t"),
     TopicAuthorizationFailedError),
    ("alter_topic_config", ["t", {}], (AclOperation.ALTER_CONFIGS, TOPIC, "t"),
     TopicAuthorizationFailedError),
    ("describe_topic", ["t"], (AclOperation.DESCRIBE, TOPIC, "t"),
     TopicAuthorizationFailedError),
    ("reassign_partitions", [{}], (AclOperation.ALTER, CLUSTER, CLUSTER_NAME),
     ClusterAuthorizationFailedError),
    ("elect_preferred_leaders", [None], (AclOperation.ALTER, CLUSTER, CLUSTER_NAME),
     ClusterAuthorizationFailedError),
    ("alter_user_scram_credentials", [[], []], (AclOperation.ALTER, CLUSTER, CLUSTER_NAME),
     ClusterAuthorizationFailedError),
    ("create_acls", [[]], (AclOperation.ALTER, CLUSTER, CLUSTER_NAME),
     ClusterAuthorizationFailedError),
    ("delete_acls", [[]], (AclOperation.ALTER, CLUSTER, CLUSTER_NAME),
     ClusterAuthorizationFailedError),
])
def test_each_admin_request_needs_what_kafka_checks_for_it(method, args, needs, error):
    assert isinstance(controller_refusal(access(), method, args), error)
    assert controller_refusal(access(needs), method, args) is None


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic():
    """Kafka's InitProducerId without a transactional id (KIP-679)."""
    assert isinstance(controller_refusal(access(), "init_producer_id", []),
                      ClusterAuthorizationFailedError)
    assert controller_refusal(access((AclOperation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)),
                              "init_producer_id", []) is None
    assert controller_refusal(access(by_type=[(AclOperation.WRITE, TOPIC)]),
                              "init_producer_id", []) is None
    assert isinstance(controller_refusal(access(by_type=[(AclOperation.READ, TOPIC)]),
                                         "init_producer_id", []),
                      ClusterAuthorizationFailedError)


def test_the_door_passes_on_only_the_requests_rafka_clients_make():
    everything = Access(lambda *_: True, lambda *_: True)
    assert isinstance(controller_refusal(everything, "register_broker", [1]),
                      InvalidRequestError)


@pytest.mark.parametrize("grants, refused", [
    ((), TopicAuthorizationFailedError),
    (((AclOperation.DELETE, TOPIC, "t"),), None),       # DELETE implies DESCRIBE
    (((AclOperation.DELETE, CLUSTER, CLUSTER_NAME),), None),
])
def test_delete_topics_needs_delete_on_the_cluster_or_describe_and_delete_on_the_topic(
        grants, refused):
    authorize = allowing(*grants)
    implied = lambda op, rt, name: authorize(op, rt, name) or (   # noqa: E731
        op == AclOperation.DESCRIBE and authorize(AclOperation.DELETE, rt, name))
    error = controller_refusal(Access(implied, lambda *_: False), "delete_topic", ["t"])
    assert error is None if refused is None else isinstance(error, refused)


def test_delete_topics_refused_where_describe_is_denied_though_delete_is_allowed():
    may_delete_not_describe = Access(allowing((AclOperation.DELETE, TOPIC, "t")),
                                     lambda *_: False)
    assert isinstance(controller_refusal(may_delete_not_describe, "delete_topic", ["t"]),
                      TopicAuthorizationFailedError)


SALTED = ["c2FsdA==", "U1RPUkVE", "U0VSVkVS", 8192]
IMAGE = {"topics": {"seen": {0: {}}, "hidden": {0: {}}},
         "configs": {"seen": {}, "hidden": {"retention.ms": 1}},
         "topic_configs": {"seen": {}, "hidden": {"retention.ms": 1}},
         "topic_ids": {"seen": "a", "hidden": "b"}, "brokers": {1: {}},
         "acls": [["x"]], "scram_credentials": {"u": {"SCRAM-SHA-256": SALTED}}}


def test_a_principal_sees_the_topics_it_may_describe_and_the_acls_with_describe_on_the_cluster():
    seen = visible_image(IMAGE, allowing((AclOperation.DESCRIBE, TOPIC, "seen")))
    assert set(seen["topics"]) == set(seen["topic_ids"]) == {"seen"}
    assert seen["configs"] == seen["topic_configs"] == {}   # DESCRIBE_CONFIGS, not DESCRIBE
    assert seen["brokers"] == IMAGE["brokers"]
    assert not {"acls", "scram_credentials", "scram_users"} & set(seen)
    operator = visible_image(IMAGE, allowing((AclOperation.DESCRIBE, CLUSTER, CLUSTER_NAME)))
    assert operator["topics"] == {} and operator["acls"] == IMAGE["acls"]
    # DescribeUserScramCredentials' answer: mechanisms and iterations, never salts or keys.
    assert operator["scram_users"] == {"u": {"SCRAM-SHA-256": 8192}}
    assert "scram_credentials" not in operator


def test_a_principal_sees_the_configs_of_the_topics_it_may_describe_configs():
    seen = visible_image(IMAGE, allowing((AclOperation.DESCRIBE_CONFIGS, TOPIC, "hidden")))
    assert seen["topics"] == {} and seen["configs"] == {"hidden": {"retention.ms": 1}}


def test_topic_refusals_for_describe_topics_and_describe_configs():
    refused = topic_refusals(allowing((AclOperation.DESCRIBE_CONFIGS, TOPIC, "a")),
                             AclOperation.DESCRIBE_CONFIGS, ["a", "b"])
    assert list(refused) == ["b"] and isinstance(refused["b"], TopicAuthorizationFailedError)
    assert list(topic_refusals(allowing(), AclOperation.DESCRIBE, ["a"])) == ["a"]


BROKER = {"connections.max.reauth.ms": 0, "sasl.server.max.receive.size": 524_288}


def test_the_door_signs_in_scram_users_and_the_sasl_listeners_plain_users():
    listeners = {"INTERNAL": SaslConfig(("PLAIN",), {"alice": "a1", "bob": "b1"}),
                 "EXTERNAL": SaslConfig(("PLAIN",), {"alice": "a2", "carol": "c2"})}
    config = door_sasl_config(BROKER, listeners, None)
    assert config.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    # A user several listeners name: the first listener's password.
    assert config.plain_users == {"alice": "a1", "bob": "b1", "carol": "c2"}
    assert door_sasl_config(BROKER, {}, None).mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    reauth = door_sasl_config({**BROKER, "connections.max.reauth.ms": 3_600_000}, {}, None)
    assert set(reauth.reauth_ms.values()) == {3_600_000}


# ---- the coordinators and the hosts' other requests -----------------------------------------
from actors.broker.ray_door import (GROUP, TXN, coordinator_refusal,  # noqa: E402
                                    find_coordinator_refusal, host_refusal)
from protocols.errors import (GroupAuthorizationFailedError,  # noqa: E402
                              TransactionalIdAuthorizationFailedError)

GROUP_RT, TXN_RT = ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
ROWS = [("t", 0, 5, -1, ""), ("t", 1, 7, -1, "")]


@pytest.mark.parametrize("method, args", [
    ("join_group", ["g", "", "consumer", []]), ("sync_group", ["g", "m", 1, None]),
    ("heartbeat", ["g", "m", 1]), ("leave_group", ["g", "m"]),
])
def test_the_group_protocol_needs_read_on_the_group(method, args):
    refusal, _ = coordinator_refusal(access(), GROUP, method, args)
    assert isinstance(refusal, GroupAuthorizationFailedError)
    assert coordinator_refusal(access((AclOperation.READ, GROUP_RT, "g")), GROUP, method,
                               args) == (None, None)


def test_offset_commit_needs_read_on_the_group_then_on_each_topic():
    args = ["g", "m", 1, ROWS]
    assert isinstance(coordinator_refusal(access((AclOperation.READ, TOPIC, "t")), GROUP,
                                          "commit_offsets", args)[0],
                      GroupAuthorizationFailedError)
    assert isinstance(coordinator_refusal(access((AclOperation.READ, GROUP_RT, "g")), GROUP,
                                          "commit_offsets", args)[0],
                      TopicAuthorizationFailedError)
    assert coordinator_refusal(access((AclOperation.READ, GROUP_RT, "g"),
                                      (AclOperation.READ, TOPIC, "t")),
                               GROUP, "commit_offsets", args) == (None, None)


def test_txn_offset_commit_needs_write_on_the_transactional_id_too():
    args = ["tx", "g", 1, 0, "m", 1, ROWS]
    reader = [(AclOperation.READ, GROUP_RT, "g"), (AclOperation.READ, TOPIC, "t")]
    assert isinstance(coordinator_refusal(access(*reader), GROUP, "txn_commit_offsets",
                                          args)[0], TransactionalIdAuthorizationFailedError)
    assert coordinator_refusal(access(*reader, (AclOperation.WRITE, TXN_RT, "tx")), GROUP,
                               "txn_commit_offsets", args) == (None, None)


def test_offset_fetch_needs_describe_and_leaves_out_topics_it_may_not_describe():
    describer = access((AclOperation.DESCRIBE, GROUP_RT, "g"), (AclOperation.DESCRIBE, TOPIC, "t"))
    assert isinstance(coordinator_refusal(access(), GROUP, "fetch_offsets", ["g", None])[0],
                      GroupAuthorizationFailedError)
    assert isinstance(coordinator_refusal(describer, GROUP, "fetch_offsets",
                                          ["g", [["u", 0]]])[0],
                      TopicAuthorizationFailedError)
    refusal, keep = coordinator_refusal(describer, GROUP, "fetch_offsets", ["g", None])
    assert refusal is None
    assert keep([("t", 0, 5, -1, ""), ("u", 0, 9, -1, "")]) == [("t", 0, 5, -1, "")]


def test_list_groups_shows_every_group_with_describe_on_the_cluster_else_those_described():
    answer = [("a", "consumer", "Stable"), ("b", "consumer", "Empty")]
    _, keep = coordinator_refusal(access((AclOperation.DESCRIBE, GROUP_RT, "b")), GROUP,
                                  "list_groups", [])
    assert keep(answer) == [answer[1]]
    assert coordinator_refusal(access((AclOperation.DESCRIBE, CLUSTER, CLUSTER_NAME)), GROUP,
                               "list_groups", []) == (None, None)


@pytest.mark.parametrize("method, args, grants, error", [
    ("delete_group", ["g"], [(AclOperation.DELETE, GROUP_RT, "g")],
     GroupAuthorizationFailedError),
    ("delete_offsets", ["g", [["t", 0]]], [(AclOperation.DELETE, GROUP_RT, "g"),
                                          (AclOperation.READ, TOPIC, "t")],
     GroupAuthorizationFailedError),
    ("describe_group", ["g"], [(AclOperation.DESCRIBE, GROUP_RT, "g")],
     GroupAuthorizationFailedError),
])
def test_group_administration(method, args, grants, error):
    assert isinstance(coordinator_refusal(access(), GROUP, method, args)[0], error)
    assert coordinator_refusal(access(*grants), GROUP, method, args)[0] is None


@pytest.mark.parametrize("method, args, grants", [
    ("init_producer_id", ["tx", 60_000], [(AclOperation.WRITE, TXN_RT, "tx")]),
    ("add_partitions_to_txn", ["tx", 1, 0, [["t", 0]]],
     [(AclOperation.WRITE, TXN_RT, "tx"), (AclOperation.WRITE, TOPIC, "t")]),
    ("add_offsets_to_txn", ["tx", 1, 0, "g"],
     [(AclOperation.WRITE, TXN_RT, "tx"), (AclOperation.READ, GROUP_RT, "g")]),
    ("end_txn", ["tx", 1, 0, True], [(AclOperation.WRITE, TXN_RT, "tx")]),
    ("describe_transaction", ["tx"], [(AclOperation.DESCRIBE, TXN_RT, "tx")]),
])
def test_the_transaction_protocol_needs_write_on_the_transactional_id(method, args, grants):
    assert isinstance(coordinator_refusal(access(), TXN, method, args)[0],
                      TransactionalIdAuthorizationFailedError)
    for missing in grants[1:]:   # each grant is needed
        refusal, _ = coordinator_refusal(access(*[g for g in grants if g != missing]), TXN,
                                         method, args)
        assert refusal is not None
    assert coordinator_refusal(access(*grants), TXN, method, args)[0] is None


def test_list_transactions_shows_the_transactional_ids_it_may_describe():
    _, keep = coordinator_refusal(access((AclOperation.DESCRIBE, TXN_RT, "b")), TXN,
                                  "list_transactions", [[], [], -1])
    listed = [{"transactional_id": "a"}, {"transactional_id": "b"}]
    assert keep(([], listed)) == ([], [listed[1]])


def test_find_coordinator_needs_describe_on_the_key():
    assert isinstance(find_coordinator_refusal(access(), "g", 0), GroupAuthorizationFailedError)
    assert isinstance(find_coordinator_refusal(access(), "tx", 1),
                      TransactionalIdAuthorizationFailedError)
    assert find_coordinator_refusal(access((AclOperation.DESCRIBE, GROUP_RT, "g")), "g", 0) \
        is None


def test_coordinator_requests_the_door_does_not_pass_on():
    assert isinstance(coordinator_refusal(access(), GROUP, "complete_txn", [0, 1, True])[0],
                      InvalidRequestError)
    assert isinstance(host_refusal(access(), "stop_many", [[]]), InvalidRequestError)


@pytest.mark.parametrize("method, args, grant, error", [
    ("delete_records", ["t", 0, 5, 30_000], (AclOperation.DELETE, TOPIC, "t"),
     TopicAuthorizationFailedError),
    ("describe_producers_many", [[["t", 0]]], (AclOperation.READ, TOPIC, "t"),
     TopicAuthorizationFailedError),
    ("write_txn_markers_many", [[("t", 0, 1, 0, 0, False)], 30_000],
     (AclOperation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME), ClusterAuthorizationFailedError),
])
def test_the_admin_requests_to_replica_hosts(method, args, grant, error):
    assert isinstance(host_refusal(access(), method, args), error)
    assert host_refusal(access(grant), method, args) is None


def test_describe_transactions_shows_the_partitions_of_topics_it_may_describe():
    """Kafka's handleDescribeTransactionsRequest leaves out the topics the principal may
    not DESCRIBE."""
    _, keep = coordinator_refusal(access((AclOperation.DESCRIBE, TXN_RT, "tx"),
                                         (AclOperation.DESCRIBE, TOPIC, "a")),
                                  TXN, "describe_transaction", ["tx"])
    answer = {"transactional_id": "tx", "partitions": [("a", 0), ("b", 0), ("a", 1)]}
    assert keep(answer)["partitions"] == [("a", 0), ("a", 1)]
    error = TransactionalIdAuthorizationFailedError("x")
    assert keep(error) is error
