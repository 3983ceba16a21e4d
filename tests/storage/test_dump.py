"""storage.dump: kafka-dump-log.sh output for .index, .timeindex and .log files."""
from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from protocols.control_records import ABORT, EndTransactionMarker, end_txn_marker_batch
from protocols.records import Record, encode_batch
from storage.dump import (DumpLine, DumpOptions, LogDumper, dump_log, dump_offset_index,
                          dump_time_index)
from storage.log import Log
from storage.transaction_index import AbortedTxn, TransactionIndex

T0 = 1531477349287  # the timestamps of Kafka's own dump examples
SEGMENT = "00000000000000000000"

# Seed 000 §3.3: what kafka-dump-log.sh printed for 00000000000000000000.index. (The seed's
# hex listing of the same file agrees for its first two rows only: 0x02fa, 0x03b0, 0x0475
# are 762, 944, 1141, not 656, 838, 1050; the printed dump is taken as the example.)
SEED_ENTRIES = [(6, 156), (14, 459), (22, 656), (26, 838), (31, 1050)]
SEED_INDEX_DUMP = """\
offset: 6 position: 156
offset: 14 position: 459
offset: 22 position: 656
offset: 26 position: 838
offset: 31 position: 1050"""


def seed_index_bytes() -> bytes:
    data = b"".join(struct.pack(">II", offset, position) for offset, position in SEED_ENTRIES)
    assert data[:16].hex() == "00000006" "0000009c" "0000000e" "000001cb"  # the seed's hex
    return data


def run(paths, **options) -> tuple[list[str], list[str], LogDumper]:
    dumper = LogDumper(DumpOptions(**options))
    lines = list(dumper.dump([str(p) for p in paths]))
    assert all(isinstance(line, DumpLine) for line in lines)
    return ([l.text for l in lines if not l.stderr], [l.text for l in lines if l.stderr],
            dumper)


def batch_of_size(base_offset: int, count: int, size: int) -> bytes:
    """A batch of ``count`` records, offsets from ``base_offset``, exactly ``size`` bytes
    long (the padding of the last two values is searched, since varint lengths make the
    size jump by two at some lengths)."""
    for second_last in range(0, 300):
        for last in range(0, 300):
            lengths = [1] * count
            lengths[-1] = last
            if count > 1:
                lengths[-2] = second_last
            records = [Record(None, b"v" * n, T0 + base_offset + i)
                       for i, n in enumerate(lengths)]
            data = encode_batch(records, base_offset=base_offset)
            if len(data) == size:
                return data
            if len(data) > size:
                break
    raise AssertionError(f"no batch of {count} records is {size} bytes")


def seed_log_bytes() -> bytes:
    """A .log whose batches sit where the seed's index says: the batch at 156 ends at
    offset 6, the one at 459 at 14, 656 at 22, 838 at 26, 1050 at 31."""
    layout = [(0, 6, 156), (6, 1, 303), (7, 8, 197), (15, 8, 182), (23, 4, 212), (27, 5, 150)]
    return b"".join(batch_of_size(base, count, size) for base, count, size in layout)


# ---- offset index -------------------------------------------------------------------------

def test_seed_index_dumps_as_kafka_printed_it(tmp_path):
    (tmp_path / f"{SEGMENT}.log").write_bytes(seed_log_bytes())
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(seed_index_bytes())

    out, err, dumper = run([index])

    assert "\n".join(out) == f"Dumping {index}\n{SEED_INDEX_DUMP}"
    assert err == [] and dumper.failed == []


def test_preallocated_zero_tail_ends_the_index_dump(tmp_path):
    (tmp_path / f"{SEGMENT}.log").write_bytes(seed_log_bytes())
    index = tmp_path / f"{SEGMENT}.index"
    # An active segment's index after a crash: still its preallocated size, zero-filled.
    index.write_bytes(seed_index_bytes() + bytes(4096 - 40))

    out, err, _ = run([index])

    assert out[1:] == SEED_INDEX_DUMP.splitlines()
    assert err == []


def test_a_zero_first_entry_is_printed_but_a_later_one_stops_the_dump(tmp_path):
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(struct.pack(">iI", 0, 0) + struct.pack(">iI", 0, 0))

    assert list(dump_offset_index(index)) == ["offset: 0 position: 0"]


def test_index_offsets_are_relative_to_the_base_offset_in_the_name(tmp_path):
    index = tmp_path / "00000000000000018913.index"
    index.write_bytes(seed_index_bytes())

    assert list(dump_offset_index(index))[0] == "offset: 18919 position: 156"


def test_index_without_its_log_is_dumped_unchecked(tmp_path):
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(seed_index_bytes())

    out, err, _ = run([index])

    assert out[1:] == SEED_INDEX_DUMP.splitlines() and err == []


def test_empty_index(tmp_path):
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(b"")

    out, _, _ = run([index])

    assert out == [f"Dumping {index}", f"{index} is empty."]


def test_index_entries_that_do_not_match_the_log_are_reported_after_the_dump(tmp_path):
    (tmp_path / f"{SEGMENT}.log").write_bytes(seed_log_bytes())
    index = tmp_path / f"{SEGMENT}.index"
    # 14 -> 656 and 22 -> 459 are swapped; the batch at 656 ends at 22, the one at 459 at 14.
    index.write_bytes(struct.pack(">iIiIiI", 6, 156, 14, 656, 22, 459))

    out, err, dumper = run([index])

    assert out[1:] == ["offset: 6 position: 156", "offset: 14 position: 656",
                       "offset: 22 position: 459"]
    # Kafka lists a file's mismatches newest first.
    assert err == [f"Mismatches in :{index.absolute()}",
                   "  Index offset: 22, log offset: 14",
                   "  Index offset: 14, log offset: 22"]
    assert dumper.failed == []


def test_verify_index_only_prints_only_the_problems(tmp_path):
    (tmp_path / f"{SEGMENT}.log").write_bytes(seed_log_bytes())
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(struct.pack(">iIiI", 6, 156, 13, 459))

    out, err, _ = run([index], verify_index_only=True)

    assert out == [f"Dumping {index}"]
    assert err == [f"Mismatches in :{index.absolute()}", "  Index offset: 13, log offset: 14"]


def test_verify_index_only_needs_the_log(tmp_path):
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(seed_index_bytes())

    out, err, dumper = run([index], verify_index_only=True)

    assert dumper.failed == [str(index)]
    assert "No such file" in err[0] or "cannot verify" in err[0]


def test_index_sanity_check(tmp_path):
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(seed_index_bytes())
    torn = tmp_path / "00000000000000000100.index"
    torn.write_bytes(seed_index_bytes()[:-3])

    out, err, dumper = run([index, torn], index_sanity_check=True)

    assert out == [f"Dumping {index}", f"{index} passed sanity check.", f"Dumping {torn}"]
    assert dumper.failed == [str(torn)]
    assert err == [f"Error: {torn}: CorruptIndexError: Index file {torn.absolute()} is "
                   "corrupt, found 37 bytes which is neither positive nor a multiple of 8"]


# ---- time index ---------------------------------------------------------------------------

def write_time_indexed_segment(directory: Path) -> tuple[Path, list[bytes]]:
    """Three batches of two records; the offset and time index point at the last two."""
    batches = [encode_batch([Record(None, b"a", T0 + 10 * b + i) for i in range(2)],
                            base_offset=2 * b) for b in range(3)]
    (directory / f"{SEGMENT}.log").write_bytes(b"".join(batches))
    p1, p2 = len(batches[0]), len(batches[0]) + len(batches[1])
    (directory / f"{SEGMENT}.index").write_bytes(struct.pack(">iIiI", 3, p1, 5, p2))
    return directory / f"{SEGMENT}.timeindex", batches


def test_time_index_dump(tmp_path):
    timeindex, _ = write_time_indexed_segment(tmp_path)
    timeindex.write_bytes(struct.pack(">qiqi", T0 + 11, 3, T0 + 21, 5) + bytes(12 * 4))

    out, err, _ = run([timeindex])

    assert out == [f"Dumping {timeindex}",
                   f"timestamp: {T0 + 11} offset: 3",
                   f"timestamp: {T0 + 21} offset: 5"]
    assert err == []


def test_time_index_entries_checked_against_the_log(tmp_path):
    timeindex, _ = write_time_indexed_segment(tmp_path)
    timeindex.write_bytes(struct.pack(">qiqiqi", T0 + 11, 3, T0 + 11, 5, T0 + 30, 4))

    out, err, _ = run([timeindex])

    assert out[1:] == [f"timestamp: {T0 + 11} offset: 3", f"timestamp: {T0 + 11} offset: 5",
                       f"timestamp: {T0 + 30} offset: 4"]
    where = timeindex.absolute()
    assert err == [f"Found timestamp mismatch in :{where}",
                   f"  Index timestamp: {T0 + 11}, log timestamp: {T0 + 21}",
                   f"Found out of order timestamp in :{where}",
                   f"  Index timestamp: {T0 + 11}, Previously indexed timestamp: {T0 + 11}",
                   "The following indexed offsets are not found in the log.",
                   "Indexed offset: 4, found log offset: 5"]


def test_time_index_sanity_check_rejects_a_shrinking_timestamp(tmp_path):
    timeindex = tmp_path / f"{SEGMENT}.timeindex"
    timeindex.write_bytes(struct.pack(">qiqi", T0 + 11, 3, 0, 0))

    out, err, dumper = run([timeindex], index_sanity_check=True)

    assert dumper.failed == [str(timeindex)]
    assert err == [f"Error: {timeindex}: CorruptIndexError: Corrupt time index found, time "
                   f"index file ({timeindex.absolute()}) has non-zero size but the last "
                   f"timestamp is 0 which is less than the first timestamp {T0 + 11}"]


# ---- log ----------------------------------------------------------------------------------

def crc_at(data: bytes, position: int) -> int:
    size = 12 + struct.unpack_from(">i", data, position + 8)[0]
    return crc32c.crc32c(data[position + 21:position + size])


def batch_sizes(data: bytes) -> list[int]:
    sizes, pos = [], 0
    while pos + 12 <= len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        sizes.append(size)
        pos += size
    return sizes


@pytest.fixture
def written_log(tmp_path) -> Path:
    """A partition written through storage.Log: three appends by a leader in epoch 0."""
    log = Log.open(tmp_path / "t-0", {"index.interval.bytes": 0})
    log.append_as_leader(encode_batch(
        [Record(None, f"message_{i}".encode(), T0 + i) for i in range(3)]), 0)
    log.append_as_leader(encode_batch(
        [Record(f"k{i}".encode(), f"message_{i}".encode(), T0 + i, (("h1", b"x"),))
         for i in (3, 4)]), 0)
    log.append_as_leader(encode_batch(
        [Record(None, f"message_{i}".encode(), T0 + i) for i in (5, 6)],
        compression="gzip"), 0)
    log.close()
    return tmp_path / "t-0"


def batch_line(base, last, count, position, max_ts, size, crc, codec="none", valid="true"):
    return (f"baseOffset: {base} lastOffset: {last} count: {count} baseSequence: -1 "
            f"lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 "
            f"isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
            f"position: {position} CreateTime: {max_ts} size: {size} magic: 2 "
            f"compresscodec: {codec} crc: {crc} isvalid: {valid}")


def expected_batch_lines(data: bytes) -> list[str]:
    s0, s1, s2 = batch_sizes(data)
    return [batch_line(0, 2, 3, 0, T0 + 2, s0, crc_at(data, 0)),
            batch_line(3, 4, 2, s0, T0 + 4, s1, crc_at(data, s0)),
            batch_line(5, 6, 2, s0 + s1, T0 + 6, s2, crc_at(data, s0 + s1), codec="gzip")]


def test_log_dump_prints_one_line_per_batch(written_log):
    path = written_log / f"{SEGMENT}.log"
    data = path.read_bytes()

    out, err, dumper = run([path])

    assert out == [f"Dumping {path}", "Log starting offset: 0", *expected_batch_lines(data)]
    assert err == [] and dumper.failed == []


def test_log_dump_with_data_prints_records_under_their_batch(written_log):
    path = written_log / f"{SEGMENT}.log"
    batches = expected_batch_lines(path.read_bytes())

    out, err, _ = run([path], print_data_log=True)

    assert out == [
        f"Dumping {path}", "Log starting offset: 0",
        batches[0],
        f"| offset: 0 CreateTime: {T0} keySize: -1 valueSize: 9 sequence: -1 headerKeys: [] "
        "payload: message_0",
        f"| offset: 1 CreateTime: {T0 + 1} keySize: -1 valueSize: 9 sequence: -1 "
        "headerKeys: [] payload: message_1",
        f"| offset: 2 CreateTime: {T0 + 2} keySize: -1 valueSize: 9 sequence: -1 "
        "headerKeys: [] payload: message_2",
        batches[1],
        f"| offset: 3 CreateTime: {T0 + 3} keySize: 2 valueSize: 9 sequence: -1 "
        "headerKeys: [h1] key: k3 payload: message_3",
        f"| offset: 4 CreateTime: {T0 + 4} keySize: 2 valueSize: 9 sequence: -1 "
        "headerKeys: [h1] key: k4 payload: message_4",
        batches[2],
        f"| offset: 5 CreateTime: {T0 + 5} keySize: -1 valueSize: 9 sequence: -1 "
        "headerKeys: [] payload: message_5",
        f"| offset: 6 CreateTime: {T0 + 6} keySize: -1 valueSize: 9 sequence: -1 "
        "headerKeys: [] payload: message_6",
    ]
    assert err == []


def test_deep_iteration_without_data_and_skipped_metadata(written_log):
    path = written_log / f"{SEGMENT}.log"

    deep = list(dump_log(path, DumpOptions(deep_iteration=True)))
    bare = list(dump_log(path, DumpOptions(print_data_log=True, skip_record_metadata=True)))

    assert deep[6] == (f"| offset: 3 CreateTime: {T0 + 3} keySize: 2 valueSize: 9 "
                       "sequence: -1 headerKeys: [h1]")
    assert bare[6] == "| key: k3 payload: message_3"
    assert bare[2] == " payload: message_0"


def test_segment_indexes_written_by_the_log_agree_with_it(written_log):
    data = (written_log / f"{SEGMENT}.log").read_bytes()
    s0, s1, _ = batch_sizes(data)
    index, timeindex = written_log / f"{SEGMENT}.index", written_log / f"{SEGMENT}.timeindex"

    out, err, _ = run([index, timeindex])

    # index.interval.bytes=0: an entry for every batch after the first.
    assert out == [f"Dumping {index}", f"offset: 4 position: {s0}",
                   f"offset: 6 position: {s0 + s1}",
                   f"Dumping {timeindex}", f"timestamp: {T0 + 4} offset: 4",
                   f"timestamp: {T0 + 6} offset: 6"]
    assert err == []


def test_corrupted_batch_is_shown_invalid(written_log):
    path = written_log / f"{SEGMENT}.log"
    data = bytearray(path.read_bytes())
    s0 = batch_sizes(bytes(data))[0]
    flipped = data.index(b"message_3", s0)
    data[flipped] ^= 0x01  # "message_3" -> "lessage_3"; the stored CRC no longer matches
    path.write_bytes(bytes(data))

    out, _, _ = run([path], print_data_log=True)

    lines = [l for l in out if l.startswith("baseOffset")]
    assert [l.rsplit(" ", 1)[1] for l in lines] == ["true", "false", "true"]
    assert f"crc: {crc_at(bytes(data), s0)} " not in lines[1]
    assert any(l.endswith("key: k3 payload: lessage_3") for l in out)


def test_trailing_bytes_after_the_last_batch_are_reported(written_log):
    path = written_log / f"{SEGMENT}.log"
    with path.open("ab") as f:
        f.write(bytes(7))

    out, _, _ = run([path])

    assert out[-1] == f"Found 7 invalid bytes at the end of {SEGMENT}.log"
    assert len(out) == 3 + 3  # Dumping, Log starting offset, 3 batches, the report


def test_max_bytes_limits_the_batches_read(written_log):
    path = written_log / f"{SEGMENT}.log"
    s0, s1, _ = batch_sizes(path.read_bytes())

    out = list(dump_log(path, DumpOptions(max_bytes=s0 + s1 + 5)))

    assert [l.split(" ")[1] for l in out[1:]] == ["0", "3"]  # no trailing-bytes line either


def test_offset_gaps_are_reported_after_deep_iteration(tmp_path):
    path = tmp_path / f"{SEGMENT}.log"
    # Compaction leaves gaps: 0, 1, then 5, then 9.
    path.write_bytes(encode_batch([Record(None, b"a", T0), Record(None, b"b", T0)])
                     + encode_batch([Record(None, b"c", T0)], base_offset=5)
                     + encode_batch([Record(None, b"d", T0)], base_offset=9))

    _, err, _ = run([path], deep_iteration=True)

    assert err == [f"Non-consecutive offsets in {path.absolute()}",
                   "  5 is followed by 9", "  1 is followed by 5"]


def test_producer_sequences_per_record(tmp_path):
    path = tmp_path / f"{SEGMENT}.log"
    path.write_bytes(encode_batch([Record(None, b"a", T0), Record(None, b"b", T0)],
                                  producer_id=7, producer_epoch=1, base_sequence=2**31 - 1))

    out = list(dump_log(path, DumpOptions(deep_iteration=True)))

    assert "baseSequence: 2147483647 lastSequence: 0 producerId: 7 producerEpoch: 1 " in out[1]
    assert "sequence: 2147483647 " in out[2] and "sequence: 0 " in out[3]


# ---- several files, unknown files, errors ------------------------------------------------

def test_each_file_has_its_header_and_unknown_files_are_ignored(written_log):
    names = [f"{SEGMENT}.index", "leader-epoch-checkpoint", f"{SEGMENT}.log.deleted",
             f"{SEGMENT}.timeindex"]
    (written_log / f"{SEGMENT}.log.deleted").write_bytes(b"")
    paths = [written_log / n for n in names]

    out, err, dumper = run(paths)

    assert [l for l in out if l.startswith("Dumping ")] == [f"Dumping {p}" for p in paths]
    assert err == [f"Ignoring unknown file {paths[1]}", f"Ignoring unknown file {paths[2]}"]
    assert dumper.failed == []


def test_a_missing_file_fails_alone(tmp_path, written_log):
    missing = tmp_path / f"{SEGMENT}.log"
    present = written_log / f"{SEGMENT}.log"

    out, err, dumper = run([missing, present])

    assert out[0] == f"Dumping {missing}" and out[1] == f"Dumping {present}"
    assert err == [f"Error: {missing}: No such file or directory"]
    assert dumper.failed == [str(missing)]
    assert len(out) == 2 + 1 + 3


def test_producer_snapshot_dumps_as_kafka_prints_it(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append_as_leader(encode_batch([Record(None, b"a", T0), Record(None, b"b", T0 + 5)],
                                      producer_id=3, producer_epoch=1, base_sequence=0), 0)
    log.close()
    out, err, _ = run([tmp_path / "t-0" / f"{2:020d}.snapshot"])
    assert out == [f"Dumping {tmp_path / 't-0' / f'{2:020d}.snapshot'}",
                   "producerId: 3 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: "
                   f"OptionalLong.empty lastTimestamp: {T0 + 5} firstSequence: 0 "
                   f"lastSequence: 1 lastOffset: 1 offsetDelta: 1 timestamp: {T0 + 5}"]
    assert err == []


def test_transaction_index_dumps_as_kafka_prints_it(tmp_path):
    path = tmp_path / f"{100:020d}.txnindex"
    index = TransactionIndex(100, path)
    index.append(AbortedTxn(983493, 137, 299, 200))
    index.append(AbortedTxn(7, 300, 310, 301))
    out, err, _ = run([path])
    assert out == [f"Dumping {path}",
                   "version: 0 producerId: 983493 firstOffset: 137 lastOffset: 299 "
                   "lastStableOffset: 200",
                   "version: 0 producerId: 7 firstOffset: 300 lastOffset: 310 "
                   "lastStableOffset: 301"]
    assert err == []


def test_an_end_transaction_marker_prints_its_type_and_coordinator_epoch(tmp_path):
    # Kafka's DumpLogSegments: " endTxnMarker: ABORT coordinatorEpoch: 5" after the
    # record's metadata, and no payload for a control record.
    log = Log.open(tmp_path / "t-0")
    log.append_as_follower(end_txn_marker_batch(EndTransactionMarker(ABORT, 5), 11, 2,
                                                timestamp_ms=T0, partition_leader_epoch=0))
    log.close()
    out, err, _ = run([tmp_path / "t-0" / f"{SEGMENT}.log"], print_data_log=True)
    assert "isTransactional: true isControl: true" in out[2]
    assert "producerId: 11 producerEpoch: 2" in out[2]
    assert out[3] == (f"| offset: 0 CreateTime: {T0} keySize: 4 valueSize: 6 sequence: -1 "
                      "headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 5")
    assert err == []
