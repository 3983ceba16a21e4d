"""The transaction APIs of the Kafka listener (Kafka's KafkaApis handlers for them):
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
ListTransactions (TxnOffsetCommit goes to the group coordinator: ``group_apis``).

A transactional request goes to this broker's transaction coordinator
(``actors.txn.actor``), which answers NOT_COORDINATOR for an id it does not coordinate (the
client finds the coordinator again with FindCoordinator). InitProducerId without a
transactional id is an idempotent producer's: its id comes from the controller.
"""
from __future__ import annotations

import datetime
import logging
from typing import Any, Awaitable, Callable, Mapping

from actors.broker.listener.auth_helper import (AuthHelper, cluster_denied, group_denied,
                                                topic_denied, transactional_id_denied)
from actors.broker.listener.group_apis import call_coordinator
from protocols.errors import (KafkaError, NotLeaderOrFollowerError, OperationNotAttemptedError,
                              UnknownTopicOrPartitionError)
from protocols.kafka.acl import AclOperation, ResourceType
from protocols.kafka.codec import Request, build, response_class
from protocols.topics import COORDINATOR_TOPICS
from protocols.wire import decode

log = logging.getLogger(__name__)
# Kafka's leader writes markers with acks=all within request.timeout.ms.
MARKER_TIMEOUT_MS = 30_000


def _code(error: KafkaError | None) -> int:
    return 0 if error is None else error.code


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) \
        else int(value)


class TxnApis:
    def __init__(self, image: Callable[[], Mapping[str, Any]],
                 coordinator: Callable[[], Awaitable[Any]],
                 controller_call: Callable[..., Awaitable[Any]],
                 host_of: Callable[[str, int], Any] = lambda topic, partition: None,
                 auth: AuthHelper | None = None):
        self.image = image
        self.auth = auth or AuthHelper(image)    # who may do what (authorizer.class.name)
        self.host_of = host_of                    # the replica host of a partition here
        self.coordinator = coordinator            # this broker's TransactionCoordinatorActor
        self.controller_call = controller_call    # AdminApis.controller_call

    async def _call(self, method: str, *args) -> Any:
        return await call_coordinator(self.coordinator, method, *args)

    def _may_write(self, request: Request, transactional_id: str) -> bool:
        return self.auth.authorize(request, AclOperation.WRITE,
                                   ResourceType.TRANSACTIONAL_ID, transactional_id)

    # ---- InitProducerId --------------------------------------------------------------------
    async def init_producer_id(self, request: Request):
        """A producer's id and epoch: from the controller for an idempotent producer, from
        the transactional id's coordinator (a new epoch, fencing older instances) for a
        transactional one. v3+ carries the producer's current id and epoch when it
        recovers from an error (KIP-360)."""
        body = request.body
        answer: Any
        if body.transactional_id is None:
            # An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some
            # topic (KIP-679).
            if self.auth.authorize_cluster(request, AclOperation.IDEMPOTENT_WRITE) or \
                    self.auth.authorize_by_resource_type(request, AclOperation.WRITE,
                                                         ResourceType.TOPIC):
                answer = await self.controller_call("init_producer_id")
            else:
                answer = cluster_denied()
        elif not self._may_write(request, body.transactional_id):
            answer = transactional_id_denied()
        else:
            producer_id = int(getattr(body, "producer_id", -1))
            expected = None if producer_id < 0 else (producer_id, int(body.producer_epoch))
            answer = await self._call("init_producer_id", body.transactional_id,
                                      _ms(body.transaction_timeout), expected)
        if isinstance(answer, KafkaError):
            return build(response_class(request), {"throttle_time": 0,
                                                   "error_code": answer.code,
                                                   "producer_id": -1, "producer_epoch": -1})
        producer_id, epoch = answer
        return build(response_class(request), {"throttle_time": 0, "error_code": 0,
                                               "producer_id": producer_id,
                                               "producer_epoch": epoch})

    # ---- AddPartitionsToTxn ----------------------------------------------------------------
    async def add_partitions_to_txn(self, request: Request):
        """A producer's partitions join its transaction (v0-v3, the clients' versions). A
        partition refused (TRANSACTIONAL_ID_ or TOPIC_AUTHORIZATION_FAILED) or that does not
        exist (UNKNOWN_TOPIC_OR_PARTITION) fails the request, OPERATION_NOT_ATTEMPTED for
        the others, as Kafka answers."""
        body = request.body
        wanted = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]
        topics = self.image().get("topics", {})
        # WRITE on the transactional id, then on each topic (never an internal one's).
        if not self._may_write(request, body.v3_and_below_transactional_id):
            refused = {tp: transactional_id_denied() for tp in wanted}
        else:
            writable = self.auth.allowed(request, AclOperation.WRITE, ResourceType.TOPIC,
                                         [t for t, _ in wanted if t not in COORDINATOR_TOPICS])
            refused = {tp: topic_denied() for tp in wanted if tp[0] not in writable}
        unknown = {tp for tp in wanted if tp[1] not in topics.get(tp[0], {})
                   and tp not in refused}
        if refused or unknown:
            errors: dict = {tp: refused.get(tp) or UnknownTopicOrPartitionError(
                f"Partition {tp[0]}-{tp[1]} does not exist") if tp in refused or tp in unknown
                else OperationNotAttemptedError(
                    "Not attempted: another partition of the request failed")
                for tp in wanted}
        else:
            answer = await self._call(
                "add_partitions_to_txn", body.v3_and_below_transactional_id,
                int(body.v3_and_below_producer_id), int(body.v3_and_below_producer_epoch),
                wanted)
            errors = {tp: answer for tp in wanted}
        by_topic: dict[str, list] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "partition_error_code": _code(error)})
        return build(response_class(request), {
            "throttle_time": 0,
            "results_by_topic_v3_and_below": [{"name": t, "results_by_partition": parts}
                                              for t, parts in by_topic.items()]})

    # ---- AddOffsetsToTxn -------------------------------------------------------------------
    async def add_offsets_to_txn(self, request: Request):
        """The group's offsets will be committed in the transaction (TxnOffsetCommit, to
        the group's coordinator): its ``__consumer_offsets`` partition joins it."""
        body = request.body
        if not self._may_write(request, body.transactional_id):
            return build(response_class(request), {
                "throttle_time": 0, "error_code": transactional_id_denied().code})
        if not self.auth.authorize(request, AclOperation.READ, ResourceType.GROUP,
                                   body.group_id):
            return build(response_class(request), {"throttle_time": 0,
                                                   "error_code": group_denied().code})
        answer = await self._call("add_offsets_to_txn", body.transactional_id,
                                  int(body.producer_id), int(body.producer_epoch),
                                  body.group_id)
        return build(response_class(request), {"throttle_time": 0,
                                               "error_code": _code(answer)})

    # ---- EndTxn ----------------------------------------------------------------------------
    async def end_txn(self, request: Request):
        body = request.body
        answer = await self._call("end_txn", body.transactional_id, int(body.producer_id),
                                  int(body.producer_epoch), bool(body.committed)) \
            if self._may_write(request, body.transactional_id) \
            else transactional_id_denied()
        return build(response_class(request), {"throttle_time": 0, "error_code": _code(answer),
                                               "producer_id": int(body.producer_id),
                                               "producer_epoch": int(body.producer_epoch)})

    # ---- WriteTxnMarkers -------------------------------------------------------------------
    async def write_txn_markers(self, request: Request):
        """Markers written by this broker's leaders: what a transaction coordinator asks
        (rafka's own go between actors), and what ``kafka-transactions.sh abort`` sends to
        end a hanging transaction. Each answered per partition, once in its ISR."""
        markers = request.body.markers
        topics = self.image().get("topics", {})
        results: dict[tuple[int, str, int], KafkaError | None] = {}
        by_host: dict[int, tuple[Any, list]] = {}
        # A coordinator's request: ALTER or CLUSTER_ACTION on the cluster.
        allowed = self.auth.authorize_cluster(request, AclOperation.ALTER) or \
            self.auth.authorize_cluster(request, AclOperation.CLUSTER_ACTION)
        for m in markers if not allowed else ():
            for t in m.topics:
                for partition in t.partition_indexes:
                    results[(int(m.producer_id), t.name, int(partition))] = cluster_denied()
        for m in markers if allowed else ():
            for t in m.topics:
                for partition in t.partition_indexes:
                    key = (int(m.producer_id), t.name, int(partition))
                    host = self.host_of(t.name, int(partition))
                    if int(partition) not in topics.get(t.name, {}):
                        results[key] = UnknownTopicOrPartitionError(
                            f"Partition {t.name}-{partition} does not exist")
                    elif host is None:
                        results[key] = NotLeaderOrFollowerError(
                            f"This broker has no replica of {t.name}-{partition}")
                    else:
                        by_host.setdefault(id(host), (host, []))[1].append((key, (
                            t.name, int(partition), int(m.producer_id),
                            int(m.producer_epoch), int(m.coordinator_epoch),
                            bool(m.transaction_result))))
        for host, entries in by_host.values():
            try:
                errors = decode(await host.write_txn_markers_many.remote(
                    [marker for _, marker in entries], MARKER_TIMEOUT_MS))
            except Exception as e:   # the host died under the request
                errors = [NotLeaderOrFollowerError(repr(e))] * len(entries)
            results.update((key, error) for (key, _), error in zip(entries, errors))
        return build(response_class(request), {"markers": [
            {"producer_id": int(m.producer_id), "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": int(p),
                     "error_code": _code(results[(int(m.producer_id), t.name, int(p))])}
                    for p in t.partition_indexes]} for t in m.topics]} for m in markers]})

    # ---- administration --------------------------------------------------------------------
    async def describe_transactions(self, request: Request):
        """Each id's state at its coordinator (NOT_COORDINATOR where this broker is not
        it: the admin client asks each id's coordinator)."""
        states = []
        for transactional_id in request.body.transactional_ids:
            answer = await self._call("describe_transaction", transactional_id) \
                if self.auth.authorize(request, AclOperation.DESCRIBE,
                                       ResourceType.TRANSACTIONAL_ID, transactional_id) \
                else transactional_id_denied()
            if isinstance(answer, KafkaError):
                states.append({"error_code": answer.code, "transactional_id": transactional_id,
                               "transaction_state": "", "transaction_timeout": 0,
                               "transaction_start_time": -1, "producer_id": -1,
                               "producer_epoch": -1, "topics": []})
                continue
            by_topic: dict[str, list[int]] = {}
            # Topics the client may not describe are left out, as Kafka does.
            seen = self.auth.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                     [t for t, _ in answer["partitions"]])
            for topic, partition in answer["partitions"]:
                if topic in seen:
                    by_topic.setdefault(topic, []).append(partition)
            states.append({
                "error_code": 0, "transactional_id": transactional_id,
                "transaction_state": answer["state"],
                "transaction_timeout": answer["transaction_timeout_ms"],
                "transaction_start_time": answer["transaction_start_time_ms"],
                "producer_id": answer["producer_id"],
                "producer_epoch": answer["producer_epoch"],
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        return build(response_class(request), {"throttle_time": 0,
                                               "transaction_states": states})

    async def list_transactions(self, request: Request):
        """The transactions this broker coordinates, filtered by state, producer id and
        (v1) how long they have been open."""
        body = request.body
        answer = await self._call("list_transactions", list(body.producer_id_filters),
                                  list(body.state_filters),
                                  int(getattr(body, "duration_filter", -1)))
        if isinstance(answer, KafkaError):
            return build(response_class(request), {"throttle_time": 0,
                                                   "error_code": answer.code,
                                                   "unknown_state_filters": [],
                                                   "transaction_states": []})
        unknown, listed = answer
        seen = self.auth.allowed(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                 [t["transactional_id"] for t in listed])
        listed = [t for t in listed if t["transactional_id"] in seen]
        return build(response_class(request), {
            "throttle_time": 0, "error_code": 0, "unknown_state_filters": list(unknown),
            "transaction_states": [{"transactional_id": t["transactional_id"],
                                    "producer_id": t["producer_id"],
                                    "transaction_state": t["state"]} for t in listed]})
