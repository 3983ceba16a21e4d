"""The cluster's ACLs (Kafka's AclControlManager): CreateAcls' bindings checked as Kafka
checks them, DeleteAcls' filters matched against what is stored. Plain values;
``ControllerState`` keeps the list, puts it in the metadata image and its snapshot, where
each broker's authorizer (``protocols.kafka.authorizer``) reads it.

An ACL is stored as the list ``[resource type, resource name, pattern type, principal, host,
operation, permission]`` of Kafka's wire codes (``ACL_FIELDS``).
"""
from __future__ import annotations

from typing import Iterable

from protocols.errors import InvalidRequestError, KafkaError
from protocols.kafka.acl import (CLUSTER_NAME, Acl, AclFilter, AclOperation,
                                 AclPermissionType, PatternType, ResourceType)

ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host",
              "operation", "permission")
Stored = list   # one ACL as ACL_FIELDS' values


def to_acl(stored: Stored) -> Acl:
    rt, name, pt, principal, host, op, perm = stored
    return Acl(ResourceType(rt), name, PatternType(pt), principal, host, AclOperation(op),
               AclPermissionType(perm))


def to_stored(acl: Acl) -> Stored:
    return [int(acl.resource_type), acl.resource_name, int(acl.pattern_type), acl.principal,
            acl.host, int(acl.operation), int(acl.permission)]


def acls_of(stored: Iterable[Stored] | None) -> list[Acl]:
    return [to_acl(s) for s in stored or ()]


def _enum(kind, value: int, what: str):
    try:
        return kind(value)
    except ValueError:
        raise InvalidRequestError(f"Invalid {what} {value}") from None


def validate_new(stored: Stored) -> Acl:
    """An ACL to create, as Kafka's CreateAcls checks it (AclApis and
    AclControlManager.validateNewAcl); InvalidRequestError otherwise."""
    rt, name, pt, principal, host, op, perm = stored
    rt = _enum(ResourceType, rt, "resourceType")
    pt = _enum(PatternType, pt, "patternType")
    op = _enum(AclOperation, op, "operation")
    perm = _enum(AclPermissionType, perm, "permissionType")
    if rt == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidRequestError("The only valid name for the CLUSTER resource is "
                                  f"{CLUSTER_NAME}")
    if not name:
        raise InvalidRequestError("Invalid empty resource name")
    if rt in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequestError(f"Invalid resourceType {rt.name}")
    if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequestError(f"Invalid patternType {pt.name}")
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequestError(f"Invalid operation {op.name}")
    if perm not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidRequestError(f"Invalid permissionType {perm.name}")
    if not principal or ":" not in principal:
        raise InvalidRequestError(
            f"Could not parse principal from `{principal}` (no colon is present separating "
            "the principal type from the principal name)")
    kind, _, user = principal.partition(":")
    if not kind or not user:
        raise InvalidRequestError(f"Invalid principal `{principal}`")
    if not host:
        raise InvalidRequestError("Invalid empty host")
    return Acl(rt, name, pt, principal, host, op, perm)


def create(stored: list[Stored], creations: Iterable[Stored]
           ) -> tuple[list[Stored], list[KafkaError | None]]:
    """(the ACLs after, an error or None per creation): each creation valid or refused; one
    already stored is not stored twice (and succeeds, as in Kafka)."""
    after = [list(s) for s in stored]
    have = {tuple(s) for s in after}
    results: list[KafkaError | None] = []
    for creation in creations:
        try:
            acl = to_stored(validate_new(list(creation)))
        except KafkaError as e:
            results.append(e)
            continue
        if tuple(acl) not in have:
            have.add(tuple(acl))
            after.append(acl)
        results.append(None)
    return after, results


def filter_values(f: AclFilter) -> Stored:
    """An AclFilter as the wire's fields (ACL_FIELDS' order)."""
    return [int(f.resource_type), f.resource_name, int(f.pattern_type), f.principal, f.host,
            int(f.operation), int(f.permission)]


def filter_of(values: Stored) -> AclFilter:
    """A DeleteAcls or DescribeAcls filter from its wire fields (ACL_FIELDS' order; None for
    a name, principal or host: any); InvalidRequestError for an UNKNOWN value."""
    rt, name, pt, principal, host, op, perm = values
    found = AclFilter(_enum(ResourceType, rt, "resourceType"), name,
                      _enum(PatternType, pt, "patternType"), principal, host,
                      _enum(AclOperation, op, "operation"),
                      _enum(AclPermissionType, perm, "permissionType"))
    for value, what in ((found.resource_type, "resourceType"),
                        (found.pattern_type, "patternType"),
                        (found.operation, "operation"),
                        (found.permission, "permissionType")):
        if value.name == "UNKNOWN":
            raise InvalidRequestError(f"The filter's {what} is UNKNOWN")
    return found


def delete(stored: list[Stored], filters: Iterable[Stored]
           ) -> tuple[list[Stored], list[KafkaError | list[Stored]]]:
    """(the ACLs after, per filter the ACLs it removed or its error), as Kafka's
    AclControlManager.deleteAcls: an ACL several filters match is reported by each, and
    removed once."""
    acls = acls_of(stored)
    removed: set[int] = set()
    results: list[KafkaError | list[Stored]] = []
    for values in filters:
        try:
            selector = filter_of(list(values))
        except KafkaError as e:
            results.append(e)
            continue
        matched = [i for i, acl in enumerate(acls) if selector.matches(acl)]
        removed.update(matched)
        results.append([list(stored[i]) for i in matched])
    return [list(s) for i, s in enumerate(stored) if i not in removed], results


def describe(stored: Iterable[Stored], values: Stored) -> list[Acl]:
    """The ACLs a DescribeAcls filter selects."""
    selector = filter_of(list(values))
    return [acl for acl in acls_of(stored) if selector.matches(acl)]
