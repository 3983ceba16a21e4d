"""Control records (Kafka's ControlRecordType and EndTransactionMarker): the records of a
control batch, which a log holds but consumers never see as records.

A transaction ends with one COMMIT or ABORT marker in every partition it wrote to, written
by the partition's leader at the transaction coordinator's request: a control batch
(``isControl`` and ``isTransactional`` set) of the producer's id and epoch holding one
record, whose key is ``version i16 (0) | type i16`` and whose value is ``version i16 (0) |
coordinatorEpoch i32``. The other types (LEADER_CHANGE, SNAPSHOT_HEADER, ...) are KRaft's
metadata log's; they are named here only so that a dump can say what it read.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from protocols.errors import KafkaError
from protocols.records import NO_SEQUENCE, Record, encode_batch

ABORT, COMMIT = 0, 1
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


def control_record_type(key: bytes | None) -> int:
    """The type id in a control record's key (Kafka's ControlRecordType.parseTypeId)."""
    key = key or b""
    if len(key) < _KEY.size:
        raise KafkaError(f"Invalid value size found for end control record key. Must have "
                         f"at least 4 bytes, but found only {len(key)}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise KafkaError(f"Invalid version found for control record: {version}. "
                         f"May indicate data corruption")
    return type_id


@dataclass(frozen=True)
class EndTransactionMarker:
    control_type: int        # ABORT or COMMIT
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type == COMMIT

    def key(self) -> bytes:
        return _KEY.pack(CURRENT_CONTROL_RECORD_KEY_VERSION, self.control_type)

    def value(self) -> bytes:
        return _MARKER_VALUE.pack(CURRENT_END_TXN_MARKER_VERSION, self.coordinator_epoch)

    @classmethod
    def deserialize(cls, record: Record) -> "EndTransactionMarker":
        """The marker a control record holds (Kafka's EndTransactionMarker.deserialize);
        KafkaError when it is no end-transaction marker or its value is malformed."""
        control_type = control_record_type(record.key)
        if control_type not in (ABORT, COMMIT):
            raise KafkaError(f"Invalid control record type for end transaction marker: "
                             f"{CONTROL_TYPES.get(control_type, 'UNKNOWN')}")
        value = record.value or b""
        if len(value) < _MARKER_VALUE.size:
            raise KafkaError(f"Invalid end transaction marker value of {len(value)} bytes: "
                             f"at least {_MARKER_VALUE.size} expected")
        version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
        if version < 0:
            raise KafkaError(f"Invalid version found for end transaction marker: {version}. "
                             f"May indicate data corruption")
        return cls(control_type, coordinator_epoch)


def end_txn_marker_batch(marker: EndTransactionMarker, producer_id: int, producer_epoch: int,
                         *, timestamp_ms: int, base_offset: int = 0,
                         partition_leader_epoch: int = -1) -> bytes:
    """The control batch holding ``marker`` (Kafka's MemoryRecords.withEndTransactionMarker):
    transactional, of the producer's id and epoch, without a sequence."""
    return encode_batch([Record(marker.key(), marker.value(), timestamp_ms)],
                        base_offset=base_offset, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE,
                        partition_leader_epoch=partition_leader_epoch, transactional=True,
                        control=True, now_ms=timestamp_ms)
