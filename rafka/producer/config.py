"""The producer's settings (Kafka's ProducerConfig): names, types, defaults and what each
may be. A module of its own so that what checks a producer's settings before any record
moves (Spark's sink on the driver, in a fresh planner process) imports only this, not the
producer and its columnar encoder (pyarrow, pandas: ~0.3 s of a cold process)."""
from __future__ import annotations

from protocols.config import ConfigDef, at_least, between, one_of
from protocols.errors import InvalidConfigError
from rafka.client.ray_door import define_sasl

PRODUCER_CONFIG = define_sasl(
    ConfigDef()
    .define("acks", "string", "all", one_of("all", "-1", "0", "1"))
    .define("batch.size", "int", 16_384, at_least(0))
    .define("linger.ms", "long", 5, at_least(0))
    .define("buffer.memory", "long", 33_554_432, at_least(0))
    .define("max.block.ms", "long", 60_000, at_least(0))
    .define("max.in.flight.requests.per.connection", "int", 5, at_least(1))
    .define("retries", "int", 2_147_483_647, at_least(0))
    .define("retry.backoff.ms", "long", 100, at_least(0))
    .define("delivery.timeout.ms", "int", 120_000, at_least(0))
    .define("request.timeout.ms", "int", 30_000, at_least(0))
    .define("compression.type", "string", "none",
            one_of("none", "gzip", "snappy", "lz4", "zstd"))
    .define("max.request.size", "int", 1_048_576, at_least(0))
    .define("enable.idempotence", "boolean", True)
    .define("partitioner.ignore.keys", "boolean", False)
    .define("metadata.max.age.ms", "long", 300_000, at_least(0))
    .define("client.id", "string", "")
    .define("key.serializer", "callable", None)
    .define("value.serializer", "callable", None)
    .define("compression.level", "int", -1, between(-1, 22))
    .define("transactional.id", "string", None, nullable=True)
    .define("transaction.timeout.ms", "int", 60_000, at_least(1))
)


ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def idempotence(config, given: set[str]) -> bool:
    """Whether a producer with these parsed settings is idempotent, by Kafka's rules: on
    by default, turned off when acks is not all or more than 5 requests may be in flight
    (the leader keeps a producer's last 5 batches' sequences), an error when
    ``enable.idempotence`` was set (``given``: the names set) and either holds."""
    if not config["enable.idempotence"]:
        return False
    if ACKS[config["acks"]] != -1:
        if "enable.idempotence" in given:
            raise InvalidConfigError("Must set acks to all in order to use the idempotent "
                                     "producer.")
        return False
    if config["max.in.flight.requests.per.connection"] > 5:
        if "enable.idempotence" in given:
            raise InvalidConfigError("Must set max.in.flight.requests.per.connection to at "
                                     "most 5 to use the idempotent producer.")
        return False
    return True
