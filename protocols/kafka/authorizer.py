"""The broker's authorizer (Kafka's StandardAuthorizer): the cluster's ACLs indexed for the
questions every request asks, with ``super.users`` and ``allow.everyone.if.no.acl.found``.

Plain values in, answers out, no I/O: the listener builds one from each metadata image and
asks it per resource a request names. The decision itself is ``acl.authorize``; the index
only narrows the ACLs it is given to those whose pattern can cover the resource (its literal
name, the literal wildcard, the prefixes it starts with), and answers are remembered per
(principal, host, operation, resource) for the life of the image, so that a request naming
the same topic's partitions many times pays for one decision.
"""
from __future__ import annotations

from typing import Iterable

from protocols.kafka.acl import (ALLOWED, WILDCARD, WILDCARD_PRINCIPAL, Acl, AclOperation,
                                 AclPermissionType, Action, PatternType, ResourceType,
                                 find_result)

# Kafka's authorizer.class.name for the KRaft authorizer, the one rafka builds.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# The operations each resource type has (Kafka 4.3's AclEntry.supportedOperations): the bits
# of an ``authorized_operations`` field.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE,
                                    AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

# An authorized_operations field a client did not ask for (Kafka's Integer.MIN_VALUE).
OPERATIONS_NOT_REQUESTED = -2147483648

_CACHE_LIMIT = 65_536


def _allowing(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations an ALLOW ACL may name to allow ``operation`` (``acl.find_result``)."""
    return frozenset(op for op in AclOperation if find_result(
        Action(operation, ResourceType.TOPIC, "t"), "User:u", "h",
        Acl(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:u", "h", op,
            AclPermissionType.ALLOW)) == ALLOWED)


_ALLOWING = {op: _allowing(op) for op in AclOperation}
ALLOW, ALL = AclPermissionType.ALLOW, AclOperation.ALL


class Authorizer:
    """Answers for one set of ACLs (one metadata image's)."""

    def __init__(self, acls: Iterable[Acl], super_users: frozenset[str] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False):
        self.acls = list(acls)
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        # resource type -> {literal name or "*": {principal: its ACLs there}}
        self._literal: dict[ResourceType, dict[str, dict[str, list[Acl]]]] = {}
        # resource type -> {prefix: {principal: its ACLs there}}, and the prefixes' lengths
        self._prefixed: dict[ResourceType, dict[str, dict[str, list[Acl]]]] = {}
        self._prefix_lengths: dict[ResourceType, list[int]] = {}
        for acl in self.acls:
            if acl.pattern_type == PatternType.LITERAL:
                group = self._literal.setdefault(acl.resource_type, {}).setdefault(
                    acl.resource_name, {})
            elif acl.pattern_type == PatternType.PREFIXED:
                group = self._prefixed.setdefault(acl.resource_type, {}).setdefault(
                    acl.resource_name, {})
            else:
                continue
            group.setdefault(acl.principal, []).append(acl)
        for kind, prefixes in self._prefixed.items():
            self._prefix_lengths[kind] = sorted({len(p) for p in prefixes})
        # The same ACLs by principal first: principal -> resource type -> ({literal name:
        # ACLs}, {prefix: ACLs}, the prefixes' lengths). A decision reads only the
        # principal's and the wildcard principal's, and tries only the prefix lengths they
        # have (a cold decision's cost, issue 43: < 2 us).
        self._by_principal: dict[str, dict[ResourceType, tuple]] = {}
        for acl in self.acls:
            if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
                continue
            literal, prefixed, _ = self._by_principal.setdefault(acl.principal, {}).setdefault(
                acl.resource_type, ({}, {}, []))
            (literal if acl.pattern_type == PatternType.LITERAL else prefixed).setdefault(
                acl.resource_name, []).append(acl)
        for kinds in self._by_principal.values():
            for _, prefixed, lengths in kinds.values():
                lengths.extend(sorted({len(p) for p in prefixed}))
        self._answers: dict[tuple, bool] = {}

    def covering(self, resource_type: ResourceType, name: str) -> list[dict[str, list[Acl]]]:
        """The ACLs whose pattern covers the resource, a {principal: ACLs} per pattern."""
        found = []
        names = self._literal.get(resource_type)
        if names:
            literal = names.get(name)
            if literal:
                found.append(literal)
            if name != WILDCARD:
                wildcard = names.get(WILDCARD)
                if wildcard:
                    found.append(wildcard)
        prefixes = self._prefixed.get(resource_type)
        if prefixes:
            for length in self._prefix_lengths[resource_type]:
                if length > len(name):
                    break
                group = prefixes.get(name[:length])
                if group:
                    found.append(group)
        return found

    def _decide(self, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        """``acl.authorize`` over the covering ACLs, reading only those naming the principal
        or every user (no other can say anything of it), with ``acl.find_result``'s matching
        written out: this runs once per topic a request names."""
        if principal in self.super_users:
            return True
        # No ACL of any principal covering the resource: allow.everyone.if.no.acl.found
        # decides. Without it that answer is the same as "none of this principal's", so
        # only then must every principal's ACLs be looked at.
        if self.allow_everyone_if_no_acl_found and not self.covering(resource_type, name):
            return True
        # The operations an ALLOW may name to allow this one (ALL, itself, its implying).
        allowing = _ALLOWING[operation]
        allowed = False
        size = len(name)
        by_principal = self._by_principal
        for index in (by_principal.get(principal), by_principal.get(WILDCARD_PRINCIPAL)):
            kinds = index.get(resource_type) if index else None
            if kinds is None:
                continue
            literal, prefixed, lengths = kinds
            found = [literal.get(name)]
            if name != WILDCARD:
                found.append(literal.get(WILDCARD))
            for length in lengths:
                if length > size:
                    break
                found.append(prefixed.get(name[:length]))
            for acls in found:
                if not acls:
                    continue
                for acl in acls:
                    if acl.host != WILDCARD and acl.host != host:
                        continue
                    if acl.permission == ALLOW:
                        allowed = allowed or acl.operation in allowing
                    elif acl.operation == operation or acl.operation == ALL:
                        return False
        return allowed

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` connecting from ``host`` may do ``operation`` on the
        resource (Kafka's Authorizer.authorize for one action)."""
        key = (principal, host, operation, resource_type, name)
        answer = self._answers.get(key)
        if answer is None:
            answer = self._decide(principal, host, operation, resource_type, name)
            if len(self._answers) >= _CACHE_LIMIT:
                self._answers.clear()
            self._answers[key] = answer
        return answer

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type
        (Kafka's Authorizer.authorizeByResourceType, default method): a super user, or the
        answer for a resource no ACL names (allow.everyone.if.no.acl.found), or an ALLOW
        of the operation (or ALL) on some pattern no DENY dominates (a DENY on the literal
        wildcard, the same literal name, or a prefix of the allowed name)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        wildcard_allow = False   # decides only once no wildcard DENY came up
        for acl in self.acls:
            if acl.resource_type != resource_type:
                continue
            if acl.host not in (host, WILDCARD):
                continue
            if acl.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if acl.operation not in (operation, AclOperation.ALL):
                continue
            if acl.permission == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                elif acl.pattern_type == PatternType.PREFIXED:
                    deny_prefixed.add(acl.resource_name)
            elif acl.permission == AclPermissionType.ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    wildcard_allow = True
                else:
                    allow.append((acl.pattern_type, acl.resource_name))
        if wildcard_allow:
            return True
        for pattern_type, name in allow:
            if pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:n] in deny_prefixed for n in range(1, len(name) + 1)):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """Kafka's ``authorized_operations`` bit field: bit ``op`` set for each operation
        of the resource type the principal may do on the resource."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits

