"""Talking to partition replicas directly (through their hosts), below the clients."""
from __future__ import annotations

import time

import ray

from protocols.errors import KafkaError
from protocols.messages import FetchRequest
from protocols.records import Record, encode_batch, iter_batches
from protocols.wire import decode, encode


def produce(cluster, topic: str, partition: int, value: bytes, acks: int = -1,
            timeout_ms: int = 5000):
    """Send one record to the partition's current leader; the ProduceResult."""
    _, leader = cluster.leader(topic, partition)
    data = encode_batch([Record(None, value)])
    return decode(ray.get(leader.produce.remote(data, acks, timeout_ms)))


def produce_retrying(cluster, topic: str, partition: int, value: bytes,
                     deadline_s: float = 30) -> int:
    """Retry retriable errors as a producer would; the acknowledged offset."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            result = produce(cluster, topic, partition, value)
            if result.error is None:
                return result.base_offset
            error = result.error
        except (KafkaError, ray.exceptions.RayError) as e:
            error = e
        if time.monotonic() > deadline:
            raise AssertionError(f"could not produce to {topic}-{partition}: {error!r}")
        time.sleep(0.1)


def read_all(handle, start: int = 0, replica_id: int = -1) -> dict[int, bytes]:
    """offset -> value for everything a consumer can read (below the HW)."""
    out: dict[int, bytes] = {}
    offset = start
    while True:
        result = decode(ray.get(handle.fetch.remote(encode(FetchRequest(replica_id, offset)))))
        if result.error is not None:
            raise result.error
        batches = list(iter_batches(result.records))
        if not batches:
            return out
        for batch in batches:
            for r in batch.records():
                out[r.offset] = r.value
            offset = batch.last_offset + 1


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)
