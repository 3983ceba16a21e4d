"""Ray on Spark, rafka on that Ray: brokers on the Spark executors' Ray worker nodes, a
topic written and read back through the rafka format, then everything torn down.

    python examples/colocated.py       # a local-cluster[2,2,1024] Spark: 2 executors, 2 cores each
"""
from __future__ import annotations

import sys
import tempfile
import time

from pyspark.sql import SparkSession

import rafka
from rafka.spark.colocated import prepare_environment, start_colocated


def run(master: str = "local-cluster[2,2,1024]", out=print) -> dict:
    # Before Spark starts: its executors (the Ray worker nodes, the data source's readers)
    # inherit the Ray auth token, the interpreter and PATH from this environment.
    prepare_environment()
    started = time.monotonic()
    spark = (SparkSession.builder.master(master).appName("rafka-colocated")
             .config("spark.ui.enabled", "false").config("spark.task.cpus", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with start_colocated(spark, num_brokers=2, max_worker_nodes=2,
                             data_dir=tempfile.mkdtemp(prefix="rafka-colocated-"),
                             config={"offsets.topic.num.partitions": 3}) as colocated:
            cluster = colocated.cluster
            info = {b: cluster.broker_nodes[b] for b in cluster.broker_nodes}
            out(f"Ray on Spark at {colocated.ray_address}; brokers on nodes {info} "
                f"({time.monotonic() - started:.0f} s)")
            cluster.admin().create_topics([rafka.NewTopic("colocated", 2, 2)])
            rows = [(f"k{i}", f"v{i}") for i in range(100)]
            where = {"cluster": cluster.name, "rayAddress": colocated.ray_address}
            spark.createDataFrame(rows, "key string, value string").write \
                .format("rafka").options(**where).option("topic", "colocated") \
                .mode("append").save()
            n = spark.read.format("rafka").options(**where) \
                .option("subscribe", "colocated").load().count()
            out(f"wrote and read back {n} records through the rafka format")
            return {"brokers": info, "records": n}
    finally:
        spark.stop()


if __name__ == "__main__":
    result = run()
    sys.exit(0 if result["records"] == 100 else 1)
