"""Files damaged behind the broker's back, as the fuzzer (``tests/fuzz``, target
``log_on_open`` and ``checkpoint_file``) found them: each is answered by recovery or by an
error naming the file, never by a wrong answer. One test per finding, named after it."""
from __future__ import annotations

import struct

import pytest

from protocols.errors import KafkaStorageError
from storage import Log
from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile
from storage.epoch import LeaderEpochFileCache
from storage.partition_metadata import read_topic_id, write_topic_id
from tests.storage.conftest import batch, offsets

T0 = 1_700_000_000_000
CONFIG = {"segment.bytes": 4096, "index.interval.bytes": 300}


def written(path, clock, batches=30):
    """A closed log of several segments; batch i holds 3 records stamped T0 + 10 i + j."""
    log = Log.open(path, CONFIG, clock=clock)
    for i in range(batches):
        log.append_as_leader(batch(3, timestamp=T0 + 10 * i), i // 10)
    log.close()
    return path


def reopened(path, clock, clean=True):
    return Log.open(path, CONFIG, clock=clock, clean_shutdown=clean)


def test_a_checkpoint_that_is_not_utf8_is_a_storage_error_naming_it(tmp_path):
    for path in (tmp_path / "replication-offset-checkpoint", tmp_path / "leader-epoch-checkpoint"):
        path.write_bytes(b"0\n1\nt\xac 0 5\n")
        reader = (OffsetCheckpointFile if "replication" in path.name
                  else LeaderEpochCheckpointFile)(path)
        with pytest.raises(KafkaStorageError, match=f"line 3 in checkpoint file {path}"):
            reader.read()
    write_topic_id(tmp_path, "AAAAAAAAAAAAAAAAAAAAAQ")
    (tmp_path / "partition.metadata").write_bytes(b"version: 0\ntopic_id: \xff\n")
    with pytest.raises(KafkaStorageError, match="partition.metadata: not UTF-8"):
        read_topic_id(tmp_path)


def test_leader_epochs_out_of_order_in_the_checkpoint_load_as_kafka_assigns_them(tmp_path):
    # Kafka's LeaderEpochFileCache assigns each stored entry in turn: a later entry replaces
    # those it contradicts, so epochs and start offsets both grow in what is kept.
    checkpoint = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    checkpoint.write([EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(7, 0),
                      EpochEntry(-1, 5)])
    assert LeaderEpochFileCache(checkpoint).epoch_entries() == [(7, 0)]


def test_a_truncated_time_index_does_not_hide_a_segment_from_lookups_by_time(tmp_path, clock):
    path = written(tmp_path / "t-0", clock)
    pristine = reopened(path, clock)
    truth = [pristine.fetch_offset_by_timestamp(T0 + t) for t in range(0, 300, 7)]
    second = pristine.segments[1]
    pristine.close()
    with open(second.time_index.path, "r+b") as f:
        f.truncate(12)                       # only its first entry left
    again = reopened(path, clock)
    assert [again.fetch_offset_by_timestamp(T0 + t) for t in range(0, 300, 7)] == truth


def test_an_offset_index_entry_pointing_at_another_batch_is_not_trusted(tmp_path, clock):
    path = written(tmp_path / "t-0", clock)
    log = reopened(path, clock)
    index = log.segments[0].offset_index
    assert index.entries >= 3
    log.close()
    with open(index.path, "r+b") as f:      # entry 1 now points where entry 2's batch starts
        f.seek(8 + 4)
        f.write(open(index.path, "rb").read()[20:24])
    again = reopened(path, clock)
    for offset in range(again.log_end_offset):
        assert offsets(again.read(offset, 1))[0] == offset // 3 * 3
    assert again.segments[0].indexes_distrusted
    again.close()
    assert not index.path.exists()           # rebuilt on the next open
    assert offsets(reopened(path, clock).read(7, 1))[0] == 6


def test_a_time_index_entry_that_lies_is_not_trusted(tmp_path, clock):
    path = written(tmp_path / "t-0", clock)
    log = reopened(path, clock)
    truth = [log.fetch_offset_by_timestamp(T0 + t) for t in range(0, 300, 7)]
    time_index = log.segments[0].time_index
    log.close()
    with open(time_index.path, "r+b") as f:  # entry 0 claims an earlier timestamp
        (ts,) = struct.unpack(">q", f.read(8))
        f.seek(0)
        f.write(struct.pack(">q", ts - 50))
    again = reopened(path, clock)
    assert [again.fetch_offset_by_timestamp(T0 + t) for t in range(0, 300, 7)] == truth


def test_an_emptied_middle_segment_drops_the_segments_after_it_instead_of_a_gap(tmp_path,
                                                                                clock):
    path = written(tmp_path / "t-0", clock)
    segments = [s.log.path for s in reopened(path, clock).segments]
    assert len(segments) >= 3
    segments[1].write_bytes(b"")
    again = reopened(path, clock, clean=False)
    assert again.log_end_offset == again.segments[1].base_offset
    assert offsets(again.read(0, 1 << 20))[0] == 0
    assert len(again.segments) == 2


def test_a_segment_cut_while_its_index_is_rebuilt_drops_those_after_it(tmp_path, clock):
    # Clean shutdown: no recovery; the sanity check of segment 1 fails (its .log lost its
    # tail), its rebuild truncates, and what followed it would otherwise sit past a gap.
    path = written(tmp_path / "t-0", clock)
    segments = reopened(path, clock).segments
    cut = segments[1].log.path
    cut.write_bytes(cut.read_bytes()[:-40])
    again = reopened(path, clock, clean=True)
    end = again.log_end_offset
    assert end < segments[2].base_offset and len(again.segments) == 2
    assert offsets(again.read(end - 1, 1))[-1] == end - 1


def test_a_batch_whose_offsets_overrun_the_next_segment_is_a_storage_error_naming_it(
        tmp_path, clock):
    # A batch's baseOffset lies outside its CRC in Kafka's format: changed, it goes
    # unnoticed but where it breaks the order of the segments.
    path = written(tmp_path / "t-0", clock)
    first = reopened(path, clock).segments[0].log.path
    last_batch = first.stat().st_size - len(batch(3))
    with open(first, "r+b") as f:            # its last batch now ends at offset 5,002
        f.seek(last_batch)
        f.write(struct.pack(">q", 5_000))
    with pytest.raises(KafkaStorageError, match=str(first)):
        reopened(path, clock, clean=False)
