"""How a Spark Python worker (the planner or an executor) reaches the rafka cluster its
options name: through Ray, one connection per worker process, reused by its tasks."""
from __future__ import annotations

import gc
import os
from typing import Any

_clusters: dict[tuple[str, str], Any] = {}
_admins: dict[tuple, Any] = {}


def _key(options) -> tuple[str, str]:
    """(cluster name, Ray address) the options name."""
    return (options.get("cluster", "default"),
            options.get("rayAddress") or os.environ.get("RAY_ADDRESS") or "auto")


def connect(options):
    """This process's handle on the cluster the options name (one Ray connection per Spark
    Python worker, reused by its tasks)."""
    import rafka
    from rafka.client.ray_runtime import ensure_ray
    key = _key(options)
    if key not in _clusters:
        ensure_ray(key[1], log_to_driver=False)
        _clusters[key] = rafka.Cluster.connect(key[0])
        freeze_what_lasts()
    return _clusters[key]


def admin(options):
    """This process's ``rafka.Admin`` for the cluster the options name, with their
    consumer settings (its SASL ones sign in once), kept as Spark's Kafka source keeps one
    admin client per offset reader: a streaming query asks the offsets of every partition
    at each trigger (every 10 ms while no record comes, Spark's polling delay), and a new
    admin each time looked up the metadata, the leaders and their hosts again (~20 Ray
    calls a trigger; an idle query kept the brokers, the controller and the hosts busy)."""
    from rafka.spark.offsets import consumer_options
    config = consumer_options(options)
    key = (*_key(options), tuple(sorted((k, str(v)) for k, v in config.items())))
    if key not in _admins:
        _admins[key] = connect(options).admin(config)
    return _admins[key]


def freeze_what_lasts() -> None:
    """Move what this worker keeps for its life (its modules, Ray's state, the connection)
    out of the garbage collector's sight. A reused Spark Python worker runs a full
    ``gc.collect()`` after every task (pyspark's daemon), and with Ray and pyarrow loaded
    that walks ~150,000 objects: 100-150 ms per task, nearly half of a warm copy job's
    Python time (py-spy). Frozen objects are never collected, so this runs once, after a
    collection, when what it freezes lives as long as the process anyway.
    ``rafka.spark.daemon`` freezes the modules before it forks the workers; this freezes
    what the connection added (and the modules, in workers of Spark's own daemon)."""
    gc.collect()
    gc.freeze()
