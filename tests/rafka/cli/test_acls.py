"""``rafka acls``' reading of kafka-acls.sh's options: its --producer and --consumer
shortcuts (Kafka's AclCommandTest cases), operation names, pattern types, usage errors and
its output's words."""
import argparse

import pytest

from protocols.kafka.acl import (CLUSTER_NAME, AclOperation, AclPermissionType, PatternType,
                                 ResourceType)
from rafka.cli.acls import (UsageError, block, configure, operation, operation_name,
                            pattern_text, resource_entries)

TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(list(argv))


def ops(entries) -> set:
    return {e[2] for e in entries}


def test_producer_grants_write_describe_create_on_topics_and_transactional_ids():
    found = resource_entries(args("--add", "--allow-principal", "User:alice", "--producer",
                                  "--topic", "t", "--transactional-id", "tx", "--idempotent"),
                             LITERAL)
    assert ops(found[(TOPIC, "t", LITERAL)]) == {Op.WRITE, Op.DESCRIBE, Op.CREATE}
    assert ops(found[(TXN, "tx", LITERAL)]) == {Op.WRITE, Op.DESCRIBE}
    assert ops(found[(CLUSTER, CLUSTER_NAME, LITERAL)]) == {Op.IDEMPOTENT_WRITE}


def test_consumer_grants_read_describe_on_topics_and_read_on_groups():
    found = resource_entries(args("--add", "--allow-principal", "User:bob", "--consumer",
                                  "--topic", "t", "--group", "g"), LITERAL)
    assert ops(found[(TOPIC, "t", LITERAL)]) == {Op.READ, Op.DESCRIBE}
    assert ops(found[(GROUP, "g", LITERAL)]) == {Op.READ}
    both = resource_entries(args("--add", "--allow-principal", "User:bob", "--consumer",
                                 "--producer", "--topic", "t", "--group", "g"), LITERAL)
    assert ops(both[(TOPIC, "t", LITERAL)]) == {Op.READ, Op.WRITE, Op.DESCRIBE, Op.CREATE}


def test_principals_hosts_and_operations_multiply_hosts_default_to_any():
    found = resource_entries(args("--add", "--allow-principal", "User:a", "--allow-principal",
                                  "User:b", "--allow-host", "10.0.0.1", "--deny-principal",
                                  "User:c", "--operation", "Read", "--operation",
                                  "describe_configs", "--topic", "t",
                                  "--resource-pattern-type", "prefixed"), PREFIXED)
    entries = set(found[(TOPIC, "t", PREFIXED)])
    assert entries == {(p, "10.0.0.1", o, ALLOW) for p in ("User:a", "User:b")
                       for o in (Op.READ, Op.DESCRIBE_CONFIGS)} | \
        {("User:c", "*", o, DENY) for o in (Op.READ, Op.DESCRIBE_CONFIGS)}


def test_operation_names_as_kafka_writes_them():
    assert operation("IdempotentWrite") == operation("idempotent_write") == Op.IDEMPOTENT_WRITE
    assert operation_name(Op.DESCRIBE_CONFIGS) == "DescribeConfigs"
    with pytest.raises(UsageError, match="Invalid operation 'Any'"):
        operation("Any")


def test_usage_errors():
    with pytest.raises(UsageError, match="You must provide at least one resource"):
        resource_entries(args("--add", "--allow-principal", "User:a"), LITERAL)
    with pytest.raises(UsageError, match="ResourceType GROUP only supports operations "):
        resource_entries(args("--add", "--allow-principal", "User:a", "--operation", "Write",
                              "--group", "g"), LITERAL)
    with pytest.raises(UsageError, match="principalType:principalName"):
        resource_entries(args("--add", "--allow-principal", "alice", "--topic", "t"),
                         LITERAL)


def test_output_reads_as_kafka_acls_sh_prints_it():
    r = (TOPIC, "t", LITERAL)
    assert pattern_text(r) == "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"
    assert block("Current ACLs for resource `x`", [("User:a", "*", Op.READ, ALLOW)]) == (
        "Current ACLs for resource `x`: \n \t(principal=User:a, host=*, operation=READ, "
        "permissionType=ALLOW) \n")
