"""A log's configuration: Kafka's topic-level names, with the broker's ``log.*`` names as defaults.

``LogConfig.from_props({"segment.bytes": 1048576}, broker={"log.retention.hours": 24})``
resolves exactly as Kafka does: a topic-level key wins, then the broker key (where several
broker keys feed one topic key, ``*.ms`` beats ``*.minutes`` beats ``*.hours``), then Kafka's
default.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from protocols.config import LONG_MAX, ConfigDef, at_least, between, one_of
from protocols.records import COMPRESSION_TYPES

HOUR_MS = 3_600_000
MINUTE_MS = 60_000

TOPIC_CONFIG = (
    ConfigDef()
    .define("segment.bytes", "int", 1073741824, at_least(14),
            "Size of a segment file before a new one is rolled")
    .define("segment.ms", "long", 168 * HOUR_MS, at_least(1),
            "Time after a segment's first record timestamp when a new one is rolled")
    .define("segment.jitter.ms", "long", 0, at_least(0))
    .define("segment.index.bytes", "int", 10485760, at_least(4),
            "Preallocated size of the offset and time index files")
    .define("index.interval.bytes", "int", 4096, at_least(0),
            "Bytes appended between two offset index entries")
    .define("retention.ms", "long", 168 * HOUR_MS, at_least(-1),
            "Age (largest timestamp of a segment) after which it is deleted; -1 = forever")
    .define("retention.bytes", "long", -1, None,
            "Size of the whole partition above which old segments are deleted; -1 = unlimited")
    .define("cleanup.policy", "list", ["delete"], one_of("delete", "compact"))
    .define("delete.retention.ms", "long", 86400000, at_least(0),
            "How long compaction keeps tombstones")
    .define("min.compaction.lag.ms", "long", 0, at_least(0))
    .define("max.compaction.lag.ms", "long", LONG_MAX, at_least(1))
    .define("min.cleanable.dirty.ratio", "double", 0.5, between(0, 1))
    .define("file.delete.delay.ms", "long", 60000, at_least(0),
            "Delay before a segment renamed to .deleted is removed from disk")
    .define("flush.messages", "long", LONG_MAX, at_least(1))
    .define("flush.ms", "long", LONG_MAX, at_least(0))
    .define("max.message.bytes", "int", 1000012, at_least(0),
            "Largest record batch the log accepts")
    .define("message.timestamp.type", "string", "CreateTime",
            one_of("CreateTime", "LogAppendTime"))
    .define("compression.type", "string", "producer",
            one_of("producer", "uncompressed", *COMPRESSION_TYPES))
    .define("min.insync.replicas", "int", 1, at_least(1))
    .define("unclean.leader.election.enable", "boolean", False)
    # Not a log setting, but a topic's: where its replicas live on their broker (rafka's
    # replica hosts, actors.replica.placement). "dedicated": a Ray actor per replica.
    .define("replica.placement", "string", "shared", one_of("shared", "dedicated"))
)

# Broker-level keys that supply a topic key's default, in priority order (first present wins).
BROKER_DEFAULTS: dict[str, tuple[tuple[str, int], ...]] = {
    # topic key: ((broker key, multiplier to the topic key's unit), ...)
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", MINUTE_MS),
                     ("log.retention.hours", HOUR_MS)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "file.delete.delay.ms": (("file.delete.delay.ms", 1), ("log.segment.delete.delay.ms", 1)),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "compression.type": (("compression.type", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
}


def topic_defaults_from_broker(broker: Mapping[str, Any]) -> dict[str, Any]:
    """Turn the broker's ``log.*`` settings into topic-level defaults (raw values)."""
    out: dict[str, Any] = {}
    for topic_key, sources in BROKER_DEFAULTS.items():
        for broker_key, multiplier in sources:
            if broker.get(broker_key) is not None:
                value = broker[broker_key]
                if multiplier != 1:
                    value = TOPIC_CONFIG.keys[topic_key].convert(value) * multiplier
                out[topic_key] = value
                break
    return out


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    cleanup_policy: tuple[str, ...]
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    file_delete_delay_ms: int
    flush_messages: int
    flush_ms: int
    max_message_bytes: int
    message_timestamp_type: str
    compression_type: str
    min_insync_replicas: int
    unclean_leader_election_enable: bool

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None, *,
                   broker: Mapping[str, Any] | None = None) -> "LogConfig":
        merged = topic_defaults_from_broker(broker or {})
        merged.update(props or {})
        parsed = TOPIC_CONFIG.parse(merged)
        if parsed["segment.index.bytes"] < 12:
            # Not even one time-index entry would fit.
            parsed["segment.index.bytes"] = 12
        kwargs = {f.name: parsed[f.name.replace("_", ".")] for f in fields(cls)}
        kwargs["cleanup_policy"] = tuple(kwargs["cleanup_policy"])
        return cls(**kwargs)

    def to_props(self) -> dict[str, Any]:
        return {f.name.replace("_", "."): getattr(self, f.name) for f in fields(self)}

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"



def effective_topic_config(overrides: Mapping[str, Any], broker: Mapping[str, Any] | None
                           ) -> dict[str, Any]:
    """A topic's effective configuration: its overrides over the cluster's ``log.*``
    defaults over Kafka's (what DescribeConfigs shows)."""
    effective = LogConfig.from_props(dict(overrides), broker=broker)
    topic_only = TOPIC_CONFIG.parse(dict(overrides))   # the keys that are not log settings
    return {key: getattr(effective, key.replace(".", "_"), topic_only[key])
            for key in TOPIC_CONFIG.names()}
