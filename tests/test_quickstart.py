"""The README's main job, examples/quickstart.py, end to end: cluster, producer, a Spark
streaming aggregation through the rafka format, a consumer group."""
from __future__ import annotations

import importlib.util
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
