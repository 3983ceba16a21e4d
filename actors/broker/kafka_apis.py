"""KafkaApis: each Kafka request a wire client sends, mapped to what the broker knows and the
same actor calls rafka's own clients make.

``SUPPORTED`` is what ``ApiVersions`` tells clients: only the APIs built here, each at the
versions of Kafka's schemas whose fields are all honoured. An API not in it (not built yet:
transactions, ACLs, quotas, SASL among others) is answered as Kafka answers an unsupported
request: the connection is closed (``protocols.kafka.codec``).

The decisions are plain functions of the broker's metadata image (``metadata_values``); the
class around them awaits the controller where a request changes something.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any, Awaitable, Callable, Mapping

from protocols.errors import (InvalidTopicError, KafkaError, LeaderNotAvailableError,
                              UnknownTopicIdError, UnknownTopicOrPartitionError)
from protocols.kafka.codec import (API_VERSIONS_KEY, Request, api_versions_body, build,
                                   response_class)
from protocols.topics import OFFSETS_TOPIC, validate_topic_name

log = logging.getLogger(__name__)

METADATA_KEY = 3

# {api key: (min version, max version)} served. Grows as APIs are built.
SUPPORTED: dict[int, tuple[int, int]] = {
    API_VERSIONS_KEY: (0, 4),
    METADATA_KEY: (0, 13),
}

NO_LEADER = -1
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})


def _topic_uuid(text: str | None) -> uuid.UUID | None:
    """A Kafka Uuid string (22 characters of URL-safe base64) as a UUID."""
    if not text:
        return None
    import base64
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def kafka_uuid_text(value: uuid.UUID) -> str:
    import base64
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
                    broker_id: int, creating: Mapping[str, KafkaError | None] = {}) -> dict:
    """A Metadata response's values (every version's fields; ``build`` keeps those of the
    request's version) from the broker's metadata image. ``creating``: topics the request
    had auto-created (None) or failed to (the error)."""
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
        if name is None and topic_id is not None:
            name = by_id.get(kafka_uuid_text(topic_id))
            if name is None:
                topics.append({"error_code": UnknownTopicIdError.code, "name": None,
                               "topic_id": topic_id, "partitions": []})
                continue
        if name in creating:
            error = creating[name] or LeaderNotAvailableError()
            topics.append({"error_code": error.code, "name": name, "partitions": [],
                           "is_internal": False})
            continue
        if name not in topics_image:
            try:
                validate_topic_name(name)
                code = UnknownTopicOrPartitionError.code
            except KafkaError as e:
                code = e.code if e.code > 0 else InvalidTopicError.code
            topics.append({"error_code": code, "name": name, "partitions": []})
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
        topics.append({"error_code": 0, "name": name, "topic_id": _topic_uuid(ids.get(name)),
                       "is_internal": name in INTERNAL_TOPICS, "partitions": partitions})
    return {"throttle_time": 0, "brokers": brokers, "cluster_id": image.get("cluster_id"),
            # KRaft brokers name a live broker as the controller (clients send admin
            # requests there; Kafka picks one at random): this one.
            "controller_id": broker_id, "topics": topics, "error_code": 0}


class KafkaApis:
    def __init__(self, broker_id: int, image: Callable[[], Mapping[str, Any]],
                 create_topic: Callable[[str], Awaitable[KafkaError | None]],
                 auto_create: bool, listener: str = "PLAINTEXT"):
        self.broker_id = broker_id
        self.image = image
        self.create_topic = create_topic
        self.auto_create = auto_create
        self.listener = listener

    async def handle(self, request: Request) -> Any:
        if request.api_key == API_VERSIONS_KEY:
            return api_versions_body(request, SUPPORTED)
        if request.api_key == METADATA_KEY:
            return await self.metadata(request)
        raise AssertionError(f"no handler for API key {request.api_key}")  # SUPPORTED lies

    async def metadata(self, request: Request):
        image = self.image()
        wanted = requested_topics(request)
        creating: dict[str, KafkaError | None] = {}
        # v0-v3 had no flag: those clients' brokers created topics when asked.
        allow = getattr(request.body, "allow_auto_topic_creation", True)
        if wanted and allow and self.auto_create:
            for entry in wanted:
                name = entry["name"]
                if name is None or name in image.get("topics", {}) or name in creating:
                    continue
                try:
                    validate_topic_name(name)
                except KafkaError:
                    continue   # answered INVALID_TOPIC_EXCEPTION below
                error = await self.create_topic(name)
                creating[name] = error
                if error is not None:
                    log.info("broker %d: auto-creating topic %r failed: %r", self.broker_id,
                             name, error)
        return build(response_class(request),
                     metadata_values(image, wanted, self.listener, self.broker_id, creating))
