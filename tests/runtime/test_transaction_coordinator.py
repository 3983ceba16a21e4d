"""The transaction coordinators on a real cluster (issue 41, step 2): found through
FindCoordinator's transaction key type, their state in ``__transaction_state`` (Kafka's
bytes, replicated, min.insync 2), markers written by the data partitions' leaders, and a
coordinator's broker stopped mid-transaction: its successor loads the partition and
finishes the transaction under its own coordinator epoch."""
from __future__ import annotations

import time

import pytest
import ray

import rafka
from actors.txn.transaction_log import read_key, read_value
from protocols.control_records import COMMIT, ABORT, control_record_type
from protocols.errors import KafkaError, ProducerFencedError
from protocols.java_hash import coordinator_partition_for
from protocols.records import iter_batches
from protocols.topics import TRANSACTION_KEY_TYPE, TRANSACTION_STATE_TOPIC, TopicPartition
from protocols.wire import decode

from tests.runtime.conftest import cluster_with

pytestmark = pytest.mark.timeout(300)
TXN_PARTITIONS = 3
CONFIG = {"transaction.state.log.num.partitions": TXN_PARTITIONS}


def eventually(check, timeout_s: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            answer = check()
            if answer is not None and answer is not False:
                return answer
        except (KafkaError, ray.exceptions.RayError, AssertionError) as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout_s} s (last: {last!r})")


def coordinator_of(cluster, transactional_id: str) -> tuple[int, object]:
    """(broker id, its transaction coordinator's handle), as FindCoordinator answers it."""
    def find():
        for b in cluster.metadata()["brokers"]:
            try:
                answer = decode(ray.get(cluster.broker(b).find_coordinator.remote(
                    transactional_id, TRANSACTION_KEY_TYPE), timeout=10))
            except (KafkaError, ray.exceptions.RayError):
                continue
            if isinstance(answer, KafkaError):
                raise answer
            coordinator = ray.get(cluster.broker(answer).txn_coordinator.remote())
            partition = coordinator_partition_for(transactional_id, TXN_PARTITIONS)
            assert ray.get(coordinator.wait_loaded.remote(partition), timeout=30)
            return answer, coordinator
    return eventually(find, what=f"coordinator of {transactional_id}")


def call(coordinator, method: str, *args):
    return decode(ray.get(getattr(coordinator, method).remote(*args), timeout=60))


def markers(cluster, topic: str, partition: int) -> list[tuple]:
    """Each control batch in the partition leader's log: (producer id, epoch, type,
    coordinator epoch)."""
    _, leader = cluster.leader(topic, partition)
    out = []
    for batch in iter_batches(ray.get(leader.read_local.remote(0, 1 << 20))):
        if batch.is_control:
            [(_, _, key, value, _)] = list(batch.record_tuples())
            coordinator_epoch = int.from_bytes(value[2:6], "big", signed=True)
            out.append((batch.producer_id, batch.producer_epoch, control_record_type(key),
                        coordinator_epoch))
    return out


def txn_state_records(cluster, transactional_id: str) -> list:
    partition = coordinator_partition_for(transactional_id, TXN_PARTITIONS)
    _, leader = cluster.leader(TRANSACTION_STATE_TOPIC, partition)
    return [read_value(value) for batch in iter_batches(ray.get(leader.read_local.remote(0, 1 << 20)))
            for _, _, key, value, _ in batch.record_tuples() if read_key(key) == transactional_id]


def test_a_transaction_commits_and_aborts_through_a_real_coordinator(ray_session, tmp_path):
    with cluster_with(tmp_path, CONFIG) as cluster:
        cluster.admin().create_topics([rafka.NewTopic("orders", 2, 3)])
        _, coordinator = coordinator_of(cluster, "app-1")
        meta = cluster.metadata()["topics"][TRANSACTION_STATE_TOPIC]
        assert len(meta) == TXN_PARTITIONS and all(len(p["replicas"]) == 3 for p in meta.values())
        configs = cluster.metadata()["configs"][TRANSACTION_STATE_TOPIC]
        assert (tuple(configs["cleanup.policy"]), int(configs["min.insync.replicas"])) == (
            ("compact",), 2)
        producer_id, epoch = call(coordinator, "init_producer_id", "app-1", 60_000)
        assert epoch == 0
        tps = [("orders", 0), ("orders", 1)]
        assert call(coordinator, "add_partitions_to_txn", "app-1", producer_id, 0, tps) is None
        described = call(coordinator, "describe_transaction", "app-1")
        assert described["state"] == "Ongoing"
        assert [tuple(tp) for tp in described["partitions"]] == tps
        assert call(coordinator, "end_txn", "app-1", producer_id, 0, True) is None
        eventually(lambda: call(coordinator, "describe_transaction", "app-1")["state"]
                   == "CompleteCommit", what="CompleteCommit")
        txn_partition = coordinator_partition_for("app-1", TXN_PARTITIONS)
        coordinator_epoch = cluster.metadata()["topics"][TRANSACTION_STATE_TOPIC][
            txn_partition]["leader_epoch"]
        for p in (0, 1):
            assert markers(cluster, "orders", p) == [(producer_id, 0, COMMIT, coordinator_epoch)]
        # The log holds each step, in Kafka's bytes.
        assert [s.state.state_name for s in txn_state_records(cluster, "app-1")] == [
            "Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
        # Then an abort of a transaction on one partition, and a new instance of the
        # producer fencing the old one.
        assert call(coordinator, "add_partitions_to_txn", "app-1", producer_id, 0,
                    tps[:1]) is None
        assert call(coordinator, "end_txn", "app-1", producer_id, 0, False) is None
        eventually(lambda: markers(cluster, "orders", 0)[-1][2] == ABORT, what="ABORT")
        assert markers(cluster, "orders", 1) == [(producer_id, 0, COMMIT, coordinator_epoch)]
        eventually(lambda: call(coordinator, "init_producer_id", "app-1", 60_000)
                   == (producer_id, 1), what="epoch 1")
        assert isinstance(call(coordinator, "end_txn", "app-1", producer_id, 0, True),
                          ProducerFencedError)


def test_the_next_coordinator_finishes_an_open_transaction(ray_session, tmp_path):
    """The coordinator's broker stops with a transaction Ongoing; the broker that takes
    the partition's leadership loads it and the producer commits there."""
    with cluster_with(tmp_path, CONFIG) as cluster:
        cluster.admin().create_topics([rafka.NewTopic("orders", 1, 3)])
        first, coordinator = coordinator_of(cluster, "app-2")
        producer_id, epoch = call(coordinator, "init_producer_id", "app-2", 60_000)
        assert call(coordinator, "add_partitions_to_txn", "app-2", producer_id, epoch,
                    [("orders", 0)]) is None
        cluster.stop_broker(first)
        second, successor = coordinator_of(cluster, "app-2")
        assert second != first
        described = call(successor, "describe_transaction", "app-2")
        assert (described["state"], described["producer_id"]) == ("Ongoing", producer_id)
        assert call(successor, "end_txn", "app-2", producer_id, epoch, True) is None
        txn_partition = coordinator_partition_for("app-2", TXN_PARTITIONS)
        new_epoch = cluster.metadata()["topics"][TRANSACTION_STATE_TOPIC][txn_partition][
            "leader_epoch"]
        eventually(lambda: markers(cluster, "orders", 0)
                   == [(producer_id, epoch, COMMIT, new_epoch)], what="the COMMIT marker")
        done = eventually(lambda: (lambda d: d["state"] == "CompleteCommit" and d)(
            call(successor, "describe_transaction", "app-2")), what="CompleteCommit")
        assert list(done["partitions"]) == []


def produce_txn(cluster, topic: str, value: bytes, producer_id: int, epoch: int, seq: int,
                transactional_id: str | None):
    """A transactional batch through the leader's host, as a transactional producer
    sends it (``produce_many`` with its transactional id): the ProduceResult."""
    from protocols.messages import (ProduceManyRequest, decode_produce_many_response,
                                    encode_produce_many_request)
    from protocols.records import Record, encode_batch
    _, leader = cluster.leader(topic, 0)
    batch = encode_batch([Record(b"k", value)], producer_id=producer_id,
                         producer_epoch=epoch, base_sequence=seq, transactional=True)
    request = ProduceManyRequest(-1, 10_000, ((topic, 0, batch),), transactional_id)
    [(_, _, result)], _ = decode_produce_many_response(ray.get(
        leader.host.produce_many.remote(encode_produce_many_request(request))))
    return result


def test_transactional_produce_is_verified_and_read_committed_sees_committed_only(
        ray_session, tmp_path):
    """KIP-890 on a real cluster: a transaction's first batch at a partition is appended
    only once its coordinator confirms the partition is in the transaction; then the LSO
    holds read_committed consumers at the transaction's first offset until its marker."""
    from protocols.errors import InvalidTxnStateError, TransactionalIdAuthorizationFailedError
    with cluster_with(tmp_path, CONFIG) as cluster:
        cluster.admin().create_topics([rafka.NewTopic("orders", 1, 3)])
        _, coordinator = coordinator_of(cluster, "app-3")
        pid, epoch = call(coordinator, "init_producer_id", "app-3", 60_000)
        # Not added to the transaction, or no transactional id: refused, nothing written.
        assert isinstance(produce_txn(cluster, "orders", b"x", pid, epoch, 0, "app-3").error,
                          InvalidTxnStateError)
        assert isinstance(produce_txn(cluster, "orders", b"x", pid, epoch, 0, None).error,
                          TransactionalIdAuthorizationFailedError)
        assert call(coordinator, "add_partitions_to_txn", "app-3", pid, epoch,
                    [("orders", 0)]) is None
        first = produce_txn(cluster, "orders", b"committed", pid, epoch, 0, "app-3")
        assert (first.error, first.base_offset) == (None, 0)
        tp = TopicPartition("orders", 0)
        reader = rafka.Consumer(cluster, {"isolation.level": "read_committed",
                                          "auto.offset.reset": "earliest"})
        reader.assign([tp])
        assert reader.end_offsets([tp]) == {tp: 0}          # the LSO: the open transaction
        assert reader.poll(500) == []
        assert call(coordinator, "end_txn", "app-3", pid, epoch, True) is None
        eventually(lambda: reader.end_offsets([tp]) == {tp: 2}, what="LSO past the commit")
        # The next transaction aborts: its record is never read.
        assert call(coordinator, "add_partitions_to_txn", "app-3", pid, epoch,
                    [("orders", 0)]) is None
        assert produce_txn(cluster, "orders", b"aborted", pid, epoch, 1, "app-3").error is None
        assert call(coordinator, "end_txn", "app-3", pid, epoch, False) is None
        eventually(lambda: reader.end_offsets([tp]) == {tp: 4}, what="LSO past the abort")
        seen = []
        eventually(lambda: seen.extend(r.value for r in reader.poll(500)) or seen,
                   what="the committed record")
        seen.extend(r.value for r in reader.poll(1000))
        assert seen == [b"committed"]
        reader.close()


def test_markers_reach_a_partition_whose_leader_moved_since_the_last_ones(ray_session,
                                                                          tmp_path):
    """The coordinator writes a transaction's markers through the leaders the last
    markers reached; a partition whose leader's broker stopped in between has a new
    leader, and the marker goes there."""
    with cluster_with(tmp_path, CONFIG) as cluster:
        cluster.admin().create_topics([rafka.NewTopic("moving", 1, 3)])
        old_leader = cluster.metadata()["topics"]["moving"][0]["leader"]
        # A transactional id whose coordinator is on another broker than the leader.
        for transactional_id in (f"app-4-{i}" for i in range(20)):
            at, coordinator = coordinator_of(cluster, transactional_id)
            if at != old_leader:
                break
        producer_id, epoch = call(coordinator, "init_producer_id", transactional_id, 60_000)

        def one_transaction(commit: bool) -> None:
            assert call(coordinator, "add_partitions_to_txn", transactional_id, producer_id,
                        epoch, [("moving", 0)]) is None
            assert call(coordinator, "end_txn", transactional_id, producer_id, epoch,
                        commit) is None
            eventually(lambda: call(coordinator, "describe_transaction",
                                    transactional_id)["state"]
                       in ("CompleteCommit", "CompleteAbort"), what="the completion")
        one_transaction(True)
        cluster.stop_broker(old_leader)
        eventually(lambda: cluster.metadata()["topics"]["moving"][0]["leader"]
                   not in (old_leader, -1), what="a new leader")
        one_transaction(False)
        assert [m[2] for m in markers(cluster, "moving", 0)] == [COMMIT, ABORT]
