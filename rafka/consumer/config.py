"""The consumer's settings (Kafka's ConsumerConfig): names, types, defaults and what each
may be. A module of its own so that what checks a consumer's settings before any record
moves (Spark's source on the driver, in a fresh planner process) imports only this, not the
consumer and its fetcher."""
from __future__ import annotations

from protocols.config import ConfigDef, at_least, one_of
from rafka.client.ray_door import define_sasl

CONSUMER_CONFIG = define_sasl(
    ConfigDef()
    .define("group.id", "string", "")
    .define("client.id", "string", "")
    .define("auto.offset.reset", "string", "latest", one_of("earliest", "latest", "none"))
    .define("fetch.min.bytes", "int", 1, at_least(0))
    .define("fetch.max.wait.ms", "int", 500, at_least(0))
    .define("max.partition.fetch.bytes", "int", 1_048_576, at_least(0))
    .define("fetch.max.bytes", "int", 52_428_800, at_least(0))
    .define("max.poll.records", "int", 500, at_least(1))
    .define("request.timeout.ms", "int", 30_000, at_least(0))
    .define("retry.backoff.ms", "long", 100, at_least(0))
    .define("metadata.max.age.ms", "long", 300_000, at_least(0))
    .define("check.crcs", "boolean", True)
    .define("isolation.level", "string", "read_uncommitted",
            one_of("read_uncommitted", "read_committed"))
    .define("key.deserializer", "callable", None)
    .define("value.deserializer", "callable", None)
    # Consumer groups (subscribe, commits).
    .define("enable.auto.commit", "boolean", True)
    .define("auto.commit.interval.ms", "int", 5000, at_least(0))
    .define("session.timeout.ms", "int", 45_000, at_least(1))
    .define("heartbeat.interval.ms", "int", 3000, at_least(1))
    .define("max.poll.interval.ms", "int", 300_000, at_least(1))
    .define("partition.assignment.strategy", "list", ["range"])
    .define("group.instance.id", "string", "")
)
