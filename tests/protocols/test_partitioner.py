"""Kafka's murmur2 partitioner, byte for byte (vectors from Kafka's UtilsTest)."""
from __future__ import annotations

import random

import pytest

from protocols.partitioner import (StickyPartitionCache, murmur2, murmur2_many,
                                   partition_for_key, partitions_for_keys, to_positive)


@pytest.mark.parametrize("data,expected", [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_murmur2_of_many_keys_at_once_is_murmur2_of_each():
    import pyarrow as pa

    rng = random.Random(7)
    keys = [b"21", b"foobar", b"", b"a-little-bit-longer-string", b"\xff" * 9,
            *(rng.randbytes(rng.randrange(0, 41)) for _ in range(2000))]
    array = pa.array(keys, pa.binary())
    assert murmur2_many(array).tolist() == [murmur2(k) for k in keys]
    assert murmur2_many(array.slice(3, 50)).tolist() == [murmur2(k) for k in keys[3:53]]
    assert partitions_for_keys(array, 7).tolist() == [partition_for_key(k, 7) for k in keys]
    assert murmur2_many(pa.array([b"", b""], pa.binary())).tolist() == [murmur2(b"")] * 2
    assert len(murmur2_many(pa.array([], pa.binary()))) == 0
    # Keys of one length (every block a whole-array pass) and all shorter than a block.
    same = [rng.randbytes(13) for _ in range(100)]
    assert murmur2_many(pa.array(same, pa.binary())).tolist() == [murmur2(k) for k in same]
    tiny = [rng.randbytes(rng.randrange(0, 4)) for _ in range(100)]
    assert murmur2_many(pa.array(tiny, pa.binary())).tolist() == [murmur2(k) for k in tiny]
    # A long key among short ones is hashed on its own (it does not widen every pass).
    mixed = keys[:50] + [rng.randbytes(70_000), b"x" * 65, b"y" * 64] + keys[50:100]
    assert murmur2_many(pa.array(mixed, pa.binary())).tolist() == [murmur2(k) for k in mixed]


def test_to_positive_clears_the_sign_bit_not_abs():
    assert to_positive(-2**31) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5
    assert partition_for_key(b"foobar", 7) == to_positive(-790332482) % 7


def test_sticky_partition_changes_only_when_its_batch_is_sent():
    cache = StickyPartitionCache(random.Random(1))
    first = cache.partition("t", [0, 1, 2], 3)
    assert all(cache.partition("t", [0, 1, 2], 3) == first for _ in range(10))
    second = cache.next_partition("t", [0, 1, 2], 3, first)
    assert second != first and cache.partition("t", [0, 1, 2], 3) == second
    # A stale "batch sent" for the old partition does not move it again.
    assert cache.next_partition("t", [0, 1, 2], 3, first) == second
