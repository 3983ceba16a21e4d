"""The replicas' shared fixture: a leader and a follower of one partition (min.insync 2)."""
from __future__ import annotations

import pytest

from tests.actors.replica.test_replica import Cluster, truncate_via


@pytest.fixture
def pair(tmp_path):
    c = Cluster(tmp_path, min_isr=2)
    leader, follower = c.start(1), c.start(2)
    leader.become_leader(0, 0, isr=[1, 2], replicas=[1, 2])
    follower.become_follower(1, 0, 0, replicas=[1, 2])
    truncate_via(follower, leader)
    return c, leader, follower
