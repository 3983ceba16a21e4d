"""Filters Spark pushes down to the ``rafka`` batch source, and the ranges they narrow (pure:
no Spark session, no cluster).

Spark calls ``pushFilters`` with the conjuncts of a query's WHERE on the source's columns
(``spark.sql.python.filterPushdown.enabled``). On ``partition`` and ``offset``, comparisons,
equality and IN narrow which partitions are read and each one's offset range; they are
applied exactly (rows outside cannot be read), so Spark does not evaluate them again, except
IN on offsets, read as the range from its least to its greatest value. A lower bound on
``timestamp`` (``>``, ``>=``, ``=``, IN) starts each partition at the first offset whose
timestamp reaches it, found in the time index as ``offsetsForTimes`` finds it; the records
after that may still hold earlier timestamps (a producer's clock is its own), so Spark
evaluates the filter again on what is read. Anything else stays with Spark.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Callable, Mapping

from pyspark.sql.datasource import (EqualNullSafe, EqualTo, GreaterThan, GreaterThanOrEqual, In,
                                    LessThan, LessThanOrEqual)

from protocols.topics import TopicPartition

_COMPARISONS = (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan,
                LessThanOrEqual, In)


def _column(f) -> str | None:
    attribute = getattr(f, "attribute", ())
    return attribute[0] if len(attribute) == 1 else None


@dataclass
class Pushed:
    """The filters taken, by column (plain data: the reader holding it is pickled)."""

    partition: list = field(default_factory=list)
    offset: list = field(default_factory=list)
    timestamp: list = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.partition or self.offset or self.timestamp)


def push(filters: list) -> tuple[Pushed, list]:
    """(what the source applies, what Spark must still evaluate)."""
    pushed = Pushed()
    residual = []
    for f in filters:
        column = _column(f)
        if not isinstance(f, _COMPARISONS) or column not in ("partition", "offset",
                                                             "timestamp"):
            residual.append(f)
            continue
        if column == "timestamp":
            if isinstance(f, (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, In)):
                pushed.timestamp.append(f)
            residual.append(f)       # a lower bound only: Spark checks every row again
            continue
        getattr(pushed, column).append(f)
        if column == "offset" and isinstance(f, In):
            residual.append(f)       # read as a range: the values between are Spark's to drop
    return pushed, residual


def _holds(f, value: int) -> bool:
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return value == f.value
    if isinstance(f, In):
        return value in f.value
    return {GreaterThan: value > f.value, GreaterThanOrEqual: value >= f.value,
            LessThan: value < f.value, LessThanOrEqual: value <= f.value}[type(f)]


def offset_bounds(filters: list) -> tuple[int, int | None]:
    """``[low, high)`` of the offsets the filters allow (high None: no upper bound)."""
    low, high = 0, None

    def below(n: int) -> None:
        nonlocal high
        high = n if high is None else min(high, n)
    for f in filters:
        if isinstance(f, (EqualTo, EqualNullSafe)):
            low = max(low, f.value)
            below(f.value + 1)
        elif isinstance(f, In):
            values = [v for v in f.value if v is not None]
            if not values:
                below(0)
                continue
            low = max(low, min(values))
            below(max(values) + 1)
        elif isinstance(f, GreaterThan):
            low = max(low, f.value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            low = max(low, f.value)
        elif isinstance(f, LessThan):
            below(f.value)
        elif isinstance(f, LessThanOrEqual):
            below(f.value + 1)
    return low, high


def _micros(value) -> int:
    """A Spark timestamp filter's value as microseconds since the epoch (naive: UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return int(value)


def timestamp_floor_ms(filters: list) -> int | None:
    """The least record timestamp (ms) the filters allow, or None. A record's millisecond
    timestamp ``t`` is ``t * 1000`` microseconds in Spark."""
    floor = None
    for f in filters:
        if isinstance(f, In):
            values = [_micros(v) for v in f.value if v is not None]
            if not values:
                continue
            micros, strict = min(values), False
        else:
            micros, strict = _micros(f.value), isinstance(f, GreaterThan)
        # t * 1000 >= micros  <=>  t >= ceil(micros / 1000);  > : t >= floor(micros / 1000) + 1
        ms = micros // 1000 + 1 if strict else -(-micros // 1000)
        floor = ms if floor is None else max(floor, ms)
    return floor


def narrow(pushed: Pushed, partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The partitions the partition filters allow."""
    return [tp for tp in partitions if all(_holds(f, tp.partition) for f in pushed.partition)]


def narrow_ranges(pushed: Pushed, start: Mapping[TopicPartition, int],
                  end: Mapping[TopicPartition, int],
                  offsets_for_times: Callable[[dict[TopicPartition, int]],
                                              Mapping[TopicPartition, int]]
                  ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Each partition's ``[start, end)`` cut to what the offset and timestamp filters
    allow (an empty range where nothing is left). ``offsets_for_times`` answers, per
    partition, the first offset at or after a time, or -1."""
    low, high = offset_bounds(pushed.offset)
    new_start = {tp: max(s, low) for tp, s in start.items()}
    new_end = {tp: e if high is None else min(e, high) for tp, e in end.items()}
    floor = timestamp_floor_ms(pushed.timestamp)
    # A bound at or before the epoch excludes nothing a lookup could find (and -1, -2 would
    # ask ListOffsets for the latest or earliest offset): no lookup.
    if floor is not None and floor > 0:
        wanted = [tp for tp in new_start if new_start[tp] < new_end[tp]]
        found = offsets_for_times({tp: floor for tp in wanted}) if wanted else {}
        for tp, offset in found.items():
            new_start[tp] = new_end[tp] if offset < 0 else max(new_start[tp], offset)
    for tp in new_start:
        new_start[tp] = min(new_start[tp], new_end[tp])   # nothing left: an empty range
    return new_start, new_end
