"""Spark's Python workers under ``rafka.spark.daemon`` (``spark.python.daemon.module``, set
by ``local_session``): each forked worker starts with what the ``rafka`` format's tasks use
already loaded and frozen out of the garbage collector's sight, and still runs any task."""
from __future__ import annotations


def _worker_state(_):
    import gc
    import sys
    return (gc.get_freeze_count(),
            all(m in sys.modules for m in ("ray", "pyarrow.compute", "rafka.producer.producer",
                                           "rafka.consumer.consumer", "rafka.spark.source")))


def test_a_task_worker_starts_with_rafka_loaded_and_frozen(spark_session):
    assert spark_session.conf.get("spark.python.daemon.module") == "rafka.spark.daemon"
    states = spark_session.sparkContext.parallelize(range(4), 2).map(_worker_state).collect()
    for frozen, loaded in states:
        assert frozen > 100_000     # pyarrow, pandas, Ray and rafka: ~150,000 objects
        assert loaded


def test_a_worker_of_the_daemon_runs_plain_python_tasks(spark_session):
    assert spark_session.sparkContext.parallelize(range(10), 2).map(lambda x: x * x).sum() == 285
