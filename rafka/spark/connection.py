"""How a Spark Python worker (the planner or an executor) reaches the rafka cluster its
options name: through Ray, one connection per worker process, reused by its tasks; a job
given only Kafka's ``kafka.bootstrap.servers`` (its planning, reads and writes), over the
Kafka listener."""
from __future__ import annotations

import gc
import os
from typing import Any

_clusters: dict[tuple, Any] = {}
_admins: dict[tuple, Any] = {}
_listener_admins: dict[tuple, Any] = {}
_listener_fetchers: dict[tuple, Any] = {}
_listener_producers: dict[tuple, Any] = {}


def bootstrap_servers(options) -> str | None:
    """The ``kafka.bootstrap.servers`` a job moved from ``format("kafka")`` gives, when no
    ``cluster`` option names the rafka cluster: it is then found by its listeners."""
    if options.get("cluster") is not None:
        return None
    return (options.get("kafka.bootstrap.servers") or "").strip() or None


def _key(options) -> tuple[str | None, str | None, str]:
    """(cluster name, bootstrap servers, Ray address) the options name."""
    servers = bootstrap_servers(options)
    return (None if servers else options.get("cluster", "default"), servers,
            options.get("rayAddress") or os.environ.get("RAY_ADDRESS") or "auto")


def connect(options):
    """This process's handle on the cluster the options name (one Ray connection per Spark
    Python worker, reused by its tasks)."""
    import rafka
    from rafka.client.ray_runtime import ensure_ray
    key = _key(options)
    if key not in _clusters:
        ensure_ray(key[2], log_to_driver=False)
        _clusters[key] = rafka.Cluster.connect(key[0], bootstrap_servers=key[1])
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


def _over_listener(options) -> tuple[str, str] | None:
    """(bootstrap servers, client.id) when the options name the cluster by a PLAINTEXT
    listener alone (a job moved from ``format("kafka")``): its reads then go over the Kafka
    listener, as Spark's Kafka source reads, and Spark's Python workers need no Ray."""
    from rafka.consumer.config import CONSUMER_CONFIG
    from rafka.spark.offsets import consumer_options
    servers = bootstrap_servers(options)
    config = CONSUMER_CONFIG.parse(consumer_options(options))
    if servers is None or config["security.protocol"].upper() != "PLAINTEXT":
        return None
    return servers, config["client.id"]


def planning(options):
    """What a read's planning asks its partitions and offsets of (``partition_counts(topics)``,
    ``list_offsets(specs, isolation_level)``), one per process and option set: over the
    Kafka listener given only ``kafka.bootstrap.servers`` on PLAINTEXT, as Spark's Kafka
    source plans (no Ray in Spark's planner processes, which start cold for a session's
    first job of each kind), else this process's ``admin(options)`` through Ray."""
    key = _over_listener(options)
    if key is None:
        return _RayPlanning(options)
    if key not in _listener_admins:
        from rafka.client.listener_admin import ListenerAdmin
        _listener_admins[key] = ListenerAdmin(key[0], client_id=key[1] or "rafka-spark-planner")
    return _listener_admins[key]


def listener_fetcher(options):
    """This process's ``ListenerFetcher`` for a read whose planning went over the listener
    (``planning``), reused by the worker's tasks; None when the read goes through Ray."""
    key = _over_listener(options)
    if key is None:
        return None
    if key not in _listener_fetchers:
        from rafka.client.listener_fetcher import ListenerFetcher
        _listener_fetchers[key] = ListenerFetcher(key[0], client_id=key[1] or "rafka-spark")
    return _listener_fetchers[key]


def writes_over_listener(options, config: dict) -> str | None:
    """The bootstrap servers of a write that names the cluster by a PLAINTEXT
    ``kafka.bootstrap.servers`` alone (``config``: its producer configs): it then goes over
    the Kafka listener, with no Ray in Spark's workers; None when it goes through Ray."""
    from rafka.producer.config import PRODUCER_CONFIG
    servers = bootstrap_servers(options)
    if servers is None or \
            PRODUCER_CONFIG.parse(config)["security.protocol"].upper() != "PLAINTEXT":
        return None
    return servers


def listener_producer(options, config: dict):
    """This process's ``ListenerProducer`` with these producer configs, for a write over
    the listener (``writes_over_listener``), kept for the worker's next tasks as Spark keeps
    its Kafka producers (one per configuration per executor); None when the write goes
    through Ray."""
    servers = writes_over_listener(options, config)
    if servers is None:
        return None
    key = (servers, tuple(sorted((k, str(v)) for k, v in config.items())))
    if key not in _listener_producers:
        from rafka.client.listener_producer import ListenerProducer
        _listener_producers[key] = ListenerProducer(servers, config)
    return _listener_producers[key]


class _RayPlanning:
    def __init__(self, options):
        self.options = options

    def partition_counts(self, topics=None) -> dict[str, int]:
        """Every topic's (the controller's metadata holds them all)."""
        from rafka.connectors.range_reader import partition_counts
        return partition_counts(connect(self.options))

    def list_offsets(self, specs, isolation_level: str = "read_uncommitted"):
        return admin(self.options).list_offsets(specs, isolation_level)


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
