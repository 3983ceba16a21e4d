"""What ``rafka top`` shows, from two samples of the cluster: pure (no Ray, no clock of its
own), so that every figure on the screen is a function of what was sampled.

A sample is what an operator's first look at a Kafka cluster asks: the live brokers and the
controller, each partition's leader, replicas and ISR, each partition's log end offset
(throughput is the difference between two samples over the time between them: messages
appended per second, by topic and by leader broker), and each consumer group's lag."""
from __future__ import annotations

from dataclasses import dataclass, field

# Partitions out of ISR and groups listed, at most (the rest counted).
MAX_ROWS = 10


@dataclass(frozen=True)
class PartitionState:
    leader: int            # -1: none (offline)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class Sample:
    at_s: float                        # when taken (a monotonic clock)
    brokers: list[int]                 # the live ones
    controller_id: int
    partitions: dict[tuple[str, int], PartitionState]
    log_end_offsets: dict[tuple[str, int], int]
    # group -> (state, {(topic, partition): lag}, None when it could not be told)
    groups: dict[str, tuple[str, dict[tuple[str, int], int] | None]] = field(
        default_factory=dict)


def _rates(sample: Sample, previous: Sample | None) -> dict[tuple[str, int], float] | None:
    """Messages appended per second per partition since ``previous``; None without it."""
    if previous is None or sample.at_s <= previous.at_s or not sample.log_end_offsets:
        return None
    elapsed = sample.at_s - previous.at_s
    return {tp: max(0, end - previous.log_end_offsets[tp]) / elapsed
            for tp, end in sample.log_end_offsets.items() if tp in previous.log_end_offsets}


def _table(rows: list[list], header: list[str]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return [" ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip()
            for row in [header, *rows]]


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def render(sample: Sample, previous: Sample | None, title: str) -> list[str]:
    """The screen's lines."""
    rates = _rates(sample, previous)
    live = set(sample.brokers)
    out_of_isr = {tp: s for tp, s in sample.partitions.items()
                  if len(s.isr) < len(s.replicas)}
    offline = {tp for tp, s in sample.partitions.items() if s.leader < 0 or s.leader not in live}
    topics = sorted({t for t, _ in sample.partitions})
    lines = [title,
             f"BROKERS {len(live)} (controller {sample.controller_id})   TOPICS {len(topics)}   "
             f"PARTITIONS {len(sample.partitions)}   UNDER-REPLICATED {len(out_of_isr)}   "
             f"OFFLINE {len(offline)}", ""]

    known = sorted(live | {b for s in sample.partitions.values() for b in s.replicas})
    rows = []
    for b in known:
        led = [tp for tp, s in sample.partitions.items() if s.leader == b]
        held = sum(1 for s in sample.partitions.values() if b in s.replicas)
        missing = sum(1 for s in sample.partitions.values()
                      if b in s.replicas and b not in s.isr)
        rate = None if rates is None else sum(rates.get(tp, 0.0) for tp in led)
        rows.append([b, "up" if b in live else "DOWN", len(led), held, missing, _rate(rate)])
    lines += _table(rows, ["BROKER", "STATE", "LEADERS", "REPLICAS", "OUT-OF-ISR",
                           "MESSAGES-IN/S"])

    rows = []
    for topic in topics:
        parts = [tp for tp in sample.partitions if tp[0] == topic]
        rate = None if rates is None else sum(rates.get(tp, 0.0) for tp in parts)
        rows.append([topic, len(parts), rate, sum(1 for tp in parts if tp in out_of_isr),
                     sum(1 for tp in parts if tp in offline)])
    # The busiest first, then those with partitions out of ISR or offline.
    rows.sort(key=lambda r: (-(r[2] or 0.0), -r[3] - r[4], r[0]))
    lines += [""] + _table([[t, n, _rate(r), u, o] for t, n, r, u, o in rows[:MAX_ROWS]],
                           ["TOPIC", "PARTITIONS", "MESSAGES-IN/S", "UNDER-REPLICATED",
                            "OFFLINE"])
    if len(rows) > MAX_ROWS:
        lines.append(f"... and {len(rows) - MAX_ROWS} more topics")

    if out_of_isr:
        rows = [[t, p, s.leader, ",".join(map(str, s.replicas)), ",".join(map(str, s.isr)),
                 ",".join(str(r) for r in s.replicas if r not in s.isr)]
                for (t, p), s in sorted(out_of_isr.items())]
        lines += ["", "PARTITIONS OUT OF ISR"] + _table(
            rows[:MAX_ROWS], ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "MISSING"])
        if len(rows) > MAX_ROWS:
            lines.append(f"... and {len(rows) - MAX_ROWS} more partitions")

    if sample.groups:
        rows = []
        for group, (state, lags) in sample.groups.items():
            if lags is None:   # not told this time: last
                rows.append([group, state, -1, "?", "?"])
                continue
            worst = max(lags.items(), key=lambda item: item[1], default=None)
            rows.append([group, state, sum(lags.values()), len(lags),
                         "-" if worst is None else f"{worst[0][0]}-{worst[0][1]} ({worst[1]:,})"])
        rows.sort(key=lambda r: (-r[2], r[0]))
        lines += ["", "CONSUMER GROUPS (most lagging first)"] + _table(
            [[g, s, "?" if lag < 0 else f"{lag:,}", n, w] for g, s, lag, n, w in rows[:MAX_ROWS]],
            ["GROUP", "STATE", "LAG", "PARTITIONS", "MOST-LAGGING-PARTITION"])
        if len(rows) > MAX_ROWS:
            lines.append(f"... and {len(rows) - MAX_ROWS} more groups")
    return lines
