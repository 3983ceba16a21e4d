"""Consumer lag, as kafka-exporter reports it (pure: no Ray): per group and partition, the
partition's log end offset (its high watermark: what ListOffsets(latest) answers a
read_uncommitted consumer, and kafka-consumer-groups.sh's LOG-END-OFFSET) minus the group's
committed offset, never below 0; and its sum per group and topic."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping


@dataclass(frozen=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int
    log_end_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.log_end_offset - self.committed)


def committed_rows(offsets: Mapping[str, Mapping]) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, committed offset) of a coordinator's groups
    (``GroupCoordinator.offsets``: {group: {TopicPartition: OffsetAndMetadata}})."""
    return [(group, tp.topic, tp.partition, committed.offset)
            for group, partitions in offsets.items()
            for tp, committed in partitions.items() if committed.offset >= 0]


def partition_lags(rows: Iterable[tuple[str, str, int, int]],
                   ends: Mapping[tuple[str, int], int]) -> list[PartitionLag]:
    """Each committed row with its partition's log end offset; a partition whose end is not
    known (its leader did not answer) is left out, not reported as 0."""
    return [PartitionLag(group, topic, partition, offset, ends[topic, partition])
            for group, topic, partition, offset in rows if (topic, partition) in ends]


def lag_sums(lags: Iterable[PartitionLag]) -> dict[tuple[str, str], int]:
    """{(group, topic): the lag summed over its partitions}."""
    sums: dict[tuple[str, str], int] = {}
    for lag in lags:
        sums[lag.group, lag.topic] = sums.get((lag.group, lag.topic), 0) + lag.lag
    return sums
