"""The last stable offset on a partition's leader (seed 001: read_committed consumers read up
to the LSO, told the aborted transactions in what they read; read_uncommitted ones up to the
HW), ListOffsets by isolation level, and KIP-890's verification: a transaction's first batch
at a partition is appended only with the guard of a verification its coordinator answered,
voided by a marker for the producer meanwhile (INVALID_TXN_STATE otherwise).

Transactional data is appended to the leader's log directly here, as the leader will once
its coordinator has added the partition to the transaction; followers copy it by fetching.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from actors.replica.fetch_session import CachedPartition
from actors.replica.partition import FetchRequest
from protocols.errors import InvalidTxnStateError
from protocols.messages import (LATEST_TIMESTAMP, READ_COMMITTED, FetchManyResponse,
                                FetchResult, decode_fetch_many_response,
                                encode_fetch_many_response)
from protocols.records import Record, encode_batch
from tests.actors.replica.test_replica import fetch_once, msg, values

T0 = 1_000


def txn(pid: int, seq: int, value: str) -> bytes:
    return encode_batch([Record(None, value.encode(), T0)], producer_id=pid, producer_epoch=0,
                        base_sequence=seq, transactional=True)


def replicate(c, leader, follower) -> None:
    """Fetch until the follower has everything and the HW is at the log end (a fetch reads
    within one segment; the follower's next position moves the HW)."""
    for _ in range(6):
        fetch_once(follower, leader)
        if leader.log.high_watermark == leader.log.log_end_offset:
            return
    raise AssertionError("the follower did not catch up")


def read(leader, isolation: int = 0, offset: int = 0):
    return leader.fetch(FetchRequest(-1, offset, current_leader_epoch=0,
                                     isolation_level=isolation))


def seven_aborted_eight_open(c, leader, follower) -> None:
    """A plain record at 0, producer 7's transaction at 1, aborted at 3, producer 8's open
    at 2; replicated, so the HW is 4 and the LSO 2."""
    leader.produce(msg("plain"), acks=1, timeout_ms=100)            # 0
    leader.log.append_as_leader(txn(7, 0, "t7-a"), 0)               # 1: 7 opens
    leader.log.append_as_leader(txn(8, 0, "t8-a"), 0)               # 2: 8 opens
    leader.log.append_end_txn_marker(7, 0, 0, False, 0)             # 3: 7 aborted
    replicate(c, leader, follower)


def test_read_committed_stops_at_the_lso_and_lists_the_aborted_transactions(pair):
    c, leader, follower = pair
    seven_aborted_eight_open(c, leader, follower)
    assert leader.log.high_watermark == 4
    uncommitted, committed = read(leader), read(leader, READ_COMMITTED)
    assert values(uncommitted.records)[:3] == ["plain", "t7-a", "t8-a"]
    assert (uncommitted.last_stable_offset, uncommitted.aborted_transactions) == (2, None)
    # Up to the LSO (8's transaction is open from offset 2); 7's record at 1 is in what
    # was read and 7 was aborted (its marker is past the LSO, its index entry too): the
    # consumer is told, and drops it.
    assert values(committed.records) == ["plain", "t7-a"]
    assert (committed.last_stable_offset, committed.aborted_transactions) == (2, ((7, 1),))
    leader.log.append_end_txn_marker(8, 0, 0, True, 0)               # 4: 8 committed
    replicate(c, leader, follower)
    committed = read(leader, READ_COMMITTED)
    assert committed.last_stable_offset == 5
    assert values(committed.records)[:3] == ["plain", "t7-a", "t8-a"]
    assert committed.aborted_transactions == ((7, 1),)
    assert read(leader, READ_COMMITTED, offset=4).aborted_transactions == ()
    # The follower copied the markers and indexed the abort as the leader did.
    assert follower.log.collect_aborted_transactions(0, 5) == \
        leader.log.collect_aborted_transactions(0, 5)


def test_a_read_committed_fetch_named_as_a_region_is_told_the_same_aborted_transactions(
        pair):
    """Zero-copy fetch for read_committed consumers (librdkafka's default): the region
    holds the bytes a read returns, up to the LSO, with the aborted transactions a read is
    told (a superset bounded by the segment's end would be allowed, as in Kafka)."""
    c, leader, follower = pair
    seven_aborted_eight_open(c, leader, follower)
    for offset in (0, 1, 2):
        request = FetchRequest(-1, offset, current_leader_epoch=0,
                               isolation_level=READ_COMMITTED)
        read = leader.read_for_fetch(request)
        named = leader.read_for_fetch(request, as_region=True)
        region = named.records
        got = b"" if not region else Path(region.path).read_bytes()[
            region.position:region.position + region.size]
        assert got == read.records
        assert named.aborted_transactions == read.aborted_transactions


def test_list_offsets_latest_is_the_lso_for_read_committed(pair):
    c, leader, follower = pair
    leader.produce(msg("a"), acks=1, timeout_ms=100)
    leader.log.append_as_leader(txn(7, 0, "t"), 0)
    replicate(c, leader, follower)
    assert leader.list_offsets(LATEST_TIMESTAMP) == (2, -1)
    assert leader.list_offsets(LATEST_TIMESTAMP, isolation_level=READ_COMMITTED) == (1, -1)
    assert leader.list_offsets(T0, isolation_level=READ_COMMITTED) == (0, T0)


def test_a_transactions_first_batch_needs_its_verification(pair):
    """ReplicaManagerTest's verification cases: unverified, verified, a verification voided
    by a marker (the transaction ended while the coordinator was asked), and a producer
    whose transaction is open here already, which needs none."""
    c, leader, follower = pair
    with pytest.raises(InvalidTxnStateError, match="not verified"):
        leader.produce(msg("a") + txn(7, 0, "t"), acks=1, timeout_ms=100)
    assert leader.log.log_end_offset == 0          # nothing of the request was written
    assert leader.log.first_unstable_offset is None
    stale = leader.start_txn_verification(7)
    assert stale is not None
    leader.write_txn_marker(7, 0, 0, False, 1000)   # an abort lands meanwhile
    with pytest.raises(InvalidTxnStateError):
        leader.produce(txn(7, 0, "t"), acks=1, timeout_ms=100, verified={7: stale})
    guard = leader.start_txn_verification(7)
    # A second request of the transaction, in flight with the first, shares its guard
    # (Kafka's VerificationStateEntry): neither voids the other.
    assert leader.start_txn_verification(7) is guard
    leader.produce(txn(7, 0, "t"), acks=1, timeout_ms=100, verified={7: guard})
    assert leader.log.producer_state.ongoing_txns == {1: 7}
    assert leader.start_txn_verification(7) is None   # open here: no more verification
    leader.produce(txn(7, 1, "u"), acks=1, timeout_ms=100)
    assert leader.log.log_end_offset == 3


def test_verification_can_be_turned_off(tmp_path):
    """transaction.partition.verification.enable=false: Kafka's behaviour before KIP-890."""
    import dataclasses
    from tests.actors.replica.test_replica import Cluster
    c = Cluster(tmp_path, min_isr=1)
    leader = c.start(1)
    leader.config = dataclasses.replace(leader.config,
                                        transaction_partition_verification=False)
    leader.become_leader(0, 0, isr=[1], replicas=[1])
    assert leader.start_txn_verification(7) is None
    leader.produce(txn(7, 0, "t"), acks=1, timeout_ms=100)
    assert leader.log.first_unstable_offset == 0


def test_a_fetch_session_tells_a_moved_lso():
    cached = CachedPartition(FetchRequest(-1, 5), high_watermark=9, log_start_offset=0,
                             last_stable_offset=5)
    assert cached.quiet(9, 0, 5) and not cached.quiet(9, 0, 9)
    assert cached.must_respond(FetchResult(b"", 9, 0, last_stable_offset=9))
    assert cached.quiet(9, 0, 9)


def test_the_lso_and_aborted_transactions_cross_the_hosts_channel():
    result = FetchResult(b"x", 9, 0, 10, None, 3, 4, 7, ((7, 1), (9, 5)))
    wire = encode_fetch_many_response(FetchManyResponse((("t", 0, result),)))
    (_, _, back), = decode_fetch_many_response(wire).results
    assert back == result
    plain = FetchResult(b"", 9, 0, 10)
    (_, _, back), = decode_fetch_many_response(encode_fetch_many_response(
        FetchManyResponse((("t", 0, plain),)))).results
    assert back.aborted_transactions is None


def test_describe_producers_shows_open_transactions_and_coordinator_epochs(pair):
    c, leader, follower = pair
    leader.log.append_as_leader(txn(7, 0, "a"), 0)                  # 0: 7 opens
    leader.log.append_end_txn_marker(7, 0, 3, True, 0)             # 1: committed, epoch 3
    leader.log.append_as_leader(txn(8, 0, "b"), 0)                  # 2: 8 opens
    found = {p[0]: p for p in leader.active_producers()}
    assert found[7][4:] == (3, -1)                                  # done, by coordinator 3
    assert found[8][4:] == (-1, 2)                                  # open since offset 2
