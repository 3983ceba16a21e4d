"""How a Spark Python worker (the planner or an executor) reaches the rafka cluster its
options name: through Ray, one connection per worker process, reused by its tasks."""
from __future__ import annotations

import gc
import os
from typing import Any

_clusters: dict[tuple[str, str], Any] = {}


def connect(options):
    """This process's handle on the cluster the options name (one Ray connection per Spark
    Python worker, reused by its tasks)."""
    import rafka
    from rafka.client.ray_runtime import ensure_ray
    name = options.get("cluster", "default")
    address = options.get("rayAddress") or os.environ.get("RAY_ADDRESS") or "auto"
    key = (name, address)
    if key not in _clusters:
        ensure_ray(address, log_to_driver=False)
        _clusters[key] = rafka.Cluster.connect(name)
        freeze_what_lasts()
    return _clusters[key]


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
