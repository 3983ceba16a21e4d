"""What the group coordinator writes to ``__consumer_offsets`` and how a new coordinator
reads it back (pure: bytes in, bytes out).

As in Kafka the topic is compacted, so every record's key names what it is about and the
last value per key wins; a null value (tombstone) deletes it:

- an offset commit: key ``(1, group, topic, partition)``, value ``OffsetAndMetadata``;
- a group's metadata: key ``(2, group)``, value the generation, protocol, leader and members.

Keys and values are msgpack (``protocols.wire``); Kafka's key versions 1 (offset commit) and
2 (group metadata) are kept as the first element, so the two never collide.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from protocols.messages import OffsetAndMetadata
from protocols.topics import TopicPartition
from protocols.wire import decode, encode

OFFSET_COMMIT_KEY, GROUP_METADATA_KEY = 1, 2


@dataclass
class StoredGroup:
    """A group as loaded from the log: its committed offsets, its last metadata, and the
    offsets transactions committed that their markers have not yet settled (producer id
    -> values)."""
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    metadata: dict | None = None
    pending: dict[int, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return encode((OFFSET_COMMIT_KEY, group_id, topic, partition))


def offset_commit_value(value: OffsetAndMetadata) -> bytes:
    return encode((value.offset, value.leader_epoch, value.metadata, value.commit_timestamp))


def group_metadata_key(group_id: str) -> bytes:
    return encode((GROUP_METADATA_KEY, group_id))


def group_metadata_value(metadata: dict) -> bytes:
    """``metadata`` as ``Group.to_stored()`` gives it."""
    return encode(metadata)


def replay(records: Iterable[tuple]) -> dict[str, StoredGroup]:
    """Fold records, in offset order, into each group's state: ``(key, value)``, or as
    ``coordinator_load.read_partition`` gives them with transactions, ``(key, value,
    producer id, None)`` and markers ``(None, None, producer id, commit)``. A transaction's
    offsets wait for its marker: COMMIT makes them committed, ABORT drops them."""
    groups: dict[str, StoredGroup] = {}
    for record in records:
        key, value = record[0], record[1]
        producer_id, marker = (record[2], record[3]) if len(record) > 2 else (-1, None)
        if marker is not None:
            for group in groups.values():
                settled = group.pending.pop(producer_id, None)
                if settled and marker:
                    group.offsets.update(settled)
            continue
        if key is None:
            continue
        kind, group_id, *rest = decode(key)
        group = groups.setdefault(group_id, StoredGroup())
        if kind == OFFSET_COMMIT_KEY:
            tp = TopicPartition(*rest)
            if producer_id >= 0:
                if value is not None:
                    group.pending.setdefault(producer_id, {})[tp] = \
                        OffsetAndMetadata(*decode(value))
            elif value is None:
                group.offsets.pop(tp, None)
            else:
                group.offsets[tp] = OffsetAndMetadata(*decode(value))
        elif kind == GROUP_METADATA_KEY:
            group.metadata = None if value is None else decode(value)
    # A group with neither offsets nor metadata left (nor a transaction's) was deleted.
    return {g: s for g, s in groups.items() if s.offsets or s.metadata is not None
            or s.pending}
