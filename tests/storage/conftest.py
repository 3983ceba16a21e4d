from __future__ import annotations

import pytest

from tests.clock import ManualClock

from protocols.records import Record, encode_batch



@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)


def batch(n: int = 1, *, value_size: int = 100, timestamp: int = 1_700_000_000_000,
          key: bytes | None = None, base_offset: int = 0, epoch: int = -1,
          compression: str = "none", prefix: str = "v") -> bytes:
    """n records of ``value_size`` bytes each, as one v2 batch."""
    records = [Record(key if key is not None else None,
                      f"{prefix}{i}".encode().ljust(value_size, b"."), timestamp + i)
               for i in range(n)]
    return encode_batch(records, base_offset=base_offset, partition_leader_epoch=epoch,
                        compression=compression)


def keyed_batch(pairs, *, timestamp: int = 1_700_000_000_000, base_offset: int = 0) -> bytes:
    records = [Record(k, v, timestamp + i) for i, (k, v) in enumerate(pairs)]
    return encode_batch(records, base_offset=base_offset)


def values(data: bytes) -> list[bytes | None]:
    from protocols.records import iter_batches
    return [r.value for b in iter_batches(data) for r in b.records()]


def offsets(data: bytes) -> list[int]:
    from protocols.records import iter_batches
    return [r.offset for b in iter_batches(data) for r in b.records()]
