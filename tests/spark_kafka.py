"""Spark's own Kafka source and sink (``spark-sql-kafka-0-10``) from
Maven Central, fetched once into ``~/.cache/rafka/spark-sql-kafka-<version>`` with its
dependencies (kafka-clients, commons-pool2, the token provider); nothing of it is committed.
The tests' Spark session loads them (``spark.jars``), so ``format("kafka")`` reads and
writes rafka topics through the brokers' Kafka listeners."""
from __future__ import annotations

import os
from pathlib import Path


# The connector of Spark 4.2.0: Maven Central did not serve 4.3.0's (the installed
# pyspark's) on 2026-11-25; 4.2's connector runs on Spark 4.3 (the DataSource V2 API it
# uses is the same), which the tests that load it show.
CONNECTOR_VERSION = "4.2.0"


def pom(version: str) -> str:
    # Spark itself is already on the classpath (pyspark's jars): only what the connector
    # adds is fetched; what pyspark ships (Scala, lz4, snappy) is excluded, so that one
    # version of each is loaded.
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rafka.tests</groupId><artifactId>spark-kafka</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>{version}</version>
      <exclusions>
        <exclusion><groupId>org.apache.spark</groupId><artifactId>spark-tags_2.13</artifactId></exclusion>
        <exclusion><groupId>org.apache.hadoop</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.slf4j</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>com.google.code.findbugs</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.scala-lang</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.scala-lang.modules</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.lz4</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>at.yawk.lz4</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.xerial.snappy</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
  </dependencies>
</project>
"""


def spark_kafka_jars() -> list[Path]:
    """The connector's jars (fetched on first use)."""
    from benchmarks.peers import maven_jars
    version = os.environ.get("RAFKA_SPARK_KAFKA_VERSION", CONNECTOR_VERSION)
    cache = Path(os.environ.get("RAFKA_SPARK_KAFKA_CACHE", Path.home() / ".cache" / "rafka"
                                / f"spark-sql-kafka-{version}"))
    lib = maven_jars(cache, pom(version), f"Spark's Kafka connector {version}")
    return sorted(lib.glob("*.jar"))
