"""The examples run as users would copy them: the consumer-group worker pool on
Ray actors and the Ray Data batch job."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SMALL = {"offsets.topic.num.partitions": 3}


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_worker_pool_processes_every_order_once(ray_session, tmp_path):
    lines: list[str] = []
    result = load("worker_pool").run(tmp_path, workers=2, orders=600, name="pool-test",
                                     config=SMALL, out=lines.append)
    assert result["processed"] == 600 and result["cents"] == result["expected"], lines
    assert lines[-1].endswith("OK")


def test_ray_data_job_filters_readings_into_alerts(ray_session, tmp_path):
    lines: list[str] = []
    result = load("ray_data_job").run(tmp_path, records=300, name="ray-data-test",
                                      config=SMALL, out=lines.append)
    hot = sum(1 for i in range(300) if 15 + (i * 7) % 30 >= 40)
    assert result == {"read": 300, "alerts": hot}, lines
