"""The broker's authorizer (``protocols.kafka.authorizer``): its index answers as the plain
decision does over every ACL, Kafka's BaseAuthorizerTest cases of authorizeByResourceType
(the check behind an idempotent producer's InitProducerId), and the authorized_operations
bit fields."""
import random

import pytest

from protocols.kafka.acl import (ALLOWED, Acl, AclOperation, AclPermissionType, Action,
                                 PatternType, ResourceType, authorize)
from protocols.kafka.authorizer import SUPPORTED_OPERATIONS, Authorizer

TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALL, READ, WRITE = AclOperation.ALL, AclOperation.READ, AclOperation.WRITE
USER1, USER2 = "User:user1", "User:user2"
HOST1, HOST2 = "192.168.1.1", "192.168.1.2"


class Acls:
    """Kafka's addAcls / removeAcls over a set, and authorizeByResourceType on it."""

    def __init__(self, super_users=frozenset()):
        self.acls: list[Acl] = []
        self.super_users = frozenset(super_users)

    def add(self, entries, kind, name, pattern=LITERAL):
        for principal, host, op, permission in entries:
            acl = Acl(kind, name, pattern, principal, host, op, permission)
            if acl not in self.acls:
                self.acls.append(acl)

    def remove(self, entries, kind, name, pattern=LITERAL):
        gone = {Acl(kind, name, pattern, *e) for e in entries}
        self.acls = [a for a in self.acls if a not in gone]

    def by_type(self, principal, host, op, kind) -> bool:
        return Authorizer(self.acls, self.super_users).authorize_by_resource_type(
            principal, host, op, kind)


def test_the_index_answers_as_the_decision_over_every_acl():
    rng = random.Random(43)
    names = ["orders", "orders-eu", "ord", "o", "payments", "*", "pay", ""]
    principals = ["User:alice", "User:bob", "User:*"]
    hosts = ["*", HOST1, HOST2]
    ops = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]
    for _ in range(200):
        acls = [Acl(rng.choice([TOPIC, GROUP]), rng.choice(names[:-1]),
                    rng.choice([LITERAL, PREFIXED]), rng.choice(principals),
                    rng.choice(hosts), rng.choice(ops), rng.choice([ALLOW, DENY]))
                for _ in range(rng.randrange(0, 12))]
        everyone = rng.random() < 0.3
        index = Authorizer(acls, frozenset({"User:root"}), everyone)
        for _ in range(30):
            action = Action(rng.choice(ops), rng.choice([TOPIC, GROUP]),
                            rng.choice(names[:-1]) + rng.choice(["", "-x"]))
            who = rng.choice(["User:alice", "User:bob", "User:carol", "User:root"])
            host = rng.choice([HOST1, HOST2])
            expected = authorize(acls, action, who, host, super_users=frozenset({"User:root"}),
                                 allow_everyone_if_no_acl_found=everyone) == ALLOWED
            for _ in range(2):   # the remembered answer too
                assert index.authorize(who, host, action.operation, action.resource_type,
                                       action.resource_name) == expected, (acls, action, who)


def test_authorize_by_resource_type_no_acl_found_override():
    # testAuthorizeByResourceTypeNoAclFoundOverride
    empty = Authorizer([], allow_everyone_if_no_acl_found=True)
    assert empty.authorize_by_resource_type(USER1, HOST1, READ, TOPIC)
    assert not Authorizer([]).authorize_by_resource_type(USER1, HOST1, READ, TOPIC)


def test_authorize_by_resource_type_multiple_add_and_remove():
    acls = Acls()
    deny_read, allow_read = (USER1, HOST1, READ, DENY), (USER1, HOST1, READ, ALLOW)
    for _ in range(3):
        assert not acls.by_type(USER1, HOST1, READ, TOPIC)
        acls.add([allow_read], TOPIC, "sb1")
        assert acls.by_type(USER1, HOST1, READ, TOPIC)
        for _ in range(3):
            acls.add([deny_read], TOPIC, "sb1")
            assert not acls.by_type(USER1, HOST1, READ, TOPIC)
            acls.remove([deny_read], TOPIC, "sb1")
            acls.add([allow_read], TOPIC, "sb1")
            assert acls.by_type(USER1, HOST1, READ, TOPIC)
        acls.remove([allow_read], TOPIC, "sb1")
        assert not acls.by_type(USER1, HOST1, READ, TOPIC)


def test_authorize_by_resource_type_isolation_unrelated_deny_wont_dominate_allow():
    acls = Acls()
    acls.add([(USER1, HOST1, READ, DENY), (USER2, HOST1, READ, DENY),
              (USER1, HOST2, WRITE, DENY), (USER2, HOST2, READ, DENY),
              (USER1, HOST2, READ, ALLOW)], TOPIC, "sb1")
    acls.add([(USER1, HOST2, READ, DENY)], TOPIC, "sb2")
    acls.add([(USER1, HOST2, READ, DENY)], GROUP, "s", PREFIXED)
    for kind in (TOPIC, GROUP, TXN, CLUSTER):
        assert not acls.by_type(USER1, HOST1, READ, kind)
    assert acls.by_type(USER1, HOST2, READ, TOPIC)


def test_authorize_by_resource_type_deny_takes_precedence():
    acls = Acls()
    acls.add([(USER1, HOST1, WRITE, ALLOW)], TOPIC, "sb1")
    assert acls.by_type(USER1, HOST1, WRITE, TOPIC)
    acls.add([(USER1, HOST1, WRITE, DENY)], TOPIC, "sb1")
    assert not acls.by_type(USER1, HOST1, WRITE, TOPIC)


def test_authorize_by_resource_type_prefixed_resource_deny_dominate():
    acls = Acls()
    allow, deny = (USER1, HOST1, READ, ALLOW), (USER1, HOST1, READ, DENY)
    steps = [(allow, "abcde", True), (deny, "abcd", False), (allow, "abc", True),
             (deny, "a", False), (allow, "ab", False)]
    for entry, prefix, expected in steps:
        acls.add([entry], GROUP, prefix, PREFIXED)
        assert acls.by_type(USER1, HOST1, READ, GROUP) == expected, prefix


def test_authorize_by_resource_type_wildcard_resource_deny_dominate():
    acls = Acls()
    allow, deny = (USER1, HOST1, WRITE, ALLOW), (USER1, HOST1, WRITE, DENY)
    acls.add([allow], GROUP, "hello", PREFIXED)
    assert acls.by_type(USER1, HOST1, WRITE, GROUP)
    acls.add([deny], GROUP, "*")
    assert not acls.by_type(USER1, HOST1, WRITE, GROUP)
    acls.add([allow], GROUP, "*")
    assert not acls.by_type(USER1, HOST1, WRITE, GROUP)
    acls.add([allow], GROUP, "aloha")
    assert not acls.by_type(USER1, HOST1, WRITE, GROUP)


def test_authorize_by_resource_type_a_wildcard_deny_wins_whatever_the_order():
    for order in (1, -1):
        acls = Acls()
        for entry in [(USER1, HOST1, WRITE, ALLOW), ("User:*", "*", WRITE, DENY)][::order]:
            acls.add([entry], TOPIC, "*")
        assert not acls.by_type(USER1, HOST1, WRITE, TOPIC)


def test_authorize_by_resource_type_with_all_operation_ace():
    acls = Acls()
    assert not acls.by_type(USER1, HOST1, READ, TOPIC)
    acls.add([(USER1, HOST1, WRITE, DENY), (USER1, HOST1, ALL, ALLOW)], TOPIC, "sb1")
    assert acls.by_type(USER1, HOST1, READ, TOPIC)
    acls.add([(USER1, HOST1, ALL, DENY)], TOPIC, "sb1")
    assert not acls.by_type(USER1, HOST1, READ, TOPIC)


def test_authorize_by_resource_type_with_all_host_ace():
    acls = Acls()
    assert not acls.by_type(USER1, HOST1, READ, TOPIC)
    acls.add([(USER1, HOST1, READ, ALLOW)], TOPIC, "sb1")
    assert acls.by_type(USER1, HOST1, READ, TOPIC)
    acls.add([(USER1, "*", READ, DENY)], TOPIC, "sb1")
    assert not acls.by_type(USER1, HOST1, READ, TOPIC)
    acls.add([(USER1, HOST1, READ, DENY)], TOPIC, "sb2")
    assert not acls.by_type(USER1, HOST1, READ, TOPIC)
    assert not acls.by_type(USER1, HOST2, READ, TOPIC)
    acls.add([(USER1, "*", READ, ALLOW)], TOPIC, "sb2")
    assert acls.by_type(USER1, HOST2, READ, TOPIC)
    acls.add([(USER1, "*", READ, DENY)], TOPIC, "sb2")
    assert not acls.by_type(USER1, HOST2, READ, TOPIC)


def test_authorize_by_resource_type_with_all_principal_ace():
    acls = Acls()
    assert not acls.by_type(USER1, HOST1, READ, TOPIC)
    acls.add([(USER1, HOST1, READ, ALLOW)], TOPIC, "sb1")
    assert acls.by_type(USER1, HOST1, READ, TOPIC)
    acls.add([("User:*", HOST1, READ, DENY)], TOPIC, "sb1")
    assert not acls.by_type(USER1, HOST1, READ, TOPIC)
    acls.add([(USER1, HOST1, READ, DENY)], TOPIC, "sb2")
    assert not acls.by_type(USER1, HOST1, READ, TOPIC)
    assert not acls.by_type(USER2, HOST1, READ, TOPIC)
    acls.add([("User:*", HOST1, READ, ALLOW)], TOPIC, "sb2")
    assert acls.by_type(USER2, HOST1, READ, TOPIC)
    acls.add([("User:*", HOST1, READ, DENY)], TOPIC, "sb2")
    assert not acls.by_type(USER2, HOST1, READ, TOPIC)


def test_authorize_by_resource_type_super_user_has_access():
    acls = Acls(super_users={"User:superuser1"})
    for kind in (TOPIC, CLUSTER, GROUP, TXN):
        acls.add([("User:*", "*", ALL, DENY)], kind, "*")
    for kind in (TOPIC, CLUSTER, GROUP, TXN):
        assert acls.by_type("User:superuser1", "192.0.4.4", READ, kind)


def test_authorized_operations_are_a_bit_per_operation_of_the_resource_type():
    acls = [Acl(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW),
            Acl(TOPIC, "orders", LITERAL, "User:alice", "*", AclOperation.ALTER_CONFIGS, ALLOW),
            Acl(GROUP, "g", LITERAL, "User:alice", "*", ALL, ALLOW)]
    authorizer = Authorizer(acls)
    bits = authorizer.authorized_operations("User:alice", HOST1, TOPIC, "orders")
    # READ implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    assert bits == sum(1 << op for op in (READ, AclOperation.DESCRIBE,
                                          AclOperation.ALTER_CONFIGS,
                                          AclOperation.DESCRIBE_CONFIGS))
    assert authorizer.authorized_operations("User:alice", HOST1, GROUP, "g") == \
        sum(1 << op for op in SUPPORTED_OPERATIONS[GROUP])
    assert authorizer.authorized_operations("User:bob", HOST1, TOPIC, "orders") == 0


@pytest.mark.parametrize("kind", [TOPIC, GROUP, CLUSTER, TXN])
def test_every_supported_operation_is_a_kafka_operation(kind):
    assert all(op not in (AclOperation.ANY, AclOperation.UNKNOWN, ALL)
               for op in SUPPORTED_OPERATIONS[kind])
