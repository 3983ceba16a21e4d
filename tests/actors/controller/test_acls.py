"""The cluster's ACLs (``actors.controller.acls``): CreateAcls' bindings checked as Kafka's
AclApis and AclControlManager check them, DeleteAcls' filters (Kafka's AclControlManagerTest
cases), and the ACLs kept in the controller's image and snapshot."""
import pytest

from actors.controller.acls import create, delete, describe, filter_values, to_stored
from actors.controller.state import ControllerState
from protocols.errors import InvalidRequestError
from protocols.kafka.acl import (Acl, AclFilter, AclOperation, AclPermissionType,
                                 PatternType, ResourceType)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
READ, WRITE, ALTER = AclOperation.READ, AclOperation.WRITE, AclOperation.ALTER


def acl(kind=TOPIC, name="orders", pattern=LITERAL, principal="User:alice", host="*",
        op=READ, permission=ALLOW):
    return [int(kind), name, int(pattern), principal, host, int(op), int(permission)]


def messages(results):
    return [None if e is None else (type(e), str(e)) for e in results]


def test_create_stores_each_acl_once():
    after, results = create([], [acl(), acl(op=WRITE), acl()])
    assert results == [None, None, None]
    assert after == [acl(), acl(op=WRITE)]
    again, results = create(after, [acl()])
    assert results == [None] and again == after


@pytest.mark.parametrize("bad, message", [
    (acl(kind=ResourceType.ANY), "Invalid resourceType ANY"),
    (acl(kind=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl(pattern=PatternType.MATCH), "Invalid patternType MATCH"),
    (acl(pattern=PatternType.ANY), "Invalid patternType ANY"),
    (acl(op=AclOperation.ANY), "Invalid operation ANY"),
    (acl(op=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl(permission=AclPermissionType.ANY), "Invalid permissionType ANY"),
    (acl(name=""), "Invalid empty resource name"),
    (acl(kind=CLUSTER, name="other"),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(principal="alice"), "Could not parse principal from `alice` (no colon is present "
                             "separating the principal type from the principal name)"),
    (acl(op=99), "Invalid operation 99"),
])
def test_create_refuses_what_kafka_refuses(bad, message):
    after, results = create([acl()], [bad, acl(op=WRITE)])
    assert messages(results) == [(InvalidRequestError, message), None]
    assert after == [acl(), acl(op=WRITE)]


def test_delete_removes_what_each_filter_matches_and_reports_it_under_each():
    stored = [acl(), acl(op=WRITE), acl(kind=GROUP, name="g", op=ALTER),
              acl(name="ord", pattern=PREFIXED, permission=DENY)]
    by_topic = filter_values(AclFilter(TOPIC))
    reads = filter_values(AclFilter(operation=READ))
    after, results = delete(stored, [reads, by_topic])
    # Each filter reports every ACL it matches (the READs on topics twice); each goes once.
    assert results == [[acl(), acl(name="ord", pattern=PREFIXED, permission=DENY)],
                       [acl(), acl(op=WRITE), acl(name="ord", pattern=PREFIXED,
                                                   permission=DENY)]]
    assert after == [acl(kind=GROUP, name="g", op=ALTER)]


def test_a_match_filter_selects_every_acl_that_applies_to_the_resource():
    stored = [acl(), acl(name="*"), acl(name="ord", pattern=PREFIXED), acl(name="other")]
    found = describe(stored, filter_values(AclFilter(TOPIC, "orders", PatternType.MATCH)))
    assert [to_stored(a) for a in found] == stored[:3]


def test_a_filter_with_an_unknown_value_is_refused():
    after, results = delete([acl()], [filter_values(AclFilter(TOPIC)) [:5] + [0, 1]])
    assert messages(results) == [(InvalidRequestError, "The filter's operation is UNKNOWN")]
    assert after == [acl()]


def test_acls_are_in_the_image_and_survive_the_controller_moving():
    state = ControllerState(lambda: 0)
    msgs, results = state.create_acls([acl()])
    assert results == [None] and msgs is not None
    assert state.metadata_image()["acls"] == [acl()]
    again = ControllerState.from_snapshot(state.to_snapshot(), lambda: 0)
    assert again.metadata_image()["acls"] == [acl()]
    msgs, results = state.create_acls([acl()])
    assert msgs == []                    # nothing changed: no update to send
    msgs, results = state.delete_acls([filter_values(AclFilter(GROUP))])
    assert msgs == [] and results == [[]]
    msgs, results = state.delete_acls([filter_values(AclFilter())])
    assert results == [[acl()]] and state.metadata_image()["acls"] == []
    assert isinstance(to_stored(Acl(TOPIC, "t", LITERAL, "User:a", "*", ALTER, DENY)), list)
