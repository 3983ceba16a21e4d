"""Partition replica logic: acks, HW, ISR, follower fetch, leader-epoch truncation (seed 000
§7; KIP-101, KIP-279).

Replicas talk by direct calls here (the actor shell or the simulator moves real messages);
their logs are real files; a "crash" abandons the replica object and reopens its directory
without a clean shutdown, with the HW from the last checkpoint.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from actors.replica.alter_partition import AlterPartitionSender
from actors.replica.partition import FetchRequest, PartitionReplica, ReplicaConfig
from actors.timer.system_timer import SystemTimer
from protocols.errors import (FencedLeaderEpochError, NotEnoughReplicasError,
                              NotLeaderOrFollowerError, OffsetNotAvailableError,
                              OffsetOutOfRangeError, RequestTimedOutError,
                              UnknownLeaderEpochError)
from protocols.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from protocols.records import Record, encode_batch, iter_batches
from storage import Log
from tests.clock import ManualClock

TOPIC = "t"


def msg(value: str) -> bytes:
    return encode_batch([Record(None, value.encode(), 1_000)])


def values(data: bytes) -> list[str]:
    return [r.value.decode() for b in iter_batches(data) for r in b.records()]


class Cluster:
    """Brokers' directories, HW checkpoints and replicas of one partition."""

    def __init__(self, root: Path, *, epochs: bool = True, min_isr: int = 1):
        self.root = root
        self.clock = ManualClock(1_700_000_000_000)
        self.timer = SystemTimer(self.clock)
        self.config = ReplicaConfig(leader_epoch_truncation=epochs)
        self.log_config = {"min.insync.replicas": min_isr}
        self.hw_checkpoint: dict[int, int] = {}
        self.replicas: dict[int, PartitionReplica] = {}

    def start(self, broker_id: int) -> PartitionReplica:
        """Open (or reopen after a crash) broker_id's replica from its directory."""
        log = Log.open(self.root / f"broker-{broker_id}" / f"{TOPIC}-0", self.log_config,
                       clock=self.clock, high_watermark=self.hw_checkpoint.get(broker_id, 0))
        replica = PartitionReplica(
            TOPIC, 0, broker_id, log, clock=self.clock, timer=self.timer, config=self.config,
            on_high_watermark=lambda hw, b=broker_id: self.hw_checkpoint.__setitem__(b, hw))
        self.replicas[broker_id] = replica
        return replica

    def crash(self, broker_id: int) -> None:
        del self.replicas[broker_id]  # no close(): what was written stays, nothing else

    def values(self, broker_id: int) -> list[str]:
        log = self.replicas[broker_id].log
        return values(log.read(log.log_start_offset, 1 << 20)) if log.log_end_offset else []


def fetch_once(follower: PartitionReplica, leader: PartitionReplica) -> None:
    request = follower.fetch_request()
    assert request is not None
    # As sent, but answered at once rather than long-polled.
    follower.on_fetch_result(leader.fetch(dataclasses.replace(request, max_wait_ms=0)))


def truncate_via(follower: PartitionReplica, leader: PartitionReplica) -> None:
    epoch = follower.truncation_request()
    if epoch is not None:
        follower.on_leader_epoch_end_offset(*leader.offsets_for_leader_epoch(epoch))


# ---- acks and the high watermark ----------------------------------------------------------
def test_acks_1_answers_at_once_acks_all_waits_for_the_high_watermark(pair):
    c, leader, follower = pair
    assert leader.produce(msg("a"), acks=1, timeout_ms=1000).base_offset == 0
    done = []
    assert leader.produce(msg("b"), acks=-1, timeout_ms=1000, on_done=done.append) is None
    assert done == [] and leader.high_watermark == 0
    fetch_once(follower, leader)              # follower gets a, b: leader learns LEO 0
    assert leader.high_watermark == 0 and done == []
    fetch_once(follower, leader)              # next fetch at 2: HW = min(2, 2)
    assert leader.high_watermark == 2
    assert [(r.base_offset, r.error) for r in done] == [(1, None)]
    assert follower.high_watermark == 2       # min(leader HW in the response, own LEO)


def test_acks_all_times_out_with_request_timed_out(pair):
    c, leader, _ = pair
    done = []
    leader.produce(msg("a"), acks=-1, timeout_ms=100, on_done=done.append)
    c.clock.advance(101)
    c.timer.advance_clock()
    assert isinstance(done[0].error, RequestTimedOutError)


def test_not_enough_replicas_is_refused_before_appending(tmp_path):
    c = Cluster(tmp_path, min_isr=2)
    leader = c.start(1)
    leader.become_leader(0, 0, isr=[1], replicas=[1, 2])
    with pytest.raises(NotEnoughReplicasError, match="min.isr"):
        leader.produce(msg("a"), acks=-1, timeout_ms=100)
    assert leader.log_end_offset == 0
    assert leader.produce(msg("a"), acks=1, timeout_ms=100).error is None


def test_follower_logs_are_byte_identical_below_the_high_watermark(pair):
    c, leader, follower = pair
    for i in range(5):
        leader.produce(msg(f"m{i}"), acks=1, timeout_ms=100)
        fetch_once(follower, leader)
    fetch_once(follower, leader)
    hw = leader.high_watermark
    assert hw == 5
    assert leader.log.read(0, 1 << 20, max_offset=hw) == follower.log.read(0, 1 << 20,
                                                                           max_offset=hw)


# ---- ListOffsets --------------------------------------------------------------------------
def test_list_offsets_earliest_latest_and_by_time_stop_at_the_high_watermark(pair):
    c, leader, follower = pair
    for i, ts in enumerate((1_000, 2_000, 3_000)):
        leader.produce(encode_batch([Record(None, f"m{i}".encode(), ts)]), acks=1,
                       timeout_ms=100)
    fetch_once(follower, leader)
    fetch_once(follower, leader)
    assert leader.high_watermark == 3
    leader.produce(encode_batch([Record(None, b"above", 4_000)]), acks=1, timeout_ms=100)
    assert leader.list_offsets(EARLIEST_TIMESTAMP) == (0, -1)
    assert leader.list_offsets(LATEST_TIMESTAMP) == (3, -1)    # the HW, not the LEO 4
    assert leader.list_offsets(1_500) == (1, 2_000)             # first at or after
    assert leader.list_offsets(4_000) == (-1, -1)               # only above the HW
    with pytest.raises(UnknownLeaderEpochError):     # a client ahead of this leader
        leader.list_offsets(LATEST_TIMESTAMP, current_leader_epoch=1)
    with pytest.raises(NotLeaderOrFollowerError):
        follower.list_offsets(LATEST_TIMESTAMP)


def test_a_new_leader_answers_latest_only_once_its_high_watermark_is_in_its_epoch(pair):
    """KIP-207: until the followers have fetched in the new epoch the HW it holds may be
    behind what the old leader answered: OFFSET_NOT_AVAILABLE, retriable."""
    c, leader, follower = pair
    leader.produce(msg("a"), acks=1, timeout_ms=100)
    fetch_once(follower, leader)
    follower.become_leader(1, 1, isr=[1, 2], replicas=[1, 2])
    with pytest.raises(OffsetNotAvailableError):
        follower.list_offsets(LATEST_TIMESTAMP)
    assert follower.list_offsets(EARLIEST_TIMESTAMP) == (0, -1)


# ---- consumers ----------------------------------------------------------------------------
def test_consumers_read_only_below_the_high_watermark(pair):
    c, leader, follower = pair
    leader.produce(msg("a"), acks=1, timeout_ms=100)
    consumer = FetchRequest(-1, 0, current_leader_epoch=0)
    assert values(leader.fetch(consumer).records) == []  # HW still 0
    fetch_once(follower, leader)
    fetch_once(follower, leader)
    assert values(leader.fetch(consumer).records) == ["a"]
    with pytest.raises(NotLeaderOrFollowerError):
        follower.fetch(consumer)
    assert isinstance(leader.fetch(FetchRequest(-1, 99)).error, OffsetOutOfRangeError)
    leader.become_leader(2, 1, isr=[1, 2], replicas=[1, 2])  # re-elected in epoch 2
    with pytest.raises(FencedLeaderEpochError):
        leader.fetch(FetchRequest(-1, 0, current_leader_epoch=0))
    with pytest.raises(UnknownLeaderEpochError):
        leader.fetch(FetchRequest(-1, 0, current_leader_epoch=3))


def test_a_long_poll_completes_when_data_arrives(pair):
    c, leader, follower = pair
    got = []
    assert leader.fetch(FetchRequest(2, 0, 0, max_wait_ms=500), on_done=got.append) is None
    assert got == []
    leader.produce(msg("x"), acks=1, timeout_ms=100)
    assert values(got[0].records) == ["x"]
    empty = []
    leader.fetch(FetchRequest(2, 1, 0, max_wait_ms=500), on_done=empty.append)
    c.clock.advance(501)
    c.timer.advance_clock()
    assert empty[0].records == b"" and empty[0].error is None


# ---- the ISR ------------------------------------------------------------------------------
def test_a_lagging_follower_leaves_the_isr_through_the_controller(pair):
    c, leader, follower = pair
    done = []
    leader.produce(msg("a"), acks=-1, timeout_ms=60_000, on_done=done.append)
    c.clock.advance(30_001)                   # replica.lag.time.max.ms without catching up
    proposal = leader.maybe_shrink_isr()
    assert proposal.new_isr == (1,) and (proposal.leader_epoch, proposal.partition_epoch) == (0, 0)
    assert leader.isr == [1, 2]               # nothing changes until the controller says so
    leader.on_alter_partition_result([1], partition_epoch=1)
    assert leader.isr == [1] and leader.high_watermark == 1
    # HW passed the batch but the ISR is now below min.insync.replicas=2.
    assert type(done[0].error).__name__ == "NotEnoughReplicasAfterAppendError"


def test_a_caught_up_follower_rejoins_the_isr(tmp_path):
    c = Cluster(tmp_path)
    leader, follower = c.start(1), c.start(2)
    leader.become_leader(0, 0, isr=[1], replicas=[1, 2])
    follower.become_follower(1, 0, 0, replicas=[1, 2])
    truncate_via(follower, leader)
    leader.produce(msg("a"), acks=1, timeout_ms=100)
    assert leader.high_watermark == 1         # ISR [1] alone
    fetch_once(follower, leader)              # LEO 0 < HW 1: not yet
    assert leader.take_alter_partition() is None
    fetch_once(follower, leader)              # LEO 1 >= HW 1
    assert leader.take_alter_partition().new_isr == (1, 2)
    leader.on_alter_partition_result([1, 2], partition_epoch=1)
    assert leader.isr == [1, 2]


def test_one_alter_partition_in_flight_sent_again_without_an_answer_and_stale_answers_ignored(
        pair):
    # Kafka's AlterPartitionManager for one partition (actors/replica/alter_partition.py).
    c, leader, follower = pair
    sender = AlterPartitionSender(leader, c.clock, retry_ms=3_000)
    assert sender.next_to_send() is None          # nothing proposed
    leader.produce(msg("a"), acks=1, timeout_ms=100)
    c.clock.advance(30_001)
    shrink = leader.maybe_shrink_isr()
    assert sender.next_to_send() is shrink
    assert sender.next_to_send() is None          # in flight: wait for its answer
    c.clock.advance(3_000)
    assert sender.next_to_send() is shrink        # no answer in time: again
    sender.on_failure(shrink)
    assert sender.next_to_send() is shrink        # the request failed: again at once
    sender.on_answer(shrink, [1], 1)
    assert leader.isr == [1] and sender.next_to_send() is None
    sender.on_answer(shrink, [1], 1)              # the answer to the copy sent earlier
    assert leader.isr == [1] and leader.partition_epoch == 1
    fetch_once(follower, leader)                  # caught up: expand
    fetch_once(follower, leader)
    expand = sender.next_to_send()
    assert expand.new_isr == (1, 2)
    # A LeaderAndIsr withdraws the proposal: the answer to it changes nothing.
    leader.apply_leader_and_isr(1, 1, 2, [1], [1, 2])
    assert sender.next_to_send() is None
    sender.on_answer(expand, [1, 2], 9)
    assert leader.isr == [1] and leader.partition_epoch == 2


def test_a_restated_partition_epoch_keeps_the_isr_change_in_flight(tmp_path):
    # Simulator seed 6002245: a new controller restates the partition (same leader epoch,
    # same partition epoch) while the leader's ISR expansion is on its way to it. The
    # controller accepts the expansion; its answer must still reach the leader, or the
    # leader would count its HW over [1] while the controller's ISR is [1, 2].
    c = Cluster(tmp_path)
    leader, follower = c.start(1), c.start(2)
    leader.become_leader(0, 0, isr=[1], replicas=[1, 2])
    follower.become_follower(1, 0, 0, replicas=[1, 2])
    truncate_via(follower, leader)
    sender = AlterPartitionSender(leader, c.clock, retry_ms=3_000)
    leader.produce(msg("a"), acks=1, timeout_ms=100)
    fetch_once(follower, leader)
    fetch_once(follower, leader)
    expand = sender.next_to_send()
    assert expand.new_isr == (1, 2) and expand.partition_epoch == 0
    assert leader.apply_leader_and_isr(1, 0, 0, [1], [1, 2]) is False   # the restatement
    assert leader.take_alter_partition() is expand
    sender.on_answer(expand, [1, 2], 1)
    assert leader.isr == [1, 2] and leader.partition_epoch == 1
    leader.produce(msg("b"), acks=1, timeout_ms=100)
    assert leader.high_watermark == 1         # follower 2 is in the ISR: it must have "b"
    fetch_once(follower, leader)              # "b" reaches the follower
    fetch_once(follower, leader)              # which says so
    assert leader.high_watermark == 2


def test_a_late_fetch_from_an_earlier_start_of_the_follower_is_refused(tmp_path):
    # Kafka's KIP-903 (ReplicaTest's stale broker epoch case); simulator seed 5017707: the
    # follower's host died with a fetch at offset 1 still on a slow link. Its successor
    # caught up to 3 in a new fetch session, and the dead start's fetch arrived after. Taken,
    # it set the follower back to 1, and the successor's session, naming only partitions
    # that move, never said 3 again: the HW stayed at 1 for good.
    c = Cluster(tmp_path)
    leader = c.start(1)
    leader.become_leader(0, 0, isr=[1, 2], replicas=[1, 2])
    for value in "abc":
        leader.produce(msg(value), acks=0, timeout_ms=100)
    late = FetchRequest(2, 1, 0, max_wait_ms=0)
    assert leader.accept_fetch(FetchRequest(2, 3, 0, max_wait_ms=0), replica_epoch=7)
    assert leader.high_watermark == 3
    with pytest.raises(NotLeaderOrFollowerError, match="replica epoch 6 vs expected 7"):
        leader.accept_fetch(late, replica_epoch=6)
    assert leader.followers[2].log_end_offset == 3 and leader.isr == [1, 2]
    # The same start asking again, or a later one from wherever it is, is taken; a fetch
    # naming no epoch (a follower that was not told its own yet) is not checked.
    leader.accept_fetch(FetchRequest(2, 3, 0, max_wait_ms=0), replica_epoch=7)
    leader.accept_fetch(FetchRequest(2, 2, 0, max_wait_ms=0), replica_epoch=8)
    assert leader.followers[2].log_end_offset == 2
    leader.accept_fetch(FetchRequest(2, 3, 0, max_wait_ms=0))
    assert leader.followers[2].log_end_offset == 3 and leader.followers[2].replica_epoch == 8


def test_stale_leader_and_isr_is_fenced(pair):
    c, leader, follower = pair
    follower.become_follower(1, 3, 1, replicas=[1, 2])
    with pytest.raises(FencedLeaderEpochError):
        follower.become_follower(1, 2, 1, replicas=[1, 2])


# ---- the seeds' two failures of "truncate to HW", and leader epochs (seed 001 §10.10) -----
def loss_scenario(tmp_path, epochs: bool) -> tuple[Cluster, int]:
    """B leads, A follows; m1, m2 are acknowledged (acks=all) but A's HW is one behind when
    A crashes. A restarts, then B crashes and A becomes leader; B comes back as follower."""
    c = Cluster(tmp_path, epochs=epochs)
    A, B = 1, 2
    b, a = c.start(B), c.start(A)
    b.become_leader(0, 0, isr=[A, B], replicas=[B, A])
    a.become_follower(B, 0, 0, replicas=[B, A])
    truncate_via(a, b)
    acked = []
    b.produce(msg("m1"), acks=-1, timeout_ms=10_000, on_done=acked.append)
    fetch_once(a, b)
    fetch_once(a, b)                          # B: HW 1; A: HW 1
    b.produce(msg("m2"), acks=-1, timeout_ms=10_000, on_done=acked.append)
    fetch_once(a, b)                          # A has m2, HW still 1
    b.fetch(a.fetch_request())                # B sees A at 2: HW 2, m2 acknowledged; the
    assert [r.error for r in acked] == [None, None]  # response never reaches A: A crashes
    assert (b.high_watermark, a.high_watermark) == (2, 1)
    c.crash(A)
    a = c.start(A)
    a.become_follower(B, 0, 0, replicas=[B, A])
    truncate_via(a, b)                        # epochs: asks B; without: cuts to HW 1
    c.crash(B)
    a.become_leader(1, 1, isr=[A], replicas=[B, A])
    b = c.start(B)
    b.become_follower(A, 1, 1, replicas=[B, A])
    truncate_via(b, a)
    fetch_once(b, a)
    return c, B


def test_seed_data_loss_happens_without_leader_epochs(tmp_path):
    c, B = loss_scenario(tmp_path, epochs=False)
    assert c.values(1) == ["m1"] and c.values(B) == ["m1"]  # acknowledged m2 is gone


def test_seed_data_loss_is_prevented_by_leader_epochs(tmp_path):
    c, B = loss_scenario(tmp_path, epochs=True)
    assert c.values(1) == ["m1", "m2"] and c.values(B) == ["m1", "m2"]


def divergence_scenario(tmp_path, epochs: bool) -> Cluster:
    """A leads, B follows with m1, m2 but HW 1; both crash. B restarts first (as A's
    follower, then leader of epoch 1 when A stays away) and takes m3; then A returns."""
    c = Cluster(tmp_path, epochs=epochs)
    A, B = 1, 2
    a, b = c.start(A), c.start(B)
    a.become_leader(0, 0, isr=[A, B], replicas=[A, B])
    b.become_follower(A, 0, 0, replicas=[A, B])
    truncate_via(b, a)
    a.produce(msg("m1"), acks=1, timeout_ms=100)
    fetch_once(b, a)
    fetch_once(b, a)
    a.produce(msg("m2"), acks=1, timeout_ms=100)
    fetch_once(b, a)
    a.fetch(b.fetch_request())                # A: HW 2; B: HW 1
    c.crash(A)
    c.crash(B)
    b = c.start(B)
    b.become_follower(A, 0, 0, replicas=[A, B])  # A is down: B cannot ask it anything
    b.become_leader(1, 1, isr=[B], replicas=[A, B])
    b.produce(msg("m3"), acks=1, timeout_ms=100)
    a = c.start(A)
    a.become_follower(B, 1, 1, replicas=[A, B])
    truncate_via(a, b)
    fetch_once(a, b)
    fetch_once(a, b)
    return c


def test_seed_divergence_happens_without_leader_epochs(tmp_path):
    c = divergence_scenario(tmp_path, epochs=False)
    assert c.values(2) == ["m1", "m3"]
    assert c.values(1) == ["m1", "m2"]        # same offsets, different records
    assert c.replicas[1].high_watermark == c.replicas[2].high_watermark == 2


def test_seed_divergence_is_prevented_by_leader_epochs(tmp_path):
    c = divergence_scenario(tmp_path, epochs=True)
    assert c.values(1) == c.values(2)
    leader, follower = c.replicas[2], c.replicas[1]
    hw = leader.high_watermark
    assert leader.log.read(0, 1 << 20, max_offset=hw) == follower.log.read(0, 1 << 20,
                                                                           max_offset=hw)


def test_delete_records_waits_for_the_followers_log_start_offsets(pair):
    c, leader, follower = pair
    for i in range(4):
        leader.produce(msg(f"m{i}"), acks=1, timeout_ms=100)
    fetch_once(follower, leader)
    fetch_once(follower, leader)
    assert leader.high_watermark == 4
    done = []
    assert leader.delete_records(3, timeout_ms=1000, on_done=done.append) is None
    assert leader.log.log_start_offset == 3 and done == []
    fetch_once(follower, leader)              # learns the new log start, applies it
    assert follower.log.log_start_offset == 3
    fetch_once(follower, leader)              # and tells the leader in its next fetch
    assert done[0].low_watermark == 3 and done[0].error is None
    with pytest.raises(OffsetOutOfRangeError):
        leader.delete_records(9, timeout_ms=1000)


def test_a_late_offsets_for_leader_epoch_answer_is_dropped(tmp_path):
    """An answer meant for an earlier leadership must not truncate the new one's log."""
    c = Cluster(tmp_path)
    leader, follower = c.start(1), c.start(2)
    leader.become_leader(0, 0, isr=[1, 2], replicas=[1, 2])
    follower.become_follower(1, 0, 0, replicas=[1, 2])
    truncate_via(follower, leader)
    leader.produce(msg("a"), acks=1, timeout_ms=1000)
    leader.produce(msg("b"), acks=1, timeout_ms=1000)
    fetch_once(follower, leader)
    assert follower.log_end_offset == 2
    follower.become_follower(1, 1, 1, replicas=[1, 2])      # epoch 1: asks again
    assert follower.truncation_request() == 0
    # The answer to a question asked in epoch 0 arrives now: ignored.
    assert follower.on_leader_epoch_end_offset(0, 0, leader_epoch=0) is None
    assert follower.log_end_offset == 2 and follower.needs_truncation
    leader.become_leader(1, 1, isr=[1, 2], replicas=[1, 2])
    assert follower.on_leader_epoch_end_offset(
        *leader.offsets_for_leader_epoch(0), leader_epoch=1) == 2
    assert not follower.needs_truncation



def test_kip279_intermediate_truncation_when_the_leader_answers_an_epoch_we_never_had(
        tmp_path):
    """Found by the simulator (seed 5675): leader 2's epochs are 0, 2, 4; follower 1's are
    0, 3, each with a different record at offset 9. Asked about epoch 3 the leader answers
    (2, 10); the follower never had epoch 2, so it cuts to the end of its own epoch 0 (9)
    and asks again, instead of keeping its diverging record."""
    c = Cluster(tmp_path)
    b1, b2 = c.start(1), c.start(2)
    b2.become_leader(0, 0, isr=[1, 2], replicas=[1, 2])
    b1.become_follower(2, 0, 0, replicas=[1, 2])
    truncate_via(b1, b2)
    for i in range(1, 10):
        b2.produce(msg(f"r{i}"), acks=1, timeout_ms=1000)
    fetch_once(b1, b2)
    assert b1.log_end_offset == 9
    b2.become_leader(2, 1, isr=[2], replicas=[1, 2])            # alone in epoch 2
    b2.produce(msg("r11"), acks=1, timeout_ms=1000)
    b1.become_leader(3, 2, isr=[1], replicas=[1, 2])            # alone in epoch 3
    b1.produce(msg("r12"), acks=1, timeout_ms=1000)
    b2.become_leader(4, 3, isr=[2, 1], replicas=[1, 2])
    b1.become_follower(2, 4, 3, replicas=[1, 2])
    assert b1.truncation_request() == 3
    assert b2.offsets_for_leader_epoch(3) == (2, 10)
    assert b1.on_leader_epoch_end_offset(2, 10) == 9            # intermediate
    assert b1.needs_truncation and b1.truncation_request() == 0
    assert b2.offsets_for_leader_epoch(0) == (0, 9)
    assert b1.on_leader_epoch_end_offset(0, 9) == 9
    assert not b1.needs_truncation
    fetch_once(b1, b2)
    assert c.values(1) == c.values(2) == [f"r{i}" for i in range(1, 10)] + ["r11"]
