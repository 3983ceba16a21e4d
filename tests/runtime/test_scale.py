"""Kafka's scale on one machine (docs/architecture.md, "Scale"): 1,000 partitions at RF=3 on
3 brokers, created with every leader serving, one record produced to and consumed from each through
the public API. The full sweep (sizes, memory, idle CPU) is ``benchmarks/runtime.py
--sweep``."""
from __future__ import annotations

import itertools

import pytest

import rafka
from benchmarks.machine import MemoryGuard, available_gib

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

PARTITIONS = 1_000
MIN_AVAILABLE_GIB = 3.0
_names = itertools.count()


def test_a_thousand_partitions_at_rf_3_each_take_and_give_back_a_record(ray_session, tmp_path):
    if available_gib() < MIN_AVAILABLE_GIB + 2:
        pytest.fail(f"not started: {available_gib():.1f} GiB of memory available, the test "
                    f"needs {MIN_AVAILABLE_GIB + 2} GiB (it stops itself below "
                    f"{MIN_AVAILABLE_GIB} GiB)")
    # Kafka's default timeouts, as a deployment runs, not the fault tests' short ones: with
    # replica.lag.time.max.ms at 3 s, a follower of 1,000 partitions that a loaded two-core
    # machine holds up for 3 s leaves every ISR and comes back, two AlterPartitions each.
    cluster = rafka.Cluster.start(3, tmp_path / "data", name=f"scale{next(_names)}")
    try:
        with MemoryGuard(MIN_AVAILABLE_GIB) as guard:
            admin = rafka.Admin(cluster, timeout_s=300)
            admin.create_topics([rafka.NewTopic("wide", PARTITIONS, 3)])  # leaders serving
            with rafka.Producer(cluster, {"acks": "all", "linger.ms": 5}) as producer:
                futures = [producer.send("wide", f"p{p}".encode(), partition=p)
                           for p in range(PARTITIONS)]
                offsets = [f.result(120).offset for f in futures]
            assert offsets == [0] * PARTITIONS
            consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest",
                                                "max.poll.records": 5000})
            consumer.assign([("wide", p) for p in range(PARTITIONS)])
            got: dict[int, bytes] = {}
            for _ in range(600):
                for r in consumer.poll(500):
                    got[r.partition] = r.value
                if len(got) == PARTITIONS or guard.tripped is not None:
                    break
            consumer.close()
        assert guard.tripped is None, (
            f"stopped: available memory fell to {guard.tripped:.1f} GiB "
            f"(< {MIN_AVAILABLE_GIB} GiB)")
        assert got == {p: f"p{p}".encode() for p in range(PARTITIONS)}
    finally:
        cluster.shutdown()
