"""What the ``rafka`` Spark source decides, as Spark's Kafka source decides it: which
partitions an option set names, where reading starts and ends, how a batch is cut into
Spark partitions, how ``maxOffsetsPerTrigger`` spreads over partitions, what counts as data
lost to retention. Plain Python (no Spark, no Ray): offsets in, offsets out.

Offsets cross Spark's checkpoints in Spark's Kafka JSON shape,
``{"topic": {"0": 23, "1": 42}}``; in options ``-2`` means earliest and ``-1`` latest.
"""
from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Mapping

from protocols.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from protocols.topics import TopicPartition, validate_topic_name


log = logging.getLogger(__name__)


class SparkSourceError(ValueError):
    """A bad option or an impossible read, worded as Spark's Kafka source words it."""


# Spark's KafkaSourceProvider.validateGeneralOptions: consumer options a source refuses, and why
# (``group.id`` is taken since Spark 3.0: it names the reads' group, nothing is committed).
_UNSUPPORTED_CONSUMER_OPTIONS = {
    "auto.offset.reset": "Instead set the source option 'startingoffsets' to 'earliest' or "
                         "'latest' to specify where to start.",
    "key.deserializer": "keys are deserialized as byte arrays with ByteArrayDeserializer. Use "
                        "DataFrame operations to explicitly deserialize the keys.",
    "value.deserializer": "values are deserialized as byte arrays with "
                          "ByteArrayDeserializer. Use DataFrame operations to explicitly "
                          "deserialize the values.",
    "enable.auto.commit": "offsets are not committed to Kafka.",
}


def kafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options without their prefix: client configs, as Spark's Kafka
    source and sink take them. ``bootstrap.servers`` is dropped: it names the cluster, as
    the ``cluster`` option does (``rafka.spark.connection.bootstrap_servers``), so a job
    moved from ``format("kafka")`` keeps working."""
    out = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    out.pop("bootstrap.servers", None)
    return out


def consumer_options(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka_options`` for a source's consumers: Spark's Kafka source refuses those that
    would change what a read returns or where it starts, or commit offsets."""
    out = kafka_options(options)
    for name, why in _UNSUPPORTED_CONSUMER_OPTIONS.items():
        if name in out:
            raise SparkSourceError(f"Kafka option '{name}' is not supported as {why}"
                                   if not why.startswith("Instead") else
                                   f"Kafka option '{name}' is not supported. {why}")
    return out


@dataclass(frozen=True)
class Subscription:
    """Exactly one of: fixed topics, a pattern over topic names, fixed partitions."""
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def named_topics(self) -> list[str] | None:
        """The topics to describe, as Spark's Kafka source describes them (Metadata of
        these only); None for a pattern (every topic)."""
        if self.pattern is not None:
            return None
        return sorted(set(self.topics) | {tp.topic for tp in self.partitions})

    def select(self, partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
        """The partitions to read, given every topic's partition count."""
        if self.partitions:
            return sorted(self.partitions)
        if self.pattern is not None:
            regex = re.compile(self.pattern)
            topics = [t for t in partitions_per_topic if not t.startswith("__")
                      and regex.fullmatch(t)]
        else:
            topics = list(self.topics)
        return sorted(TopicPartition(t, p) for t in topics
                      for p in range(partitions_per_topic.get(t, 0)))


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("assign", "subscribe", "subscribePattern") if options.get(k)]
    if len(given) != 1:
        raise SparkSourceError("One of the following options must be specified for Kafka "
                               "source: subscribe, subscribePattern, assign. See the docs for "
                               "more details." if not given else
                               f"Only one of these options may be given: {given}")
    kind = given[0]
    value = options[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise SparkSourceError(f"No topics to subscribe to as specified value for option "
                                   f"'subscribe' is '{value}'")
        for t in topics:
            validate_topic_name(t)
        return Subscription(topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(value)
        except re.error as e:
            raise SparkSourceError(f"Pattern to subscribe is invalid: {value!r}: {e}") from None
        return Subscription(pattern=value)
    try:
        spec = json.loads(value)
        partitions = tuple(sorted(TopicPartition(t, int(p)) for t, ps in spec.items()
                                  for p in ps))
    except (ValueError, TypeError, AttributeError):
        raise SparkSourceError(f"Expected e.g. {{\"topicA\":[0,1],\"topicB\":[0,1]}}, got "
                               f"{value}") from None
    if not partitions:
        raise SparkSourceError(f"No topicpartitions to assign as specified value for option "
                               f"'assign' is '{value}'")
    for tp in partitions:
        validate_topic_name(tp.topic)
    return Subscription(partitions=partitions)


def parse_offsets(value: str | None, default: str, *, option: str,
                  allow_earliest: bool = True) -> str | dict[TopicPartition, int]:
    """``earliest`` | ``latest`` | a JSON offset per partition (-2 earliest, -1 latest)."""
    if value is None:
        return default
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() == "earliest" and not allow_earliest:
            raise SparkSourceError(f"starting offset can't be earliest for {option}")
        return text.lower()
    try:
        spec = json.loads(text)
        offsets = {TopicPartition(t, int(p)): int(o) for t, ps in spec.items()
                   for p, o in ps.items()}
    except (ValueError, TypeError, AttributeError):
        raise SparkSourceError(f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}},"
                               f"\"topicB\":{{\"0\":-2}}}}, got {value} for {option}") from None
    if not allow_earliest and any(o == EARLIEST_TIMESTAMP for o in offsets.values()):
        raise SparkSourceError(f"{option}: -2 (earliest) is not allowed as an ending offset")
    return offsets


def resolve(spec: str | Mapping[TopicPartition, int], partitions: list[TopicPartition],
            earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
            *, option: str) -> dict[TopicPartition, int]:
    """Concrete offsets for ``partitions``: a JSON spec must name every one of them."""
    if spec == "earliest":
        return {tp: earliest[tp] for tp in partitions}
    if spec == "latest":
        return {tp: latest[tp] for tp in partitions}
    missing = [tp for tp in partitions if tp not in spec]
    if missing:
        raise SparkSourceError(f"{option} for {sorted(missing)} is not specified")
    out = {}
    for tp in partitions:
        o = spec[tp]
        out[tp] = (earliest[tp] if o == EARLIEST_TIMESTAMP
                   else latest[tp] if o == LATEST_TIMESTAMP else o)
    return out


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Spark's Kafka source's reportDataLoss: fail the query, with what to do about it, or
    (``failOnDataLoss=false``) log it and go on."""
    if fail_on_data_loss:
        raise SparkSourceError(
            f"{message}. Some data may have been lost because they are not available in rafka "
            "any more; either the data was aged out by rafka or the topic may have been "
            "deleted before all the data in the topic was processed. If you don't want your "
            "streaming query to fail on such cases, set the source option \"failOnDataLoss\" "
            "to \"false\".")
    log.warning("%s. Some data may have been lost because they are not available in rafka "
                "any more; either the data was aged out by rafka or the topic may have been "
                "deleted before all the data in the topic was processed. If you want your "
                "streaming query to fail on such cases, set the source option "
                "\"failOnDataLoss\" to \"true\".", message)


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def check_data_loss(start: Mapping[TopicPartition, int],
                    earliest: Mapping[TopicPartition, int],
                    fail_on_data_loss: bool) -> dict[TopicPartition, int]:
    """Retention may have deleted records we were about to read: fail, as Spark does by
    default, or skip to what is left (``failOnDataLoss=false``)."""
    out = dict(start)
    for tp, offset in start.items():
        if tp in earliest and offset < earliest[tp]:
            report_data_loss(f"Partition {_name(tp)}'s offset was changed from {offset} to "
                             f"{earliest[tp]}, some data may have been missed",
                             fail_on_data_loss)
            out[tp] = earliest[tp]
    return out


def micro_batch_offsets(start: Mapping[TopicPartition, int],
                        end: Mapping[TopicPartition, int],
                        earliest: Mapping[TopicPartition, int], fail_on_data_loss: bool
                        ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """A micro-batch's (from, until) offsets, checked as Spark's KafkaMicroBatchStream
    checks them (getOffsetRangesFromResolvedOffsets) before it plans the ranges: a partition
    new since ``start`` is read from its earliest offset (data lost if that is not 0, or
    unknown: it is gone again); one in ``start`` but not in ``end`` is gone (a topic
    deleted); one whose end is below its start was truncated or recreated (its range is
    dropped: the next batch starts at the end). ``earliest`` is of the partitions in
    ``end`` that still exist (one deleted since is gone too); records retention deleted
    below a start are skipped (``check_data_loss``)."""
    new = [tp for tp in end if tp not in start]
    found = {tp: earliest[tp] for tp in new if tp in earliest}
    if len(found) != len(new):
        report_data_loss(f"Cannot find earliest offsets of "
                         f"{sorted(map(_name, set(new) - set(found)))}. Some data may have "
                         "been missed", fail_on_data_loss)
    for tp, offset in sorted(found.items()):
        if offset != 0:
            report_data_loss(f"Added partition {_name(tp)} starts from {offset} instead of 0. "
                             "Some data may have been missed", fail_on_data_loss)
    gone = sorted(tp for tp in start if tp not in end or tp not in earliest)
    if gone:
        report_data_loss(f"{[_name(tp) for tp in gone]} are gone. Some data may have been "
                         "missed", fail_on_data_loss)
    begin = {**start, **found}
    out_from, out_until = {}, {}
    for tp, until in sorted(end.items()):
        if tp not in begin or tp not in earliest:
            continue
        if until < begin[tp]:
            report_data_loss(f"Partition {_name(tp)}'s offset was changed from {begin[tp]} "
                             f"to {until}, some data may have been missed", fail_on_data_loss)
            continue
        out_from[tp], out_until[tp] = begin[tp], until
    return check_data_loss(out_from, earliest, fail_on_data_loss), out_until


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_rows: int | None) -> dict[TopicPartition, int]:
    """``maxOffsetsPerTrigger``: the limit shared over the partitions in proportion to how
    far behind each is (Spark's KafkaMicroBatchStream.rateLimit)."""
    if max_rows is None:
        return dict(latest)
    lags = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lags.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = max_rows * lags[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + step)
    return out


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp, o in sorted(offsets.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(o)
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, ps in data.items() for p, o in ps.items()}
