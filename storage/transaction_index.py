"""A segment's aborted transactions: its ``.txnindex`` file (Kafka's TransactionIndex).

A read_committed fetch must be told which transactions in the range it reads were aborted,
so that the consumer drops their records. Each segment keeps, for every transaction whose
ABORT marker was written in it, an ``AbortedTxn``: the producer id, the transaction's first
and last offsets (the marker's), and the partition's last stable offset when the marker was
written. Entries are in the order of their markers, so their last offsets rise; a search
over a fetch's range can stop at the first entry whose last stable offset reaches the
range's end, since every transaction aborted later began after that.

The file is Kafka's: entries of 34 bytes, ``version i16 (0) | producerId i64 | firstOffset
i64 | lastOffset i64 | lastStableOffset i64``, big-endian, no header; it is created on the
first append, so a segment without aborted transactions has none, as in Kafka.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from protocols.errors import CorruptIndexError, KafkaError

CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size   # 34


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def encode(self) -> bytes:
        return _ENTRY.pack(self.version, self.producer_id, self.first_offset,
                           self.last_offset, self.last_stable_offset)

    @classmethod
    def decode(cls, data: bytes | memoryview, at: int = 0) -> "AbortedTxn":
        version, pid, first, last, lso = _ENTRY.unpack_from(data, at)
        return cls(pid, first, last, lso, version)


@dataclass(frozen=True)
class TxnIndexSearchResult:
    aborted_transactions: list[AbortedTxn]
    is_complete: bool   # no later segment can hold an aborted transaction in the range


class TransactionIndex:
    def __init__(self, start_offset: int, path: Path):
        self.start_offset = start_offset
        self.path = Path(path)
        self._last_offset: int | None = None
        entries = self._entries()
        if entries:
            self._last_offset = entries[-1][1].last_offset

    # ---- reading ---------------------------------------------------------------------------
    def _entries(self) -> list[tuple[int, AbortedTxn]]:
        """``(position, entry)`` of every whole entry in the file (a torn last one is
        ignored, as Kafka's reader stops short of it)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out = []
        for position in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            txn = AbortedTxn.decode(data, position)
            if txn.version > CURRENT_VERSION:
                raise KafkaError(f"Unexpected aborted transaction version {txn.version} in "
                                 f"transaction index {self.path.resolve()}, current version "
                                 f"is {CURRENT_VERSION}")
            out.append((position, txn))
        return out

    @property
    def last_offset(self) -> int | None:
        """The last offset of the newest entry (None: no entry)."""
        return self._last_offset

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return [txn for _, txn in self._entries()]

    def is_empty(self) -> bool:
        return not self._entries()

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int
                             ) -> TxnIndexSearchResult:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``, and
        whether the search is complete (an entry's last stable offset reached the bound:
        transactions aborted after it began after the bound)."""
        found = []
        for _, txn in self._entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        for _, txn in self._entries():
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {txn} in index "
                    f"{self.path.resolve()} is less than start offset {self.start_offset}")

    # ---- writing ---------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        if self._last_offset is not None and self._last_offset >= txn.last_offset:
            raise ValueError(f"The last offset of appended transactions must increase "
                             f"sequentially, but {txn.last_offset} is not greater than current "
                             f"last offset {self._last_offset} of index {self.path.resolve()}")
        with open(self.path, "ab") as f:
            f.write(txn.encode())
        self._last_offset = txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions ending at or after ``offset``."""
        last = None
        for position, txn in self._entries():
            if txn.last_offset >= offset:
                os.truncate(self.path, position)
                self._last_offset = last
                return
            last = txn.last_offset

    def reset(self) -> None:
        if self.path.exists():
            os.truncate(self.path, 0)
        self._last_offset = None

    def flush(self) -> None:
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename_to(self, path: Path) -> None:
        path = Path(path)
        try:
            if self.path.exists():
                os.replace(self.path, path)
        finally:
            self.path = path

    def update_parent_dir(self, directory: Path) -> None:
        self.path = Path(directory) / self.path.name

    def delete_if_exists(self) -> bool:
        try:
            self.path.unlink()
            return True
        except FileNotFoundError:
            return False
