"""The partition log: appends, reads, rolls, truncation and retention (seed 000
§1-§4)."""
from __future__ import annotations

import os

import pytest

from protocols.errors import (CorruptRecordError, InvalidOffsetError, InvalidRecordError,
                              InvalidConfigError, OffsetOutOfRangeError, RecordTooLargeError,
                              UnsupportedVersionError)
from protocols.records import Record, encode_batch, iter_batches
from storage import Log
from tests.storage.conftest import batch, keyed_batch, offsets, values

T0 = 1_700_000_000_000


def open_log(path, clock, **config):
    return Log.open(path / "topic-0", config, clock=clock)


def listing(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ---- appends and reads --------------------------------------------------------------------
def test_leader_append_assigns_offsets_and_stamps_the_leader_epoch(tmp_path, clock):
    log = open_log(tmp_path, clock)
    first = log.append_as_leader(batch(3), leader_epoch=5)
    second = log.append_as_leader(batch(2, prefix="w"), leader_epoch=5)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    data = log.read(0, 1 << 20)
    assert offsets(data) == [0, 1, 2, 3, 4]
    assert [b.partition_leader_epoch for b in iter_batches(data)] == [5, 5]
    assert all(b.is_valid() for b in iter_batches(data))
    assert log.leader_epoch_cache.latest_epoch == 5


def test_partition_directory_holds_20_digit_segment_files(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(1), 0)
    assert listing(log.dir) == ["00000000000000000000.index", "00000000000000000000.log",
                                "00000000000000000000.timeindex", "leader-epoch-checkpoint"]
    # The active segment's indexes are preallocated, as in seed 000's listing.
    assert os.path.getsize(log.dir / "00000000000000000000.index") == 10485760
    assert os.path.getsize(log.dir / "00000000000000000000.timeindex") == 10485756


def test_a_new_partition_holds_its_log_alone_until_records_arrive(tmp_path, clock, caplog):
    """Kafka's LazyIndex: a segment's index files are made by its first append, so a
    topic of thousands of partitions opens a .log each, not three files each. Closed and
    opened again empty, the log finds nothing to rebuild."""
    log = open_log(tmp_path, clock)
    assert listing(log.dir) == ["00000000000000000000.log"]
    log.close()
    log = open_log(tmp_path, clock)
    assert not [name for name in listing(log.dir) if "index" in name]
    log.append_as_leader(batch(2), 0)
    assert {"00000000000000000000.index", "00000000000000000000.timeindex"} <= set(
        listing(log.dir))
    assert offsets(log.read(0, 1 << 20)) == [0, 1]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_rolled_segment_that_took_no_records_reopens_without_index_files(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(3), 0)
    log.roll()
    assert listing(log.dir).count("00000000000000000003.log") == 1
    assert "00000000000000000003.index" not in listing(log.dir)
    log.close()
    log = open_log(tmp_path, clock)
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.log_end_offset == 3
    log.append_as_leader(batch(1), 0)
    assert offsets(log.read(3, 1 << 20)) == [3]
    assert "00000000000000000003.index" in listing(log.dir)


def test_the_producers_buffer_is_not_modified(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(1), 0)
    produced = batch(1)
    before = bytes(produced)
    log.append_as_leader(produced, 0)
    assert produced == before


def test_read_returns_whole_batches_up_to_max_bytes_and_at_least_one(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for _ in range(10):
        log.append_as_leader(batch(5), 0)
    one = len(batch(5))
    data = log.read(0, one * 3 + one // 2)
    assert len(data) == one * 3
    assert offsets(data)[-1] == 14
    # A batch larger than max_bytes still comes back whole (KIP-74).
    assert len(log.read(7, 10)) == one
    assert offsets(log.read(7, 10)) == [5, 6, 7, 8, 9]  # the batch holding offset 7
    assert log.read(7, 10, min_one_message=False) == b""


def test_read_never_passes_max_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for _ in range(4):
        log.append_as_leader(batch(5), 0)
    assert offsets(log.read(0, 1 << 20, max_offset=10)) == list(range(10))
    assert log.read(10, 1 << 20, max_offset=10) == b""
    assert log.read(0, 1 << 20, max_offset=0) == b""


def region_bytes(region) -> bytes:
    with open(region.path, "rb") as f:
        assert os.fstat(f.fileno())[1:3] == (region.inode, region.device)
        return os.pread(f.fileno(), region.size, region.position)


def test_a_read_as_a_region_names_the_bytes_a_read_returns(tmp_path, clock):
    """Zero-copy fetch: the same bytes, named (path, device, inode, position, size)."""
    log = open_log(tmp_path, clock)
    for _ in range(4):
        log.append_as_leader(batch(5), 0)
    one = len(batch(5))
    info = log.read_info(5, 1 << 20, max_offset=15, as_region=True)
    region = info.records
    assert region.path == os.path.abspath(log.dir / "00000000000000000000.log")
    assert (region.position, region.size) == (one, 2 * one)
    assert region_bytes(region) == log.read(5, 1 << 20, max_offset=15)
    assert info.next_offset == 20   # not known without reading: where the segment ends
    # To the log end when nothing bounds it; at or past max_offset: nothing to name.
    assert region_bytes(log.read_info(0, 1 << 20, as_region=True).records) == log.read(0, 1 << 20)
    assert log.read_info(15, 1 << 20, max_offset=15, as_region=True).records == b""
    assert log.read_info(20, 1 << 20, as_region=True).records == b""


def test_a_regions_end_offset_is_bounded_by_the_offset_index_as_kafkas_fetch_is(tmp_path,
                                                                                  clock):
    """Kafka's fetchUpperBoundOffset: the first index entry at or past the region's end
    bounds the offsets in it (a read_committed fetch is told the aborted transactions
    below it), not the segment's end."""
    log = open_log(tmp_path, clock, **{"index.interval.bytes": 1})   # an entry per batch
    for _ in range(6):
        log.append_as_leader(batch(5), 0)
    one = len(batch(5))
    info = log.read_info(0, 2 * one, as_region=True)
    assert info.records.size == 2 * one
    assert info.next_offset == 14          # the third batch (10-14) starts at the end
    assert log.read_info(0, 2 * one + 3, as_region=True).next_offset == 19   # partial 3rd
    assert log.read_info(0, 1 << 20, as_region=True).next_offset == 30       # the log end


def test_a_region_ends_at_max_bytes_even_inside_a_batch_as_kafkas_does(tmp_path, clock):
    """Kafka's LogSegment.read cuts a slice at the fetch's byte limit, not at a batch's
    end: the last batch may be partial (clients drop it and fetch it again whole). At least
    the first batch comes whole (KIP-74)."""
    log = open_log(tmp_path, clock)
    for _ in range(4):
        log.append_as_leader(batch(5), 0)
    one = len(batch(5))
    region = log.read_info(0, one + 10, as_region=True).records
    assert region.size == one + 10
    assert region_bytes(region) == log.read(0, 1 << 20)[:one + 10]
    assert log.read_info(7, 10, as_region=True).records.size == one
    assert log.read_info(7, 10, min_one_message=False, as_region=True).records.size == 10


def test_a_region_is_bounded_by_its_segment(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.bytes": 3 * len(batch(5)) + 1})
    for _ in range(5):
        log.append_as_leader(batch(5), 0)
    assert len(log.segments) == 2
    first = log.read_info(0, 1 << 20, as_region=True).records
    assert first.size == 3 * len(batch(5))
    assert offsets(region_bytes(first)) == list(range(15))
    second = log.read_info(15, 1 << 20, as_region=True).records
    assert second.path.endswith("00000000000000000015.log")
    assert offsets(region_bytes(second)) == list(range(15, 25))


def test_a_region_stops_where_a_read_stops_at_a_damaged_batch_header(tmp_path, clock):
    """The batch holding the limit cannot be found (its header is damaged): the region
    would run to the segment's end, past the limit; the read's bytes are answered instead,
    which stop at the damage."""
    log = open_log(tmp_path, clock)
    for _ in range(4):
        log.append_as_leader(batch(5), 0)
    one = len(batch(5))
    with open(log.dir / "00000000000000000000.log", "r+b") as f:
        os.pwrite(f.fileno(), (1 << 30).to_bytes(4, "big"), 2 * one + 8)   # batchLength
    info = log.read_info(0, 1 << 20, max_offset=12, as_region=True)
    assert isinstance(info.records, bytes)
    assert info.records == log.read(0, 1 << 20, max_offset=12)
    assert offsets(info.records) == list(range(10))


def test_read_outside_the_log_is_offset_out_of_range(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(3), 0)
    assert log.read(3, 100) == b""  # exactly the log end: nothing yet
    with pytest.raises(OffsetOutOfRangeError, match="range 0 to 3"):
        log.read(4, 100)
    log.update_high_watermark(3)
    log.delete_records(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)


def test_log_append_time_overrides_timestamps_and_keeps_the_crc_valid(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    clock.now_ms = T0 + 123_456
    info = log.append_as_leader(batch(2, timestamp=5), 0)
    assert info.log_append_time == T0 + 123_456
    (b,) = iter_batches(log.read(0, 1 << 20))
    assert b.is_valid() and b.timestamp_type == "log_append_time"
    assert [r.timestamp for r in b.records()] == [T0 + 123_456] * 2


def test_topic_compression_type_recompresses_producer_batches(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"compression.type": "gzip"})
    log.append_as_leader(batch(4), 0)
    (b,) = iter_batches(log.read(0, 1 << 20))
    assert b.compression == "gzip"
    assert values(log.read(0, 1 << 20))[0].startswith(b"v0")


# ---- bad input leaves the log exactly as before -------------------------------------------
def _snapshot(log):
    return (log.log_end_offset, log.read(0, 1 << 30) if log.log_end_offset else b"",
            log.size, log.num_segments)


def test_crc_mismatch_is_corrupt_record_and_appends_nothing(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(2), 0)
    before = _snapshot(log)
    bad = bytearray(batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(bad), 0)
    # A good batch followed by a corrupt one: all or nothing.
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(1) + bytes(bad), 0)
    assert _snapshot(log) == before


def test_oversized_batch_is_record_too_large(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"max.message.bytes": 1000})
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=1000"):
        log.append_as_leader(batch(20), 0)
    assert log.log_end_offset == 0 and log.size == 0


def test_wrong_magic_is_unsupported_version(tmp_path, clock):
    log = open_log(tmp_path, clock)
    bad = bytearray(batch(1))
    bad[16] = 1
    with pytest.raises(UnsupportedVersionError):
        log.append_as_leader(bytes(bad), 0)


def test_trailing_garbage_is_corrupt(tmp_path, clock):
    log = open_log(tmp_path, clock)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(1) + b"\x00\x01", 0)
    assert log.log_end_offset == 0


def test_compacted_topic_rejects_null_keys(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError, match="without key"):
        log.append_as_leader(batch(1), 0)
    log.append_as_leader(keyed_batch([(b"k", b"v")]), 0)
    assert log.log_end_offset == 1


def test_unknown_config_names_the_closest_key(tmp_path, clock):
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        open_log(tmp_path, clock, **{"segment.byte": 100})


# ---- follower appends ---------------------------------------------------------------------
def test_follower_append_keeps_the_leaders_offsets_and_epochs(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_follower(batch(3, base_offset=0, epoch=1))
    log.append_as_follower(batch(2, base_offset=3, epoch=2))
    assert log.log_end_offset == 5
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 3)]
    with pytest.raises(InvalidOffsetError):
        log.append_as_follower(batch(1, base_offset=4, epoch=2))  # goes backwards
    assert log.log_end_offset == 5


# ---- rolling ------------------------------------------------------------------------------
def test_roll_on_segment_bytes(tmp_path, clock):
    one = len(batch(10))
    log = open_log(tmp_path, clock, **{"segment.bytes": one * 3})
    for _ in range(7):
        log.append_as_leader(batch(10), 0)
    assert [s.base_offset for s in log.segments] == [0, 30, 60]
    assert all(s.size <= one * 3 for s in log.segments)
    # Inactive segments' indexes are trimmed to their valid size.
    assert os.path.getsize(log.dir / "00000000000000000000.index") == \
        log.segments[0].offset_index.entries * 8
    assert offsets(log.read(35, 1 << 20))[0] == 30


def test_roll_on_time_since_the_first_timestamp(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.ms": 1000})
    log.append_as_leader(batch(1, timestamp=T0), 0)
    log.append_as_leader(batch(1, timestamp=T0 + 1000), 0)  # not more than segment.ms
    assert log.num_segments == 1
    log.append_as_leader(batch(1, timestamp=T0 + 1001), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_the_offset_index_is_full(tmp_path, clock):
    # 36 bytes: room for 4 offset-index entries (the time index, 3 slots, stays at one entry
    # because every batch has the same timestamp). An entry before every batch but the first.
    log = open_log(tmp_path, clock, **{"segment.index.bytes": 36, "index.interval.bytes": 0})
    for _ in range(12):
        log.append_as_leader(batch(1, timestamp=T0), 0)
    assert [s.base_offset for s in log.segments] == [0, 5, 10]
    assert log.segments[0].offset_index.entries == 4
    assert [o for s in log.segments for o in offsets(log.read(s.base_offset, 1 << 30))] \
        == list(range(12))


def test_roll_when_the_offset_does_not_fit_a_relative_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_follower(batch(1, base_offset=0))
    far = 2**31 + 5  # offset - baseOffset > Integer.MAX_VALUE
    log.append_as_follower(batch(1, base_offset=far))
    assert [s.base_offset for s in log.segments] == [0, far]
    assert (log.dir / f"{far:020d}.log").exists()
    assert offsets(log.read(far, 1000)) == [far]


# ---- finding offsets: the seeds' examples -------------------------------------------------
def test_segment_lookup_by_binary_search_seed_002(tmp_path, clock):
    """Seed 002 §5.3: segments 0, 368769, 737337; offset 368776 is in 368769's files."""
    log = open_log(tmp_path, clock)
    for base in (0, 368769, 737337):
        log.roll(base)
        log.append_as_follower(batch(10, base_offset=base))
    assert [s.base_offset for s in log.segments] == [0, 368769, 737337]
    assert log.segment_for(368776).base_offset == 368769
    assert offsets(log.read(368776, 1 << 20)) == list(range(368769, 368779))


def test_offset_lookup_uses_the_sparse_index_then_scans(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"index.interval.bytes": 4096})
    for _ in range(100):
        log.append_as_leader(batch(10), 0)  # ~1.2 KB each
    seg = log.active_segment
    assert 0 < seg.offset_index.entries < 100  # sparse
    entry = seg.offset_index.lookup(537)
    assert entry.offset <= 537
    loc = seg.translate_offset(537)
    assert loc.base_offset <= 537 <= loc.last_offset and loc.position >= entry.position


def test_offset_for_timestamp(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"index.interval.bytes": 0})
    for i in range(10):
        log.append_as_leader(batch(5, timestamp=T0 + i * 100), 0)  # record ts = T0+i*100+j
    assert log.offset_for_timestamp(T0) == 0
    assert log.offset_for_timestamp(T0 + 302) == 17
    assert log.offset_for_timestamp(T0 + 305) == 20
    assert log.offset_for_timestamp(T0 + 10_000) is None
    assert log.offset_for_timestamp(-2) == 0 and log.offset_for_timestamp(-1) == 50


# ---- truncation ---------------------------------------------------------------------------
def test_truncate_to_removes_the_tail_and_later_segments(tmp_path, clock):
    one = len(batch(10))
    log = open_log(tmp_path, clock, **{"segment.bytes": one * 2})
    for e in range(6):
        log.append_as_follower(batch(10, base_offset=e * 10, epoch=e))
    log.update_high_watermark(60)
    assert log.truncate_to(25) is True  # inside batch [20, 29]: the whole batch goes
    assert log.log_end_offset == 20
    assert [s.base_offset for s in log.segments] == [0, 20]
    assert log.high_watermark == 20
    assert log.leader_epoch_cache.epoch_entries() == [(0, 0), (1, 10)]
    assert offsets(log.read(0, 1 << 20)) == list(range(20))
    log.append_as_follower(batch(3, base_offset=20, epoch=7))
    assert log.log_end_offset == 23
    assert log.truncate_to(100) is False


def test_truncate_fully_and_start_at(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(5), 0)
    log.truncate_fully_and_start_at(42)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (42, 42, 1)
    assert log.active_segment.base_offset == 42
    assert log.append_as_leader(batch(1), 0).first_offset == 42


# ---- retention ----------------------------------------------------------------------------
def _filled(tmp_path, clock, n_batches=6, **config):
    one = len(batch(10))
    log = open_log(tmp_path, clock, **{"segment.bytes": one * 2, **config})
    for i in range(n_batches):
        log.append_as_leader(batch(10, timestamp=T0 + i * 1000), 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def test_retention_by_time_judges_the_largest_timestamp(tmp_path, clock):
    log = _filled(tmp_path, clock, **{"retention.ms": 10_000})
    assert [s.base_offset for s in log.segments] == [0, 20, 40]
    clock.now_ms = T0 + 1009 + 10_001  # first segment's largest timestamp is T0+1009
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [20, 40]
    assert log.log_start_offset == 20
    # Renamed to .deleted now, removed file.delete.delay.ms (60 s) later.
    assert (log.dir / "00000000000000000000.log.deleted").exists()
    assert log.delete_pending_segments() == 0
    clock.advance(60_000)
    assert log.delete_pending_segments() == 3
    assert not any(p.name.endswith(".deleted") for p in log.dir.iterdir())


def test_retention_when_every_segment_expired_rolls_a_fresh_active_segment(tmp_path, clock):
    log = _filled(tmp_path, clock, n_batches=5, **{"retention.ms": 1000})
    clock.now_ms = T0 + 10**6
    assert log.delete_old_segments() == 3
    assert [s.base_offset for s in log.segments] == [50]
    assert log.log_start_offset == log.log_end_offset == 50
    assert log.append_as_leader(batch(1), 0).first_offset == 50


def test_retention_never_deletes_above_the_high_watermark(tmp_path, clock):
    log = _filled(tmp_path, clock, **{"retention.ms": 1000})
    log.update_high_watermark(25)
    clock.now_ms = T0 + 10**6
    assert log.delete_old_segments() == 1  # only [0, 20) lies wholly below HW 25
    assert log.log_start_offset == 20


def test_retention_by_size_counts_the_whole_partition(tmp_path, clock):
    one = len(batch(10))
    log = _filled(tmp_path, clock, **{"retention.bytes": one * 3})
    # 6 batches in 3 segments of 2; keep at most 3 batches' worth -> drop the oldest segment
    # only (dropping two would leave 2, which is not required).
    assert log.delete_old_segments() == 1
    assert log.size == one * 4


def test_retention_by_log_start_offset(tmp_path, clock):
    log = _filled(tmp_path, clock)
    log.delete_records(45)
    assert log.delete_old_segments() == 2  # segments whose NEXT base <= 45: [0,20), [20,40)
    assert [s.base_offset for s in log.segments] == [40]
    assert offsets(log.read(45, 1 << 20))[0] == 40  # the batch holding 45
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(61)


def test_compact_only_topics_are_not_deleted_by_time(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"cleanup.policy": "compact", "retention.ms": 1,
                                       "segment.bytes": 200})
    for i in range(5):
        log.append_as_leader(keyed_batch([(b"k%d" % i, b"v")]), 0)
    log.update_high_watermark(5)
    clock.now_ms = T0 + 10**9
    assert log.delete_old_segments() == 0


# ---- flush policy -------------------------------------------------------------------------
def test_flush_messages_moves_the_recovery_point(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"flush.messages": 3})
    log.append_as_leader(batch(2), 0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(1), 0)
    assert log.recovery_point == 3


def test_flush_ms(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"flush.ms": 1000})
    log.append_as_leader(batch(2), 0)
    assert log.flush_if_due() is False
    clock.advance(1000)
    assert log.flush_if_due() is True and log.recovery_point == 2


# ---- reopening ----------------------------------------------------------------------------
def test_reopen_after_close_keeps_everything(tmp_path, clock):
    one = len(batch(10))
    log = open_log(tmp_path, clock, **{"segment.bytes": one * 2})
    for e in range(5):
        log.append_as_leader(batch(10), e)
    # A read serves one segment at most, as a Kafka fetch does.
    data = b"".join(log.read(s.base_offset, 1 << 30) for s in log.segments)
    assert offsets(data) == list(range(50))
    log.close()
    again = Log.open(tmp_path / "topic-0", {"segment.bytes": one * 2}, clock=clock,
                     clean_shutdown=True)
    assert again.log_end_offset == 50
    assert [s.base_offset for s in again.segments] == [0, 20, 40]
    assert b"".join(again.read(s.base_offset, 1 << 30) for s in again.segments) == data
    assert again.leader_epoch_cache.epoch_entries() == [(e, e * 10) for e in range(5)]
    assert again.append_as_leader(batch(1), 9).first_offset == 50
