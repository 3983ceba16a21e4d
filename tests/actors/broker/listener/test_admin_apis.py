"""The Kafka listener's config answers, as plain functions
(``actors.broker.listener.admin_apis``): DescribeConfigs' values and sources,
IncrementalAlterConfigs' operations."""
from __future__ import annotations

import pytest

from actors.broker.listener.admin_apis import (APPEND, DEFAULT_CONFIG, DELETE,
                                               DYNAMIC_TOPIC_CONFIG, SET,
                                               STATIC_BROKER_CONFIG, SUBTRACT, config_text,
                                               incremental_changes, topic_config_entries)
from protocols.errors import InvalidRequestError


def test_described_values_say_where_they_come_from():
    entries = {e["name"]: e for e in topic_config_entries(
        {"retention.ms": 3_600_000, "cleanup.policy": ["compact", "delete"]},
        {"log.segment.bytes": 1 << 20}, None)}
    assert (entries["retention.ms"]["value"], entries["retention.ms"]["config_source"]) == \
        ("3600000", DYNAMIC_TOPIC_CONFIG)
    assert entries["cleanup.policy"]["value"] == "compact,delete"
    assert (entries["segment.bytes"]["value"], entries["segment.bytes"]["config_source"]) == \
        (str(1 << 20), STATIC_BROKER_CONFIG)
    assert entries["min.insync.replicas"]["config_source"] == DEFAULT_CONFIG
    assert entries["retention.ms"]["config_type"] == 5        # LONG
    only = topic_config_entries({}, {}, ["retention.ms", "no.such.key"])
    assert [e["name"] for e in only] == ["retention.ms"]


def test_incremental_operations_as_kafka_defines_them():
    current = {"cleanup.policy": ["delete"], "retention.ms": 1000}
    assert incremental_changes(current, [("retention.ms", SET, "5000"),
                                         ("segment.ms", DELETE, None)]) == \
        {"retention.ms": "5000", "segment.ms": None}
    assert incremental_changes(current, [("cleanup.policy", APPEND, "compact")]) == \
        {"cleanup.policy": "delete,compact"}
    assert incremental_changes({"cleanup.policy": "compact,delete"},
                               [("cleanup.policy", SUBTRACT, "delete")]) == \
        {"cleanup.policy": "compact"}
    with pytest.raises(InvalidRequestError, match="Unknown config operation 9"):
        incremental_changes(current, [("retention.ms", 9, "1")])


def test_config_text_is_kafkas():
    assert [config_text(v) for v in (True, False, 5, ["a", "b"], None)] == \
        ["true", "false", "5", "a,b", None]
