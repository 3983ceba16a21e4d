"""Topic names and partition directory names.

Topic names become directory names (``<topic>-<partition>``), so they are validated the way
Kafka's ``Topic.validate`` does before anything touches the disk.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from protocols.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
# Kafka's internal topic of committed offsets and group metadata.
OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's internal topic of transactional ids' states (the transaction coordinators' log).
TRANSACTION_STATE_TOPIC = "__transaction_state"
# FindCoordinator's key types: whose coordinator, and so which internal topic.
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
# The internal topics whose leaders host a coordinator.
COORDINATOR_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def validate_topic_name(topic: object) -> str:
    if not isinstance(topic, str):
        raise InvalidTopicError(f"Topic name must be a string, not {type(topic).__name__}")
    if not topic:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(topic) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"Topic name is illegal, it can't be longer than "
                                f"{MAX_NAME_LENGTH} characters, topic name: {topic[:40]}...")
    if not _LEGAL.match(topic):
        raise InvalidTopicError(f"Topic name \"{topic}\" is illegal, it contains a character "
                                "other than ASCII alphanumerics, '.', '_' and '-'")
    return topic


def validate_partition(partition: object) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidTopicError(f"Partition must be a non-negative integer, not {partition!r}")
    return partition


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{validate_topic_name(topic)}-{validate_partition(partition)}"


def parse_partition_dir_name(name: str) -> TopicPartition:
    """``my.topic-3`` -> ``TopicPartition('my.topic', 3)``; the topic may itself contain '-'."""
    m = _PARTITION_DIR.match(name)
    if not m:
        raise InvalidTopicError(f"Directory name {name!r} is not of the form <topic>-<partition>")
    topic = validate_topic_name(m.group("topic"))
    return TopicPartition(topic, int(m.group("partition")))
