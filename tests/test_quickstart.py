"""The README's main job, examples/quickstart.py, end to end: cluster, producer, a Spark
streaming aggregation through the rafka format, a consumer group."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def load_example():
    spec = importlib.util.spec_from_file_location("quickstart", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_clickstream_pipeline_counts_every_click_it_sent(spark_session, tmp_path):
    quickstart = load_example()
    lines: list[str] = []
    summary = quickstart.run_quickstart(
        tmp_path, users=20, clicks=1_500, spark=spark_session, name="quickstart-test",
        out=lines.append)                  # Kafka's defaults: 50 __consumer_offsets partitions
    assert summary["ok"], lines
    assert summary["counted"] == summary["sent"] == 1_500
    assert any(line.startswith("consumer group 'dashboard-") for line in lines), lines
    assert sum("Topic: clicks\t" in line for line in lines) == 6      # described


def test_the_main_jobs_screen_carries_its_own_lines_only(ray_session, tmp_path):
    """The README's command as a user runs it (here on this session's Ray, whose address the
    process inherits): a progress line per step and the result on stdout, nothing on
    stderr; Spark's and Ray's output (log lines, stage bars, worker processes' dumps) in
    ``quickstart.log``."""
    run = subprocess.run([sys.executable, str(EXAMPLE), "--data-dir", str(tmp_path / "data"),
                          "--users", "5", "--clicks", "200"],
                         capture_output=True, text=True, timeout=540, cwd=tmp_path)
    log = tmp_path / "data" / "quickstart.log"
    assert run.returncode == 0, run.stdout + run.stderr + (log.read_text()[-3000:]
                                                          if log.exists() else "")
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    assert lines[0] == f"(Spark's and Ray's own output: {log}; --verbose shows it here)"
    assert lines[1].startswith("starting a 3-broker rafka cluster")
    assert lines[-1].startswith("OK: 200 clicks counted, 200 produced")
    chatter = ("WARN", " INFO ", "Stage ", "SIGTERM", "Ray cluster", "log4j")
    assert not [line for line in lines if any(word in line for word in chatter)], lines
    assert "Ray cluster" in log.read_text() and "log4j" in log.read_text()
