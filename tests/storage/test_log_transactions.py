"""Transactions on one partition's log (the seeds' LSO; Kafka's UnifiedLogTest and
ProducerStateManagerTest transactional cases): transactional batches open a transaction, a
COMMIT or ABORT marker ends it, the last stable offset stays at the first offset of the
oldest one still open, and every aborted one is indexed (``.txnindex``) in the segment of
its marker, through restarts, crashes and truncation."""
from __future__ import annotations

import pytest

from protocols.errors import (InvalidProducerEpochError, InvalidRecordError,
                              InvalidTxnStateError, TransactionCoordinatorFencedError)
from protocols.records import Record, encode_batch
from storage import Log
from storage.dump import LogDumper
from storage.transaction_index import AbortedTxn

T0 = 1_700_000_000_000


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = True
              ) -> bytes:
    return encode_batch([Record(None, f"p{pid}-{seq + i}".encode(), T0) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=transactional)


def end(log: Log, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0):
    return log.append_end_txn_marker(pid, epoch, coordinator_epoch, commit, 0, now_ms=T0)


def settle(log: Log) -> None:
    log.update_high_watermark(log.log_end_offset)


@pytest.fixture
def log(tmp_path, clock):
    return Log.open(tmp_path / "t-0", clock=clock)


def test_the_lso_is_the_first_offset_of_the_oldest_open_transaction(log):
    log.append_as_leader(encode_batch([Record(None, b"plain", T0)]), 0)         # offset 0
    log.append_as_leader(txn_batch(1, 0), 0)                                   # 1-2
    log.append_as_leader(txn_batch(2, 0), 0)                                   # 3-4
    settle(log)
    assert log.first_unstable_offset == 1
    assert (log.high_watermark, log.last_stable_offset) == (5, 1)
    end(log, 1, commit=True)                                                   # 5
    settle(log)
    assert (log.first_unstable_offset, log.last_stable_offset) == (3, 3)
    end(log, 2, commit=True)                                                   # 6
    # Its marker is not below the high watermark yet: the transaction stays unstable
    # (Kafka's unreplicatedTxns), or a leader change could take the marker away from under
    # a read_committed consumer that read the transaction.
    assert (log.first_unstable_offset, log.last_stable_offset) == (3, 3)
    settle(log)
    assert log.first_unstable_offset is None
    assert log.last_stable_offset == 7


def test_the_lso_never_passes_the_high_watermark(log):
    log.append_as_leader(txn_batch(1, 0), 0)
    assert (log.first_unstable_offset, log.high_watermark, log.last_stable_offset) == (0, 0, 0)


def test_an_aborted_transaction_is_indexed_with_the_lso_it_leaves(log):
    log.append_as_leader(txn_batch(1, 0), 0)                                   # 0-1
    log.append_as_leader(txn_batch(2, 0), 0)                                   # 2-3
    log.append_as_leader(txn_batch(1, 2), 0)                                   # 4-5
    end(log, 1, commit=False)                                                  # 6
    end(log, 2, commit=True)                                                   # 7: no entry
    log.append_as_leader(txn_batch(1, 4), 0)                                   # 8-9
    end(log, 1, commit=False)                                                  # 10
    aborted = [AbortedTxn(1, 0, 6, 2),   # producer 2's transaction (from 2) was still open
               AbortedTxn(1, 8, 10, 11)]
    assert log.collect_aborted_transactions(0, 11) == aborted
    assert log.collect_aborted_transactions(7, 11) == aborted[1:]
    assert log.collect_aborted_transactions(0, 6) == aborted[:1]
    assert (log.dir / f"{0:020d}.txnindex").stat().st_size == 2 * 34


def test_a_producer_in_a_transaction_writes_only_transactional_batches(log):
    log.append_as_leader(txn_batch(1, 0), 0)
    with pytest.raises(InvalidTxnStateError, match="Expected transactional write"):
        log.append_as_leader(txn_batch(1, 2, transactional=False), 0)
    with pytest.raises(InvalidTxnStateError):      # nor within one request
        log.append_as_leader(txn_batch(3, 0) + txn_batch(3, 2, transactional=False), 0)
    assert log.log_end_offset == 2
    end(log, 1, commit=True)
    log.append_as_leader(txn_batch(1, 2, transactional=False), 0)   # idempotent again


def test_clients_may_not_write_control_records(log):
    from protocols.control_records import ABORT, EndTransactionMarker, end_txn_marker_batch
    marker = end_txn_marker_batch(EndTransactionMarker(ABORT, 0), 1, 0, timestamp_ms=T0)
    with pytest.raises(InvalidRecordError, match="Clients are not allowed to write control"):
        log.append_as_leader(marker, 0)


def test_a_marker_of_an_older_epoch_or_coordinator_is_refused(log):
    log.append_as_leader(txn_batch(1, 0, epoch=3), 0)
    end(log, 1, commit=False, epoch=3, coordinator_epoch=5)
    log.append_as_leader(txn_batch(1, 2, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError):
        end(log, 1, commit=True, epoch=2, coordinator_epoch=5)
    with pytest.raises(TransactionCoordinatorFencedError, match="4 \\(zombie\\), 5"):
        end(log, 1, commit=True, epoch=3, coordinator_epoch=4)
    end(log, 1, commit=True, epoch=4, coordinator_epoch=6)   # a bumped epoch ends it
    settle(log)
    assert log.first_unstable_offset is None


def test_a_marker_without_a_transaction_here_ends_an_empty_one(log):
    # The coordinator writes a marker to every partition it was told of, even one the
    # producer never wrote to: Kafka indexes that abort at the marker's own offset.
    log.append_as_leader(encode_batch([Record(None, b"x", T0)]), 0)
    end(log, 9, commit=False)
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(9, 1, 1, 2)]


@pytest.mark.parametrize("clean", [True, False])
def test_open_transactions_and_the_index_survive_a_restart(tmp_path, clock, clean):
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 300}, clock=clock)
    log.append_as_leader(txn_batch(1, 0), 0)
    end(log, 1, commit=False)
    for seq in range(0, 8, 2):
        log.append_as_leader(txn_batch(2, seq), 0)
    assert log.num_segments > 1
    if clean:
        log.close()
    else:
        for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
            snapshot.unlink()                      # replayed from the log instead
    reopened = Log.open(tmp_path / "t-0", {"segment.bytes": 300}, clock=clock,
                        clean_shutdown=clean, high_watermark=11)
    assert reopened.first_unstable_offset == 3
    assert reopened.last_stable_offset == 3
    assert reopened.collect_aborted_transactions(0, 11) == [AbortedTxn(1, 0, 2, 3)]
    end(reopened, 2, commit=False)
    assert reopened.collect_aborted_transactions(3, 12)[-1] == AbortedTxn(2, 3, 11, 12)


def test_a_lost_index_is_rebuilt_from_the_log(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", clock=clock)
    log.append_as_leader(txn_batch(1, 0), 0)
    end(log, 1, commit=False)
    log.close()
    (tmp_path / "t-0" / f"{0:020d}.txnindex").unlink()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    reopened = Log.open(tmp_path / "t-0", clock=clock, clean_shutdown=False)
    assert reopened.collect_aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]


def test_truncation_reopens_a_transaction_and_drops_its_index_entry(log):
    log.append_as_leader(txn_batch(1, 0), 0)                                   # 0-1
    end(log, 1, commit=False)                                                  # 2
    assert log.collect_aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]
    log.truncate_to(2)                                                         # the marker
    assert log.collect_aborted_transactions(0, 3) == []
    assert log.first_unstable_offset == 0
    end(log, 1, commit=True)
    settle(log)
    assert log.first_unstable_offset is None


def test_the_snapshot_dump_shows_an_open_transaction(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", clock=clock)
    log.append_as_leader(txn_batch(4, 0), 0)
    end(log, 4, commit=False, coordinator_epoch=7)
    log.append_as_leader(txn_batch(4, 2), 0)
    log.close()
    lines = [line.text for line in LogDumper().dump([tmp_path / "t-0" / f"{5:020d}.snapshot"])]
    assert lines[1] == ("producerId: 4 producerEpoch: 0 coordinatorEpoch: 7 "
                        f"currentTxnFirstOffset: OptionalLong[3] lastTimestamp: {T0} "
                        f"firstSequence: 0 lastSequence: 1 lastOffset: 1 offsetDelta: 1 "
                        f"timestamp: {T0}")


def test_deleted_segments_take_their_index_with_them(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 200, "file.delete.delay.ms": 0},
                   clock=clock)
    log.append_as_leader(txn_batch(1, 0), 0)
    end(log, 1, commit=False)
    while log.num_segments < 3:
        log.append_as_leader(encode_batch([Record(None, b"x" * 50, T0)]), 0)
    settle(log)
    log.delete_records(log.segments[1].base_offset)
    log.delete_old_segments()
    log.delete_pending_segments()
    assert not list((tmp_path / "t-0").glob("*.txnindex*"))


def test_compaction_keeps_the_aborted_transactions_indexed(tmp_path, clock):
    # Compaction keeps offsets and markers, so the cleaned segment keeps the index entries
    # of the segments it replaces (the cleaner's rules for transactional data, which may
    # drop aborted records, are a later step of issue 41).
    from storage.cleaner import Cleaner
    log = Log.open(tmp_path / "c-0", {"cleanup.policy": "compact", "segment.bytes": 400},
                   clock=clock)
    for round_ in range(3):
        log.append_as_leader(encode_batch(
            [Record(b"k%d" % i, b"v%d" % round_, T0) for i in range(3)], producer_id=1,
            producer_epoch=0, base_sequence=3 * round_, transactional=True), 0)
        end(log, 1, commit=round_ != 1)
    while log.num_segments < 3:
        log.append_as_leader(encode_batch([Record(b"k0", b"x" * 80, T0)]), 0)
    log.roll()
    settle(log)
    before = log.collect_aborted_transactions(0, log.log_end_offset)
    assert before == [AbortedTxn(1, 4, 7, 8)]
    assert Cleaner().clean(log).segments_cleaned > 0
    assert log.collect_aborted_transactions(0, log.log_end_offset) == before
