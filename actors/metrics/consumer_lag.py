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


def lag_sums(lags: Iterable[PartitionLag],
             rows: Iterable[tuple[str, str, int, int]] = ()) -> dict[tuple[str, str], int]:
    """{(group, topic): the lag summed over its partitions}; a (group, topic) one of whose
    committed ``rows`` has no lag (its leader did not answer) is left out rather than
    summed short."""
    sums: dict[tuple[str, str], int] = {}
    for lag in lags:
        sums[lag.group, lag.topic] = sums.get((lag.group, lag.topic), 0) + lag.lag
    told = {(lag.group, lag.topic, lag.partition) for lag in lags}
    for group, topic, partition, _ in rows:
        if (group, topic, partition) not in told:
            sums.pop((group, topic), None)
    return sums


class OffsetTimeline:
    """When each partition's log end offset passed which offsets: a sample per report, so
    that a committed offset's lag can be told in time (how long ago the first record the
    group has not consumed was appended), by interpolating between the samples around it,
    as kafka-lag-exporter estimates it. Told only where the samples reach back far enough:
    an offset appended before a partition's first sample has no time (None)."""

    def __init__(self, keep: int = 240):
        self.keep = keep   # distinct log ends per partition: 20 min at a report every 5 s
        # Per partition: [first seen ms, last seen ms, log end], the ends rising.
        self._samples: dict[tuple[str, int], list[list[int]]] = {}

    def record(self, ends: Mapping[tuple[str, int], int], now_ms: int,
               wanted: Iterable[tuple[str, int]] | None = None) -> None:
        """This report's log end offsets. Partitions not ``wanted`` (default: not in
        ``ends``) are forgotten: no group reads them any more. One wanted but not in
        ``ends`` (its leader did not answer this time) keeps its samples."""
        keep = set(ends if wanted is None else wanted)
        for tp in list(self._samples):
            if tp not in keep:
                del self._samples[tp]
        for tp, end in ends.items():
            samples = self._samples.setdefault(tp, [])
            if samples and end < samples[-1][2]:
                samples.clear()   # truncated (a new leader, or records deleted): anew
            if samples and end == samples[-1][2]:
                samples[-1][1] = now_ms   # still there: the end had not passed it by now
                continue
            samples.append([now_ms, now_ms, end])
            del samples[:-self.keep]

    def lag_ms(self, tp: tuple[str, int], committed: int, now_ms: int) -> int | None:
        """How long ago the record at ``committed`` (the first not consumed) was appended:
        0 when there is none, None when the samples do not reach back to it."""
        samples = self._samples.get(tp)
        if not samples:
            return None
        if committed >= samples[-1][2]:
            return 0
        for i, (first_ms, _, end) in enumerate(samples):
            if end > committed:
                if i == 0:
                    return None
                # Appended after the end was last seen below it and by the time it was
                # first seen past it: in proportion between those two.
                _, before_ms, before_end = samples[i - 1]
                passed = before_ms + (first_ms - before_ms) * (committed - before_end) \
                    // (end - before_end)
                return max(0, now_ms - passed)
        return 0
