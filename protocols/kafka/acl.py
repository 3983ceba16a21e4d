"""Kafka's access-control model and its authorizer's decision (Kafka's StandardAuthorizer,
StandardAuthorizerData): plain values in, ALLOWED or DENIED out, no I/O, no clock.

An ACL (Kafka's AclBinding) names a resource pattern (type, name, LITERAL or PREFIXED), a
principal (``User:alice``, ``User:*`` for everyone), a host (``*`` for any), an operation
and ALLOW or DENY. For an action (operation on a resource, by a principal from a host):

- a super user (``super.users``) may do anything;
- the ACLs considered are those of the resource's type whose pattern covers its name: the
  LITERAL name itself, the LITERAL wildcard ``*``, every PREFIXED name it starts with;
- one of them that matches the principal, host and operation and DENYs wins; else one that
  ALLOWs allows; an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and of
  ALTER_CONFIGS also DESCRIBE_CONFIGS (a DENY implies nothing), ALL covers every operation;
- no ACL at all covering the resource: ``allow.everyone.if.no.acl.found`` decides (default
  false); ACLs covering it but none allowing: DENIED.

The numbers are Kafka's wire codes (ResourceType, PatternType, AclOperation,
AclPermissionType).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


ALLOWED, DENIED = "ALLOWED", "DENIED"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"     # the one CLUSTER resource's name

_IMPLIES_DESCRIBE = {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                     AclOperation.DELETE, AclOperation.ALTER}
_IMPLIES_DESCRIBE_CONFIGS = {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}


@dataclass(frozen=True)
class Acl:
    """One ACL (Kafka's StandardAcl / AclBinding)."""
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True)
class Action:
    operation: AclOperation
    resource_type: ResourceType
    resource_name: str


def host_address(ip: str) -> str:
    """A client's address as Kafka's authorizer compares it with an ACL's host (Java's
    InetAddress.getHostAddress): an IPv4 client of a dual-stack socket
    (``::ffff:10.1.2.3``) as ``10.1.2.3``, IPv6 uncompressed (``0:0:0:0:0:0:0:1``)."""
    import ipaddress
    text, percent, scope = ip.partition("%")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return ip
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        groups = address.exploded.split(":")
        return ":".join(format(int(g, 16), "x") for g in groups) + percent + scope
    return str(address)


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by ';' (Kafka's getConfiguredSuperUsers)."""
    users = set()
    for part in (value or "").split(";"):
        part = part.strip()
        if not part:
            continue
        kind, sep, name = part.partition(":")
        if not sep or not kind or not name:
            raise ValueError("expected a string in format principalType:principalName but "
                             f"got {part}")
        users.add(part)
    return frozenset(users)


def covers(acl: Acl, resource_type: ResourceType, name: str) -> bool:
    """Whether ``acl``'s resource pattern applies to the resource."""
    if acl.resource_type != resource_type:
        return False
    if acl.pattern_type == PatternType.LITERAL:
        return acl.resource_name in (name, WILDCARD)
    return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)


def find_result(action: Action, principal: str, host: str, acl: Acl) -> str | None:
    """ALLOWED, DENIED or None (the ACL says nothing of this principal, host and operation),
    as Kafka's StandardAuthorizerData.findResult."""
    if acl.principal not in (principal, WILDCARD_PRINCIPAL):
        return None
    if acl.host not in (WILDCARD, host):
        return None
    if acl.operation != AclOperation.ALL:
        if acl.permission == AclPermissionType.ALLOW:
            if action.operation == AclOperation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif action.operation == AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif action.operation != acl.operation:
                return None
        elif action.operation != acl.operation:
            return None
    return ALLOWED if acl.permission == AclPermissionType.ALLOW else DENIED


def authorize(acls: Iterable[Acl], action: Action, principal: str, host: str, *,
              super_users: frozenset[str] = frozenset(),
              allow_everyone_if_no_acl_found: bool = False) -> str:
    """The authorizer's answer to one action (Kafka's StandardAuthorizer.authorize)."""
    if principal in super_users:
        return ALLOWED
    found_any = allowed = False
    for acl in acls:
        if not covers(acl, action.resource_type, action.resource_name):
            continue
        found_any = True
        result = find_result(action, principal, host, acl)
        if result == DENIED:
            return DENIED
        allowed = allowed or result == ALLOWED
    if allowed:
        return ALLOWED
    if not found_any:
        return ALLOWED if allow_everyone_if_no_acl_found else DENIED
    return DENIED


@dataclass(frozen=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select (Kafka's AclBindingFilter): ANY, or None for
    a name, principal or host, matches everything; pattern type MATCH selects the ACLs that
    would apply to the named resource (its LITERAL name, the wildcard, PREFIXED prefixes)."""
    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, acl: Acl) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and \
                self.pattern_type != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return acl.resource_name in (self.resource_name, WILDCARD)
        return self.resource_name.startswith(acl.resource_name)

    def matches(self, acl: Acl) -> bool:
        return (self.matches_pattern(acl)
                and self.principal in (None, acl.principal)
                and self.host in (None, acl.host)
                and self.operation in (AclOperation.ANY, acl.operation)
                and self.permission in (AclPermissionType.ANY, acl.permission))
