"""raydp (Spark on Ray) with rafka, in the second environment (pyspark 3.5.7 + raydp,
requirements-raydp.txt) that .ci/run builds: a topic through Ray Data into a raydp Spark
DataFrame and back to a topic (issue 8). Not under tests/: the main environment has Spark 4
and no raydp."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "raydp_pipeline.py"


def test_a_topic_goes_through_raydp_spark_and_back(tmp_path):
    import pyspark
    assert pyspark.__version__.startswith("3.5")        # the environment raydp needs
    spec = importlib.util.spec_from_file_location("raydp_pipeline", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    lines: list[str] = []
    result = example.run(tmp_path, records=300, name="raydp-test", out=lines.append)
    assert result == {"customers": 12, "cents": sum(100 + i for i in range(300)),
                      "expected": sum(100 + i for i in range(300))}, lines
