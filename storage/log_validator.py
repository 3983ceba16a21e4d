"""LogValidator: the checks an append passes before it reaches a segment, and the leader's
offset assignment (Kafka's LogValidator).

Batches are never decoded on this path but where Kafka decodes them too: a compacted topic's
records must have keys, and a topic whose ``compression.type`` is not ``producer`` recompresses
batches in another codec. Everything else reads batch headers, checks CRC-32C and sizes, and
patches baseOffset / partitionLeaderEpoch / LogAppendTime in place.
"""
from __future__ import annotations

from protocols.errors import (CorruptRecordError, InvalidRecordError, RecordListTooLargeError,
                              RecordTooLargeError)
from protocols.records import (LOG_OVERHEAD, BatchHeader, RecordBatch, encode_batch,
                               iter_batches, set_base_offset, set_log_append_time,
                               set_partition_leader_epoch)
from storage.config import LogConfig
from storage.segment import BatchInfo

Batches = list[tuple[RecordBatch, BatchHeader]]


def validate_batches(buf: bytes | bytearray, config: LogConfig, name: str,
                     leader: bool) -> Batches:
    """Every batch of an append, with its header: sizes within ``max.message.bytes`` and
    the segment size, CRC-32C intact, nothing trailing. A leader's (producer's) batches also
    hold records, a consistent lastOffsetDelta and, on a compacted topic, keys."""
    batches: Batches = []
    end = 0
    max_bytes = config.max_message_bytes
    compact = config.compact
    for batch in iter_batches(buf):
        h = batch.header()
        size = h.batch_length + LOG_OVERHEAD
        if size > max_bytes:
            raise RecordTooLargeError(
                f"The record batch at offset {h.base_offset} is {size} bytes, larger "
                f"than max.message.bytes={max_bytes} of {name}")
        if h.crc != batch.compute_checksum():
            batch.ensure_valid()  # raises CorruptRecordError with the details
        if leader:
            count = h.record_count
            if count <= 0:
                raise InvalidRecordError(f"A record batch produced to {name} has no records")
            if h.last_offset_delta != count - 1:
                raise InvalidRecordError(
                    f"A record batch produced to {name} has lastOffsetDelta "
                    f"{h.last_offset_delta} for {count} records")
            if batch.is_control:
                raise InvalidRecordError(f"Clients are not allowed to write control records "
                                         f"in topic partition {name}.")
            if compact:
                for record in batch.records():
                    if record.key is None:
                        raise InvalidRecordError(
                            f"Compacted topic cannot accept message without key in "
                            f"topic partition {name}.")
        batches.append((batch, h))
        end = batch.position + size
    if end != len(buf):
        raise CorruptRecordError(
            f"{len(buf) - end} trailing bytes in an append to {name} do not form a "
            "complete record batch")
    if leader and not batches:
        raise InvalidRecordError(f"An append to {name} holds no record batch")
    if end > config.segment_bytes:
        raise RecordListTooLargeError(
            f"Message batch size is {end} bytes in append to partition {name} which "
            f"exceeds the maximum configured segment size of {config.segment_bytes}.")
    return batches


def validate_as_leader(buf: bytearray, config: LogConfig,
                       name: str) -> tuple[bytearray, Batches]:
    """A producer's append: validated, and recompressed when the topic's
    ``compression.type`` names another codec than the batches carry (as Kafka does)."""
    batches = validate_batches(buf, config, name, leader=True)
    target = config.compression_type
    if target != "producer":
        codec = "none" if target == "uncompressed" else target
        if any(b.compression != codec for b, _ in batches):
            buf = recompress([b for b, _ in batches], codec)
            batches = validate_batches(buf, config, name, leader=True)
    return buf, batches


def recompress(batches: list[RecordBatch], codec: str) -> bytearray:
    """The batches again, in ``codec``, keeping everything else of each."""
    out = bytearray()
    for b in batches:
        out += encode_batch(list(b.records()), base_offset=0, compression=codec,
                            timestamp_type=b.timestamp_type, producer_id=b.producer_id,
                            producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
                            partition_leader_epoch=b.partition_leader_epoch,
                            transactional=b.is_transactional, control=b.is_control)
    return out


def assign_offsets(buf: bytearray, batches: Batches, first_offset: int, leader_epoch: int,
                   log_append_time: int) -> tuple[list[BatchInfo], int]:
    """Stamp the leader's offsets from ``first_offset``, its epoch and (when >= 0) the
    LogAppendTime into ``buf`` in place: each batch's ``BatchInfo`` and the record count."""
    offset = first_offset
    infos: list[BatchInfo] = []
    records = 0
    for batch, h in batches:
        pos = batch.position
        set_base_offset(buf, pos, offset)
        set_partition_leader_epoch(buf, pos, leader_epoch)
        if log_append_time >= 0:
            set_log_append_time(buf, pos, log_append_time)
        last = offset + h.last_offset_delta
        infos.append(BatchInfo(last, h.max_timestamp if log_append_time < 0
                               else log_append_time, h.batch_length + LOG_OVERHEAD))
        records += h.record_count
        offset = last + 1
    return infos, records
