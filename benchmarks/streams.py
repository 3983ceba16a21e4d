"""A realistic stream: the records users bring, not the benchmarks' uniform key-less ones.

Keys are user ids (``user-<n>``, 6-12 bytes) or UUIDs (36 bytes), half each, drawn from a
pool so that keys repeat; values are JSON objects of 100 B to 2 KiB, skewed toward small
(log-normal, median ~230 B, mean ~310 B); a tenth of the records carry 1-3 headers
(``trace-id``, ``source``, ``schema``); timestamps rise with jitter, as events' do, ending
about when the stream is made. Made with a fixed seed, so every run and every peer gets the
same keys, values and headers (the timestamps move with the clock).
"""
from __future__ import annotations

import time
import uuid

import numpy as np
import pyarrow as pa

MIN_VALUE, MAX_VALUE = 100, 2048
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
EVENTS = ("page_view", "click", "add_to_cart", "checkout", "search", "login")


def value_sizes(rng: np.random.Generator, count: int) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(230), 0.75, count), MIN_VALUE, MAX_VALUE).astype(int)


def realistic_stream(count: int, seed: int = 40, start_ms: int | None = None) -> pa.Table:
    """``count`` records as an Arrow table: key, value (binary), headers (Spark's
    ``array<struct<key: string, value: binary>>``, null for most), timestamp (int64 ms).
    ``start_ms``: the first timestamp; by default the stream ends about now. Timestamps
    older than a topic's ``retention.ms`` (7 days) are deleted by the next retention pass
    (Kafka's first comes 30 s after a broker starts), so a fixed date goes stale: Kafka
    4.3.1 deleted the peer's copy of a stream dated 2026-09 under its Spark job."""
    rng = np.random.default_rng(seed)
    pool = max(1, count // 20)
    ids = [f"user-{n}".encode() for n in rng.integers(0, 10_000_000, pool // 2 + 1)]
    ids += [str(uuid.UUID(bytes=rng.bytes(16), version=4)).encode()
            for _ in range(pool - len(ids) + 1)]
    keys = [ids[i] for i in rng.integers(0, len(ids), count)]
    sizes = value_sizes(rng, count)
    filler = "abcdefghijklmnopqrstuvwxyz0123456789" * (MAX_VALUE // 36 + 1)
    events = rng.integers(0, len(EVENTS), count)
    values = []
    for i in range(count):
        head = (f'{{"id":{i},"user":"{keys[i].decode()}","event":"{EVENTS[events[i]]}",'
                f'"amount":{(i % 997) * 0.37:.2f},"data":"')
        pad = max(0, int(sizes[i]) - len(head) - 2)
        values.append(f'{head}{filler[:pad]}"}}'.encode())
    headers: list = [None] * count
    for i in np.flatnonzero(rng.random(count) < 0.1):
        n = int(rng.integers(1, 4))
        headers[i] = [("trace-id", rng.bytes(8).hex().encode()), ("source", b"web-frontend"),
                      ("schema", b"events.v3")][:n]
    if start_ms is None:
        start_ms = time.time_ns() // 1_000_000 - count // 10 - 50
    stamps = start_ms + np.arange(count, dtype=np.int64) // 10 + rng.integers(0, 50, count)
    return pa.table({"key": pa.array(keys, pa.binary()),
                     "value": pa.array(values, pa.binary()),
                     "headers": pa.array(headers, HEADER_TYPE),
                     "timestamp": pa.array(stamps, pa.int64())})


def describe_stream(table: pa.Table) -> str:
    import pyarrow.compute as pc
    values = pc.binary_length(table["value"]).to_numpy()
    keys = pc.binary_length(table["key"]).to_numpy()
    with_headers = table["headers"].is_valid().to_numpy(zero_copy_only=False).mean()
    return (f"realistic stream: {len(table):,} records, keys {keys.min()}-{keys.max()} B "
            f"(user ids and UUIDs), JSON values {values.min()}-{values.max()} B (median "
            f"{int(np.median(values))}, mean {values.mean():.0f}), {with_headers:.0%} with "
            f"1-3 headers, rising timestamps; {payload_bytes(table) / 2**20:.1f} MB of keys, "
            "values and headers")


def payload_bytes(table: pa.Table) -> int:
    """Key, value and header bytes: what the MB/s figures count."""
    import pyarrow.compute as pc
    total = int(pc.sum(pc.binary_length(table["value"])).as_py() or 0)
    total += int(pc.sum(pc.binary_length(table["key"])).as_py() or 0)
    if "headers" in table.column_names:
        flat = pc.list_flatten(table["headers"])
        if len(flat):
            total += int(pc.sum(pc.binary_length(pc.struct_field(flat, [0]))).as_py() or 0)
            total += int(pc.sum(pc.binary_length(pc.struct_field(flat, [1]))).as_py() or 0)
    return total
