"""Ray on Spark with rafka on it: examples/colocated.py on a real local-cluster
Spark, in its own process (one SparkContext per process; the test session has its own)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "colocated.py"


def test_brokers_run_on_ray_on_spark_worker_nodes_and_the_format_reads_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                          timeout=540, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    placed = next(line for line in lines if line.startswith("Ray on Spark at"))
    nodes = placed.split("brokers on nodes ")[1].split(" (")[0]
    assert nodes.count("'") == 4 and len(set(nodes.split("'")[1::2])) == 2   # 2 nodes
    assert "wrote and read back 100 records through the rafka format" in lines
