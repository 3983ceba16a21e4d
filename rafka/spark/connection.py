"""How a Spark Python worker (the planner or an executor) reaches the rafka cluster its
options name: through Ray, one connection per worker process, reused by its tasks."""
from __future__ import annotations

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
    return _clusters[key]
