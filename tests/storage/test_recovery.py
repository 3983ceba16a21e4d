"""Crash recovery: a log reopened after an unclean shutdown recovers to a consistent prefix."""
from __future__ import annotations

import os

import pytest

from protocols.errors import InvalidTopicError
from protocols.topics import TopicPartition
from storage import Log, LogManager
from tests.storage.conftest import batch, offsets


def fill(path, clock, n=6, records=10, **config):
    one = len(batch(records))
    log = Log.open(path, {"segment.bytes": one * 2, **config}, clock=clock)
    for e in range(n):
        log.append_as_leader(batch(records), e)
    return log, one


def test_torn_tail_is_truncated_on_unclean_reopen(tmp_path, clock):
    log, one = fill(tmp_path / "t-0", clock, n=3)
    active = log.active_segment.log.path
    good_size = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(batch(10)[:40])  # a write cut short by the crash
    # No close(): the process died. Reopen without a clean-shutdown mark.
    again = Log.open(tmp_path / "t-0", {"segment.bytes": one * 2}, clock=clock)
    assert again.log_end_offset == 30
    assert os.path.getsize(active) == good_size
    assert again.append_as_leader(batch(1), 9).first_offset == 30


def test_corrupt_batch_truncates_there_and_drops_later_segments(tmp_path, clock):
    log, one = fill(tmp_path / "t-0", clock, n=6)
    first = log.segments[0].log.path
    with open(first, "r+b") as f:  # flip a byte inside the second batch's records
        f.seek(one + 70)
        byte = f.read(1)
        f.seek(one + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = Log.open(tmp_path / "t-0", {"segment.bytes": one * 2}, clock=clock)
    assert again.log_end_offset == 10
    assert [s.base_offset for s in again.segments] == [0]
    assert offsets(again.read(0, 1 << 20)) == list(range(10))
    assert again.leader_epoch_cache.epoch_entries() == [(0, 0)]


def test_recovery_starts_at_the_recovery_point(tmp_path, clock):
    log, one = fill(tmp_path / "t-0", clock, n=6)
    first = log.segments[0].log.path
    with open(first, "r+b") as f:
        f.seek(70)
        f.write(b"\xff")
    # Everything below 40 was flushed: only the last segment is re-validated, so the
    # (pretend bit-rot) in segment 0 is not looked at, exactly as Kafka behaves.
    again = Log.open(tmp_path / "t-0", {"segment.bytes": one * 2}, clock=clock,
                     recovery_point=40)
    assert again.log_end_offset == 60


@pytest.mark.parametrize("damage", ["missing", "odd-length"])
def test_a_missing_or_corrupt_index_is_rebuilt(tmp_path, clock, damage):
    log, one = fill(tmp_path / "t-0", clock, n=40, records=10,
                    **{"segment.bytes": 1 << 20, "index.interval.bytes": 2048})
    entries = log.active_segment.offset_index.entries
    assert entries > 5
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    if damage == "missing":
        index.unlink()
    else:
        with open(index, "ab") as f:
            f.write(b"\x01\x02\x03")
    again = Log.open(tmp_path / "t-0", {"segment.bytes": 1 << 20,
                                        "index.interval.bytes": 2048},
                     clock=clock, clean_shutdown=True)
    assert again.active_segment.offset_index.entries == entries
    assert offsets(again.read(237, 1 << 20))[0] == 230


def test_a_small_segments_lost_index_is_made_again_once(tmp_path, clock):
    """Below index.interval.bytes the rebuilt index has no entry to store; its file is made
    anyway, or every later open would find it missing and recover the segment again."""
    log, one = fill(tmp_path / "t-0", clock, n=2, records=2)
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    index.unlink()
    for _ in range(2):
        again = Log.open(tmp_path / "t-0", {}, clock=clock, clean_shutdown=True)
        assert index.exists() and again.log_end_offset == 4
        again.close()


def test_leftover_deleted_files_are_removed_on_open(tmp_path, clock):
    log, one = fill(tmp_path / "t-0", clock, n=6, **{"retention.ms": 1})
    log.update_high_watermark(60)

    def crash(step):
        raise SystemExit(f"crash at {step}")

    log.fault_injector = crash
    clock.advance(10**9)
    with pytest.raises(SystemExit):
        log.delete_old_segments()
    assert any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())
    again = Log.open(tmp_path / "t-0", {"segment.bytes": one * 2}, clock=clock,
                     log_start_offset=log.log_start_offset)
    assert not any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())
    assert again.log_end_offset == 60
    assert again.segments[0].base_offset > 0


# ---- LogManager: directory-level checkpoints and the clean-shutdown marker ---------------
def test_log_manager_writes_kafka_checkpoints_and_recovers(tmp_path, clock):
    manager = LogManager(tmp_path, {"log.segment.bytes": 10_000}, clock=clock)
    manager.load_logs()
    tp = TopicPartition("orders", 3)
    log = manager.get_or_create_log(tp)
    assert log.dir == tmp_path / "orders-3"
    for e in range(5):
        log.append_as_leader(batch(10), e)
    log.update_high_watermark(50)
    log.delete_records(20)
    manager.shutdown()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 3 50\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\norders 3 20\n"
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\norders 3 50\n"

    again = LogManager(tmp_path, {"log.segment.bytes": 10_000}, clock=clock)
    assert again.had_clean_shutdown
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # running now: unclean if we die
    again.load_logs()
    reopened = again.get_log(tp)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (20, 50)
    assert reopened.high_watermark == 50
    assert reopened.recovery_point == 50


def test_log_manager_after_a_crash_recovers_from_the_checkpointed_point(tmp_path, clock):
    manager = LogManager(tmp_path, clock=clock)
    log = manager.get_or_create_log(TopicPartition("t", 0))
    log.append_as_leader(batch(3), 0)
    log.flush()
    manager.checkpoint()
    log.append_as_leader(batch(3), 0)
    with open(log.active_segment.log.path, "ab") as f:
        f.write(b"\x00" * 7)  # torn
    # crash: no shutdown()
    again = LogManager(tmp_path, clock=clock)
    assert not again.had_clean_shutdown
    again.load_logs()
    assert again.get_log(TopicPartition("t", 0)).log_end_offset == 6


@pytest.mark.parametrize("topic", ["..", ".", "a/b", "", "x" * 250, "bad name"])
def test_an_invalid_topic_name_never_becomes_a_path(tmp_path, clock, topic):
    manager = LogManager(tmp_path / "logs", clock=clock)
    with pytest.raises(InvalidTopicError):
        manager.get_or_create_log(TopicPartition(topic, 0))
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
