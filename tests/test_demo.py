"""The README's main job runs end to end on a local data directory."""
from __future__ import annotations

from protocols.topics import TopicPartition
from rafka.demo import PARTITIONS, TOPIC, run_demo


def test_demo_writes_reads_and_recovers(tmp_path):
    lines: list[str] = []
    ends = run_demo(tmp_path, records_per_partition=1_000, out=lines.append)
    assert ends == {TopicPartition(TOPIC, p): 1_000 for p in range(PARTITIONS)}
    assert any("log end offsets match" in line for line in lines)
    # A second run appends after what the first left on disk.
    again = run_demo(tmp_path, records_per_partition=500, out=lines.append)
    assert set(again.values()) == {1_500}
    assert (tmp_path / "broker-0" / ".kafka_cleanshutdown").exists()
