"""Kafka's default partitioning: murmur2 of the serialized key (byte-compatible with
``org.apache.kafka.common.utils.Utils.murmur2``), positive, modulo the partition count; and
the sticky choice for records without a key (KIP-480: stay on one partition until its batch
is sent, then move on)."""
from __future__ import annotations

import random

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def _signed(n: int) -> int:
    n &= _MASK
    return n - (1 << 32) if n & 0x80000000 else n


def murmur2(data: bytes) -> int:
    """Kafka's murmur2: a signed 32-bit int, as Java returns it."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return _signed(h)


def to_positive(n: int) -> int:
    """Kafka's Utils.toPositive: clear the sign bit (not abs: abs(MIN_VALUE) overflows)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitionCache:
    """The partition a null-key record goes to, per topic, until ``next_partition`` is
    called when that partition's batch is sent (preferring partitions with a leader)."""

    def __init__(self, rng: random.Random | None = None):
        self._rng = rng or random.Random()
        # topic -> its sticky partition (public: the producer's send reads it inline)
        self.current: dict[str, int] = {}

    def partition(self, topic: str, available: list[int], num_partitions: int) -> int:
        if topic not in self.current:
            return self.next_partition(topic, available, num_partitions, -1)
        return self.current[topic]

    def next_partition(self, topic: str, available: list[int], num_partitions: int,
                       previous: int) -> int:
        if self.current.get(topic, -1) != previous:
            return self.current[topic]  # someone already moved on
        choices = [p for p in (available or range(num_partitions)) if p != previous] or \
            list(available or range(num_partitions))
        chosen = self._rng.choice(choices)
        self.current[topic] = chosen
        return chosen
