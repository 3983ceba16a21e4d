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


def test_workers_forked_after_the_preload_draw_different_ray_ids():
    """Ray draws ids (actor classes', objects', the core worker's store warm-up object) from
    one generator per process, seeded at first use. Had the daemon drawn one before forking
    (``@ray.remote`` on a class does), its workers would draw the same ids, and two of them
    connecting at once crash on the same object (seen with the actors' modules preloaded).
    A process of its own: this one has drawn Ray ids already."""
    import subprocess
    import sys
    from pathlib import Path

    forked = subprocess.run([sys.executable, "-c", _FORK_TWICE], capture_output=True,
                            text=True, timeout=120, cwd=str(Path(__file__).parents[3]))
    assert forked.returncode == 0, forked.stderr[-2000:]
    loaded_after_fork, first, second = forked.stdout.split()
    assert loaded_after_fork == "[]"   # no module of AFTER_FORK was preloaded
    assert first != second


_FORK_TWICE = """
import os, sys, traceback
from rafka.spark.daemon import AFTER_FORK, preload
preload()
print(str([m for m in AFTER_FORK if m in sys.modules]).replace(" ", ""), flush=True)
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            from ray._raylet import ActorClassID
            print(ActorClassID.from_random().hex(), flush=True)
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
"""
