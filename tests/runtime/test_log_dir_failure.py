"""A broker whose log directory runs out of space (a real tmpfs filled up): Kafka's log
directory failure. The broker halts, its leadership moves to the other ISR members, nothing
acknowledged is lost, and once the directory has room again the broker serves and rejoins
the ISR (Kafka's ReplicaManager.handleLogDirFailure, KIP-112)."""
from __future__ import annotations

import pytest

import rafka
from tests.disks import FILLER, fill, tmpfs
from tests.runtime.conftest import cluster_with
from tests.runtime.helpers import (check_read_back_once_in_order, send_through_fault,
                                   wait_until)

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def broker_2_on_a_small_disk(tmp_path):
    """Broker 2's log directory on its own 16 MiB tmpfs."""
    with tmpfs(tmp_path / "data" / "broker-2", "16m") as disk:
        yield disk


def test_a_leader_whose_disk_fills_halts_and_loses_nothing_acknowledged(
        ray_session, tmp_path, broker_2_on_a_small_disk):
    disk = broker_2_on_a_small_disk
    with cluster_with(tmp_path) as cluster:
        cluster.admin().create_topics([rafka.NewTopic(
            "full", replica_assignment={0: [2, 0, 1]}, config={"min.insync.replicas": 2})])
        wait_until(lambda: cluster.leader("full", 0)[0] == 2, 30, "broker 2 to lead full-0")
        before = cluster.broker_pid(2)
        results = send_through_fault(cluster, "full", lambda: fill(disk), after_s=12.0)

        # The leader's next append failed: broker 2 halted (Ray started it again, and it
        # waits for room), leadership moved to an ISR member, and the sends went on there.
        wait_until(lambda: cluster.broker_pid(2) != before, 30, "broker 2 to halt")
        meta = cluster.metadata()["topics"]["full"][0]
        assert meta["leader"] in (0, 1) and 2 not in meta["isr"], meta
        assert {m.offset for m in results} == set(range(len(results)))
        check_read_back_once_in_order(cluster, "full", results)

        # Room again: broker 2 registers, catches up and rejoins the ISR, its log whole.
        (disk / FILLER).unlink()
        cluster.wait_for_brokers([2], 60)
        wait_until(lambda: 2 in cluster.metadata()["topics"]["full"][0]["isr"], 60,
                   "broker 2 back in the ISR of full-0")
        import ray
        state = ray.get(cluster.replica("full", 0, 2).describe.remote())
        assert state["log_end_offset"] == len(results)
