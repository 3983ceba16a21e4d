"""LogLoader on its own: what opening a log's directory finds, after clean and unclean
shutdowns (cases of Kafka's LogLoaderTest). The log writes the files; the loader reads them
back without a log around it."""
from __future__ import annotations

import os

import pytest

from storage import Log
from storage.checkpoint import LeaderEpochCheckpointFile
from storage.config import LogConfig
from storage.epoch import LeaderEpochFileCache
from storage.files import LEADER_EPOCH_CHECKPOINT
from storage.log_loader import LogLoader
from storage.segment import LogSegment
from tests.storage.conftest import batch


@pytest.fixture
def written(tmp_path, clock):
    """Three segments of 20 records (two batches of 10 each, epochs 0..5); not closed."""
    one = len(batch(10))
    props = {"segment.bytes": one * 2}
    log = Log.open(tmp_path / "t-0", props, clock=clock)
    for epoch in range(6):
        log.append_as_leader(batch(10), epoch)
    log.flush()
    return tmp_path / "t-0", LogConfig.from_props(props)


def loader(directory, config) -> LogLoader:
    def new_segment(base: int, suffix: str) -> LogSegment:
        return LogSegment.open(directory, base, index_interval_bytes=config.index_interval_bytes,
                               max_index_size=config.segment_index_bytes, now_ms=0,
                               suffix=suffix)
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT))
    return LogLoader(directory, config, new_segment, cache)


def test_a_clean_load_finds_every_segment_and_trusts_them(written):
    directory, config = written
    loaded = loader(directory, config).load(0, 0, clean_shutdown=True)
    assert [s.base_offset for s in loaded.segments] == [0, 20, 40]
    assert (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point) == (0, 60, 60)


def test_an_empty_directory_gets_one_segment_at_the_log_start_offset(tmp_path):
    loaded = loader(tmp_path, LogConfig.from_props({})).load(0, 25, clean_shutdown=False)
    assert [s.base_offset for s in loaded.segments] == [25]
    assert (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point) == \
        (25, 25, 0)


def test_an_unclean_load_cuts_a_torn_tail_and_relearns_the_epochs(written):
    directory, config = written
    first = sorted(directory.glob("*.log"))[0]
    with open(first, "r+b") as f:        # bit rot in the second batch of segment 0
        f.seek(len(batch(10)) + 70)
        byte = f.read(1)
        f.seek(len(batch(10)) + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    (directory / LEADER_EPOCH_CHECKPOINT).unlink()
    the_loader = loader(directory, config)
    loaded = the_loader.load(0, 0, clean_shutdown=False)
    assert [s.base_offset for s in loaded.segments] == [0]
    assert (loaded.log_end_offset, loaded.recovery_point) == (10, 0)
    assert the_loader.leader_epoch_cache.epoch_entries() == [(0, 0)]
    assert sorted(p.name for p in directory.glob("*.log")) == [first.name]


def test_unfinished_work_is_removed_and_a_recovery_point_beyond_the_end_is_cut(written):
    directory, config = written
    (directory / "00000000000000000020.log.deleted").write_bytes(b"old")
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"half")
    (directory / "00000000000000000040.log.swap").write_bytes(b"maybe incomplete")
    loaded = loader(directory, config).load(1_000, 0, clean_shutdown=False)
    assert not [p for p in os.listdir(directory)
                if p.endswith((".deleted", ".cleaned", ".swap"))]
    assert (loaded.log_end_offset, loaded.recovery_point) == (60, 60)
