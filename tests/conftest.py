"""Session-wide fixtures shared by several test packages."""
from __future__ import annotations

import pytest

from rafka.client.ray_runtime import RAY_SYSTEM_CONFIG, prepare_local_token_auth
from tests.root import summary_lines


def pytest_terminal_summary(terminalreporter):
    for line in summary_lines():
        terminalreporter.write_line(line, red=True)


# -- Ray: one local instance for the whole session ---------------------------------------------

@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance (2 CPUs, no dashboard, namespace ``rafka-tests``) shared by every
    ``@pytest.mark.ray`` test of the session; shut down when the session ends."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        prepare_local_token_auth()
    # Metrics exported every 4 s (Ray's default: 10 s), so that tests scraping them wait less.
    ray.init(num_cpus=2, include_dashboard=False, namespace="rafka-tests",
             ignore_reinit_error=True, log_to_driver=True,
             _system_config={**RAY_SYSTEM_CONFIG, "metrics_report_interval_ms": 4000})
    yield ray
    if started_here:
        ray.shutdown()


# -- Spark: one local session for the whole session --------------------------------------------

@pytest.fixture(scope="session")
def spark_session(ray_session):
    """A local Spark session (``local[2]``) with the ``rafka`` format registered, created
    after Ray so that its Python workers inherit the Ray address and auth token; with
    Spark's own Kafka connector loaded (``tests/spark_kafka.py``), for ``format("kafka")``
    against the brokers' Kafka listeners."""
    import rafka.spark
    from tests.spark_kafka import spark_kafka_jars

    jars = ",".join(str(j) for j in spark_kafka_jars())
    spark = rafka.spark.local_session("rafka-tests", conf={"spark.jars": jars})
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()
