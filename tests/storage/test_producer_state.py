"""Idempotent producers on the log: duplicates answered with their original offsets,
sequence gaps and stale epochs refused, state kept across restarts in .snapshot files."""
from __future__ import annotations

import struct

import crc32c
import pytest

from protocols.errors import (CorruptRecordError, InvalidProducerEpochError,
                              OutOfOrderSequenceNumberError)
from protocols.records import Record, encode_batch
from storage import Log
from storage.producer_state import ProducerStateManager, decode_snapshot


def batch(seq: int, n: int = 2, pid: int = 7, epoch: int = 0) -> bytes:
    return encode_batch([Record(None, f"v{seq + i}".encode(), 1_000) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_a_retried_batch_is_answered_with_its_original_offsets(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", clock=clock)
    assert log.append_as_leader(batch(0), 0).first_offset == 0
    assert log.append_as_leader(batch(2), 0).first_offset == 2
    again = log.append_as_leader(batch(0), 0)           # the retry of the first batch
    assert (again.first_offset, again.last_offset, again.duplicate) == (0, 1, True)
    assert log.log_end_offset == 4                       # nothing written twice
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(batch(9), 0)                # a gap: 4..8 never arrived
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(batch(5, epoch=1), 0)       # a new epoch starts at 0
    assert log.append_as_leader(batch(0, epoch=1), 0).first_offset == 4
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch(4, epoch=0), 0)       # fenced: an older epoch
    # Another producer and non-idempotent batches are independent.
    assert log.append_as_leader(batch(0, pid=8), 0).first_offset == 6
    assert log.append_as_leader(encode_batch([Record(None, b"x")]), 0).first_offset == 8


def test_a_producers_first_batch_must_be_its_sequence_zero(tmp_path, clock):
    """Two requests of a new producer can overtake each other between actors: the second
    batch, arriving first, is refused (retriable) so that the first is not left out of
    order for good; it is accepted once the first is in."""
    log = Log.open(tmp_path / "t-0", clock=clock)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(batch(2), 0)
    assert log.log_end_offset == 0
    assert log.append_as_leader(batch(0), 0).first_offset == 0
    assert log.append_as_leader(batch(2), 0).first_offset == 2



def test_several_batches_of_one_producer_in_one_append(tmp_path, clock):
    """A produce request may carry several batches of a partition (Kafka's
    UnifiedLogTest.testMultipleProducersWithDuplicatesInSingleAppend's shape): each is
    checked against the state the ones before it leave, so a new producer's 0, 2, 4 are
    one append, and a gap or an epoch going back within the append is refused whole."""
    log = Log.open(tmp_path / "t-0", clock=clock)
    info = log.append_as_leader(batch(0) + batch(2) + batch(4) + batch(0, pid=8), 0)
    assert (info.first_offset, info.last_offset) == (0, 7)
    assert log.append_as_leader(batch(6) + batch(8), 0).first_offset == 8
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(batch(10) + batch(13), 0)       # 12 missing between them
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch(0, epoch=1) + batch(2, epoch=0), 0)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(batch(0, epoch=1) + batch(4, epoch=2), 0)   # not 0
    assert log.log_end_offset == 12                          # nothing of those written
    info = log.append_as_leader(batch(10) + batch(0, epoch=1) + batch(2, epoch=1), 0)
    assert (info.first_offset, info.last_offset) == (12, 17)
    retry = log.append_as_leader(batch(0, epoch=1), 0)
    assert (retry.first_offset, retry.duplicate) == (14, True)

@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_survives_a_restart(tmp_path, clock, clean):
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 200}, clock=clock)
    for seq in range(0, 20, 2):
        log.append_as_leader(batch(seq), 0)
    assert log.num_segments > 1                          # rolls took snapshots
    if clean:
        log.close()                                      # snapshot at the log end
    reopened = Log.open(tmp_path / "t-0", {"segment.bytes": 200}, clock=clock,
                        clean_shutdown=clean)
    assert any(p.suffix == ".snapshot" for p in (tmp_path / "t-0").iterdir())
    dup = reopened.append_as_leader(batch(18), 0)
    assert (dup.first_offset, dup.duplicate) == (18, True)
    with pytest.raises(OutOfOrderSequenceNumberError):
        reopened.append_as_leader(batch(21), 0)
    assert reopened.append_as_leader(batch(20), 0).first_offset == 20


def test_truncation_rewinds_producer_state(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 200}, clock=clock)
    for seq in range(0, 12, 2):
        log.append_as_leader(batch(seq), 0)
    log.truncate_to(6)                                   # batches 6.. are gone
    assert log.append_as_leader(batch(6), 0).first_offset == 6   # so 6 is new again
    log.truncate_to(0)
    assert log.append_as_leader(batch(0), 0).first_offset == 0


def test_follower_appends_build_the_same_state(tmp_path, clock):
    leader = Log.open(tmp_path / "a", clock=clock)
    follower = Log.open(tmp_path / "b", clock=clock)
    for seq in range(0, 6, 2):
        leader.append_as_leader(batch(seq), 0)
    follower.append_as_follower(leader.read(0, 1 << 20))
    # After a leader change the follower, now leader, still recognises the retry.
    assert follower.append_as_leader(batch(4), 1).duplicate


def test_snapshot_files_are_kafkas_producer_snapshot_layout(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", clock=clock)
    log.append_as_leader(batch(0, n=3, pid=7), 0)                # offsets 0-2, seq 0-2
    log.append_as_leader(batch(0, n=2, pid=9, epoch=4), 0)       # offsets 3-4, seq 0-1
    log.close()
    data = (tmp_path / "t-0" / f"{5:020d}.snapshot").read_bytes()   # named by its end offset
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 2)
    assert crc == crc32c.crc32c(data[6:])                        # over the entries, as Kafka
    entries = list(struct.iter_unpack(">qhiqiqiq", data[10:]))
    # producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator
    # epoch, current txn first offset
    assert entries == [(7, 0, 2, 2, 2, 1_000, -1, -1), (9, 4, 1, 4, 1, 1_000, -1, -1)]


def test_a_snapshot_written_by_kafka_is_read(tmp_path):
    # One entry per producer, its last batch: what Kafka's ProducerStateManager writes.
    entries = struct.pack(">qhiqiqiq", 11, 12, 41, 140, 9, 123_456, 13, -1)
    body = struct.pack(">i", 1) + entries
    (tmp_path / f"{141:020d}.snapshot").write_bytes(
        struct.pack(">hI", 1, crc32c.crc32c(body)) + body)
    state = ProducerStateManager(tmp_path)
    assert state.load(log_end_offset=200) == 141
    assert state.check(11, 12, 32, 41) is not None               # the retry of 131-140
    assert state.check(11, 12, 42, 45) is None                   # the next batch
    with pytest.raises(OutOfOrderSequenceNumberError):
        state.check(11, 12, 50, 51)


def test_a_corrupt_snapshot_is_dropped_and_the_state_rebuilt_from_the_log(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 200}, clock=clock)
    for seq in range(0, 20, 2):
        log.append_as_leader(batch(seq), 0)
    log.close()
    newest = max((tmp_path / "t-0").glob("*.snapshot"))
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF                                             # a flipped bit
    newest.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC is no longer valid"):
        decode_snapshot(bytes(data))
    reopened = Log.open(tmp_path / "t-0", {"segment.bytes": 200}, clock=clock,
                        clean_shutdown=True)
    assert not newest.exists()
    assert reopened.append_as_leader(batch(18), 0).duplicate    # state came back anyway
    assert reopened.append_as_leader(batch(20), 0).first_offset == 20
