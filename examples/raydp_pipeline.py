"""Spark on Ray (raydp) with rafka: a topic read as a Ray Dataset, handed to a raydp Spark
session as a DataFrame, aggregated there, and written back to a topic.

raydp needs pyspark <= 3.5.7, while the ``rafka`` Spark format needs Spark 4, so this runs
in a second environment (``requirements-raydp.txt``) and goes through Ray Data:

    python3 -m venv .venv-raydp && .venv-raydp/bin/pip install -r requirements-raydp.txt \
        && .venv-raydp/bin/pip install --no-deps -e .
    .venv-raydp/bin/python examples/raydp_pipeline.py --data-dir ./data/raydp
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import ray

import rafka
import rafka.ray

# Java 17 closes the JDK internals Spark 3.5 and raydp use; raydp-submit opens them for its
# own JVM, these open them for the driver and executors (else ray.data.from_spark fails).
JAVA17 = " ".join(["-XX:+IgnoreUnrecognizedVMOptions"] + [
    f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
        "java.lang", "java.lang.invoke", "java.io", "java.net", "java.nio", "java.math",
        "java.text", "java.util", "java.util.concurrent", "java.util.concurrent.atomic",
        "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar")]
    + ["--add-exports=java.base/sun.nio.ch=ALL-UNNAMED"])


def run(data_dir: Path, records: int = 600, name: str = "default",
        config: dict | None = None, out=print) -> dict:
    import raydp

    # Spark's Python workers run `python3` from PATH unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # raydp's executors are Java actors Ray starts; every JVM started from here on (Ray's
    # Java workers included, via the raylet's environment) gets the flags this way.
    os.environ["JAVA_TOOL_OPTIONS"] = JAVA17
    cluster = rafka.Cluster.start(3, data_dir, config, name=name)
    try:
        admin = cluster.admin()
        admin.create_topics([rafka.NewTopic(t, 3, 2) for t in ("purchases", "per-customer")
                             if t not in admin.list_topics()])
        with rafka.Producer(cluster) as producer:
            for i in range(records):
                producer.send("purchases", json.dumps({"customer": f"c{i % 12}",
                                                       "cents": 100 + i}).encode(),
                              key=f"c{i % 12}".encode())
        spark = raydp.init_spark("rafka-raydp", num_executors=1, executor_cores=1,
                                 executor_memory="700M",
                                 configs={"spark.driver.extraJavaOptions": JAVA17,
                                          "spark.executor.extraJavaOptions": JAVA17,
                                          "spark.sql.shuffle.partitions": "2"})
        try:
            ds = rafka.ray.read_topic(cluster, "purchases")          # Ray Data
            df = ds.to_spark(spark)                                  # -> Spark (raydp)
            totals = (df.selectExpr("CAST(key AS STRING) AS customer",
                                    "get_json_object(CAST(value AS STRING), '$.cents') "
                                    "AS cents")
                      .groupBy("customer").agg({"cents": "sum"})
                      .withColumnRenamed("sum(cents)", "cents"))
            back = ray.data.from_spark(totals)                       # Spark -> Ray Data
            rows = back.map(lambda r: {"key": r["customer"].encode(),
                                       "value": json.dumps({"customer": r["customer"],
                                                            "cents": int(r["cents"])})
                                       .encode()})
            written = rafka.ray.write_topic(rows, cluster, "per-customer")
        finally:
            raydp.stop_spark()
        result = rafka.ray.read_topic(cluster, "per-customer").take_all()
        cents = sum(json.loads(r["value"])["cents"] for r in result)
        out(f"raydp Spark summed {records} purchases into {written} customers; "
            f"{cents} cents in total")
        return {"customers": written, "cents": cents,
                "expected": sum(100 + i for i in range(records))}
    finally:
        cluster.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="./data/raydp")
    args = parser.parse_args()
    result = run(Path(args.data_dir))
    return 0 if result["cents"] == result["expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
