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


# Keys longer than this are hashed one by one: every numpy pass handles one 4-byte block of
# all keys, so one long key would add a pass per 4 bytes for itself.
_LONG_KEY = 64


def murmur2_many(keys):
    """``murmur2`` of every key of an Arrow binary array without nulls, as a numpy int32
    array: the same loop, one 4-byte block of all keys per step, each block read as a
    little-endian word straight from the keys' bytes (a key's blocks past its own length
    leave its hash alone)."""
    import numpy as np

    count = len(keys)
    if keys.null_count:
        raise ValueError("murmur2_many takes keys without nulls")
    out = np.empty(count, np.int32)
    if count == 0:
        return out
    offsets = np.frombuffer(keys.buffers()[1], np.int32)[
        keys.offset:keys.offset + count + 1].astype(np.int64)
    raw = keys.buffers()[2]
    data = np.frombuffer(raw, np.uint8)[offsets[0]:offsets[-1]] if raw is not None \
        else np.zeros(0, np.uint8)
    data = np.concatenate([data, np.zeros(8, np.uint8)])   # tail reads stay inside
    words = np.ndarray((len(data) - 3,), "<u4", data, 0, (1,))   # a word at every byte
    starts, lengths = offsets[:-1] - offsets[0], np.diff(offsets)
    long_keys = np.flatnonzero(lengths > _LONG_KEY)
    for i in long_keys.tolist():
        out[i] = murmur2(data[starts[i]:starts[i] + lengths[i]].tobytes())
    short = np.flatnonzero(lengths <= _LONG_KEY) if len(long_keys) else slice(None)
    start, length = starts[short], lengths[short]
    m = np.uint32(_M)
    h = np.uint32(0x9747B28C) ^ length.astype(np.uint32)
    full = length // 4
    fewest, most = int(full.min(initial=0)), int(full.max(initial=0))
    for j in range(most):
        if j < fewest:   # every key has this block
            k = words[start + 4 * j] * m
            k ^= k >> np.uint32(24)
            k *= m
            h = (h * m) ^ k
        else:
            rows = np.flatnonzero(full > j)
            k = words[start[rows] + 4 * j] * m
            k ^= k >> np.uint32(24)
            k *= m
            h[rows] = (h[rows] * m) ^ k
    tail = length % 4
    base = start + full * 4
    h ^= np.where(tail == 3, data[base + 2].astype(np.uint32) << np.uint32(16), np.uint32(0))
    h ^= np.where(tail >= 2, data[base + 1].astype(np.uint32) << np.uint32(8), np.uint32(0))
    h ^= np.where(tail >= 1, data[base].astype(np.uint32), np.uint32(0))
    h = np.where(tail >= 1, h * m, h)
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    out[short] = h.view(np.int32)
    return out


def partitions_for_keys(keys, num_partitions: int):
    """``partition_for_key`` of every key of an Arrow binary array without nulls (numpy)."""
    return (murmur2_many(keys) & 0x7FFFFFFF) % num_partitions


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
