"""LogSegments: a log's segments in base-offset order (Kafka's LogSegmentsTest)."""
from __future__ import annotations

import pytest

from storage.log_segments import LogSegments
from storage.segment import LogSegment


@pytest.fixture
def make(tmp_path):
    def make(base: int, suffix: str = "") -> LogSegment:
        return LogSegment.open(tmp_path, base, index_interval_bytes=4096,
                               max_index_size=1 << 16, now_ms=0, suffix=suffix)
    return make


def test_segments_stay_in_base_offset_order_and_the_active_one_is_last(make):
    segments = LogSegments([make(100), make(0)])
    segments.add(make(50))
    assert [s.base_offset for s in segments] == [0, 50, 100]
    assert segments.active.base_offset == 100 and len(segments) == 3


def test_adding_at_a_base_offset_already_held_replaces_that_segment(make):
    # A cleaned segment swapped in, or a roll onto the empty active segment.
    old, new = make(0), make(0, ".cleaned")
    segments = LogSegments([old])
    segments.add(new)
    assert segments.values() == [new]


def test_remove_removes_only_the_segment_held_at_its_base(make):
    held, stranger = make(10), make(10, ".swap")
    segments = LogSegments([make(0), held])
    segments.remove(stranger)                     # not the one held there: nothing happens
    assert [s.base_offset for s in segments] == [0, 10]
    segments.remove(held)
    assert [s.base_offset for s in segments] == [0]


def test_floor_is_the_segment_holding_an_offset(make):
    segments = LogSegments([make(0), make(50), make(100)])
    assert segments.floor(0).base_offset == 0
    assert segments.floor(99).base_offset == 50
    assert segments.floor(1_000).base_offset == 100
    assert LogSegments([make(10)]).floor(5) is None
    assert [s.base_offset for s in segments.from_floor(75)] == [50, 100]
    assert [s.base_offset for s in LogSegments([make(10)]).from_floor(5)] == [10]


def test_with_next_pairs_each_segment_with_its_successor(make):
    segments = LogSegments([make(0), make(50)])
    assert [(s.base_offset, n and n.base_offset) for s, n in segments.with_next()] == \
        [(0, 50), (50, None)]


def test_clear_and_remove_after_hand_back_what_they_removed(make):
    segments = LogSegments([make(0), make(50), make(100)])
    assert [s.base_offset for s in segments.remove_after(0)] == [50, 100]
    assert [s.base_offset for s in segments] == [0]
    assert [s.base_offset for s in segments.clear()] == [0]
    assert len(segments) == 0 and segments.floor(0) is None
