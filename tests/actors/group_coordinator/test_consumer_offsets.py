"""__consumer_offsets records: a new coordinator rebuilds each group from the log."""
from __future__ import annotations

from actors.group_coordinator.group import Group, GroupConfig
from actors.group_coordinator.offsets import (group_metadata_key, group_metadata_value,
                                        offset_commit_key, offset_commit_value, replay)
from protocols.messages import OffsetAndMetadata
from protocols.records import MemoryRecordsBuilder, iter_batches
from protocols.topics import TopicPartition


def test_the_last_commit_per_partition_wins_and_tombstones_delete():
    log = [
        (offset_commit_key("g1", "t", 0), offset_commit_value(OffsetAndMetadata(5))),
        (offset_commit_key("g1", "t", 1), offset_commit_value(OffsetAndMetadata(7, 2, "m"))),
        (offset_commit_key("g2", "t", 0), offset_commit_value(OffsetAndMetadata(1))),
        (offset_commit_key("g1", "t", 0), offset_commit_value(OffsetAndMetadata(9, 3))),
        (offset_commit_key("g2", "t", 0), None),                  # group g2 deleted
    ]
    groups = replay(log)
    assert list(groups) == ["g1"]
    assert groups["g1"].offsets == {TopicPartition("t", 0): OffsetAndMetadata(9, 3),
                                    TopicPartition("t", 1): OffsetAndMetadata(7, 2, "m")}


def test_group_metadata_round_trips_through_a_record_batch():
    group = Group("g", GroupConfig(initial_rebalance_delay_ms=0),
                  new_member_id=lambda c: f"{c}-1")
    member, _ = group.join("", "consumer", [("range", b"sub")], 0, client_id="c",
                           require_known_member_id=False)
    group.sync(member, 1, {member: b"assigned"}, 1)
    builder = MemoryRecordsBuilder()
    builder.append(1, group_metadata_key("g"), group_metadata_value(group.describe()))
    builder.append(2, offset_commit_key("g", "t", 3), offset_commit_value(OffsetAndMetadata(42)))
    batch = next(iter_batches(builder.build()))
    loaded = replay((r.key, r.value) for r in batch.records())
    meta = loaded["g"].metadata
    assert (meta["state"], meta["generation_id"], meta["protocol"], meta["leader"]) == \
        ("Stable", 1, "range", "c-1")
    assert meta["members"][0]["assignment"] == b"assigned"
    assert loaded["g"].offsets[TopicPartition("t", 3)].offset == 42
    assert replay([(group_metadata_key("g"), None)]) == {}
