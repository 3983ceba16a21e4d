"""The leader-epoch cache and OffsetsForLeaderEpoch answers (KIP-101, KIP-279)."""
from __future__ import annotations

from storage.checkpoint import LeaderEpochCheckpointFile
from storage.epoch import UNDEFINED_EPOCH, LeaderEpochFileCache


def cache(tmp_path, *entries) -> LeaderEpochFileCache:
    c = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def test_assign_persists_and_reloads(tmp_path):
    c = cache(tmp_path, (0, 0), (2, 10), (3, 25))
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n3 25\n"
    again = cache(tmp_path)
    assert again.epoch_entries() == [(0, 0), (2, 10), (3, 25)]
    assert again.latest_epoch == 3 and again.previous_epoch == 2


def test_assign_same_epoch_later_offset_is_a_no_op(tmp_path):
    c = cache(tmp_path, (1, 5))
    c.assign(1, 9)
    assert c.epoch_entries() == [(1, 5)]


def test_assign_removes_conflicting_entries(tmp_path):
    c = cache(tmp_path, (0, 0), (1, 10), (2, 20))
    c.assign(3, 15)  # a new leader whose log diverged at 15
    assert c.epoch_entries() == [(0, 0), (1, 10), (3, 15)]


def test_end_offset_for_each_kind_of_request(tmp_path):
    c = cache(tmp_path, (1, 0), (3, 40), (5, 90))
    leo = 120
    assert c.end_offset_for(5, leo) == (5, 120)         # the latest epoch: the log end
    assert c.end_offset_for(3, leo) == (3, 90)          # ends where epoch 5 starts
    assert c.end_offset_for(4, leo) == (3, 90)          # unknown epoch: the largest below
    assert c.end_offset_for(2, leo) == (1, 40)
    assert c.end_offset_for(0, leo) == (0, 0)           # older than anything we know
    assert c.end_offset_for(6, leo) == (UNDEFINED_EPOCH, -1)
    assert c.end_offset_for(UNDEFINED_EPOCH, leo) == (UNDEFINED_EPOCH, -1)


def test_truncation_from_the_end_and_from_the_start(tmp_path):
    c = cache(tmp_path, (1, 0), (3, 40), (5, 90))
    c.truncate_from_end(90)
    assert c.epoch_entries() == [(1, 0), (3, 40)]
    c.truncate_from_start(55)
    assert c.epoch_entries() == [(3, 55)]
    assert c.epoch_for_offset(70) == 3 and c.epoch_for_offset(10) is None


def test_kip_101_divergent_logs_after_both_replicas_restart(tmp_path):
    """Seed's second failure case. Leader A wrote m1 (offset 0, epoch 0) and m2 (offset 1,
    epoch 0) but only m1 reached B before both crashed. B restarts first and becomes leader
    with epoch 1, writing m3 at offset 1. When A comes back as a follower, it asks B for the
    end of its latest epoch (0): B answers (0, 1), so A truncates m2 at offset 1 and then
    fetches m3; with "truncate to HW" A would have kept m2 and the replicas would diverge."""
    a = cache(tmp_path, (0, 0))
    b = LeaderEpochFileCache(None)
    b.assign(0, 0)
    b.assign(1, 1)                                       # B leads epoch 1 from offset 1
    epoch, end = b.end_offset_for(a.latest_epoch, log_end_offset=2)
    assert (epoch, end) == (0, 1)
    a_log_end = 2
    truncate_to = min(end, a_log_end)
    assert truncate_to == 1                              # m2 goes; m3 arrives next
    a.truncate_from_end(truncate_to)
    a.assign(1, 1)
    assert a.epoch_entries() == b.epoch_entries()


def test_kip_101_no_loss_after_a_follower_restart(tmp_path):
    """Seed's first failure case: follower B has m1, m2 (offsets 0, 1) but its HW is still 1
    when it restarts. Truncating to HW would drop m2, which the leader had acknowledged.
    Asking the leader for epoch 0's end gives the leader's LEO 2: nothing is truncated."""
    leader = LeaderEpochFileCache(None)
    leader.assign(0, 0)
    follower_latest_epoch, follower_log_end, follower_hw = 0, 2, 1
    epoch, end = leader.end_offset_for(follower_latest_epoch, log_end_offset=2)
    assert min(end, follower_log_end) == 2 > follower_hw


def test_seed_001_last_offset_for_a_follower_in_epoch_1(tmp_path):
    """Seed 001 §10.10.7: the leader has (1,20) (2,80) (3,120); a follower whose last epoch
    is 1 is told LastOffset = 80 and truncates there if its LEO is larger."""
    leader = cache(tmp_path, (1, 20), (2, 80), (3, 120))
    assert leader.end_offset_for(1, log_end_offset=150) == (1, 80)


# ---- who writes the checkpoint ---------------------------------------------------------------
# A replica host takes the write of a new epoch (``on_dirty``): thousands of partitions
# becoming leaders at once are not thousands of fsyncs on its event loop.

def test_a_new_epoch_whose_write_is_taken_is_written_when_flushed(tmp_path):
    c = cache(tmp_path, (0, 0))
    taken = []
    c.on_dirty = taken.append
    c.assign(1, 10)
    assert taken == [c] and c.dirty
    assert cache(tmp_path).epoch_entries() == [(0, 0)]       # not written yet
    c.flush_if_dirty()
    assert not c.dirty
    assert cache(tmp_path).epoch_entries() == [(0, 0), (1, 10)]
    c.assign(1, 12)                                          # no change: nothing to write
    assert taken == [c] and not c.dirty


def test_a_truncation_writes_at_once_with_a_pending_epoch(tmp_path):
    c = cache(tmp_path, (0, 0))
    c.on_dirty = lambda _c: None
    c.assign(1, 10)
    c.assign(2, 20)
    c.truncate_from_end(15)                                  # written now, (1, 10) with it
    assert not c.dirty
    assert cache(tmp_path).epoch_entries() == [(0, 0), (1, 10)]


def test_the_log_writes_a_pending_epoch_before_its_recovery_point_passes_it(tmp_path, clock):
    """Recovery re-reads only the batches after the recovery point: an epoch's entry must
    be on disk before the point moves past its start."""
    from storage import Log
    from tests.storage.conftest import batch
    log = Log.open(tmp_path / "t-0", clock=clock)
    log.leader_epoch_cache.on_dirty = lambda _c: None
    log.leader_epoch_cache.assign(4, 0)                      # became leader, epoch 4
    log.append_as_leader(batch(5), 4)
    assert cache(tmp_path / "t-0").epoch_entries() == []
    log.flush()
    assert log.recovery_point == 5
    assert cache(tmp_path / "t-0").epoch_entries() == [(4, 0)]
    log.leader_epoch_cache.assign(5, 5)
    log.close()                                              # and when it closes
    assert cache(tmp_path / "t-0").epoch_entries() == [(4, 0), (5, 5)]


def test_a_crash_before_the_write_loses_no_epoch_of_a_record(tmp_path, clock):
    """As in Kafka: a log reopened after a crash recovers from its recovery point and
    assigns the epochs of the batches it re-reads."""
    from storage import Log
    from tests.storage.conftest import batch
    log = Log.open(tmp_path / "t-0", clock=clock)
    log.leader_epoch_cache.on_dirty = lambda _c: None
    log.leader_epoch_cache.assign(4, 0)
    log.append_as_leader(batch(5), 4)
    # No flush, no close: the process died with the checkpoint unwritten.
    again = Log.open(tmp_path / "t-0", clock=clock)
    assert again.log_end_offset == 5
    assert again.leader_epoch_cache.epoch_entries() == [(4, 0)]
