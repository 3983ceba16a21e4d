"""What the Kafka listener says about the cluster, from the broker's metadata image: the
Metadata answer's values for every version, brokers' endpoints (KIP-951's node endpoints),
Kafka's printed topic ids. Plain functions of the image: no Ray, no I/O."""
from __future__ import annotations

import base64
import uuid
from typing import Any, Callable, Mapping

from protocols.errors import (InvalidTopicError, KafkaError, LeaderNotAvailableError,
                              TopicAuthorizationFailedError, UnknownTopicIdError,
                              UnknownTopicOrPartitionError)
from protocols.kafka.codec import Request
from protocols.topics import COORDINATOR_TOPICS, validate_topic_name

NO_LEADER = -1


def topic_uuid(text: str | None) -> uuid.UUID | None:
    """A Kafka Uuid string (22 characters of URL-safe base64) as a UUID."""
    if not text:
        return None
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def kafka_uuid_text(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def requested_topics(request: Request) -> list[dict] | None:
    """The topics a Metadata request names ({"name": ..., "topic_id": ...}), None for all
    (v0: an empty list meant all; from v1 on, null means all and an empty list none)."""
    topics = request.body.topics
    if topics is None or (request.api_version == 0 and not topics):
        return None
    return [{"name": getattr(t, "name", None), "topic_id": getattr(t, "topic_id", None)}
            for t in topics]


def metadata_values(image: Mapping[str, Any], wanted: list[dict] | None, listener: str,
                    broker_id: int, creating: Mapping[str, KafkaError | None] = {},
                    describable: Callable[[str], bool] | None = None,
                    operations: Callable[[str], int] | None = None) -> dict:
    """A Metadata response's values (every version's fields; ``build`` keeps those of the
    request's version) from the broker's metadata image. ``creating``: topics the request
    had auto-created (None) or failed to (the error).

    ``describable(name)``: whether the client may see the topic (the authorizer's DESCRIBE).
    One it may not is never looked up, as in Kafka: left out of an all-topics answer,
    TOPIC_AUTHORIZATION_FAILED where named (by id: the id kept, ids are not secret).
    ``operations(name)``: the topic_authorized_operations of each topic it may see."""
    all_topics = wanted is None
    brokers = []
    for b, info in sorted(image.get("brokers", {}).items()):
        for name, host, port in info.get("endpoints", []):
            if name == listener:
                brokers.append({"node_id": int(b), "host": host, "port": port,
                                "rack": info.get("rack")})
    live = {b["node_id"] for b in brokers}
    topics_image = image.get("topics", {})
    ids = image.get("topic_ids", {})
    by_id = {v: k for k, v in ids.items()}
    if wanted is None:
        wanted = [{"name": name, "topic_id": None} for name in sorted(topics_image)]
    topics = []
    for entry in wanted:
        name, topic_id = entry["name"], entry["topic_id"]
        by_name = name is not None
        if name is None and topic_id is not None:
            name = by_id.get(kafka_uuid_text(topic_id))
            if name is None:
                topics.append({"error_code": UnknownTopicIdError.code, "name": None,
                               "topic_id": topic_id, "partitions": []})
                continue
        if describable is not None and name is not None and not describable(name):
            if not all_topics:
                topics.append({"error_code": TopicAuthorizationFailedError.code,
                               "name": name if by_name else None,
                               "topic_id": None if by_name else topic_id,
                               "partitions": [], "is_internal": False})
            continue
        allowed_ops = {} if operations is None else \
            {"topic_authorized_operations": operations(name)}
        if name in creating:
            error = creating[name] or LeaderNotAvailableError()
            refused = error.code == TopicAuthorizationFailedError.code
            # A refused creation's operations are left out, as Kafka leaves them.
            topics.append({"error_code": error.code, "name": name, "partitions": [],
                           "is_internal": False, **({} if refused else allowed_ops)})
            continue
        if name not in topics_image:
            try:
                validate_topic_name(name)
                code = UnknownTopicOrPartitionError.code
            except InvalidTopicError as e:
                code = e.code
            topics.append({"error_code": code, "name": name, "partitions": [],
                           **allowed_ops})
            continue
        partitions = []
        for p, st in sorted(topics_image[name].items(), key=lambda kv: int(kv[0])):
            leader = st["leader"]
            partitions.append({
                "error_code": LeaderNotAvailableError.code if leader == NO_LEADER else 0,
                "partition_index": int(p), "leader_id": leader,
                "leader_epoch": st["leader_epoch"], "replica_nodes": list(st["replicas"]),
                "isr_nodes": list(st["isr"]),
                "offline_replicas": [r for r in st["replicas"] if r not in live]})
        topics.append({"error_code": 0, "name": name, "topic_id": topic_uuid(ids.get(name)),
                       "is_internal": name in COORDINATOR_TOPICS, "partitions": partitions,
                       **allowed_ops})
    return {"throttle_time": 0, "brokers": brokers, "cluster_id": image.get("cluster_id"),
            "controller_id": controller_id(broker_id, live), "topics": topics,
            "error_code": 0}


def controller_id(broker_id: int, live: set[int]) -> int:
    """The controller a Metadata answer names. KRaft brokers name a live broker (clients
    send admin requests there; Kafka picks one at random): this one, or where the image does
    not list this broker (fenced meanwhile), the first it lists; -1 when it lists none. A
    controller id missing from the broker list leaves librdkafka waiting for a controller
    until its next metadata refresh (topic.metadata.refresh.interval.ms, 5 minutes)."""
    if broker_id in live:
        return broker_id
    return min(live, default=-1)


def endpoint_of(image: Mapping[str, Any], broker_id: int, listener: str = "PLAINTEXT"
                ) -> tuple[str, int] | None:
    """A live broker's (host, port) on ``listener``, from the metadata image."""
    for name, host, port in image.get("brokers", {}).get(broker_id, {}).get("endpoints", []):
        if name == listener:
            return host, port
    return None


def node_endpoints(image: Mapping[str, Any], broker_ids, listener: str) -> list[dict]:
    """KIP-951: the endpoints of the brokers named in NOT_LEADER_OR_FOLLOWER answers, so the
    client goes to the new leader without a Metadata round trip."""
    out = []
    for b in sorted(set(broker_ids)):
        where = endpoint_of(image, b, listener)
        if where is not None:
            out.append({"node_id": b, "host": where[0], "port": where[1],
                        "rack": image["brokers"][b].get("rack")})
    return out
