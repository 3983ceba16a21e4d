"""What a consumer hands out of a fetch holding transactions (Kafka's
CompletedFetch/FetcherTest read_committed cases): never a control record; for
read_committed, nothing of a transaction the answer lists as aborted, up to its ABORT
marker; the position moves past every skipped batch. Both poll and poll_arrow."""
from __future__ import annotations

import pytest

from protocols.control_records import ABORT, COMMIT, EndTransactionMarker, end_txn_marker_batch
from protocols.records import Record, encode_batch
from protocols.topics import TopicPartition
from rafka.consumer.config import CONSUMER_CONFIG
from rafka.consumer.fetch_buffer import buffer_fetched
from rafka.consumer.fetcher import Fetcher
from rafka.consumer.subscription_state import PartitionState

TP = TopicPartition("t", 0)


def data(offset: int, value: str, pid: int = -1, seq: int = -1,
         transactional: bool = False) -> bytes:
    return encode_batch([Record(None, value.encode(), 1_000)], base_offset=offset,
                        producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=seq, transactional=transactional)


def marker(offset: int, pid: int, kind: int) -> bytes:
    return end_txn_marker_batch(EndTransactionMarker(kind, 0), pid, 0, timestamp_ms=1_000,
                                base_offset=offset)


# 0 plain, 1 pid 7 (aborted at 4), 2 pid 8 (committed at 5), 3 pid 7, 4 ABORT 7,
# 5 COMMIT 8, 6 pid 7 again (a new transaction, not aborted), 7 plain
RECORDS = b"".join([data(0, "plain-0"), data(1, "t7-1", 7, 0, True), data(2, "t8-2", 8, 0, True),
                    data(3, "t7-3", 7, 1, True), marker(4, 7, ABORT), marker(5, 8, COMMIT),
                    data(6, "t7-6", 7, 2, True), data(7, "plain-7")])
ABORTED = ((7, 1),)


def polled(isolation: str, arrow: bool, aborted=ABORTED) -> tuple[list[str], int]:
    fetcher = Fetcher(CONSUMER_CONFIG.parse({"isolation.level": isolation}), None,
                      lambda tp, st: None)
    st = PartitionState(position=0)
    parts = {TP: st}
    buffer_fetched(st, RECORDS, 0, aborted, read_committed=isolation == "read_committed",
                   as_arrow=arrow)
    if arrow:
        table = fetcher.drain_arrow(parts, 1_000, headers=False)
        got = [v.decode() for v in table["value"].to_pylist()]
    else:
        got = [r.value.decode() for r in fetcher.drain_buffered(parts)]
    return got, st.position


@pytest.mark.parametrize("arrow", [False, True])
def test_read_committed_skips_aborted_transactions_and_markers(arrow):
    assert polled("read_committed", arrow) == (["plain-0", "t8-2", "t7-6", "plain-7"], 8)


@pytest.mark.parametrize("arrow", [False, True])
def test_read_uncommitted_skips_only_markers(arrow):
    assert polled("read_uncommitted", arrow) == (
        ["plain-0", "t7-1", "t8-2", "t7-3", "t7-6", "plain-7"], 8)


def test_a_fetch_ending_in_markers_still_moves_the_position():
    fetcher = Fetcher(CONSUMER_CONFIG.parse({}), None, lambda tp, st: None)
    st = PartitionState(position=4)
    buffer_fetched(st, marker(4, 7, ABORT) + marker(5, 8, COMMIT), 4)
    assert fetcher.drain_buffered({TP: st}) == [] and st.position == 6
