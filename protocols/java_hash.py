"""Java's ``String.hashCode()`` and what Kafka derives from it: which partition of an
internal topic (``__consumer_offsets``, ``__transaction_state``) holds a coordinator's key."""
from __future__ import annotations


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` over UTF-16 code units, as an unsigned 32-bit number."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def java_string_hashcode(s: str) -> int:
    """``String.hashCode()`` as Java's signed 32-bit int."""
    h = java_string_hash(s)
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition_for(key: str, partitions: int) -> int:
    """The internal topic's partition holding a group id or transactional id (Kafka's
    ``Utils.abs(key.hashCode) % partitions``); its leader's broker is the key's
    coordinator."""
    h = java_string_hashcode(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
