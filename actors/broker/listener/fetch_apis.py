"""Fetch over the Kafka listener (part of Kafka's KafkaApis, with its FetchManager): a
consumer's FetchRequest read from the replica hosts leading its partitions on this broker,
in fetch sessions (KIP-227) when the client asks for one.

A client's full fetch with session epoch 0 (the Java client's first) gets a session id; its
later fetches name only the partitions added or moved since, and those to forget, and the
answer carries only the partitions with something new (records, an error, a moved high
watermark or log start offset). The session is the same pure ``FetchSession`` /
``FetchSessionCache`` / ``new_context`` the replica hosts keep for their followers, here
one cache per broker (``max.incremental.fetch.session.cache.slots``) as in Kafka. What a
session saves here is the client's bytes and the answer's: the broker still asks each host
for all of the session's partitions it leads (partitions are not parked across hosts).

An incremental fetch naming a session this broker does not have (it restarted, or evicted
it) is FETCH_SESSION_ID_NOT_FOUND; one with another epoch, INVALID_FETCH_SESSION_EPOCH: the
client then starts a new session with a full fetch.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping

from actors import hop_trace
from actors.broker.client_quota_manager import BrokerQuotas
from actors.broker.listener.auth_helper import AuthHelper, topic_denied
from actors.broker.listener.file_regions import open_region
from actors.broker.listener.host_channels import HostChannels
from actors.broker.listener.metadata_apis import node_endpoints
from actors.broker.listener.partition_route import (PartitionRoute, by_topic, gather_hosts,
                                                    leaders_named)
from actors.metrics.broker_topic_stats import BrokerTopicStats
from actors.replica.channel import API_LISTENER_FETCH
from actors.replica.fetch_session import FetchSessionCache, new_context
from protocols.errors import KafkaError, NotLeaderOrFollowerError
from protocols.fetch_session_handler import FINAL_EPOCH, INVALID_SESSION_ID
from protocols.file_region import FileRegion
from protocols.kafka.acl import AclOperation
from protocols.kafka.codec import Request, build, response_class
from protocols.messages import (READ_UNCOMMITTED, FetchManyRequest, FetchRequest,
                                FetchResult, decode_fetch_many_response,
                                encode_fetch_many_request)

log = logging.getLogger(__name__)

def _topic_of(topic_data) -> Any:
    """A request's topic as the client names it: its name, or (v13+) its id."""
    name = getattr(topic_data, "topic", None)
    return name if name is not None else getattr(topic_data, "topic_id", None)


def fetch_error(error: KafkaError, route: PartitionRoute, name: str | None,
                partition: int) -> dict:
    return route.with_leader({"partition_index": partition, "error_code": error.code,
                              "high_watermark": -1, "last_stable_offset": -1,
                              "log_start_offset": -1, "preferred_read_replica": -1,
                              "records": None}, error, name, partition)


class FetchApis:
    def __init__(self, broker_id: int, image: Callable[[], Mapping[str, Any]],
                 host_of: Callable[[str, int], Any],
                 sessions: FetchSessionCache | None, channels: HostChannels,
                 node_id: str = "", auth: AuthHelper | None = None,
                 quotas: BrokerQuotas | None = None):
        self.broker_id = broker_id
        self.quotas = quotas   # consumer_byte_rate
        self.auth = auth or AuthHelper(image)
        self.image = image
        self.host_of = host_of
        self.sessions = sessions   # None: every fetch is sessionless
        self.channels = channels
        # This broker's node: its hosts name their records' place in the segment files
        # rather than send them (zero-copy fetch, ``file_regions``). "": bytes.
        self.node_id = node_id
        # BytesOut of what the answers send (a host does not count a listener's fetch:
        # of a fetch spread over several hosts a late answer may be dropped).
        self.topic_stats = BrokerTopicStats()

    async def fetch(self, request: Request):
        """Each leader host of this broker gets the partitions to read in one
        ``fetch_many`` (the path rafka's consumer takes, below the high watermark); the
        answer goes out once one host has something, the others then asked again without
        waiting, so every partition is in it."""
        body = request.body
        route = PartitionRoute(self.image(), self.host_of, self.broker_id)
        max_wait_ms = int(body.max_wait.total_seconds() * 1000)
        min_bytes = int(body.min_bytes)
        max_bytes = int(getattr(body, "max_bytes", 0x7FFFFFFF))
        if self.quotas is not None:
            # No more than a consumer's quota lets it have in one go (Kafka's
            # getMaxValueInQuotaWindow).
            most = self.quotas.max_fetch_bytes(request.principal, request.client_id)
            if most is not None:
                max_bytes = min(max_bytes, max(1, most))
        isolation = int(getattr(body, "isolation_level", READ_UNCOMMITTED))
        context = new_context(self.sessions, FetchManyRequest(
            -1, max_wait_ms, min_bytes, max_bytes,
            tuple((_topic_of(t), int(p.partition), FetchRequest(
                -1, int(p.fetch_offset), int(getattr(p, "current_leader_epoch", -1)),
                int(p.partition_max_bytes), isolation_level=isolation))
                for t in body.topics for p in t.partitions),
            int(getattr(body, "session_id", INVALID_SESSION_ID)),
            int(getattr(body, "session_epoch", FINAL_EPOCH)),
            tuple((_topic_of(t), int(p)) for t in getattr(body, "forgotten_topics_data", ())
                  for p in t.partitions)))
        if context.error is not None:
            return build(response_class(request), {
                "throttle_time": 0, "error_code": context.error.code,
                "session_id": INVALID_SESSION_ID, "responses": []})
        results: dict[tuple, FetchResult] = {}
        by_host: dict[Any, list] = {}
        # A broker's fetch (a replica id) needs CLUSTER_ACTION, every partition refused
        # TOPIC_AUTHORIZATION_FAILED without it, as Kafka answers; a consumer's, READ on
        # each topic.
        replica_id = int(getattr(getattr(body, "replica_state", None), "replica_id",
                                 getattr(body, "replica_id", -1)))
        if replica_id >= 0:
            refused = None if self.auth.authorize_cluster(
                request, AclOperation.CLUSTER_ACTION) else (lambda name: topic_denied())
        else:
            refused = self.auth.topic_refusal(request, AclOperation.READ)
        for topic, partition, fetch in context.partitions:
            name = route.name(topic)
            denied = refused(name) if refused is not None and name is not None else None
            host, error = (None, denied) if denied is not None else \
                route.host(name, partition)
            if host is None:
                results[(topic, partition)] = FetchResult(error=error or route.unknown(topic))
            else:
                by_host.setdefault(host, []).append(((topic, partition), name, fetch))

        def ask(host, parts, wait_ms: int):
            return self.channels.call(host, API_LISTENER_FETCH, encode_fetch_many_request(
                FetchManyRequest(-1, wait_ms, min_bytes, max_bytes,
                                 tuple((n, key[1], r) for key, n, r in parts),
                                 regions_on_node=self.node_id)))

        for host, parts, answer in await fetch_hosts(by_host, ask, max_wait_ms):
            if isinstance(answer, BaseException):
                log.info("broker %d: fetch from a replica host failed: %r", self.broker_id,
                         answer)
                for key, _, _ in parts:
                    results[key] = FetchResult(error=NotLeaderOrFollowerError(str(answer)))
                continue
            response = decode_fetch_many_response(answer)
            for (key, _, _), (_, _, result) in zip(parts, response.results):
                results[key] = result
        answered_ns = time.monotonic_ns() if hop_trace.ON and replica_id < 0 else 0
        response = context.respond([(t, p, results[(t, p)])
                                    for t, p, _ in context.partitions])
        throttle_ms = 0
        if self.quotas is not None and replica_id < 0:
            # consumer_byte_rate: the records answered.
            size = sum(len(r.records) for _, _, r in response.results
                       if r.error is None and r.records)
            throttle_ms = self.quotas.record_fetch(request.principal, request.client_id, size)
        order, answers = [], {}
        read, follower = self.topic_stats.read, replica_id >= 0
        for topic, partition, result in response.results:
            key = (topic, partition)
            order.append(key)
            if result.error is not None:
                answers[key] = fetch_error(result.error, route, route.name(topic), partition)
            else:
                aborted = result.aborted_transactions
                records = b"" if throttle_ms else result.records
                if records:
                    read(route.name(topic) or topic, len(records), follower)
                if isinstance(records, FileRegion):
                    try:
                        opened = open_region(records)
                    except KafkaError as e:
                        answers[key] = fetch_error(e, route, route.name(topic), partition)
                        continue
                    records = b"" if opened is None else opened
                answers[key] = {"partition_index": partition, "error_code": 0,
                                "high_watermark": result.high_watermark,
                                "last_stable_offset": result.last_stable_offset,
                                "log_start_offset": result.log_start_offset,
                                "aborted_transactions": None if aborted is None else [
                                    {"producer_id": pid, "first_offset": first}
                                    for pid, first in aborted],
                                "preferred_read_replica": -1, "records": records}
        if answered_ns:
            _trace_fetched(request, route, answers, answered_ns)
        return build(response_class(request), {
            "throttle_time": throttle_ms, "error_code": 0, "session_id": response.session_id,
            "responses": [{"topic": t, "topic_id": t, "partitions": parts}
                          for t, parts in by_topic(order, answers)],
            "node_endpoints": node_endpoints(route.image, leaders_named(answers),
                                             request.listener)})


def _trace_fetched(request: Request, route: PartitionRoute, answers: dict,
                   answered_ns: int) -> None:
    """Hop marks of the records a consumer's Fetch answer sends (its hosts answered at
    ``answered_ns``), made once it is written (``actors.hop_trace``)."""
    for (topic, partition), answer in answers.items():
        found = hop_trace.span(answer.get("records"))
        if found:
            hop_trace.hold(id(request), "listener.fetch", route.name(topic) or topic,
                           partition, *found, answered_ns)


async def fetch_hosts(by_host: Mapping[Any, list], ask, max_wait_ms: int) -> list:
    """Long-poll every host; once one answers, the hosts still waiting are asked again
    without waiting (their long polls are given up; a late answer is dropped): the
    response holds every partition and waits for none of them longer than for the first."""
    if len(by_host) <= 1:
        return await gather_hosts(by_host, lambda h, parts: ask(h, parts, max_wait_ms))
    polls = {asyncio.ensure_future(ask(h, parts, max_wait_ms)): h
             for h, parts in by_host.items()}
    done, pending = await asyncio.wait(polls, return_when=asyncio.FIRST_COMPLETED)
    for poll in pending:
        poll.cancel()
    answers = {polls[f]: _outcome(f) for f in done}
    still = {polls[f]: by_host[polls[f]] for f in pending}
    if still:
        for h, _, a in await gather_hosts(still, lambda h, parts: ask(h, parts, 0)):
            answers[h] = a
    return [(h, by_host[h], answers[h]) for h in by_host]


def _outcome(future):
    return future.exception() if future.exception() is not None else future.result()
