"""A Spark driver of its own (``python -m tests.spark_executor_kill``, started by
``tests/runtime/test_exactly_once_sinks.py``): Spark in ``local-cluster`` mode, so that its
executor is a JVM process of its own, runs a streaming copy of a topic with the rafka sink's
``exactlyOnce``, and SIGKILLs the executor while the sink writes. Spark's standalone worker
starts a new executor and Spark runs the lost tasks again. Prints one JSON line: the
executor pids killed and the query's batches.

Arguments: the rafka cluster's name, the source and sink topics, a checkpoint directory.
RAY_ADDRESS (and Ray's auth variables) name the Ray instance, for the driver and, through
the environment, the executors' Python workers."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid


def executor_pids(tag: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{tag}|"
                            f"{tag}.*CoarseGrainedExecutorBackend"],
                           capture_output=True, text=True).stdout.split()
    return [int(p) for p in found if int(p) != os.getpid()]


def main() -> int:
    cluster_name, source, sink, checkpoint = sys.argv[1:5]
    import rafka
    import rafka.spark
    from rafka.client.ray_runtime import ensure_ray
    ensure_ray(os.environ["RAY_ADDRESS"], log_to_driver=False)
    cluster = rafka.Cluster.connect(cluster_name)
    tag = f"rafka-kill-{uuid.uuid4().hex[:8]}"
    spark = rafka.spark.local_session("executor-kill", master="local-cluster[1,2,1024]", conf={
        "spark.executor.extraJavaOptions": f"-Drafka.test={tag}",
        "spark.executorEnv.RAY_ADDRESS": os.environ["RAY_ADDRESS"],
        "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "spark.task.maxFailures": "8"})
    spark.sparkContext.setLogLevel("ERROR")
    killed: list[int] = []
    done = threading.Event()

    def killer() -> None:
        """Kill the executor once the sink has written, then once more a little later."""
        admin = cluster.admin()
        tps = [(sink, p) for p in range(3)]
        while not done.is_set() and len(killed) < 2:
            written = sum(r.offset for r in admin.list_offsets(
                {tp: "latest" for tp in tps}).values())
            pids = executor_pids(tag)
            if written > (0 if not killed else 3000) and pids:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed.extend(pids)
                time.sleep(2)
            time.sleep(0.05)
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    query = (spark.readStream.format("rafka").option("cluster", cluster_name)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "1500").load()
             .selectExpr("key", "value")
             .writeStream.format("rafka").option("cluster", cluster_name)
             .option("topic", sink).option("exactlyOnce", "true")
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    finished = query.awaitTermination(400)
    done.set()
    batches = len([p for p in query.recentProgress if p["numInputRows"] > 0])
    error = None if query.exception() is None else str(query.exception())[:500]
    spark.stop()
    print(json.dumps({"killed": killed, "batches": batches, "finished": bool(finished),
                      "error": error}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
