"""KafkaApis: each Kafka request a wire client sends, mapped to what the broker knows and the
same actor calls rafka's own clients make.

Requests are dispatched by API key through one table built with the listener (Kafka's
``case ApiKeys.X => handleX``): the partition APIs are answered here, Fetch by
``fetch_apis``, the group, administrative and reassignment APIs by their own modules. The
versions served are ``api_versions.SUPPORTED``; every key in it has a handler here.

The decisions are plain functions of the broker's metadata image (``metadata_apis``); the
class around them awaits the controller where a request changes something.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Mapping

from actors import hop_trace
from actors.broker.client_quota_manager import BrokerQuotas
from actors.broker.listener.acl_apis import AclApis
from actors.broker.listener.admin_apis import AdminApis
from actors.broker.listener.api_versions import ADVERTISED
from actors.broker.listener.auth_helper import (AuthHelper, topic_denied,
                                                transactional_id_denied)
from actors.broker.listener.fetch_apis import FetchApis
from actors.broker.listener.group_apis import GroupApis
from actors.broker.listener.host_channels import HostChannels
from actors.broker.listener.metadata_apis import (metadata_values, node_endpoints,
                                                  requested_topics)
from actors.broker.listener.partition_route import (PartitionRoute, by_topic, gather_hosts,
                                                    leaders_named)
from actors.broker.listener.reassignment_apis import ReassignmentApis
from actors.broker.listener.request_order import appends_sent
from actors.broker.listener.sasl_authenticator import after_authentication
from actors.broker.listener.txn_apis import TxnApis
from actors.replica.channel import API_LIST_OFFSETS, API_OFFSETS_FOR_LEADER_EPOCH, API_PRODUCE
from actors.replica.fetch_session import FetchSessionCache
from protocols.errors import KafkaError, NotLeaderOrFollowerError
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.acl import CLUSTER_NAME, AclOperation, ResourceType
from protocols.kafka.codec import (CloseConnection, InvalidRequest, NoResponse, Request,
                                   api_versions_body, build, response_class)
from protocols.messages import (OffsetsForLeaderEpochRequest, ProduceManyRequest,
                                decode_produce_many_response, produce_many_request_pieces)
from protocols.topics import validate_topic_name
from protocols.wire import decode, encode

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Any]]


class KafkaApis:
    def __init__(self, broker_id: int, image: Callable[[], Mapping[str, Any]],
                 create_topic: Callable[[str], Awaitable[KafkaError | None]],
                 auto_create: bool,
                 host_of: Callable[[str, int], Any] = lambda topic, partition: None,
                 groups: GroupApis | None = None, admin: AdminApis | None = None,
                 txn: TxnApis | None = None,
                 fetch_sessions: FetchSessionCache | None = None, node_id: str = "",
                 auth: AuthHelper | None = None, quotas: BrokerQuotas | None = None):
        self.broker_id = broker_id
        # Client quotas (producer_byte_rate here, consumer_byte_rate in FetchApis).
        self.quotas = quotas
        # Who may do what (authorizer.class.name); without one, everyone anything.
        self.auth = auth = auth or AuthHelper(image)
        self.image = image
        self.create_topic = create_topic
        self.auto_create = auto_create
        # The replica host holding this broker's replica of a partition (None: none here).
        self.host_of = host_of
        # Produce and Fetch reach the hosts over their channel.
        self.channels = HostChannels()
        fetches = FetchApis(broker_id, image, host_of, fetch_sessions, self.channels,
                            node_id, auth, quotas)
        # The bytes its fetch answers send (BytesOut): the broker's metrics report takes them.
        self.topic_stats = fetches.topic_stats
        self.handlers: dict[ApiKey, Handler] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: fetches.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.DELETE_RECORDS: self.delete_records,
            ApiKey.DESCRIBE_PRODUCERS: self.describe_producers,
            # Answered by the socket server's Authenticator before a SASL connection is
            # authenticated; here, after it or on a listener without SASL.
            ApiKey.SASL_HANDSHAKE: self.sasl_out_of_place,
            ApiKey.SASL_AUTHENTICATE: self.sasl_out_of_place,
        }
        # A listener built without the group coordinator or the controller (a test's) has
        # no handler for their APIs.
        if groups is not None:
            self.handlers.update({
                ApiKey.FIND_COORDINATOR: groups.find_coordinator,
                ApiKey.JOIN_GROUP: groups.join_group,
                ApiKey.SYNC_GROUP: groups.sync_group,
                ApiKey.HEARTBEAT: groups.heartbeat,
                ApiKey.LEAVE_GROUP: groups.leave_group,
                ApiKey.OFFSET_COMMIT: groups.offset_commit,
                ApiKey.OFFSET_FETCH: groups.offset_fetch,
                ApiKey.OFFSET_DELETE: groups.offset_delete,
                ApiKey.TXN_OFFSET_COMMIT: groups.txn_offset_commit,
            })
        if admin is not None:
            reassignments = ReassignmentApis(image, admin.controller_call, auth)
            acls = AclApis(image, self.auth, admin.controller_call)
            self.handlers.update({
                ApiKey.CREATE_TOPICS: admin.create_topics,
                ApiKey.DELETE_TOPICS: admin.delete_topics,
                ApiKey.CREATE_PARTITIONS: admin.create_partitions,
                ApiKey.DESCRIBE_CLUSTER: admin.describe_cluster,
                ApiKey.LIST_GROUPS: admin.list_groups,
                ApiKey.DESCRIBE_GROUPS: admin.describe_groups,
                ApiKey.DELETE_GROUPS: admin.delete_groups,
                ApiKey.DESCRIBE_CONFIGS: admin.describe_configs,
                ApiKey.ALTER_CONFIGS: admin.alter_configs,
                ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.incremental_alter_configs,
                ApiKey.ELECT_LEADERS: admin.elect_leaders,
                ApiKey.DESCRIBE_LOG_DIRS: admin.describe_log_dirs,
                ApiKey.ALTER_PARTITION_REASSIGNMENTS: reassignments.alter,
                ApiKey.LIST_PARTITION_REASSIGNMENTS: reassignments.list,
                ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: admin.describe_user_scram_credentials,
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS: admin.alter_user_scram_credentials,
                ApiKey.DESCRIBE_CLIENT_QUOTAS: admin.describe_client_quotas,
                ApiKey.ALTER_CLIENT_QUOTAS: admin.alter_client_quotas,
                ApiKey.DESCRIBE_ACLS: acls.describe_acls,
                ApiKey.CREATE_ACLS: acls.create_acls,
                ApiKey.DELETE_ACLS: acls.delete_acls,
            })

        if txn is not None:
            self.handlers.update({
                ApiKey.INIT_PRODUCER_ID: txn.init_producer_id,
                ApiKey.ADD_PARTITIONS_TO_TXN: txn.add_partitions_to_txn,
                ApiKey.ADD_OFFSETS_TO_TXN: txn.add_offsets_to_txn,
                ApiKey.END_TXN: txn.end_txn,
                ApiKey.WRITE_TXN_MARKERS: txn.write_txn_markers,
                ApiKey.DESCRIBE_TRANSACTIONS: txn.describe_transactions,
                ApiKey.LIST_TRANSACTIONS: txn.list_transactions,
            })

    async def handle(self, request: Request) -> Any:
        handler = self.handlers.get(request.api_key)
        if handler is None:   # SUPPORTED names an API this listener was built without
            raise AssertionError(f"no handler for API key {request.api_key}")
        return await handler(request)

    async def sasl_out_of_place(self, request: Request):
        return after_authentication(request)

    async def api_versions(self, request: Request):
        return api_versions_body(request, ADVERTISED)

    async def metadata(self, request: Request):
        image = self.image()
        body = request.body
        wanted = requested_topics(request)
        creating: dict[str, KafkaError | None] = {}
        authorizer = self.auth.authorizer()

        def may(operation: AclOperation, name: str) -> bool:
            return authorizer is None or authorizer.authorize(
                request.principal, request.host, operation, ResourceType.TOPIC, name)
        # v0-v3 had no flag: those clients' brokers created topics when asked.
        allow = getattr(body, "allow_auto_topic_creation", True)
        if wanted and allow and self.auto_create:
            for entry in wanted:
                name = entry["name"]
                if name is None or name in image.get("topics", {}) or name in creating \
                        or not may(AclOperation.DESCRIBE, name):
                    continue
                try:
                    validate_topic_name(name)
                except KafkaError:
                    continue   # answered INVALID_TOPIC_EXCEPTION below
                if not (self.auth.authorize_cluster(request, AclOperation.CREATE)
                        or may(AclOperation.CREATE, name)):
                    creating[name] = topic_denied()
                    continue
                error = await self.create_topic(name)
                creating[name] = error
                if error is not None:
                    log.info("broker %d: auto-creating topic %r failed: %r", self.broker_id,
                             name, error)
        values = metadata_values(
            image, wanted, request.listener, self.broker_id, creating,
            describable=None if authorizer is None else
            (lambda name: may(AclOperation.DESCRIBE, name)),
            operations=(lambda name: self.auth.authorized_operations(
                request, ResourceType.TOPIC, name))
            if getattr(body, "include_topic_authorized_operations", False) else None)
        # v8-v10: the cluster's operations (0 to a client that may not describe it).
        if getattr(body, "include_cluster_authorized_operations", False):
            values["cluster_authorized_operations"] = (
                self.auth.authorized_operations(request, ResourceType.CLUSTER, CLUSTER_NAME)
                if self.auth.authorize_cluster(request, AclOperation.DESCRIBE) else 0)
        return build(response_class(request), values)

    async def produce(self, request: Request):
        """Kafka's ProduceRequest: each partition's batches go, as bytes, to the replica host
        holding its leader on this broker (one ``produce_many`` per host, over the hosts'
        channel as rafka's own producer sends it); a partition led elsewhere is answered
        NOT_LEADER_OR_FOLLOWER with its leader (KIP-951). acks=0 is answered with nothing."""
        body = request.body
        # kio reads a null array where Kafka's schema allows none; Kafka's parser refuses it.
        if body.topic_data is None or any(t.partition_data is None for t in body.topic_data):
            raise InvalidRequest("Produce request with a null topic_data or partition_data")
        acks = int(body.acks)
        started = time.monotonic_ns() if hop_trace.ON else 0
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        txn_id = getattr(body, "transactional_id", None)
        # Transactional batches need their transactional id, and WRITE on it (Kafka's
        # RequestUtils.hasTransactionalRecords: each partition's first batch says).
        if _has_transactional_records(body.topic_data) and (txn_id is None or not (
                self.auth.authorize(request, AclOperation.WRITE,
                                    ResourceType.TRANSACTIONAL_ID, txn_id))):
            # The whole request, as Kafka answers it; acks=0 has no answer to carry it.
            if acks == 0:
                raise CloseConnection(f"{request.principal} may not write transactional id "
                                      f"{txn_id!r} (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)")
            denied = transactional_id_denied()
            order, answers, _ = route.split(body.topic_data, "partition_data", "index",
                                            _produce_error, lambda part: None,
                                            lambda name: denied)
            return self._produce_answer(request, route, order, answers)
        order, answers, by_host = route.split(
            body.topic_data, "partition_data", "index", _produce_error,
            lambda part: part.records or b"",
            self.auth.topic_refusal(request, AclOperation.WRITE))
        timeout_ms = int(body.timeout.total_seconds() * 1000)
        sends = {host: self.channels.send(host, API_PRODUCE, produce_many_request_pieces(
            ProduceManyRequest(acks, timeout_ms, tuple((n, p, r) for (_, p), n, r in parts),
                               txn_id)))
                 for host, parts in by_host.items()}
        if txn_id is None and all(written for _, written in sends.values()):
            appends_sent()
        outcomes = await asyncio.gather(*[answer for answer, _ in sends.values()],
                                        return_exceptions=True)
        for (host, parts), answer in zip(by_host.items(), outcomes):
            if isinstance(answer, BaseException):
                log.info("broker %d: produce to a replica host failed: %r", self.broker_id,
                         answer)
                for key, name, _ in parts:
                    answers[key] = _produce_error(NotLeaderOrFollowerError(str(answer)),
                                                  route, name, key[1])
                continue
            for (key, name, _), (_, _, result) in zip(parts,
                                                      decode_produce_many_response(answer)[0]):
                answers[key] = (_produce_error(result.error, route, name, key[1])
                                if result.error is not None else
                                {"index": key[1], "error_code": 0,
                                 "base_offset": result.base_offset,
                                 "log_append_time": result.log_append_time,
                                 "log_start_offset": result.log_start_offset})
            if started:
                _trace_produced(hop_trace.received.get(id(request), started), started, parts,
                                answers)
        # producer_byte_rate: the request's bytes, as Kafka records them (once handled).
        throttle_ms = 0 if self.quotas is None else self.quotas.record(
            self.quotas.produce, request.principal, request.client_id, request.size)
        if acks == 0:
            return NoResponse(throttle_ms) if throttle_ms else None
        return self._produce_answer(request, route, order, answers, throttle_ms)

    def _produce_answer(self, request: Request, route: PartitionRoute, order: list,
                        answers: dict, throttle_ms: int = 0):
        return build(response_class(request), {
            # Each version has one of the two (v13 names topics by id).
            "responses": [{"name": t, "topic_id": t, "partition_responses": parts}
                          for t, parts in by_topic(order, answers)],
            "throttle_time": throttle_ms,
            "node_endpoints": node_endpoints(route.image, leaders_named(answers),
                                             request.listener)})

    async def list_offsets(self, request: Request):
        """Kafka's ListOffsetsRequest: earliest (-2), latest (-1, the high watermark; the last
        stable offset for isolation_level read_committed) or the
        first offset at or after a time, per partition, from its leader's replica host (one
        ``list_offsets_many`` per host, over the hosts' channel)."""
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        isolation = int(getattr(request.body, "isolation_level", 0))
        order, answers, by_host = route.split(
            request.body.topics, "partitions", "partition_index", _offsets_error,
            lambda part: (int(part.timestamp), int(getattr(part, "current_leader_epoch", -1))),
            self.auth.topic_refusal(request, AclOperation.DESCRIBE))
        for host, parts, answer in await gather_hosts(
                by_host, lambda host, parts: self.channels.call(host, API_LIST_OFFSETS, encode(
                    [(name, key[1], ts, epoch, isolation)
                     for key, name, (ts, epoch) in parts]))):
            results = ([NotLeaderOrFollowerError(str(answer))] * len(parts)
                       if isinstance(answer, BaseException)
                       else [decode(a) for a in decode(answer)])
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
        change, KIP-320), from the hosts' ``offsets_for_leader_epoch_many`` over the channel
        (as followers ask it)."""
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        order, answers, by_host = route.split(
            request.body.topics, "partitions", "partition", _epoch_error,
            lambda part: (int(part.leader_epoch), int(part.current_leader_epoch)),
            # A broker's (CLUSTER_ACTION) may ask of any topic; a client, of those it may
            # describe.
            None if self.auth.authorize_cluster(request, AclOperation.CLUSTER_ACTION)
            else self.auth.topic_refusal(request, AclOperation.DESCRIBE))
        for host, parts, answer in await gather_hosts(
                by_host, lambda host, parts: self.channels.call(
                    host, API_OFFSETS_FOR_LEADER_EPOCH, encode(OffsetsForLeaderEpochRequest(
                        -1, tuple((name, key[1], epoch, current)
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
            lambda part: int(part.offset),
            self.auth.topic_refusal(request, AclOperation.DELETE))

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
        refused = self.auth.topic_refusal(request, AclOperation.READ)
        order, answers, by_host = [], {}, {}
        for t in request.body.topics:
            denied = refused(t.name) if refused is not None else None
            for p in t.partition_indexes:
                key = (t.name, p)
                order.append(key)
                host, error = (None, denied) if denied else route.host(t.name, p)
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

def _has_transactional_records(topic_data) -> bool:
    from protocols.records import ATTRIBUTES_OFFSET, TRANSACTIONAL_MASK
    for t in topic_data:
        for part in t.partition_data:
            records = part.records
            if records and len(records) >= ATTRIBUTES_OFFSET + 2 and \
                    int.from_bytes(records[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2],
                                   "big") & TRANSACTIONAL_MASK:
                return True
    return False


def _offsets_error(error: KafkaError, route: PartitionRoute, name: str | None,
                   partition: int) -> dict:
    return {"partition_index": partition, "error_code": error.code, "timestamp": -1,
            "offset": -1, "leader_epoch": -1, "old_style_offsets": []}


def _epoch_error(error: KafkaError, route: PartitionRoute, name: str | None,
                 partition: int) -> dict:
    return {"partition": partition, "error_code": error.code, "leader_epoch": -1,
            "end_offset": -1}


def _producers_answer(partition: int, producers) -> dict:
    """A DescribeProducers partition: its producers (with the coordinator epoch of their
    last transaction marker and their open transaction's first offset, -1 for none), or
    the error."""
    if isinstance(producers, KafkaError):
        return {"partition_index": partition, "error_code": producers.code,
                "error_message": str(producers), "active_producers": []}
    return {"partition_index": partition, "error_code": 0, "error_message": None,
            "active_producers": [
                {"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq,
                 "last_timestamp": ts, "coordinator_epoch": coordinator_epoch,
                 "current_txn_start_offset": txn_start}
                for pid, epoch, seq, ts, coordinator_epoch, txn_start in producers]}


def _trace_produced(received: int, started: int, parts: list, answers: dict) -> None:
    """Hop marks of a Produce request's appended batches (``actors.hop_trace``)."""
    now = time.monotonic_ns()
    for key, name, records in parts:
        answer = answers.get(key)
        count = hop_trace.record_count(records) if answer and answer["error_code"] == 0 \
            else 0
        if count:
            first, last = answer["base_offset"], answer["base_offset"] + count - 1
            hop_trace.mark("listener.received", name, key[1], first, last, received)
            hop_trace.mark("listener.produce", name, key[1], first, last, started)
            hop_trace.mark("listener.produced", name, key[1], first, last, now)


def _produce_error(error: KafkaError, route: PartitionRoute, name: str | None,
                   partition: int) -> dict:
    return route.with_leader({"index": partition, "error_code": error.code,
                              "base_offset": -1, "log_append_time": -1,
                              "log_start_offset": -1, "error_message": str(error) or None},
                             error, name, partition)


