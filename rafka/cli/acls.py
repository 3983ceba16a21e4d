"""``rafka acls``: kafka-acls.sh for a rafka cluster: add, list and remove ACLs, with its
options, its --producer and --consumer shortcuts and its output.

    rafka acls --add --allow-principal User:alice --operation Read --topic orders
    rafka acls --add --allow-principal User:bob --producer --topic orders --idempotent
    rafka acls --add --allow-principal User:carol --consumer --topic orders --group billing
    rafka acls --add --deny-principal User:mallory --operation All --topic '*'
    rafka acls --list [--topic orders] [--principal User:alice]
    rafka acls --remove --force --allow-principal User:alice --operation Read --topic orders
"""
from __future__ import annotations

import argparse
import sys

from rafka.cli.args import EXIT_FAILURE, EXIT_USAGE, add_cluster_options, admin_of
from protocols.kafka.acl import (CLUSTER_NAME, WILDCARD, Acl, AclFilter, AclOperation,
                                 AclPermissionType, PatternType, ResourceType)

USAGE_RESOURCE = ("You must provide at least one resource: --topic <topic> or --cluster or "
                  "--group <group> or --delegation-token <Delegation Token ID>")


class UsageError(Exception):
    pass


def configure(parser: argparse.ArgumentParser) -> None:
    # kafka-acls.sh's --cluster names the cluster resource.
    add_cluster_options(parser, name_option="--cluster-name", command_config=True)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    parser.add_argument("--topic", action="append", default=[],
                        help="topic ('*': every topic); repeatable")
    parser.add_argument("--group", action="append", default=[],
                        help="consumer group ('*': every group); repeatable")
    parser.add_argument("--transactional-id", action="append", default=[],
                        help="transactional id ('*': every one); repeatable")
    parser.add_argument("--user-principal", action="append", default=[],
                        help="user resource (delegation tokens' owner); repeatable")
    parser.add_argument("--cluster", dest="cluster_resource", action="store_true",
                        help="the cluster's ACLs")
    parser.add_argument("--resource-pattern-type", default=None,
                        choices=["any", "match", "literal", "prefixed", "ANY", "MATCH",
                                 "LITERAL", "PREFIXED"],
                        help="literal (default) or prefixed; listing and removing also any "
                             "or match (every ACL that applies to the resource)")
    parser.add_argument("--allow-principal", action="append", default=[],
                        help="principalType:name allowed ('User:*': everyone)")
    parser.add_argument("--deny-principal", action="append", default=[],
                        help="principalType:name denied (a DENY wins over any ALLOW)")
    parser.add_argument("--allow-host", action="append", default=[],
                        help="host allowed (default '*' with --allow-principal)")
    parser.add_argument("--deny-host", action="append", default=[],
                        help="host denied (default '*' with --deny-principal)")
    parser.add_argument("--operation", action="append", default=[],
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                             "DescribeConfigs, AlterConfigs, IdempotentWrite, All "
                             "(default All); repeatable")
    parser.add_argument("--producer", action="store_true",
                        help="Write, Describe, Create on the topics; Write, Describe on the "
                             "transactional ids")
    parser.add_argument("--consumer", action="store_true",
                        help="Read, Describe on the topics; Read on the groups")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IdempotentWrite on the cluster")
    parser.add_argument("--principal", action="append", default=[],
                        help="--list: only this principal's ACLs; repeatable")
    parser.add_argument("--force", action="store_true", help="--remove without asking")


def operation(name: str) -> AclOperation:
    """``Read``, ``read``, ``IdempotentWrite``, ``idempotent_write`` -> the operation
    (Kafka's SecurityUtils.operation)."""
    key = "".join(c for c in name.strip() if c.isalnum()).upper()
    for op in AclOperation:
        if op.name.replace("_", "") == key and op not in (AclOperation.UNKNOWN,
                                                          AclOperation.ANY):
            return op
    raise UsageError(f"Invalid operation {name!r}")


def operation_name(op: AclOperation) -> str:
    """Kafka's SecurityUtils.operationName: IDEMPOTENT_WRITE -> IdempotentWrite."""
    return "".join(part.capitalize() for part in op.name.split("_"))


def principal(text: str) -> str:
    text = text.strip()
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise UsageError(f"expected a string in format principalType:principalName but got "
                         f"{text}")
    return text


def _pattern_type(args, adding: bool) -> PatternType:
    chosen = PatternType[(args.resource_pattern_type or "literal").upper()]
    if adding and chosen not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(f"A '--resource-pattern-type' value of '{chosen.name}' is not valid "
                         "when adding acls.")
    return chosen


def resources(args, pattern: PatternType, required: bool = True
              ) -> list[tuple[ResourceType, str, PatternType]]:
    """The resource patterns (or filters) the options name, as kafka-acls.sh reads them."""
    found = [(ResourceType.TOPIC, t.strip(), pattern) for t in args.topic]
    if pattern == PatternType.LITERAL and (args.cluster_resource or args.idempotent):
        found.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    found += [(ResourceType.GROUP, g.strip(), pattern) for g in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id]
    found += [(ResourceType.USER, u.strip(), pattern) for u in args.user_principal]
    if not found and required:
        raise UsageError(USAGE_RESOURCE)
    return list(dict.fromkeys(found))


def entries(args, operations: set[AclOperation]) -> list[tuple[str, str, AclOperation,
                                                               AclPermissionType]]:
    """(principal, host, operation, permission) for each allowed and denied principal,
    host and operation (kafka-acls.sh's getAcl): hosts default to '*'."""
    out = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for p in dict.fromkeys(principal(p) for p in principals):
            for host in dict.fromkeys(h.strip() for h in hosts or [WILDCARD]):
                for op in sorted(operations):
                    out.append((p, host, op, permission))
    return out


def resource_entries(args, pattern: PatternType, required: bool = True) -> dict:
    """{resource pattern: its entries}: the --producer / --consumer shortcuts, or the
    --operation given (default All) on every resource named."""
    named = resources(args, pattern, required)
    out: dict[tuple, list] = {}
    if not args.producer and not args.consumer:
        ops = {operation(o) for o in args.operation} or {AclOperation.ALL}
        for r in named:
            out[r] = entries(args, ops)
    if args.producer:
        for r in named:
            if r[0] == ResourceType.TOPIC:
                out[r] = entries(args, {AclOperation.WRITE, AclOperation.DESCRIBE,
                                        AclOperation.CREATE})
            elif r[0] == ResourceType.TRANSACTIONAL_ID:
                out[r] = entries(args, {AclOperation.WRITE, AclOperation.DESCRIBE})
        if args.idempotent:
            out[(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] = entries(
                args, {AclOperation.IDEMPOTENT_WRITE})
    if args.consumer:
        for r in named:
            if r[0] == ResourceType.TOPIC:
                out[r] = list(dict.fromkeys(out.get(r, []) + entries(
                    args, {AclOperation.READ, AclOperation.DESCRIBE})))
            elif r[0] == ResourceType.GROUP:
                out[r] = list(dict.fromkeys(out.get(r, []) + entries(args,
                                                                     {AclOperation.READ})))
    from protocols.kafka.authorizer import SUPPORTED_OPERATIONS
    for r, acls in out.items():
        valid = set(SUPPORTED_OPERATIONS.get(r[0], ())) | {AclOperation.ALL}
        if any(op not in valid for _, _, op, _ in acls):
            raise UsageError(f"ResourceType {r[0].name} only supports operations "
                             f"{', '.join(operation_name(o) for o in sorted(valid))}")
    return out


def pattern_text(r: tuple, kind: str = "ResourcePattern") -> str:
    return f"{kind}(resourceType={r[0].name}, name={r[1]}, patternType={r[2].name})"


def entry_text(e: tuple) -> str:
    return (f"(principal={e[0]}, host={e[1]}, operation={e[2].name}, "
            f"permissionType={e[3].name})")


def block(title: str, acls: list) -> str:
    """kafka-acls.sh's paragraph: the title, then each ACL on a tab-indented line."""
    return f"{title}: \n " + "\n".join("\t" + entry_text(e) for e in acls) + " \n"


def _add(admin, args) -> int:
    pattern = _pattern_type(args, adding=True)
    wanted = resource_entries(args, pattern)
    if any(not acls for acls in wanted.values()):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when "
                         "trying to add ACLs.")
    for r, acls in wanted.items():
        print(block(f"Adding ACLs for resource `{pattern_text(r)}`", acls))
        errors = [e for e in admin.create_acls([Acl(r[0], r[1], r[2], *e) for e in acls])
                  if e is not None]
        if errors:
            raise errors[0]
    return 0


def _list(admin, args) -> int:
    pattern = PatternType[(args.resource_pattern_type or "literal").upper()]
    named = resources(args, pattern, required=False)
    found: list[Acl] = []
    for r in named or [None]:
        selector = AclFilter() if r is None else AclFilter(r[0], r[1], r[2])
        found += admin.describe_acls(selector)
    by_resource: dict[tuple, list] = {}
    for acl in found:
        entries = by_resource.setdefault(
            (acl.resource_type, acl.resource_name, acl.pattern_type), [])
        entry = (acl.principal, acl.host, acl.operation, acl.permission)
        if entry not in entries:   # a resource named twice lists its ACLs once
            entries.append(entry)
    wanted = [principal(p) for p in args.principal]
    for who in wanted or [None]:
        if who is not None:
            print(f"ACLs for principal `{who}`")
        for r, acls in by_resource.items():
            shown = [e for e in acls if who is None or e[0] == who]
            if shown:
                print(block(f"Current ACLs for resource `{pattern_text(r)}`", shown))
    return 0


def _remove(admin, args) -> int:
    pattern = _pattern_type(args, adding=False)
    for r, acls in resource_entries(args, pattern).items():
        filter_text = pattern_text(r, "ResourcePatternFilter")
        question = (f"Are you sure you want to delete all ACLs for resource filter "
                    f"`{filter_text}`? (y/n)" if not acls else
                    "Are you sure you want to remove ACLs: \n "
                    + "\n".join("\t" + entry_text(e) for e in acls)
                    + f" \n from resource filter `{filter_text}`? (y/n)")
        if not args.force:
            print(question)
            if sys.stdin.readline().strip().lower() != "y":
                continue
        filters = [AclFilter(r[0], r[1], r[2])] if not acls else [
            AclFilter(r[0], r[1], r[2], p, h, op, perm) for p, h, op, perm in acls]
        admin.delete_acls(filters)
    return 0


def run(args: argparse.Namespace) -> int:
    from protocols.errors import KafkaError
    try:
        action = _add if args.add else _remove if args.remove else _list
        if args.add or args.remove:   # usage errors before reaching the cluster
            resource_entries(args, _pattern_type(args, adding=args.add))
        return action(admin_of(args), args)
    except UsageError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    except KafkaError as e:
        print(f"Error while executing ACL command: {e.name}: {e}", file=sys.stderr)
        return EXIT_FAILURE
