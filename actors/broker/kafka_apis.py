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

import asyncio
import logging
from typing import Any, Awaitable, Callable, Mapping

from actors.broker.admin_apis import ADMIN_APIS, AdminApis
from actors.broker.group_apis import GROUP_APIS, GroupApis
from actors.broker.partition_route import (PartitionRoute, by_topic, gather_hosts,
                                           leaders_named)
from actors.broker.reassignment_apis import REASSIGNMENT_APIS, ReassignmentApis
from actors.broker.wire_fetch import FETCH_KEY, FetchApis
from actors.broker.wire_metadata import metadata_values, node_endpoints, requested_topics
from actors.replica.fetch_session import FetchSessionCache
from protocols.errors import KafkaError, NotLeaderOrFollowerError
from protocols.kafka.codec import (API_VERSIONS_KEY, Request, api_versions_body, build,
                                   response_class)
from protocols.messages import (OffsetsForLeaderEpochRequest, ProduceManyRequest,
                                decode_produce_many_response, encode_produce_many_request)
from protocols.topics import validate_topic_name
from protocols.wire import decode, encode

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
LIST_OFFSETS_KEY = 2
METADATA_KEY = 3
OFFSET_FOR_LEADER_EPOCH_KEY = 23
DELETE_RECORDS_KEY = 21
DESCRIBE_PRODUCERS_KEY = 61

# {api key: (min version, max version)} served. Grows as APIs are built.
SUPPORTED: dict[int, tuple[int, int]] = {
    API_VERSIONS_KEY: (0, 4),
    METADATA_KEY: (0, 13),
    # v3 is the oldest Kafka 4 serves; v13 names topics by id.
    PRODUCE_KEY: (3, 13),
    # v4 is the oldest Kafka 4 serves; v7 brings fetch sessions (KIP-227); v13 names topics
    # by id.
    FETCH_KEY: (4, 17),
    # v7 adds MAX_TIMESTAMP (-3) and v8 EARLIEST_LOCAL (-4), not built yet.
    LIST_OFFSETS_KEY: (1, 6),
    # A consumer's check after a leader change (KIP-320): where its epoch ends on the leader.
    OFFSET_FOR_LEADER_EPOCH_KEY: (2, 4),
    DELETE_RECORDS_KEY: (0, 2),
    # The idempotent producers each partition's leader keeps state for (KIP-664).
    DESCRIBE_PRODUCERS_KEY: (0, 0),
    **GROUP_APIS,
    **ADMIN_APIS,
    **REASSIGNMENT_APIS,
}
# What ApiVersions tells: SUPPORTED, but Produce from v0, as Kafka 4 does (KAFKA-18659,
# ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION): librdkafka before 2.10 compresses with
# gzip, snappy or lz4 only where the broker claims Produce v0-v2, and sends uncompressed
# batches otherwise. A v0-v2 request itself is still refused (connection closed).
ADVERTISED: dict[int, tuple[int, int]] = {**SUPPORTED, PRODUCE_KEY: (0, SUPPORTED[PRODUCE_KEY][1])}


class KafkaApis:
    def __init__(self, broker_id: int, image: Callable[[], Mapping[str, Any]],
                 create_topic: Callable[[str], Awaitable[KafkaError | None]],
                 auto_create: bool, listener: str = "PLAINTEXT",
                 host_of: Callable[[str, int], Any] = lambda topic, partition: None,
                 groups: GroupApis | None = None, admin: AdminApis | None = None,
                 fetch_sessions: FetchSessionCache | None = None):
        self.broker_id = broker_id
        self.image = image
        self.create_topic = create_topic
        self.auto_create = auto_create
        self.listener = listener
        # The replica host holding this broker's replica of a partition (None: none here).
        self.host_of = host_of
        self.groups = groups
        self.admin = admin
        self.fetches = FetchApis(broker_id, image, host_of, listener, fetch_sessions)
        self.reassignments = None if admin is None else \
            ReassignmentApis(image, admin.controller_call)

    async def handle(self, request: Request) -> Any:
        if request.api_key == API_VERSIONS_KEY:
            return api_versions_body(request, ADVERTISED)
        if request.api_key == METADATA_KEY:
            return await self.metadata(request)
        if request.api_key == PRODUCE_KEY:
            return await self.produce(request)
        if request.api_key == LIST_OFFSETS_KEY:
            return await self.list_offsets(request)
        if request.api_key == FETCH_KEY:
            return await self.fetches.fetch(request)
        if request.api_key == OFFSET_FOR_LEADER_EPOCH_KEY:
            return await self.offset_for_leader_epoch(request)
        if request.api_key == DELETE_RECORDS_KEY:
            return await self.delete_records(request)
        if request.api_key == DESCRIBE_PRODUCERS_KEY:
            return await self.describe_producers(request)
        if request.api_key in GROUP_APIS and self.groups is not None:
            return await self.groups.handle(request)
        if request.api_key in ADMIN_APIS and self.admin is not None:
            return await self.admin.handle(request)
        if request.api_key in REASSIGNMENT_APIS and self.reassignments is not None:
            return await self.reassignments.handle(request)
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

    async def produce(self, request: Request):
        """Kafka's ProduceRequest: each partition's batches go, as bytes, to the replica host
        holding its leader on this broker (one ``produce_many`` per host, the path rafka's
        own producer takes); a partition led elsewhere is answered NOT_LEADER_OR_FOLLOWER
        with its leader (KIP-951). acks=0 is answered with nothing."""
        body = request.body
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        order, answers, by_host = route.split(body.topic_data, "partition_data", "index",
                                              _produce_error, lambda part: part.records or b"")
        acks = int(body.acks)
        timeout_ms = int(body.timeout.total_seconds() * 1000)
        for host, parts, answer in await gather_hosts(
                by_host, lambda host, parts: host.produce_many.remote(
                    encode_produce_many_request(ProduceManyRequest(
                        acks, timeout_ms, tuple((n, p, r) for (_, p), n, r in parts))))):
            if isinstance(answer, BaseException):
                log.info("broker %d: produce to a replica host failed: %r", self.broker_id,
                         answer)
                for key, name, _ in parts:
                    answers[key] = _produce_error(NotLeaderOrFollowerError(str(answer)),
                                                  route, name, key[1])
                continue
            for (key, name, _), (_, _, result) in zip(parts,
                                                      decode_produce_many_response(answer)):
                answers[key] = (_produce_error(result.error, route, name, key[1])
                                if result.error is not None else
                                {"index": key[1], "error_code": 0,
                                 "base_offset": result.base_offset,
                                 "log_append_time": result.log_append_time,
                                 "log_start_offset": result.log_start_offset})
        if acks == 0:
            return None
        return build(response_class(request), {
            # Each version has one of the two (v13 names topics by id).
            "responses": [{"name": t, "topic_id": t, "partition_responses": parts}
                          for t, parts in by_topic(order, answers)],
            "throttle_time": 0,
            "node_endpoints": node_endpoints(route.image, leaders_named(answers), self.listener)})

    async def list_offsets(self, request: Request):
        """Kafka's ListOffsetsRequest: earliest (-2), latest (-1, the high watermark) or the
        first offset at or after a time, per partition, from its leader's replica host (one
        ``list_offsets_many`` per host, as rafka's own clients ask)."""
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        order, answers, by_host = route.split(
            request.body.topics, "partitions", "partition_index", _offsets_error,
            lambda part: (int(part.timestamp), int(getattr(part, "current_leader_epoch", -1))))
        for host, parts, answer in await gather_hosts(
                by_host, lambda host, parts: host.list_offsets_many.remote(
                    [(name, key[1], ts, epoch) for key, name, (ts, epoch) in parts])):
            results = ([NotLeaderOrFollowerError(str(answer))] * len(parts)
                       if isinstance(answer, BaseException) else [decode(a) for a in answer])
            for (key, name, _), result in zip(parts, results):
                if isinstance(result, KafkaError):
                    answers[key] = _offsets_error(result, route, name, key[1])
                else:
                    answers[key] = {"partition_index": key[1], "error_code": 0,
                                    "offset": result[0], "timestamp": result[1],
                                    "leader_epoch": route.leader(name, key[1])[1],
                                    "old_style_offsets": []}
        return build(response_class(request), {
            "throttle_time": 0, "topics": [{"name": t, "partitions": parts}
                                           for t, parts in by_topic(order, answers)]})

    async def offset_for_leader_epoch(self, request: Request):
        """Kafka's OffsetForLeaderEpoch from a client: the end offset of the asked epoch on
        each partition's leader (what a consumer checks its position against after a leader
        change, KIP-320), from the hosts' ``offsets_for_leader_epoch_many``."""
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        order, answers, by_host = route.split(
            request.body.topics, "partitions", "partition", _epoch_error,
            lambda part: (int(part.leader_epoch), int(part.current_leader_epoch)))
        for host, parts, answer in await gather_hosts(
                by_host, lambda host, parts: host.offsets_for_leader_epoch_many.remote(
                    encode(OffsetsForLeaderEpochRequest(-1, tuple(
                        (name, key[1], epoch, current)
                        for key, name, (epoch, current) in parts))))):
            results = ([(None, None, answer)] * len(parts) if isinstance(answer, BaseException)
                       else decode(answer))
            for (key, name, _), (_, _, result) in zip(parts, results):
                if isinstance(result, BaseException):
                    error = result if isinstance(result, KafkaError) \
                        else NotLeaderOrFollowerError(str(result))
                    answers[key] = _epoch_error(error, route, name, key[1])
                else:
                    answers[key] = {"partition": key[1], "error_code": 0,
                                    "leader_epoch": result[0], "end_offset": result[1]}
        return build(response_class(request), {
            "throttle_time": 0, "topics": [{"topic": t, "partitions": parts}
                                           for t, parts in by_topic(order, answers)]})

    async def delete_records(self, request: Request):
        """Kafka's DeleteRecords: each partition's log start offset moved up to the given
        offset (-1: the high watermark) on its leader, answered with the new low watermark
        once the followers have it too (the replicas' DelayedDeleteRecords)."""
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        timeout_ms = int(request.body.timeout.total_seconds() * 1000)
        order, answers, by_host = route.split(
            request.body.topics, "partitions", "partition_index",
            lambda e, route, name, p: {"partition_index": p, "low_watermark": -1,
                                       "error_code": e.code},
            lambda part: int(part.offset))

        async def one(host, key, name, offset) -> dict:
            try:
                result = decode(await host.delete_records.remote(name, key[1], offset,
                                                                 timeout_ms))
                error = result.error
            except Exception as e:   # the host died under the request
                result, error = None, NotLeaderOrFollowerError(str(e))
            return {"partition_index": key[1], "error_code": 0 if error is None else error.code,
                    "low_watermark": -1 if error is not None else result.low_watermark}
        keys = [(host, key, name, offset) for host, parts in by_host.items()
                for key, name, offset in parts]
        for (_, key, _, _), answer in zip(keys, await asyncio.gather(
                *[one(*k) for k in keys])):
            answers[key] = answer
        return build(response_class(request), {
            "throttle_time": 0, "topics": [{"name": t, "partitions": parts}
                                           for t, parts in by_topic(order, answers)]})

    async def describe_producers(self, request: Request):
        """Kafka's DescribeProducers: each partition's active idempotent producers, from its
        leader (NOT_LEADER_OR_FOLLOWER elsewhere); one call per leader host."""
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        order, answers, by_host = [], {}, {}
        for t in request.body.topics:
            for p in t.partition_indexes:
                key = (t.name, p)
                order.append(key)
                host, error = route.host(t.name, p)
                if host is None:
                    answers[key] = _producers_answer(p, error or route.unknown(t.name))
                else:
                    by_host.setdefault(host, []).append(key)

        async def one(host, keys: list) -> None:
            try:
                found = decode(await host.describe_producers_many.remote(keys))
            except Exception as e:    # the host died under the request
                found = [NotLeaderOrFollowerError(str(e))] * len(keys)
            for key, producers in zip(keys, found):
                answers[key] = _producers_answer(key[1], producers)
        await asyncio.gather(*[one(h, keys) for h, keys in by_host.items()])
        return build(response_class(request), {
            "throttle_time": 0, "topics": [{"name": t, "partitions": parts}
                                           for t, parts in by_topic(order, answers)]})

def _offsets_error(error: KafkaError, route: PartitionRoute, name: str | None,
                   partition: int) -> dict:
    return {"partition_index": partition, "error_code": error.code, "timestamp": -1,
            "offset": -1, "leader_epoch": -1, "old_style_offsets": []}


def _epoch_error(error: KafkaError, route: PartitionRoute, name: str | None,
                 partition: int) -> dict:
    return {"partition": partition, "error_code": error.code, "leader_epoch": -1,
            "end_offset": -1}


def _producers_answer(partition: int, producers) -> dict:
    """A DescribeProducers partition: its producers (no transactions: coordinator epoch and
    transaction start -1), or the error."""
    if isinstance(producers, KafkaError):
        return {"partition_index": partition, "error_code": producers.code,
                "error_message": str(producers), "active_producers": []}
    return {"partition_index": partition, "error_code": 0, "error_message": None,
            "active_producers": [
                {"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq,
                 "last_timestamp": ts, "coordinator_epoch": -1,
                 "current_txn_start_offset": -1} for pid, epoch, seq, ts in producers]}


def _produce_error(error: KafkaError, route: PartitionRoute, name: str | None,
                   partition: int) -> dict:
    return route.with_leader({"index": partition, "error_code": error.code,
                              "base_offset": -1, "log_append_time": -1,
                              "log_start_offset": -1, "error_message": str(error) or None},
                             error, name, partition)


