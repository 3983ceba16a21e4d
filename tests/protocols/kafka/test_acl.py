"""The authorizer's decision (``protocols.kafka.acl``): Kafka's StandardAuthorizerTest, case
by case (super users, allow.everyone.if.no.acl.found, implication, principal and host
matching, deny precedence, ALL, prefixes, many ACLs)."""
import pytest

from protocols.kafka.acl import (ALLOWED, DENIED, Acl, AclFilter, AclOperation,
                                 AclPermissionType, Action, PatternType, ResourceType, authorize, find_result,
                                 parse_super_users)

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
(ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS) = (
    AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
    AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)
LOCAL = "127.0.0.1"


def foo_acl(op, permission):
    return Acl(TOPIC, "foo_", PREFIXED, "User:bob", "*", op, permission)


def bar_acl(op, permission):
    return Acl(GROUP, "bar", LITERAL, "User:*", "*", op, permission)


def results(acls, principal, actions, host=LOCAL, **config):
    config.setdefault("super_users", frozenset({"User:superman"}))
    return [authorize(acls, Action(op, kind, name), f"User:{principal}", host, **config)
            for op, kind, name in actions]


def test_get_configured_super_users():
    assert parse_super_users("") == parse_super_users(" ") == frozenset()
    assert parse_super_users("User:bob;User:alice ") == {"User:bob", "User:alice"}
    assert parse_super_users(";  User:bob  ;  User:alice ") == {"User:bob", "User:alice"}
    with pytest.raises(ValueError, match="expected a string in format "
                                         "principalType:principalName but got bob"):
        parse_super_users("bob;:alice")


@pytest.mark.parametrize("allow_everyone, topic2", [(True, ALLOWED), (False, DENIED)])
def test_allow_everyone_if_no_acl_found(allow_everyone, topic2):
    acls = [Acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", READ, ALLOW)]
    config = dict(super_users=parse_super_users("User:alice;User:chris"),
                  allow_everyone_if_no_acl_found=allow_everyone)
    assert results(acls, "Bob", [(READ, TOPIC, "topic1"), (READ, TOPIC, "topic2")],
                   **config) == [DENIED, topic2]


def test_super_users_may_do_anything():
    acls = [Acl(TOPIC, "t", LITERAL, "User:*", "*", ALL, DENY)]
    assert results(acls, "superman", [(DELETE, TOPIC, "t")]) == [ALLOWED]


def test_find_result_implication():
    describe = Action(DESCRIBE, TOPIC, "foo_bar")
    for op in (DESCRIBE, READ, WRITE, DELETE, ALTER):   # these imply DESCRIBE
        assert find_result(describe, "User:bob", LOCAL, foo_acl(op, ALLOW)) == ALLOWED
    assert find_result(describe, "User:bob", LOCAL, foo_acl(CREATE, ALLOW)) is None
    for op in (READ, WRITE, DELETE, ALTER):             # deny ACLs don't imply
        assert find_result(describe, "User:bob", LOCAL, foo_acl(op, DENY)) is None
    assert find_result(describe, "User:bob", LOCAL, foo_acl(DESCRIBE, DENY)) == DENIED
    configs = Action(DESCRIBE_CONFIGS, TOPIC, "foo_bar")
    for op in (DESCRIBE_CONFIGS, ALTER_CONFIGS):
        assert find_result(configs, "User:bob", LOCAL, foo_acl(op, ALLOW)) == ALLOWED
    assert find_result(configs, "User:bob", LOCAL, foo_acl(ALTER_CONFIGS, DENY)) is None
    assert find_result(Action(ALTER_CONFIGS, TOPIC, "foo_bar"), "User:bob", LOCAL,
                       foo_acl(ALTER_CONFIGS, DENY)) == DENIED


def test_find_result_principal_matching():
    read = Action(READ, TOPIC, "foo_bar")
    assert find_result(read, "User:bob", LOCAL, foo_acl(READ, ALLOW)) == ALLOWED
    assert find_result(read, "User:alice", LOCAL, foo_acl(READ, ALLOW)) is None
    assert find_result(Action(READ, GROUP, "bar"), "User:alice", LOCAL,
                       bar_acl(READ, DENY)) == DENIED


def test_simple_authorizations():
    acls = [foo_acl(READ, ALLOW), foo_acl(WRITE, ALLOW), bar_acl(DESCRIBE_CONFIGS, ALLOW),
            bar_acl(ALTER_CONFIGS, ALLOW)]
    assert results(acls, "bob", [(READ, TOPIC, "foo_")]) == [ALLOWED]
    assert results(acls, "fred", [(ALTER_CONFIGS, GROUP, "bar")]) == [ALLOWED]


def test_deny_precedence_with_operation_all():
    acls = [Acl(TOPIC, "foo", LITERAL, "User:alice", "*", ALL, DENY),
            Acl(TOPIC, "foo", PREFIXED, "User:alice", "*", READ, ALLOW),
            Acl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, DENY),
            Acl(TOPIC, "foo", PREFIXED, "User:*", "*", DESCRIBE, ALLOW)]
    assert results(acls, "alice", [(WRITE, TOPIC, "foo"), (READ, TOPIC, "foo"),
                                   (DESCRIBE, TOPIC, "foo"), (READ, TOPIC, "foobar")]) == \
        [DENIED, DENIED, DENIED, ALLOWED]
    assert results(acls, "bob", [(DESCRIBE, TOPIC, "foo"), (READ, TOPIC, "foo"),
                                 (WRITE, TOPIC, "foo"), (DESCRIBE, TOPIC, "foobaz"),
                                 (READ, TOPIC, "foobaz")]) == \
        [DENIED, DENIED, DENIED, ALLOWED, DENIED]


def test_topic_acl_with_operation_all():
    acls = [Acl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, ALLOW),
            Acl(TOPIC, "bar", PREFIXED, "User:alice", "*", ALL, ALLOW),
            Acl(TOPIC, "baz", LITERAL, "User:bob", "*", ALL, ALLOW)]
    assert results(acls, "alice", [(WRITE, TOPIC, "foo"), (DESCRIBE_CONFIGS, TOPIC, "bar"),
                                   (DESCRIBE, TOPIC, "baz")]) == [ALLOWED, ALLOWED, DENIED]
    assert results(acls, "bob", [(WRITE, TOPIC, "foo"), (READ, TOPIC, "bar"),
                                 (DESCRIBE, TOPIC, "baz")]) == [ALLOWED, DENIED, ALLOWED]
    assert results(acls, "malory", [(DESCRIBE, TOPIC, "foo"), (WRITE, TOPIC, "bar"),
                                    (READ, TOPIC, "baz")]) == [ALLOWED, DENIED, DENIED]


def test_host_address_acl_validation():
    host1, host2 = "192.168.1.1", "192.168.1.2"
    acls = [Acl(TOPIC, "foo", LITERAL, "User:alice", host1, READ, DENY),
            Acl(TOPIC, "foo", LITERAL, "User:alice", "*", READ, ALLOW),
            Acl(TOPIC, "bar", LITERAL, "User:bob", host2, READ, ALLOW),
            Acl(TOPIC, "bar", LITERAL, "User:*", LOCAL, DESCRIBE, ALLOW)]
    actions = [(READ, TOPIC, "foo"), (READ, TOPIC, "bar"), (DESCRIBE, TOPIC, "bar")]
    assert results(acls, "alice", actions, LOCAL) == [ALLOWED, DENIED, ALLOWED]
    assert results(acls, "alice", actions, host1) == [DENIED, DENIED, DENIED]
    assert results(acls, "alice", actions, host2) == [ALLOWED, DENIED, DENIED]
    assert results(acls, "bob", actions, LOCAL) == [DENIED, DENIED, ALLOWED]
    assert results(acls, "bob", actions, host1) == [DENIED, DENIED, DENIED]
    assert results(acls, "bob", actions, host2) == [DENIED, ALLOWED, ALLOWED]


def test_authorization_with_many_acls():
    acls = [Acl(TOPIC, "green2", LITERAL, "User:*", "*", READ, ALLOW),
            Acl(TOPIC, "green", PREFIXED, "User:bob", "*", READ, ALLOW),
            Acl(TOPIC, "betamax4", LITERAL, "User:bob", "*", READ, ALLOW),
            Acl(TOPIC, "betamax", LITERAL, "User:bob", "*", READ, ALLOW),
            Acl(TOPIC, "beta", PREFIXED, "User:*", "*", READ, ALLOW),
            Acl(TOPIC, "alpha", PREFIXED, "User:*", "*", READ, ALLOW),
            Acl(TOPIC, "alp", PREFIXED, "User:bob", "*", READ, DENY),
            Acl(GROUP, "*", LITERAL, "User:bob", "*", WRITE, ALLOW),
            Acl(GROUP, "wheel", LITERAL, "User:*", "*", WRITE, DENY)]
    assert results(acls, "bob", [(READ, TOPIC, "green1"), (WRITE, GROUP, "wheel")]) == \
        [ALLOWED, DENIED]
    assert results(acls, "bob", [(READ, TOPIC, "alpha"), (WRITE, GROUP, "arbitrary"),
                                 (READ, TOPIC, "ala")]) == [DENIED, ALLOWED, DENIED]


def test_prefix_acls():
    acls = [Acl(TOPIC, "fooa", PREFIXED, "User:alice", "*", ALL, ALLOW),
            Acl(TOPIC, "foobar", LITERAL, "User:bob", "*", ALL, ALLOW),
            Acl(TOPIC, "f", PREFIXED, "User:bob", "*", ALL, ALLOW)]
    assert results(acls, "bob", [(WRITE, TOPIC, "foobarr"), (READ, TOPIC, "goobar"),
                                 (READ, TOPIC, "fooa")]) == [ALLOWED, DENIED, ALLOWED]
    assert results(acls, "alice", [(DESCRIBE, TOPIC, "fooa"), (WRITE, TOPIC, "bar"),
                                   (READ, TOPIC, "baz")]) == [ALLOWED, DENIED, DENIED]


def test_kafkas_wire_codes():
    assert (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
            ResourceType.TRANSACTIONAL_ID) == (2, 3, 4, 5)
    assert (PatternType.LITERAL, PatternType.PREFIXED) == (3, 4)
    assert (AclOperation.ALL, AclOperation.IDEMPOTENT_WRITE) == (2, 12)
    assert (AclPermissionType.DENY, AclPermissionType.ALLOW) == (2, 3)


ANY_TYPE, ANY_PATTERN, MATCH = ResourceType.ANY, PatternType.ANY, PatternType.MATCH


@pytest.mark.parametrize("filter_, pattern, expected", [
    # Kafka's ResourcePatternFilterTest, case by case
    ((TOPIC, "Name", LITERAL), (GROUP, "Name", LITERAL), False),
    ((TOPIC, "Different", PREFIXED), (TOPIC, "Name", PREFIXED), False),
    ((TOPIC, "NAME", LITERAL), (TOPIC, "Name", LITERAL), False),
    ((TOPIC, "Name", LITERAL), (TOPIC, "Name", PREFIXED), False),
    ((ANY_TYPE, "Name", PREFIXED), (TOPIC, "Name", PREFIXED), True),
    ((TOPIC, None, PREFIXED), (TOPIC, "Name", PREFIXED), True),
    ((TOPIC, None, ANY_PATTERN), (TOPIC, "Name", PREFIXED), True),
    ((TOPIC, None, MATCH), (TOPIC, "Name", PREFIXED), True),
    ((TOPIC, "Name", LITERAL), (TOPIC, "Name", LITERAL), True),
    ((TOPIC, "Name", ANY_PATTERN), (TOPIC, "Name", LITERAL), True),
    ((TOPIC, "Name", MATCH), (TOPIC, "Name", LITERAL), True),
    ((TOPIC, "Name-something", MATCH), (TOPIC, "Name", LITERAL), False),
    ((TOPIC, "*", LITERAL), (TOPIC, "*", LITERAL), True),
    ((TOPIC, "Name", LITERAL), (TOPIC, "*", LITERAL), False),
    ((TOPIC, "*", LITERAL), (TOPIC, "Name", LITERAL), False),
    ((TOPIC, "Name", ANY_PATTERN), (TOPIC, "*", LITERAL), False),
    ((TOPIC, "Name", MATCH), (TOPIC, "*", LITERAL), True),
    ((TOPIC, "Name", PREFIXED), (TOPIC, "Name", PREFIXED), True),
    ((TOPIC, "Name", PREFIXED), (TOPIC, "Name-something", PREFIXED), False),
    ((TOPIC, "Name-something", PREFIXED), (TOPIC, "Name", PREFIXED), False),
    ((TOPIC, "Name-something", ANY_PATTERN), (TOPIC, "Name", PREFIXED), False),
    ((TOPIC, "Name-something", MATCH), (TOPIC, "Name", PREFIXED), True),
])
def test_resource_pattern_filter(filter_, pattern, expected):
    acl = Acl(*pattern, "User:a", "*", READ, ALLOW)
    assert AclFilter(*filter_).matches_pattern(acl) is expected


def test_list_acls_by_filter():
    """Kafka's testListAcls: the filter ANY selects all, a resource type its own."""
    acls = [foo_acl(READ, ALLOW), foo_acl(WRITE, ALLOW), bar_acl(DESCRIBE_CONFIGS, DENY),
            bar_acl(ALTER_CONFIGS, DENY)]
    assert [a for a in acls if AclFilter().matches(a)] == acls
    assert [a for a in acls if AclFilter(TOPIC, None, ANY_PATTERN).matches(a)] == acls[:2]
    assert [a for a in acls if AclFilter(operation=WRITE, principal="User:bob").matches(a)] \
        == [acls[1]]
    assert [a for a in acls if AclFilter(permission=DENY, host="*").matches(a)] == acls[2:]


@pytest.mark.parametrize("peer, host", [
    ("127.0.0.1", "127.0.0.1"), ("::ffff:10.1.2.3", "10.1.2.3"), ("::1", "0:0:0:0:0:0:0:1"),
    ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"), ("2001:db8::ab:1", "2001:db8:0:0:0:0:ab:1")])
def test_a_clients_address_as_java_prints_it(peer, host):
    """An IPv4 client of a dual-stack listener is its IPv4 address to ACLs, as in Kafka
    (InetAddress.getHostAddress), and IPv6 is written uncompressed."""
    from protocols.kafka.acl import host_address
    assert host_address(peer) == host
