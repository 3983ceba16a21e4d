"""How ``send_batch`` cuts its records into batches (``rafka.producer.arrow_plan``): by
bytes, as Kafka's accumulator fills a batch up to batch.size, whatever the records' sizes.
The round trip through a cluster is in tests/runtime/test_clients.py."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from protocols.arrow_records import as_binary, timestamp_column
from protocols.partitioner import StickyPartitionCache, partitions_for_keys
from protocols.records import RECORD_BATCH_OVERHEAD, iter_batches
from rafka.producer.arrow_plan import (BULK_BATCH_BYTES, bulk_batch_size, encoded_batches,
                                       encoded_header_field, plan_batches, record_sizes)
from storage.config import LogConfig


def varied(count: int, seed: int = 7) -> tuple[pa.Array, pa.Array]:
    """Values of 100 B to 2 KiB, mostly small, and keys of 8-36 bytes: a stream's shape."""
    rng = random.Random(seed)
    values = [bytes([i % 251]) * min(2048, int(100 * rng.paretovariate(1.2)))
              for i in range(count)]
    keys = [f"user-{rng.randrange(10**(rng.randrange(3, 31)))}".encode() for _ in range(count)]
    return pa.array(values, pa.binary()), pa.array(keys, pa.binary())


def plan(values, keys, batch_size: int, max_request_size: int = 1 << 20, partition=None):
    sizes = record_sizes(values, keys, None, max_request_size)
    return sizes, plan_batches("t", list(range(6)), partition, keys, sizes,
                               batch_size=batch_size, max_request_size=max_request_size,
                               ignore_keys=False, sticky=StickyPartitionCache(random.Random(1)))


@pytest.mark.parametrize("batch_size", [16_384, 100_000, BULK_BATCH_BYTES])
def test_a_batch_holds_as_many_records_as_fit_in_batch_size_whatever_their_sizes(batch_size):
    values, keys = varied(20_000)
    sizes, batches = plan(values, keys, batch_size)
    by_partition: dict[int, list[np.ndarray]] = {}
    for p, indices in batches:
        by_partition.setdefault(p, []).append(indices)
    for p, runs in by_partition.items():
        for run, following in zip(runs, runs[1:] + [None]):
            held = RECORD_BATCH_OVERHEAD + int(sizes[run].sum())
            assert held <= batch_size
            if following is not None:   # the next record would not have fit
                assert held + int(sizes[following[0]]) > batch_size
    # Every record once, each partition's in the order given, in its key's partition.
    assert sorted(np.concatenate([i for _, i in batches]).tolist()) == list(range(20_000))
    expected = partitions_for_keys(keys, 6)
    for p, runs in by_partition.items():
        order = np.concatenate(runs)
        assert (np.diff(order) > 0).all() and (expected[order] == p).all()


def test_records_of_differing_sizes_fill_their_batches_and_no_more_batches_are_made():
    """The largest record does not set a batch's record count: 20,000 records of ~330 B
    mean (up to 2 KiB) make about total / batch.size batches, not one per 500 records."""
    values, keys = varied(20_000)
    sizes, batches = plan(values, keys, BULK_BATCH_BYTES)
    total = int(sizes.sum())
    assert len(batches) <= -(-total // (BULK_BATCH_BYTES - 2048)) + 6


def test_a_record_larger_than_batch_size_is_alone_in_its_batch():
    values = pa.array([b"a" * 100, b"b" * 5_000, b"c" * 100, b"d" * 100], pa.binary())
    _, batches = plan(values, None, 1_000, partition=2)
    assert [(p, i.tolist()) for p, i in batches] == [(2, [0]), (2, [1]), (2, [2, 3])]


def test_key_less_records_take_a_sticky_partition_a_whole_batch_at_a_time():
    values = pa.array([b"v" * (100 + 50 * (i % 7)) for i in range(3_000)], pa.binary())
    sizes, batches = plan(values, None, 16_384)
    assert sorted(np.concatenate([i for _, i in batches]).tolist()) == list(range(3_000))
    for p, indices in batches:
        assert RECORD_BATCH_OVERHEAD + int(sizes[indices].sum()) <= 16_384
    assert len({p for p, _ in batches}) > 1


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_send_batch_batches_fit_a_topic_of_default_max_message_bytes(compression):
    """Built, each batch (header included) is within a topic's default max.message.bytes,
    so a default send_batch is not refused as MESSAGE_TOO_LARGE and split; compressed too,
    values of random bytes growing under each codec's framing."""
    _, keys = varied(30_000, seed=11)
    rng = np.random.default_rng(11)
    values = pa.array([rng.bytes(int(n)) for n in rng.integers(100, 2048, 30_000)], pa.binary())
    stamps = timestamp_column(list(range(0, 30_000 * 37, 37)), 30_000, 0)
    headers = [[("trace", b"x" * (i % 40))] if i % 10 == 0 else None for i in range(30_000)]
    encoded = encoded_header_field(headers, 30_000)
    sizes = record_sizes(values, keys, encoded, 1 << 20)
    batches = plan_batches("t", list(range(6)), None, keys, sizes,
                           batch_size=bulk_batch_size({"batch.size": 16_384,
                                                       "max.request.size": 1 << 20}, set()),
                           max_request_size=1 << 20, ignore_keys=False,
                           sticky=StickyPartitionCache())
    limit = LogConfig.from_props({}).max_message_bytes
    built = [bytes(b.build(compression=compression))
             for _, _, b in encoded_batches(batches, sizes, as_binary(values), keys, stamps,
                                            encoded)]
    assert all(len(b) <= limit for b in built)
    assert max(len(b) for b in built) > limit * 0.9   # filled, not cut by record count
    assert sum(b.header().record_count for blob in built for b in iter_batches(blob)) == 30_000


def test_bulk_batch_size_is_batch_size_when_given_and_never_past_max_request_size():
    config = {"batch.size": 16_384, "max.request.size": 1 << 20}
    assert bulk_batch_size(config, set()) == BULK_BATCH_BYTES < 1_000_012
    assert bulk_batch_size(config, {"batch.size"}) == 16_384
    assert bulk_batch_size({"batch.size": 16_384, "max.request.size": 5_000}, set()) == 5_000
    assert bulk_batch_size({"batch.size": 2 << 20, "max.request.size": 1 << 20},
                           {"batch.size"}) == 1 << 20
