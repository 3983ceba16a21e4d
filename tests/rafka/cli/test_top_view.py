"""What ``rafka top`` shows (rafka.cli.top_view), from samples made by hand: brokers up and
down with what they lead and hold, throughput from two samples' log end offsets, partitions
out of ISR and offline, groups by lag."""
from __future__ import annotations

from rafka.cli.top_view import PartitionState, Sample, render


def sample(at_s: float, ends: dict, brokers=(1, 2, 3), partitions=None, groups=None) -> Sample:
    partitions = partitions or {("events", 0): PartitionState(1, (1, 2), (1, 2)),
                                ("events", 1): PartitionState(2, (2, 3), (2, 3)),
                                ("audit", 0): PartitionState(3, (3, 1), (3, 1))}
    return Sample(at_s, list(brokers), 1, partitions, ends, groups or {})


def test_the_first_screen_has_no_rates_and_the_second_has_them():
    first = sample(10.0, {("events", 0): 100, ("events", 1): 50, ("audit", 0): 7})
    lines = render(first, None, "t")
    assert lines[1] == ("BROKERS 3 (controller 1)   TOPICS 2   PARTITIONS 3   "
                        "UNDER-REPLICATED 0   OFFLINE 0")
    assert lines[3].split() == ["BROKER", "STATE", "LEADERS", "REPLICAS", "OUT-OF-ISR",
                                "MESSAGES-IN/S"]
    assert lines[4].split() == ["1", "up", "1", "2", "0", "-"]
    second = sample(12.0, {("events", 0): 2100, ("events", 1): 1050, ("audit", 0): 7})
    lines = render(second, first, "t")
    assert lines[4].split() == ["1", "up", "1", "2", "0", "1,000"]
    assert lines[5].split() == ["2", "up", "1", "2", "0", "500"]
    topics = lines[lines.index(next(x for x in lines if x.startswith("TOPIC"))):][:3]
    assert [row.split() for row in topics[1:]] == [["events", "2", "1,500", "0", "0"],
                                                   ["audit", "1", "0", "0", "0"]]


def test_a_broker_down_shows_its_partitions_out_of_isr_and_offline():
    partitions = {("events", 0): PartitionState(1, (1, 2), (1,)),
                  ("events", 1): PartitionState(-1, (2,), (2,)),
                  ("audit", 0): PartitionState(3, (3, 1), (3, 1))}
    lines = render(sample(1.0, {}, brokers=(1, 3), partitions=partitions), None, "t")
    assert "UNDER-REPLICATED 1   OFFLINE 1" in lines[1]
    assert ["2", "DOWN", "0", "2", "1", "-"] in [line.split() for line in lines]
    at = lines.index("PARTITIONS OUT OF ISR")
    assert lines[at + 2].split() == ["events", "0", "1", "1,2", "1", "2"]


def test_groups_are_listed_most_lagging_first():
    groups = {"quiet": ("Stable", {("events", 0): 0}),
              "unknown": ("Stable", None),     # its lag could not be told this time
              "behind": ("Empty", {("events", 0): 40, ("events", 1): 2_000})}
    lines = render(sample(1.0, {}, groups=groups), None, "t")
    at = lines.index("CONSUMER GROUPS (most lagging first)")
    assert [line.split() for line in lines[at + 2:at + 5]] == [
        ["behind", "Empty", "2,040", "2", "events-1", "(2,000)"],
        ["quiet", "Stable", "0", "1", "events-0", "(0)"],
        ["unknown", "Stable", "?", "?", "?"]]


def test_no_rates_when_the_log_ends_could_not_be_told():
    first = sample(1.0, {("events", 0): 5, ("events", 1): 5, ("audit", 0): 5})
    lines = render(sample(3.0, {}), first, "t")
    assert lines[4].split()[-1] == "-"
