"""Which replica host holds a replica (docs/architecture.md, "Actors"): a stable rule over
num.replica.hosts."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from actors.replica.placement import default_num_replica_hosts, host_index


def test_default_is_one_host_per_cpu_shared_among_the_node_s_brokers():
    assert default_num_replica_hosts(8, 1) == 8
    assert default_num_replica_hosts(8, 2) == 4
    assert default_num_replica_hosts(8, 3) == 2
    assert default_num_replica_hosts(2, 3) == 1        # at least one each
    assert default_num_replica_hosts(0, 1) == 1
    assert default_num_replica_hosts(4.0, 0) == 4      # no brokers counted: the whole node


def test_a_topic_s_partitions_spread_evenly_over_the_hosts():
    for hosts in (1, 2, 3, 8):
        counts = Counter(host_index("events", p, hosts) for p in range(hosts * 50))
        assert sorted(counts) == list(range(hosts))
        assert set(counts.values()) == {50}


def test_the_rule_is_the_same_in_every_process():
    """A restarted broker must find every replica where the last one put it: no salted
    str hash."""
    here = [host_index(t, p, 7) for t in ("a", "orders", "__consumer_offsets") for p in range(20)]
    code = ("from actors.replica.placement import host_index; print([host_index(t, p, 7) "
            "for t in ('a', 'orders', '__consumer_offsets') for p in range(20)])")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": "12345"}, cwd=".").stdout
    assert there.strip() == str(here)
