"""A segment's ``.txnindex`` (storage/transaction_index.py): Kafka's TransactionIndexTest,
case by case, and the file's bytes as Kafka writes them."""
from __future__ import annotations

import struct

import pytest

from protocols.errors import CorruptIndexError, KafkaError
from storage.transaction_index import (CURRENT_VERSION, ENTRY_SIZE, AbortedTxn,
                                       TransactionIndex)

TXNS = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40)]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "00000000000000000000.txnindex"


@pytest.fixture
def index(path):
    return TransactionIndex(0, path)


def fill(index, txns=TXNS):
    for txn in txns:
        index.append(txn)


def test_position_set_correctly_when_opened(index, path):
    fill(index)
    reopened = TransactionIndex(0, path)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.all_aborted_txns() == [*TXNS, another]


def test_sanity_check(index, path):
    fill(index)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(100, path).sanity_check()   # a start offset past every entry
    TransactionIndex(0, path).sanity_check()


def test_last_offset_must_increase(index):
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(ValueError, match="must increase sequentially"):
        index.append(AbortedTxn(0, 0, 15, 11))


def test_last_offset_cannot_decrease(index):
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 10, 11))


def test_collect_aborted_transactions(index):
    fill(index)
    cases = [((0, 100), TXNS, False), ((0, 32), TXNS[:3], True), ((0, 35), TXNS, True),
             ((10, 35), TXNS, True), ((11, 35), TXNS[1:], True), ((20, 41), TXNS[2:], False)]
    for (fetch_offset, upper_bound), expected, complete in cases:
        result = index.collect_aborted_txns(fetch_offset, upper_bound)
        assert (result.aborted_transactions, result.is_complete) == (expected, complete), \
            (fetch_offset, upper_bound)


def test_truncate(index):
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25),
            AbortedTxn(3, 32, 50, 40)]
    fill(index, txns)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns[:3]
    index.append(AbortedTxn(4, 40, 45, 41))      # the last offset is 35's again: 45 is past it
    index.reset()
    assert index.collect_aborted_txns(0, 100).aborted_transactions == []
    index.append(AbortedTxn(5, 0, 1, 0))         # after a reset any last offset goes


def test_aborted_txn_serde():
    txn = AbortedTxn(983493, 137, 299, 200)
    assert txn.version == CURRENT_VERSION == 0
    data = txn.encode()
    assert len(data) == ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 983493, 137, 299, 200)   # Kafka's bytes
    assert AbortedTxn.decode(data) == txn


def test_rename_index(index, tmp_path):
    index.append(AbortedTxn(0, 0, 10, 2))
    index.rename_to(tmp_path / "renamed.txnindex")
    index.append(AbortedTxn(1, 5, 15, 16))
    found = index.collect_aborted_txns(0, 100).aborted_transactions
    assert [t.first_offset for t in found] == [0, 5]
    assert (tmp_path / "renamed.txnindex").stat().st_size == 2 * ENTRY_SIZE


def test_update_parent_dir(index, tmp_path):
    parent = tmp_path / "parent"
    parent.mkdir()
    index.update_parent_dir(parent)
    assert index.path.parent == parent


def test_flush(path):
    index = TransactionIndex(0, path)
    index.flush()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.flush()
    assert path.stat().st_size > 0


def test_delete_if_exists(index, path):
    index.append(AbortedTxn(0, 0, 10, 2))
    assert index.delete_if_exists() and not path.exists()
    assert not index.delete_if_exists()


def test_is_empty(index):
    assert index.is_empty()                      # the file does not exist
    index.append(AbortedTxn(0, 0, 10, 2))
    assert not index.is_empty()
    index.reset()
    assert index.is_empty()                      # the file is empty


def test_do_not_create_file_until_needed(index, path):
    index.reset()
    index.flush()
    assert not path.exists()
    index.append(AbortedTxn(0, 0, 10, 2))
    assert path.exists()


def test_a_torn_last_entry_is_not_read(index, path):
    # A crash in the middle of an append leaves a partial entry: the whole ones are kept.
    fill(index)
    with open(path, "ab") as f:
        f.write(AbortedTxn(9, 60, 70, 61).encode()[:20])
    assert TransactionIndex(0, path).all_aborted_txns() == TXNS


def test_an_entry_of_a_later_version_is_refused(path):
    path.write_bytes(struct.pack(">hqqqq", 1, 7, 0, 10, 11))
    with pytest.raises(KafkaError, match="Unexpected aborted transaction version 1"):
        TransactionIndex(0, path)
