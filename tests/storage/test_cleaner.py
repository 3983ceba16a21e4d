"""Log compaction: the latest record per key survives, offsets are kept, crash-safe swaps."""
from __future__ import annotations

import pytest

from protocols.records import Record, encode_batch, iter_batches
from protocols.topics import TopicPartition
from storage import Log, LogManager
from storage.cleaner import Cleaner, cleanable_range

T0 = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": 400}


def put(log: Log, key: str, value: str | None, ts: int = T0, codec: str = "none") -> int:
    data = encode_batch([Record(key.encode(), None if value is None else value.encode(), ts)],
                        compression=codec)
    return log.append_as_leader(data, 0).first_offset


def all_records(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read_info(offset, 1 << 20)
        for b in iter_batches(info.records):
            out.extend((r.offset, r.key, r.value) for r in b.records() if r.offset >= offset)
        offset = info.next_offset
    return out


def latest(log: Log) -> dict[bytes, tuple[int, bytes | None]]:
    view = {}
    for offset, key, value in all_records(log):
        view[key] = (offset, value)
    return view


def filled(tmp_path, clock, rounds=6, keys=4, **config) -> Log:
    log = Log.open(tmp_path / "compacted-0", {**COMPACT, **config}, clock=clock)
    for r in range(rounds):
        for k in range(keys):
            put(log, f"k{k}", f"v{r}", ts=clock())
    log.roll()  # everything written so far becomes cleanable
    log.update_high_watermark(log.log_end_offset)
    return log


def test_latest_value_per_key_survives_with_its_original_offset(tmp_path, clock):
    log = filled(tmp_path, clock)
    before = latest(log)
    assert len(all_records(log)) == 24
    stats = Cleaner().clean(log)
    after = all_records(log)
    assert [(o, k, v) for o, k, v in after] == sorted(
        (o, k, v) for k, (o, v) in before.items())
    assert [o for o, _, _ in after] == [20, 21, 22, 23]  # gaps before them
    assert latest(log) == before
    assert stats.records_retained == 4 and stats.end_offset == 24
    assert log.log_end_offset == 24
    assert put(log, "k9", "new") == 24


def test_the_active_segment_is_never_compacted(tmp_path, clock):
    log = Log.open(tmp_path / "compacted-0", {**COMPACT, "segment.bytes": 10**6}, clock=clock)
    for r in range(5):
        put(log, "k", f"v{r}")
    log.update_high_watermark(5)
    Cleaner().clean(log)
    assert len(all_records(log)) == 5


def test_nothing_at_or_above_the_high_watermark_is_cleaned(tmp_path, clock):
    log = filled(tmp_path, clock)
    log.update_high_watermark(10)
    r = cleanable_range(log, None, clock())
    assert r.first_uncleanable_offset == 10
    Cleaner().clean(log)
    assert [o for o, _, _ in all_records(log) if o >= 10] == list(range(10, 24))


def test_dirty_ratio_triggers_cleaning(tmp_path, clock):
    log = filled(tmp_path, clock)
    cleaner = Cleaner()
    assert cleaner.needs_cleaning(log, None)
    stats = cleaner.clean(log)
    assert not cleaner.needs_cleaning(log, stats.end_offset)  # nothing dirty
    put(log, "k0", "again")
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    r = cleanable_range(log, stats.end_offset, clock())
    assert 0 < r.dirty_ratio < 0.5
    assert not cleaner.needs_cleaning(log, stats.end_offset)
    for r_ in range(8):
        put(log, "k1", f"more{r_}")
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert cleanable_range(log, stats.end_offset, clock()).dirty_ratio >= 0.5
    assert cleaner.needs_cleaning(log, stats.end_offset)


def test_tombstones_outlive_one_pass_then_go_after_delete_retention_ms(tmp_path, clock):
    log = filled(tmp_path, clock, **{"delete.retention.ms": 60_000})
    put(log, "k0", None, ts=clock())  # delete k0
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    cleaner = Cleaner()
    first = cleaner.clean(log)
    assert latest(log)[b"k0"] == (24, None)  # the tombstone is kept for consumers to see
    clock.advance(60_001)
    put(log, "k1", "later", ts=clock())
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    second = cleaner.clean(log, first.end_offset)
    assert b"k0" not in latest(log)
    assert second.tombstones_removed == 1


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path, clock):
    log = filled(tmp_path, clock, **{"min.compaction.lag.ms": 10_000})
    assert cleanable_range(log, None, clock()).first_uncleanable_offset == 0
    clock.advance(10_001)
    assert cleanable_range(log, None, clock()).first_uncleanable_offset == 24


def test_compressed_batches_keep_their_codec(tmp_path, clock):
    log = Log.open(tmp_path / "compacted-0", COMPACT, clock=clock)
    for r in range(6):
        data = encode_batch([Record(b"a", b"%d" % r, T0), Record(b"b", b"%d" % r, T0)],
                            compression="gzip")
        log.append_as_leader(data, 0)
    log.roll()
    log.update_high_watermark(12)
    Cleaner().clean(log)
    assert [(o, k, v) for o, k, v in all_records(log)] == [(10, b"a", b"5"), (11, b"b", b"5")]
    codecs = {b.compression for s in log.segments for _, b in s.log.batches()}
    assert codecs == {"gzip"}


def test_delete_and_compact_policy_applies_both(tmp_path, clock):
    log = filled(tmp_path, clock, **{"cleanup.policy": "compact,delete", "retention.ms": 1000})
    Cleaner().clean(log)
    clock.advance(10**6)
    assert log.delete_old_segments() > 0


@pytest.mark.parametrize("step", ["clean.writing", "replace.swap-renamed",
                                  "replace.old-deleted"])
def test_a_crash_at_any_step_recovers_and_a_later_clean_finishes(tmp_path, clock, step):
    log = filled(tmp_path, clock)
    before = latest(log)

    def crash(at):
        if at == step:
            raise SystemExit(f"crash at {at}")

    log.fault_injector = crash
    with pytest.raises(SystemExit):
        Cleaner().clean(log)
    # The process died here: reopen the directory as a restarted broker would.
    again = Log.open(tmp_path / "compacted-0", COMPACT, clock=clock, high_watermark=24)
    names = [p.name for p in again.dir.iterdir()]
    assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names)
    assert latest(again) == before
    assert again.log_end_offset == 24
    Cleaner().clean(again)
    assert [o for o, _, _ in all_records(again)] == [20, 21, 22, 23]
    assert latest(again) == before


def test_log_manager_runs_the_cleaner_and_checkpoints_the_dirty_offset(tmp_path, clock):
    manager = LogManager(tmp_path, clock=clock)
    tp = TopicPartition("users", 0)
    log = manager.get_or_create_log(tp, COMPACT)
    for r in range(6):
        for k in range(4):
            put(log, f"k{k}", f"v{r}")
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    done = manager.clean_logs()
    assert done[tp].end_offset == 24
    assert (tmp_path / "cleaner-offset-checkpoint").read_text() == "0\n1\nusers 0 24\n"
    assert manager.clean_logs() == {}


# ---- transactions (LogCleanerTest's transactional cases) ------------------------------------

def put_txn(log: Log, producer_id: int, seq: int, key: str, value: str) -> int:
    data = encode_batch([Record(key.encode(), value.encode(), T0)], producer_id=producer_id,
                        producer_epoch=0, base_sequence=seq, transactional=True)
    return log.append_as_leader(data, 0).first_offset


def test_an_aborted_transactions_records_are_removed_and_never_the_latest(tmp_path, clock):
    """testAbortedTransactionsAreRemoved / testCommittedTransactionSpanningSegments: a key's
    value written in an aborted transaction does not supersede the committed one before it;
    the aborted record goes, the marker stays, the committed transaction's value wins."""
    log = Log.open(tmp_path / "compacted-0", COMPACT, clock=clock)
    put(log, "k", "committed-plain")                     # 0
    put_txn(log, 7, 0, "k", "aborted")                   # 1
    log.append_end_txn_marker(7, 0, 0, False, 0)         # 2: ABORT
    put_txn(log, 8, 0, "j", "txn-committed")             # 3
    log.append_end_txn_marker(8, 0, 0, True, 0)          # 4: COMMIT
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    Cleaner().clean(log)
    records = all_records(log)
    assert (0, b"k", b"committed-plain") in records
    assert all(v != b"aborted" for _, _, v in records)
    assert (3, b"j", b"txn-committed") in records
    markers = [b.base_offset for b in iter_batches(log.read_info(0, 1 << 20).records)
               if b.is_control]
    assert markers == [2, 4]
    assert log.collect_aborted_transactions(0, log.log_end_offset)   # still indexed


def test_nothing_from_an_open_transaction_on_is_cleaned(tmp_path, clock):
    """The first unstable offset bounds the cleanable range, like the high watermark: an
    open transaction's records may yet be aborted."""
    log = Log.open(tmp_path / "compacted-0", COMPACT, clock=clock)
    put(log, "k", "v0")                                  # 0
    put_txn(log, 7, 0, "k", "open")                      # 1: 7's transaction stays open
    put(log, "x", "y")                                   # 2
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert cleanable_range(log, None, clock()).first_uncleanable_offset == 1
    Cleaner().clean(log)
    assert [o for o, _, _ in all_records(log)] == [0, 1, 2]


def test_a_clean_overtaken_by_a_truncation_swaps_nothing_in(tmp_path, clock):
    # A follower's truncation can reach below the high watermark (after an unclean leader
    # election) while the cleaner copies the segments it cuts. Kafka aborts such a clean
    # (LogManager.truncateTo -> abortAndPauseCleaning); here the copy, which holds records
    # the truncation removed, is deleted instead of swapped in, and the pass claims nothing.
    log = filled(tmp_path, clock)

    def truncate_once(step: str) -> None:
        if step == "clean.writing" and log.log_end_offset > 2:
            log.truncate_to(2)
    log.fault_injector = truncate_once
    stats = Cleaner().clean(log)
    log.fault_injector = None
    assert [(o, k, v) for o, k, v in all_records(log)] == [(0, b"k0", b"v0"), (1, b"k1", b"v0")]
    assert log.log_end_offset == 2
    assert (stats.segments_cleaned, stats.end_offset) == (0, stats.first_dirty_offset)
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert put(log, "k9", "new") == 2
