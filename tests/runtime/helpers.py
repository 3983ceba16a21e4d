"""Talking to partition replicas directly (through their hosts), below the clients."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

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


@contextmanager
def controller_cannot_commit(cluster):
    """While inside, the controller's checkpoint writes fail with a real FileExistsError (a
    file stands where its metadata directory was), so every change it makes, a broker's
    registration included, is answered with that error; the directory is back on leaving."""
    from actors.controller.actor import METADATA_DIR
    metadata = Path(cluster.data_dir) / METADATA_DIR
    aside = metadata.with_name(metadata.name + ".aside")
    metadata.rename(aside)
    metadata.write_bytes(b"")
    try:
        yield
    finally:
        metadata.unlink()
        aside.rename(metadata)


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


def send_through_fault(cluster, topic: str, fault, before_s: float = 1.5,
                       after_s: float = 4.0) -> list:
    """An idempotent acks=all producer sends numbered records to partition 0 of ``topic``
    while ``fault()`` happens ``before_s`` into the run; it stops ``after_s`` later and
    flushes. The RecordMetadata of every send (each must be acknowledged)."""
    import rafka
    producer = rafka.Producer(cluster, {"linger.ms": 1, "batch.size": 512,
                                        "retry.backoff.ms": 50})
    futures, stop = [], threading.Event()

    def keep_sending():
        i = 0
        while not stop.is_set():
            futures.append(producer.send(topic, f"{i:06d}".encode(), partition=0))
            i += 1
            time.sleep(0.0005)
    sender = threading.Thread(target=keep_sending)
    sender.start()
    time.sleep(before_s)
    fault()
    time.sleep(after_s)
    stop.set()
    sender.join()
    producer.flush(60)
    results = [f.result(60) for f in futures]
    producer.close()
    assert len({m.offset for m in results}) == len(results)
    return results


def check_read_back_once_in_order(cluster, topic: str, results: list) -> None:
    """Every record ``send_through_fault`` had acknowledged is read back exactly once, in
    order, at its acknowledged offset; the failure says what was lost, doubled or moved."""
    import pytest
    import rafka
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([(topic, 0)])
    records: list = []
    deadline = time.monotonic() + 60
    while len(records) < len(results) and time.monotonic() < deadline:
        records += consumer.poll(500)
    consumer.close()
    values = [r.value for r in records]
    expected = [f"{i:06d}".encode() for i in range(len(results))]
    if values != expected:
        dups = sorted({v for v in values if values.count(v) > 1})[:5]
        missing = sorted(set(expected) - set(values))[:5]
        first = next((i for i, (a, b) in enumerate(zip(values, expected)) if a != b), None)
        pytest.fail(f"{len(values)} read, {len(expected)} sent; duplicates {dups}; missing "
                    f"{missing}; first difference at index {first}")
    assert [r.offset for r in records] == [m.offset for m in results]
