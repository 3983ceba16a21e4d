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
fork handlers. Nothing here draws a Ray id either (``AFTER_FORK``).

    SparkSession.builder.config("spark.python.daemon.module", "rafka.spark.daemon")

``rafka.spark.local_session`` sets it.
"""
from __future__ import annotations

import gc
import importlib

# What a task of the ``rafka`` format imports: pandas because pyarrow's conversions import
# it on first use; pyspark's worker modules, which the daemon itself leaves to each worker;
# what Ray imports when a worker connects (pydantic, by its serialization add-ons); the
# columnar codec, which the clients import on their first Arrow batch; and what the modules
# of rafka's actor classes import, since a worker's first handle on an actor loads its class
# (Ray unpickles it). Without the last three a worker imported ~160 more modules at its first
# task, ~0.3-0.6 s of CPU in each (tests/runtime/test_spark.py).
PRELOAD = ("pandas", "pyarrow.compute", "pyarrow.json", "ray", "ray.util.serialization_addons",
           "ray._private.arrow_serialization", "ray._common.pydantic_compat",
           "ray._common.usage.usage_lib", "ray._private.runtime_env.uv_runtime_env_hook",
           "pydantic.v1", "pyspark.worker", "pyspark.sql.worker.plan_data_source_read",
           "pyspark.sql.worker.write_into_data_source", "protocols.arrow_records",
           "rafka.cluster", "rafka.client.ray_runtime", "rafka.consumer.consumer",
           "rafka.producer.producer", "rafka.spark.connection", "rafka.spark.sink",
           "rafka.spark.source", "actors.broker.state", "actors.broker.client_quota_manager",
           "actors.broker.metrics_report", "actors.controller.state", "actors.controller.lease",
           "actors.controller.messages", "actors.group_coordinator.coordinator",
           "actors.metrics.consumer_lag", "actors.metrics.exporter", "actors.metrics.gauges",
           "actors.replica.hosted_replica", "actors.replica.fetcher_manager",
           "actors.replica.locate", "actors.txn.coordinator", "actors.coordinator_load",
           "actors.gcs", "actors.process", "actors.hop_trace", "actors.timer.system_timer",
           "actors.broker.config", "actors.replica.fetch_many", "actors.replica.fetch_session",
           "actors.replica.host_quotas", "actors.replica.placement", "actors.txn.verifier",
           "protocols.kafka.listeners", "storage.log_manager", "storage.log_dir_failure",
           # and what a client of a secured cluster imports (SASL, TLS, its ACL errors)
           "protocols.kafka.jaas", "protocols.kafka.scram", "protocols.kafka.ssl_context",
           "protocols.kafka.acl",
           # and what a job by kafka.bootstrap.servers imports instead of Ray's connection:
           # Kafka's client codec (kio) and the schemas of its requests
           "rafka.client.listener_admin", "rafka.client.listener_fetcher",
           "rafka.client.listener_producer",
           "kio.schema.metadata.v12.request", "kio.schema.metadata.v12.response",
           "kio.schema.list_offsets.v5.request", "kio.schema.list_offsets.v5.response",
           "kio.schema.fetch.v12.request", "kio.schema.fetch.v12.response",
           "kio.schema.produce.v9.request", "kio.schema.produce.v9.response",
           "kio.schema.init_producer_id.v4.request", "kio.schema.init_producer_id.v4.response",
           # and an exactlyOnce write's transaction
           "rafka.connectors.exactly_once", *(
               f"kio.schema.{api}.{side}" for api in (
                   "find_coordinator.v4", "add_partitions_to_txn.v3", "add_offsets_to_txn.v3",
                   "txn_offset_commit.v3", "end_txn.v3", "offset_fetch.v8")
               for side in ("request", "response")))

# Imported by each worker after the fork, never by the daemon: the modules that make Ray actor
# classes (``@ray.remote`` on a class draws a random ActorClassID) and those importing them.
# Ray draws its ids from one generator per process, seeded at its first use; seeded before
# the fork, every worker would draw the same ids, and two workers connecting at once crash
# their core workers on the same object id (Ray's check "WarmupStore() ... Seal() called on
# an object without a reference to it").
AFTER_FORK = ("actors.broker.actor", "actors.broker.lifecycle", "actors.broker.replica_manager",
              "actors.controller.actor", "actors.group_coordinator.actor",
              "actors.replica.replica_host", "actors.timer.actor", "actors.txn.actor")


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
