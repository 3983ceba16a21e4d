"""Ray on Spark, rafka on that Ray: a rafka cluster colocated with a Spark cluster's
executors (``ray.util.spark.setup_ray_cluster``), torn down with it.

    rafka.spark.colocated.prepare_environment()
    spark = SparkSession.builder.master("local-cluster[2,1,1024]").getOrCreate()
    with rafka.spark.start_colocated(spark, num_brokers=2) as colocated:
        colocated.cluster.admin().create_topics([rafka.NewTopic("t", 2, 2)])
        spark.read.format("rafka").option("cluster", colocated.cluster.name) ...

Ray 2.60 turns token authentication on. rafka makes the token and puts it in the
environment with what else the executors need (``prepare_environment``); call that before
the SparkSession starts, so that the executors (the Ray worker nodes and the data source's
readers and writers) inherit it. Reads and writes name the Ray
address with the ``rayAddress`` option (``Colocated.ray_address``).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any


def prepare_environment() -> None:
    """What Spark's executors must inherit, set in this process's environment; call it
    before the SparkSession starts. The Ray auth token (Ray 2.60 turns token auth on), this
    interpreter for Spark's Python workers, and its bin directory on PATH (Ray on Spark runs
    the ``ray`` script found there)."""
    from rafka.client.ray_runtime import prepare_local_token_auth

    prepare_local_token_auth()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    bin_dir = os.path.dirname(sys.executable)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


@dataclass
class Colocated:
    cluster: Any
    ray_address: str

    def shutdown(self) -> None:
        import ray
        from ray.util.spark import shutdown_ray_cluster
        try:
            self.cluster.shutdown()
        finally:
            ray.shutdown()
            shutdown_ray_cluster()

    def __enter__(self) -> "Colocated":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def start_colocated(spark, num_brokers: int = 2, data_dir: str = "/tmp/rafka-colocated",
                    name: str = "colocated", max_worker_nodes: int | None = None,
                    num_cpus_worker_node: int = 1, config: dict | None = None,
                    timeout_s: float = 180.0) -> Colocated:
    """Start Ray worker nodes on the Spark executors and a rafka cluster whose brokers run
    on those worker nodes, round robin."""
    import time

    import ray
    from ray.util.spark import setup_ray_cluster

    import rafka
    from rafka.client.ray_runtime import RAY_SYSTEM_CONFIG
    from rafka.spark import register

    prepare_environment()
    workers = max_worker_nodes or int(spark.sparkContext.defaultParallelism
                                       // max(1, num_cpus_worker_node))
    address, _ = setup_ray_cluster(
        max_worker_nodes=workers, min_worker_nodes=workers,
        num_cpus_worker_node=num_cpus_worker_node, num_gpus_worker_node=0,
        head_node_options={"system_config": dict(RAY_SYSTEM_CONFIG)})
    os.environ["RAY_ADDRESS"] = address
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    head = ray.get_runtime_context().get_node_id()
    deadline = time.monotonic() + timeout_s
    while True:
        worker_nodes = sorted(n["NodeID"] for n in ray.nodes()
                              if n["Alive"] and n["NodeID"] != head)
        if len(worker_nodes) >= workers:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(worker_nodes)} of {workers} Ray-on-Spark worker nodes "
                               f"came up in {timeout_s} s")
        time.sleep(1)
    cluster = rafka.Cluster.start(num_brokers, data_dir, config, name=name, address=address,
                                  nodes=worker_nodes)
    register(spark)
    return Colocated(cluster, address)
