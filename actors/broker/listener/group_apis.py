"""The consumer-group APIs of the Kafka listener (part of Kafka's KafkaApis): FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch and OffsetDelete,
answered by the same group coordinator actors rafka's own consumers call
(``actors.group_coordinator``), so wire clients' groups and offsets are the cluster's groups and
offsets.

A group's coordinator is the broker leading its ``__consumer_offsets`` partition; a request
for a group reaching another broker is answered NOT_COORDINATOR by its coordinator actor,
as Kafka does, and the client asks FindCoordinator again.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from actors.broker.listener.auth_helper import (AuthHelper, group_denied, topic_denied,
                                                transactional_id_denied)
from protocols.errors import CoordinatorNotAvailableError, KafkaError
from protocols.kafka.acl import AclOperation, ResourceType
from protocols.kafka.codec import Request, build, response_class
from protocols.topics import GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE
from protocols.wire import decode

log = logging.getLogger(__name__)



def _code(error: KafkaError | None) -> int:
    return 0 if error is None else error.code


def _ms(value) -> int:
    return int(value.total_seconds() * 1000)


async def call_coordinator(coordinator: Callable[[], Awaitable[Any]], method: str,
                           *args) -> Any:
    """A group coordinator call's decoded answer; COORDINATOR_NOT_AVAILABLE when the actor is
    not there to ask (the client finds the coordinator again)."""
    try:
        handle = await coordinator()
        return decode(await getattr(handle, method).remote(*args))
    except KafkaError as e:
        return e
    except Exception as e:
        log.info("group coordinator call %s failed: %r", method, e)
        return CoordinatorNotAvailableError(str(e))


class GroupApis:
    def __init__(self, broker_id: int, coordinator: Callable[[], Awaitable[Any]],
                 find: Callable[[str, int], Awaitable[bytes]],
                 endpoint: Callable[[int, str], tuple[str, int] | None],
                 auth: AuthHelper | None = None):
        self.broker_id = broker_id
        self.auth = auth or AuthHelper(dict)   # who may do what (authorizer.class.name)
        self.coordinator = coordinator   # this broker's GroupCoordinatorActor
        self.find = find     # BrokerActor.find_coordinator(key, key type): broker id or error
        self.endpoint = endpoint         # a broker's (host, port) on a listener

    async def _call(self, method: str, *args) -> Any:
        return await call_coordinator(self.coordinator, method, *args)

    def _may_read(self, request: Request, group_id: str) -> bool:
        return self.auth.authorize(request, AclOperation.READ, ResourceType.GROUP, group_id)

    def _topics(self, request: Request, operation: AclOperation, topics) -> set[str]:
        """The names among the request's ``topics`` it may do ``operation`` on."""
        return self.auth.allowed(request, operation, ResourceType.TOPIC,
                                 [t.name for t in topics])

    # ---- FindCoordinator -------------------------------------------------------------------
    def _refused(self, request: Request, key: str, key_type: int) -> KafkaError | None:
        """DESCRIBE on the group (or transactional id) whose coordinator is asked for."""
        if key_type == TRANSACTION_KEY_TYPE:
            return None if self.auth.authorize(
                request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key) \
                else transactional_id_denied()
        return None if self.auth.authorize(request, AclOperation.DESCRIBE,
                                           ResourceType.GROUP, key) else group_denied()

    async def _coordinator_of(self, key: str, key_type: int, listener: str,
                              refused: KafkaError | None = None) -> dict:
        try:
            answer = refused or decode(await self.find(key, key_type))
        except Exception as e:
            answer = CoordinatorNotAvailableError(str(e))
        error = answer if isinstance(answer, KafkaError) else None
        node = None if error else answer
        where = self.endpoint(node, listener) if node is not None else None
        if node is not None and where is None:
            error = CoordinatorNotAvailableError(f"Broker {node} has no endpoint here")
        return {"key": key, "node_id": node if where else -1,
                "host": where[0] if where else "", "port": where[1] if where else -1,
                "error_code": _code(error), "error_message": str(error) if error else None}

    async def find_coordinator(self, request: Request):
        body = request.body
        key_type = int(getattr(body, "key_type", GROUP_KEY_TYPE))
        # A transactional id's coordinator (key type 1) is found from v1 on.
        if request.api_version >= 4:
            coordinators = []
            for k in body.coordinator_keys:
                refused = self._refused(request, k, key_type)
                one = await self._coordinator_of(k, key_type, request.listener, refused)
                if refused is not None:   # v4+: a refused key's message is null in Kafka
                    one["error_message"] = None
                coordinators.append(one)
            return build(response_class(request), {"throttle_time": 0,
                                                   "coordinators": coordinators})
        one = await self._coordinator_of(body.key, key_type, request.listener,
                                         self._refused(request, body.key, key_type))
        return build(response_class(request), {"throttle_time": 0, **one})

    # ---- the group protocol ----------------------------------------------------------------
    async def join_group(self, request: Request):
        body = request.body
        session_ms = _ms(body.session_timeout)
        # v0 had no rebalance timeout: the session timeout served as both.
        rebalance_ms = _ms(getattr(body, "rebalance_timeout", body.session_timeout))
        if not self._may_read(request, body.group_id):
            return build(response_class(request), {
                "error_code": group_denied().code, "generation_id": -1, "member_id": "",
                "leader": "", "protocol_name": None, "members": []})
        answer = await self._call(
            "join_group", body.group_id, body.member_id, body.protocol_type,
            [(p.name, p.metadata) for p in body.protocols], request.client_id or "",
            getattr(body, "group_instance_id", None), session_ms, rebalance_ms)
        if isinstance(answer, KafkaError):
            return build(response_class(request), {
                "error_code": answer.code, "generation_id": -1, "member_id": body.member_id,
                "leader": "", "protocol_name": None, "members": []})
        return build(response_class(request), {
            "throttle_time": 0, "error_code": _code(answer.error),
            "generation_id": answer.generation_id,
            "protocol_type": body.protocol_type if answer.error is None else None,
            "protocol_name": answer.protocol_name, "leader": answer.leader_id,
            "member_id": answer.member_id,
            "members": [{"member_id": m, "group_instance_id": instance, "metadata": meta}
                        for m, instance, meta in answer.members]})

    async def sync_group(self, request: Request):
        body = request.body
        assignments = {a.member_id: a.assignment for a in body.assignments} or None
        if not self._may_read(request, body.group_id):
            return build(response_class(request), {
                "throttle_time": 0, "error_code": group_denied().code,
                "protocol_type": None, "protocol_name": None, "assignment": b""})
        answer = await self._call("sync_group", body.group_id, body.member_id,
                                  int(body.generation_id), assignments,
                                  getattr(body, "group_instance_id", None))
        error = answer if isinstance(answer, KafkaError) else answer.error
        return build(response_class(request), {
            "throttle_time": 0, "error_code": _code(error),
            "protocol_type": getattr(body, "protocol_type", None) if error is None else None,
            "protocol_name": None if error else answer.protocol_name,
            "assignment": b"" if error else (answer.assignment or b"")})

    async def heartbeat(self, request: Request):
        body = request.body
        if not self._may_read(request, body.group_id):
            return build(response_class(request), {"throttle_time": 0,
                                                   "error_code": group_denied().code})
        answer = await self._call("heartbeat", body.group_id, body.member_id,
                                  int(body.generation_id),
                                  getattr(body, "group_instance_id", None))
        return build(response_class(request), {"throttle_time": 0, "error_code": _code(
            answer)})

    async def leave_group(self, request: Request):
        body = request.body
        if not self._may_read(request, body.group_id):
            return build(response_class(request), {"throttle_time": 0, "members": [],
                                                   "error_code": group_denied().code})
        if request.api_version < 3:
            answer = await self._call("leave_group", body.group_id, body.member_id)
            return build(response_class(request), {"throttle_time": 0,
                                                   "error_code": _code(answer)})
        members = []
        for m in body.members:   # v3+: a batch (static members leaving at once)
            answer = await self._call("leave_group", body.group_id, m.member_id,
                                      m.group_instance_id)
            members.append({"member_id": m.member_id,
                             "group_instance_id": m.group_instance_id,
                             "error_code": _code(answer)})
        return build(response_class(request), {"throttle_time": 0, "error_code": 0,
                                               "members": members})

    # ---- offsets ---------------------------------------------------------------------------
    async def offset_commit(self, request: Request):
        """OffsetCommit: READ on the group (every partition GROUP_AUTHORIZATION_FAILED
        without it), then READ on each topic (its partitions TOPIC_AUTHORIZATION_FAILED
        without it; the others committed)."""
        body = request.body
        if not self._may_read(request, body.group_id):
            return _offsets_answer(request, body.topics, refused=group_denied().code)
        allowed = self._topics(request, AclOperation.READ, body.topics)
        offsets = [(t.name, p.partition_index, int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata or "")
                   for t in body.topics if t.name in allowed for p in t.partitions]
        generation = int(getattr(body, "generation_id_or_member_epoch",
                                 getattr(body, "generation_id", -1)))
        code = 0
        if offsets or _all_named(body.topics, allowed):
            code = _code(await self._call("commit_offsets", body.group_id,
                                          body.member_id or "", generation, offsets,
                                          getattr(body, "group_instance_id", None)))
        return _offsets_answer(request, body.topics, allowed, code)

    async def txn_offset_commit(self, request: Request):
        """TxnOffsetCommit: offsets committed in the producer's transaction (held pending
        by the group coordinator until the transaction's marker settles them)."""
        body = request.body
        if not self.auth.authorize(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                   body.transactional_id):
            return _offsets_answer(request, body.topics,
                                   refused=transactional_id_denied().code)
        if not self._may_read(request, body.group_id):
            return _offsets_answer(request, body.topics, refused=group_denied().code)
        allowed = self._topics(request, AclOperation.READ, body.topics)
        offsets = [(t.name, p.partition_index, int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata or "")
                   for t in body.topics if t.name in allowed for p in t.partitions]
        code = 0
        if offsets or _all_named(body.topics, allowed):
            code = _code(await self._call(
                "txn_commit_offsets", body.transactional_id, body.group_id,
                int(body.producer_id), int(body.producer_epoch),
                getattr(body, "member_id", "") or "", int(getattr(body, "generation_id", -1)),
                offsets, getattr(body, "group_instance_id", None)))
        return _offsets_answer(request, body.topics, allowed, code)

    async def _group_offsets(self, request: Request, group_id: str, topics,
                             require_stable: bool) -> dict:
        """One group's committed offsets: DESCRIBE on the group, and on each topic (named
        topics refused TOPIC_AUTHORIZATION_FAILED; of all the group's, those refused left
        out)."""
        if not self.auth.authorize(request, AclOperation.DESCRIBE, ResourceType.GROUP,
                                   group_id):
            return {"group_id": group_id, "error_code": group_denied().code, "topics": []}
        allowed = set() if topics is None else \
            self._topics(request, AclOperation.DESCRIBE, topics)
        partitions = None if topics is None else [
            (t.name, p) for t in topics if t.name in allowed
            for p in (getattr(t, "partition_indexes", None) or ())]
        answer = await self._call("fetch_offsets", group_id, partitions, require_stable) \
            if partitions is None or partitions or _all_named(topics, allowed) else []
        if isinstance(answer, KafkaError):
            return {"group_id": group_id, "error_code": answer.code, "topics": []}
        if topics is None:
            seen = self.auth.allowed(request, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                     [found[0] for found in answer])
            answer = [found for found in answer if found[0] in seen]
        by_topic: dict[str, list] = {}
        for t in topics or ():
            if t.name not in allowed:
                by_topic[t.name] = [{"partition_index": p, "committed_offset": -1,
                                     "committed_leader_epoch": -1, "metadata": "",
                                     "error_code": topic_denied().code}
                                    for p in (getattr(t, "partition_indexes", None) or ())]
        for topic, partition, *found in answer:
            if len(found) == 1:        # an offset pending in an open transaction
                entry = {"committed_offset": -1, "committed_leader_epoch": -1,
                         "metadata": "", "error_code": found[0].code}
            else:
                offset, epoch, metadata = found
                entry = {"committed_offset": offset, "committed_leader_epoch": epoch,
                         "metadata": metadata, "error_code": 0}
            by_topic.setdefault(topic, []).append({"partition_index": partition, **entry})
        return {"group_id": group_id, "error_code": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def offset_fetch(self, request: Request):
        body = request.body
        # v7+: a read_committed consumer asks for stable offsets only (KIP-447).
        stable = bool(getattr(body, "require_stable", False))
        if request.api_version >= 8:
            groups = [await self._group_offsets(request, g.group_id, g.topics, stable)
                      for g in body.groups]
            return build(response_class(request), {"throttle_time": 0, "groups": groups})
        one = await self._group_offsets(request, body.group_id, body.topics, stable)
        return build(response_class(request), {"throttle_time": 0, **one})

    async def offset_delete(self, request: Request):
        """OffsetDelete: DELETE on the group, READ on each topic."""
        body = request.body
        if not self.auth.authorize(request, AclOperation.DELETE, ResourceType.GROUP,
                                   body.group_id):
            return build(response_class(request), {"error_code": group_denied().code,
                                                   "throttle_time": 0, "topics": []})
        allowed = self._topics(request, AclOperation.READ, body.topics)
        wanted = [(t.name, p.partition_index) for t in body.topics if t.name in allowed
                  for p in t.partitions]
        answer = await self._call("delete_offsets", body.group_id, wanted) \
            if wanted or _all_named(body.topics, allowed) else []
        if isinstance(answer, KafkaError):
            return build(response_class(request), {"error_code": answer.code,
                                                   "throttle_time": 0, "topics": []})
        by_topic: dict[str, list] = {}
        for t in body.topics:
            if t.name not in allowed:
                by_topic[t.name] = [{"partition_index": p.partition_index,
                                     "error_code": topic_denied().code}
                                    for p in t.partitions]
        for topic, partition, code in answer:
            by_topic.setdefault(topic, []).append({"partition_index": partition,
                                                   "error_code": code})
        return build(response_class(request), {"error_code": 0, "throttle_time": 0, "topics": [
            {"name": t, "partitions": ps} for t, ps in by_topic.items()]})


def _all_named(topics, allowed: set[str]) -> bool:
    """Whether every topic a request names is allowed (always so without an authorizer:
    the coordinator is then asked even for no partitions, and answers for the group)."""
    return all(t.name in allowed for t in topics)


def _offsets_answer(request: Request, topics, allowed: set[str] = frozenset(),
                    code: int = 0, refused: int | None = None):
    """An OffsetCommit / TxnOffsetCommit answer: ``code`` for each partition of a topic in
    ``allowed``, TOPIC_AUTHORIZATION_FAILED for the others; ``refused`` (the group's or
    transactional id's error) for every partition."""
    def partition_code(name: str) -> int:
        if refused is not None:
            return refused
        return code if name in allowed else topic_denied().code
    return build(response_class(request), {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": partition_code(t.name)}
                                        for p in t.partitions]}
        for t in topics]})
