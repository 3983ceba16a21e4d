"""Offset ranges: a read of a topic cut into ``[from_offset, until_offset)`` pieces of one
partition each, the unit of work of the engines that split a read into tasks (a Spark
partition, a Ray Data read task). Plain Python."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from protocols.topics import TopicPartition


@dataclass(frozen=True)
class OffsetRange:
    """One Spark partition's work: ``[from_offset, until_offset)`` of one topic-partition."""
    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                min_partitions: int | None = None) -> list[OffsetRange]:
    """One range per topic-partition with records to read; with ``minPartitions`` above
    that count, large ranges are cut further in proportion to their size."""
    ranges = [OffsetRange(tp.topic, tp.partition, start[tp], end[tp])
              for tp in sorted(end) if tp in start and end[tp] > start[tp]]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        parts = max(1, round(min_partitions * r.size / total))
        step = math.ceil(r.size / parts)
        for begin in range(r.from_offset, r.until_offset, step):
            out.append(OffsetRange(r.topic, r.partition, begin,
                                   min(r.until_offset, begin + step)))
    return out
