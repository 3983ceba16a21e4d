"""Spark's Python worker daemon with rafka loaded: ``spark.python.daemon.module``.

Spark starts one daemon per executor (``pyspark.daemon``), which forks a worker for each
Python task slot; every new worker imports what its tasks use. For the ``rafka`` format
that is pyarrow's compute kernels, pandas (pyarrow imports it on first conversion), Ray
and rafka's clients: ~1.2 s of CPU in each new worker before its first record, paid again
by every worker a job adds. This daemon imports them once, before it forks, so each worker
starts with them loaded (copy-on-write pages), and freezes them out of the garbage
collector's sight (``gc.freeze``, made for this: the pages are not touched by a
collection in the children, and a reused worker's collection after each task does not
walk them).

Nothing here starts a connection or a thread: a worker connects to Ray itself, after the
fork (Ray's core worker cannot cross a fork). pyarrow's allocator thread and numpy's
BLAS threads, started by their imports, are re-made in each child by their libraries' own
fork handlers.

    SparkSession.builder.config("spark.python.daemon.module", "rafka.spark.daemon")

``rafka.spark.local_session`` sets it.
"""
from __future__ import annotations

import gc
import importlib

# What a task of the ``rafka`` format imports: pandas because pyarrow's conversions import
# it on first use; pyspark's worker modules, which the daemon itself leaves to each worker.
PRELOAD = ("pandas", "pyarrow.compute", "ray", "pyspark.worker",
           "pyspark.sql.worker.plan_data_source_read",
           "pyspark.sql.worker.write_into_data_source", "rafka.consumer.consumer",
           "rafka.producer.producer", "rafka.spark.sink", "rafka.spark.source")


def preload() -> None:
    """Import what the ``rafka`` format's tasks use, then freeze it (see the module's doc)."""
    for module in PRELOAD:
        importlib.import_module(module)
    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager
    manager()
