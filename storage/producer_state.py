"""Idempotent-producer state of one partition (Kafka's ProducerStateManager).

For every producer id the log holds batches of, the leader remembers the producer epoch and
the last five batches' sequence ranges and offsets. A new batch must continue the sequence
(``OUT_OF_ORDER_SEQUENCE_NUMBER`` otherwise), may not come from an older epoch
(``INVALID_PRODUCER_EPOCH``), and a retried batch that is already in the log is answered
with its original offsets instead of being written twice.

The state is rebuilt from the log's batch headers and saved in ``<offset>.snapshot`` files
(the state as of that offset), taken when a segment rolls and when the log closes, so that a
restart replays only what follows the newest snapshot. The files are Kafka's producer
snapshot, version 1 (``version i16 | crc u32 | [producer entry]``, CRC-32C over the entries),
which ``kafka-dump-log.sh`` and Kafka's own ProducerStateManager read. Kafka writes one entry
per producer, its last batch; rafka writes one per retained batch, oldest first, so that all
five survive a restart here while a Kafka reader (the last entry of a producer wins) still
sees the newest.
"""
from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from protocols.control_records import EndTransactionMarker
from protocols.errors import (CorruptRecordError, InvalidProducerEpochError,
                              InvalidTxnStateError, OutOfOrderSequenceNumberError,
                              TransactionCoordinatorFencedError)
from protocols.records import CONTROL_MASK, TRANSACTIONAL_MASK
from storage.checkpoint import write_atomically

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hIi")     # version, crc, entry count
# producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator
# epoch, current transaction's first offset
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_AT = 6                              # the CRC covers from here (Kafka's offset)
NUM_BATCHES_TO_RETAIN = 5  # Kafka's: as many as max.in.flight.requests.per.connection
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    # The coordinator epoch of the producer's last end-transaction marker here, and the
    # first offset of its transaction in progress here (None: none).
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None
    last_timestamp: int = -1

    def bump_epoch(self, epoch: int) -> None:
        """A new epoch (Kafka's maybeUpdateProducerEpoch): the old epoch's batches cannot
        be retried any more; a transaction in progress stays."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def duplicate_of(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction its marker ended here: its first and last offset (the marker's)."""
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True)
class SnapshotEntry:
    """One entry of a ``.snapshot`` file: a producer's state and one of its batches (None
    for a producer with none retained: one whose epoch a marker bumped)."""
    producer_id: int
    epoch: int
    coordinator_epoch: int
    current_txn_first_offset: int | None
    last_timestamp: int
    batch: BatchMetadata | None


def _next_seq(seq: int) -> int:
    return 0 if seq == INT_MAX else seq + 1


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0  # the state covers the log up to here
        # Transactions in progress: first offset -> producer id (the lowest first offset is
        # the partition's first unstable offset).
        self.ongoing_txns: dict[int, int] = {}
        # Transactions whose marker is in the log but not yet below the high watermark:
        # first offset -> the marker's offset. They stay unstable until the HW passes the
        # marker (Kafka's unreplicatedTxns), so that no read_committed consumer reads a
        # transaction whose marker a leader change could still take away.
        self.unreplicated_txns: dict[int, int] = {}

    def clear(self, map_end_offset: int = 0) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        self.map_end_offset = map_end_offset

    def has_ongoing_txn(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    # ---- checks and updates ------------------------------------------------------------------
    def check(self, producer_id: int, epoch: int, first_seq: int,
              last_seq: int) -> BatchMetadata | None:
        """Validate a producer's batch on the leader. Returns the original batch if this
        one is a duplicate (a retry of a batch already written), else None."""
        entry = self.producers.get(producer_id)
        if entry is None:
            # A producer's first batch here must be its sequence 0. Kafka accepts any
            # sequence (its state may have been lost to retention), trusting TCP to keep a
            # connection's requests in order; Ray calls to an async actor can overtake one
            # another, and accepting a later batch first would leave the first one out of
            # order forever. rafka never drops a producer's state, so 0 is always right.
            if first_seq != 0:
                raise OutOfOrderSequenceNumberError(
                    f"Out of order sequence number for producer {producer_id} at offset "
                    f"{self.map_end_offset}: {first_seq} (incoming seq. number), the "
                    "producer's first batch here must start at 0")
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Producer {producer_id}'s epoch {epoch} is older than {entry.epoch}")
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceNumberError(
                    f"Producer {producer_id}: a new epoch {epoch} must start at sequence 0, "
                    f"got {first_seq}")
            return None
        duplicate = entry.duplicate_of(first_seq, last_seq)
        if duplicate is not None:
            return duplicate
        if first_seq != _next_seq(entry.last_seq):
            raise OutOfOrderSequenceNumberError(
                f"Out of order sequence number for producer {producer_id} at offset "
                f"{self.map_end_offset}: {first_seq} (incoming seq. number), "
                f"{entry.last_seq} (current end sequence number)")
        return None

    def check_append(self, batches) -> BatchMetadata | None:
        """``check`` of every idempotent batch of one append (their headers, in order), each
        against the state the earlier ones leave, as Kafka's leader validates a produce
        request's batches (its ProducerAppendInfo per producer): a producer's second batch in
        the append must continue its first. Returns the original of a retried batch (the
        append is then answered with its offsets), else None."""
        pending: dict[int, tuple[int, int]] = {}   # producer id -> (epoch, last sequence)
        in_txn: dict[int, bool] = {}               # producer id -> a transaction is open
        for h in batches:
            if h.producer_id < 0:
                continue
            self._check_txn_state(h, in_txn)
            if h.base_sequence < 0:
                continue
            last_seq = (h.base_sequence + h.last_offset_delta) % (INT_MAX + 1)
            earlier = pending.get(h.producer_id)
            if earlier is None:
                duplicate = self.check(h.producer_id, h.producer_epoch, h.base_sequence,
                                       last_seq)
                if duplicate is not None:
                    return duplicate
            elif h.producer_epoch < earlier[0]:
                raise InvalidProducerEpochError(
                    f"Producer {h.producer_id}'s epoch {h.producer_epoch} is older than "
                    f"{earlier[0]}")
            elif h.producer_epoch > earlier[0] and h.base_sequence != 0:
                raise OutOfOrderSequenceNumberError(
                    f"Producer {h.producer_id}: a new epoch {h.producer_epoch} must start at "
                    f"sequence 0, got {h.base_sequence}")
            elif h.producer_epoch == earlier[0] and h.base_sequence != _next_seq(earlier[1]):
                raise OutOfOrderSequenceNumberError(
                    f"Out of order sequence number for producer {h.producer_id}: "
                    f"{h.base_sequence} (incoming seq. number), {earlier[1]} (the end "
                    "sequence number of its batch before it in the same request)")
            pending[h.producer_id] = (h.producer_epoch, last_seq)
        return None

    def _check_txn_state(self, h, in_txn: dict[int, bool]) -> None:
        """A producer with a transaction open here writes transactional batches only
        (Kafka's ProducerAppendInfo.appendDataBatch); a transactional batch opens one."""
        pid = h.producer_id
        if pid not in in_txn:
            in_txn[pid] = self.has_ongoing_txn(pid)
        transactional = bool(h.attributes & TRANSACTIONAL_MASK)
        if in_txn[pid] and not transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {pid} at offset "
                f"{self.map_end_offset}: its transaction here is not ended")
        in_txn[pid] = in_txn[pid] or transactional

    def check_end_txn_marker(self, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int) -> None:
        """A marker the coordinator asks the leader to write (Kafka's
        ProducerAppendInfo.appendEndTxnMarker checks): not of an older producer epoch, not
        from an older coordinator."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Epoch of producer {producer_id} at offset {self.map_end_offset} is "
                f"{producer_epoch}, which is smaller than the last seen epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producerId {producer_id} at offset "
                f"{self.map_end_offset}: {coordinator_epoch} (zombie), "
                f"{entry.coordinator_epoch} (current)")

    def update_from_batch(self, batch) -> CompletedTxn | None:
        """Take in one batch of the log (appended by the leader, a follower's copy, or
        replayed on recovery): its producer's sequence and epoch, and the transaction it
        opens, or, for an end-transaction marker, the transaction it ends (returned; the
        caller indexes an aborted one, then calls ``complete_txn``)."""
        self.map_end_offset = max(self.map_end_offset, batch.last_offset + 1)
        pid = batch.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, batch.producer_epoch)
        entry.bump_epoch(batch.producer_epoch)
        if batch.attributes & CONTROL_MASK:
            record = next(iter(batch.records()), None)
            if record is None:
                return None    # a marker the cleaner emptied: its transaction is long gone
            marker = EndTransactionMarker.deserialize(record)
            first = entry.current_txn_first_offset
            completed = CompletedTxn(pid, batch.base_offset if first is None else first,
                                     batch.last_offset, not marker.committed)
            entry.current_txn_first_offset = None
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.last_timestamp = record.timestamp
            return completed
        if batch.base_sequence >= 0:
            entry.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence,
                                               batch.base_offset, batch.last_offset,
                                               batch.max_timestamp))
        entry.last_timestamp = batch.max_timestamp
        if batch.attributes & TRANSACTIONAL_MASK and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.base_offset
            self.ongoing_txns[batch.base_offset] = pid
        return None

    # ---- transactions --------------------------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction in progress, or ended by a marker the
        high watermark has not passed yet (None: none)."""
        firsts = [*self.ongoing_txns, *self.unreplicated_txns]
        return min(firsts) if firsts else None

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is now below the HW are stable (Kafka's
        removeUnreplicatedTransactions)."""
        if self.unreplicated_txns:
            self.unreplicated_txns = {first: marker for first, marker
                                      in self.unreplicated_txns.items()
                                      if marker >= high_watermark}

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The partition's LSO once ``completed`` ends (what its aborted-index entry
        records): the oldest other transaction's first offset, else past its marker."""
        others = [o for o, pid in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        self.ongoing_txns.pop(completed.first_offset, None)
        self.unreplicated_txns[completed.first_offset] = completed.last_offset

    # ---- snapshots ---------------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        return sorted(int(p.name[:-len(SNAPSHOT_SUFFIX)])
                      for p in self.dir.glob(f"*{SNAPSHOT_SUFFIX}")
                      if p.name[:-len(SNAPSHOT_SUFFIX)].isdigit())

    def take_snapshot(self) -> None:
        write_atomically(snapshot_path(self.dir, self.map_end_offset),
                         encode_snapshot(self.producers.values()))

    def load(self, log_end_offset: int) -> int:
        """Load the newest snapshot at or below ``log_end_offset`` (dropping any above) and
        return the offset to replay the log from."""
        self.clear()
        for offset in reversed(self.snapshot_offsets()):
            path = snapshot_path(self.dir, offset)
            if offset > log_end_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                entries = decode_snapshot(path.read_bytes())
            except (CorruptRecordError, OSError):
                path.unlink(missing_ok=True)  # torn by a crash: an older one will do
                continue
            for e in entries:
                entry = self.producers.get(e.producer_id)
                if entry is None or entry.epoch != e.epoch:
                    entry = self.producers[e.producer_id] = ProducerEntry(e.producer_id,
                                                                          e.epoch)
                if e.batch is not None:
                    entry.batches.append(e.batch)
                entry.coordinator_epoch = e.coordinator_epoch
                entry.current_txn_first_offset = e.current_txn_first_offset
                entry.last_timestamp = e.last_timestamp
            for entry in self.producers.values():
                if entry.current_txn_first_offset is not None:
                    self.ongoing_txns[entry.current_txn_first_offset] = entry.producer_id
            self.map_end_offset = offset
            return offset
        return 0

    def delete_snapshots_below(self, offset: int) -> None:
        """Segments below ``offset`` are gone: their snapshots go too, but the newest
        snapshot is always kept."""
        offsets = self.snapshot_offsets()
        for o in offsets[:-1]:
            if o < offset:
                try:
                    os.unlink(snapshot_path(self.dir, o))
                except FileNotFoundError:
                    pass


# ---- Kafka's producer snapshot file ------------------------------------------------------
def encode_snapshot(producers) -> bytes:
    entries = []
    for e in producers:
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        if not e.batches:   # Kafka's entry of a producer without batch metadata
            entries.append(_SNAPSHOT_ENTRY.pack(e.producer_id, e.epoch, -1, -1, 0,
                                                e.last_timestamp, e.coordinator_epoch, txn))
        entries += [_SNAPSHOT_ENTRY.pack(e.producer_id, e.epoch, b.last_seq, b.last_offset,
                                         b.last_offset - b.first_offset, b.timestamp,
                                         e.coordinator_epoch, txn)
                    for b in e.batches]
    body = _SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, 0, len(entries)) + b"".join(entries)
    crc = crc32c.crc32c(body[_ENTRIES_AT:])
    return _SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, crc, len(entries)) + body[10:]


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    """The entries, in file order. CorruptRecordError for a wrong version, a CRC mismatch
    or a torn file (Kafka's CorruptSnapshotException)."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptRecordError(f"Snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptRecordError(f"Snapshot contained an unknown file version {version}")
    computed = crc32c.crc32c(data[_ENTRIES_AT:])
    if crc != computed:
        raise CorruptRecordError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                                 f"{crc}. Computed crc: {computed}")
    if count < 0 or len(data) != _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptRecordError(f"Snapshot of {len(data)} bytes cannot hold {count} entries")
    out = []
    for pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn in \
            _SNAPSHOT_ENTRY.iter_unpack(data[_SNAPSHOT_HEADER.size:]):
        batch = None
        if last_offset >= 0:
            batch = BatchMetadata((last_seq - delta) % (INT_MAX + 1), last_seq,
                                  last_offset - delta, last_offset, timestamp)
        out.append(SnapshotEntry(pid, epoch, coordinator_epoch, None if txn < 0 else txn,
                                 timestamp, batch))
    return out
