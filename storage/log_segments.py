"""LogSegments: a log's segments in base-offset order (Kafka's LogSegments).

The one place that knows how segments are kept: a list and, beside it, their base offsets
for bisection, so that finding the segment holding an offset is a binary search. A segment
added at a base offset already present replaces the one there (a roll onto an empty
segment, a cleaned segment swapped in). Not thread-safe: the log's lock covers it.
"""
from __future__ import annotations

import bisect
from typing import Iterable, Iterator

from storage.segment import LogSegment


class LogSegments:
    def __init__(self, segments: Iterable[LogSegment] = ()):
        self._segments: list[LogSegment] = sorted(segments, key=lambda s: s.base_offset)
        self._bases: list[int] = [s.base_offset for s in self._segments]

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, index: int) -> LogSegment:
        return self._segments[index]

    def values(self) -> list[LogSegment]:
        """A copy: the caller may add and remove while walking it."""
        return list(self._segments)

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def add(self, segment: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, segment.base_offset)
        if i < len(self._bases) and self._bases[i] == segment.base_offset:
            self._segments[i] = segment
        else:
            self._bases.insert(i, segment.base_offset)
            self._segments.insert(i, segment)

    def remove(self, segment: LogSegment) -> None:
        """Remove ``segment`` if it is the one held at its base offset."""
        i = bisect.bisect_left(self._bases, segment.base_offset)
        if i < len(self._segments) and self._segments[i] is segment:
            del self._segments[i]
            del self._bases[i]

    def clear(self) -> list[LogSegment]:
        """Remove every segment; returns them."""
        removed, self._segments, self._bases = self._segments, [], []
        return removed

    def remove_after(self, index: int) -> list[LogSegment]:
        """Remove the segments after position ``index``; returns them."""
        removed = self._segments[index + 1:]
        del self._segments[index + 1:]
        del self._bases[index + 1:]
        return removed

    def floor_index(self, offset: int) -> int:
        """Position of the segment holding ``offset`` (the last whose base offset is at or
        below it); -1 when ``offset`` is below every segment."""
        return bisect.bisect_right(self._bases, offset) - 1

    def floor(self, offset: int) -> LogSegment | None:
        i = self.floor_index(offset)
        return self._segments[i] if i >= 0 else None

    def from_floor(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` (the first one if none does) and all after it."""
        return self._segments[max(0, self.floor_index(offset)):]

    def with_next(self) -> Iterator[tuple[LogSegment, LogSegment | None]]:
        """Each segment with the one after it (None after the active segment)."""
        segments = self._segments
        for i, segment in enumerate(segments):
            yield segment, (segments[i + 1] if i + 1 < len(segments) else None)
