"""The README's main job runs end to end on a local data directory."""
from __future__ import annotations

import pytest

from rafka.cli.demo import PARTITIONS, run_demo

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]


def test_demo_writes_survives_a_kill_and_recovers(ray_session, tmp_path):
    lines: list[str] = []
    ends = run_demo(tmp_path, records_per_partition=300, out=lines.append, name="demo-test")
    assert ends == {p: 300 for p in range(PARTITIONS)}
    assert any(", 0 lost" in line for line in lines), lines
    assert any("log end offsets match" in line for line in lines), lines
    # A second run appends after what the first left on disk.
    again = run_demo(tmp_path, records_per_partition=200, out=lines.append, name="demo-test")
    assert set(again.values()) == {500}
    assert ray_session.is_initialized()
