"""rafka in Spark: the ``rafka`` data source (``rafka.spark.source``) and a local session
whose Python workers can reach the cluster.

    spark = rafka.spark.local_session()          # or register(spark) on your own session
    spark.read.format("rafka").option("subscribe", "events").load()
"""
from __future__ import annotations

import os
import sys


def register(spark) -> None:
    """Make ``format("rafka")`` available on this session. On a session with
    ``spark.sql.python.filterPushdown.enabled`` true (``local_session`` sets it), batch
    reads take the filters Spark pushes down on partition, offset and timestamp
    (``rafka.spark.filters``); Spark refuses a source that would take them otherwise."""
    from rafka.spark.source import RafkaDataSource, RafkaFilteringDataSource
    enabled = str(spark.conf.get("spark.sql.python.filterPushdown.enabled", "false"))
    spark.dataSource.register(RafkaFilteringDataSource if enabled.lower() == "true"
                              else RafkaDataSource)


def local_session(app_name: str = "rafka", master: str = "local[2]",
                  conf: dict | None = None):
    """A local SparkSession with the ``rafka`` format registered. Its Python workers run
    this interpreter and inherit, through the environment, the address of the Ray instance
    this process is connected to (``RAY_ADDRESS``) and its auth token, so the data source
    reaches the cluster from them. Call it after the cluster is up (or Ray connected)."""
    import ray
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if ray.is_initialized():
        os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.python.daemon.module", "rafka.spark.daemon"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
