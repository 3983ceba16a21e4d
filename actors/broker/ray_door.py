"""The Ray door: who rafka's own clients are, and what they may do (issue 43, step 4).

rafka's clients reach the cluster through Ray, not through a Kafka listener. A client
configured with Kafka's SASL settings proves its user to a broker with the exchange a SASL
listener runs (PLAIN or SCRAM, ``protocols.kafka.sasl.SaslServer``, carried by Ray calls)
and gets a session: an unguessable id the broker keeps, with the principal, until it is idle
for ``connections.max.idle.ms`` or reaches its mechanism's ``connections.max.reauth.ms``.
Its requests then name the session, and the broker checks them with the authorizer the
listeners use before passing them on. A client without credentials is ``User:ANONYMOUS``,
as on a PLAINTEXT listener.

Plain values in and out, the clock and the ids injected: the broker actor does the calls.
"""
from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from protocols.errors import KafkaError, SaslAuthenticationError
from protocols.kafka.acl import CLUSTER_NAME, AclOperation, ResourceType

ANONYMOUS = "User:ANONYMOUS"
# Sessions (and exchanges under way) kept at most: the least recently used go first.
MAX_SESSIONS = 10_000

# (operation, resource type, resource name) -> may the principal do it.
Authorize = Callable[[AclOperation, ResourceType, str], bool]


@dataclass(frozen=True)
class Access:
    """One request's principal's rights: ``authorize``, and Kafka's authorizeByResourceType
    (may it do the operation on some resource of the type)."""
    authorize: Authorize
    by_resource_type: Callable[[AclOperation, ResourceType], bool]


def session_unknown() -> SaslAuthenticationError:
    return SaslAuthenticationError("Ray door session unknown or expired: authenticate again")


@dataclass
class _Session:
    principal: str
    expires_ms: int | None     # connections.max.reauth.ms: None, for ever
    used_ms: int


class RayDoorSessions:
    """Exchanges under way (the SaslServer of each, by id) and open sessions (by id)."""

    def __init__(self, idle_ms: int, new_id: Callable[[], str] = lambda:
                 secrets.token_urlsafe(32), max_sessions: int = MAX_SESSIONS):
        self.idle_ms = idle_ms
        self.new_id = new_id
        self.max_sessions = max_sessions
        self._exchanges: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def begin(self, server: Any, now_ms: int) -> str:
        """A new exchange's id (``server``: its SaslServer, the mechanism chosen)."""
        exchange = self.new_id()
        self._exchanges[exchange] = (server, now_ms)
        self._trim(self._exchanges)
        return exchange

    def exchange(self, exchange: str, now_ms: int) -> Any | None:
        """The exchange's SaslServer; None when unknown or idle too long."""
        found = self._exchanges.get(exchange)
        if found is None or now_ms - found[1] > self.idle_ms:
            self._exchanges.pop(exchange, None)
            return None
        self._exchanges[exchange] = (found[0], now_ms)
        return found[0]

    def finish(self, exchange: str) -> None:
        self._exchanges.pop(exchange, None)

    def open(self, principal: str, lifetime_ms: int, now_ms: int) -> str:
        session = self.new_id()
        self._sessions[session] = _Session(principal, now_ms + lifetime_ms if lifetime_ms
                                           else None, now_ms)
        self._trim(self._sessions)
        return session

    def principal(self, session: str | None, now_ms: int) -> str:
        """The session's principal (``ANONYMOUS`` for no session); raises
        SaslAuthenticationError for a session unknown, idle too long or past its lifetime."""
        if session is None:
            return ANONYMOUS
        found = self._sessions.get(session)
        if found is None or now_ms - found.used_ms > self.idle_ms or (
                found.expires_ms is not None and now_ms >= found.expires_ms):
            self._sessions.pop(session, None)
            raise session_unknown()
        found.used_ms = now_ms
        self._sessions.move_to_end(session)
        return found.principal

    def close(self, session: str) -> None:
        self._sessions.pop(session, None)

    def _trim(self, table: OrderedDict) -> None:
        while len(table) > self.max_sessions:
            table.popitem(last=False)


# ---- what each request needs (Kafka's KafkaApis checks for the same request) --------------
def _topic_denied() -> KafkaError:
    from actors.broker.listener.auth_helper import topic_denied
    return topic_denied()


def _cluster_denied() -> KafkaError:
    from actors.broker.listener.auth_helper import cluster_denied
    return cluster_denied()


def _on_topic(operation: AclOperation):
    def check(access: Access, name: str, *_args: Any) -> KafkaError | None:
        return None if access.authorize(operation, ResourceType.TOPIC, name) \
            else _topic_denied()
    return check


def _on_cluster(operation: AclOperation):
    def check(access: Access, *_args: Any) -> KafkaError | None:
        return None if access.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME) \
            else _cluster_denied()
    return check


def _create_topic(access: Access, name: str, *_args: Any) -> KafkaError | None:
    # CreateTopics: CREATE on the cluster, else on the topic.
    if access.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) \
            or access.authorize(AclOperation.CREATE, ResourceType.TOPIC, name):
        return None
    return _topic_denied()


def _delete_topic(access: Access, name: str, *_args: Any) -> KafkaError | None:
    # DeleteTopics: DELETE on the cluster, or DESCRIBE and DELETE on the topic.
    if access.authorize(AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME) or (
            access.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
            and access.authorize(AclOperation.DELETE, ResourceType.TOPIC, name)):
        return None
    return _topic_denied()


def _init_producer_id(access: Access, *_args: Any) -> KafkaError | None:
    # An idempotent producer's InitProducerId (no transactional id): IDEMPOTENT_WRITE on
    # the cluster, or WRITE on some topic (KIP-679).
    if access.authorize(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME) \
            or access.by_resource_type(AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return _cluster_denied()


# The controller's methods rafka's clients call, and the check Kafka makes for the request.
CONTROLLER_CHECKS: Mapping[str, Callable[..., KafkaError | None]] = {
    "init_producer_id": _init_producer_id,
    "create_topic": _create_topic,
    "delete_topic": _delete_topic,
    "create_partitions": _on_topic(AclOperation.ALTER),
    "alter_topic_config": _on_topic(AclOperation.ALTER_CONFIGS),
    "describe_topic": _on_topic(AclOperation.DESCRIBE),
    "reassign_partitions": _on_cluster(AclOperation.ALTER),
    "elect_preferred_leaders": _on_cluster(AclOperation.ALTER),
    "alter_user_scram_credentials": _on_cluster(AclOperation.ALTER),
    "alter_client_quotas": _on_cluster(AclOperation.ALTER_CONFIGS),
    "create_acls": _on_cluster(AclOperation.ALTER),
    "delete_acls": _on_cluster(AclOperation.ALTER),
}


def controller_refusal(access: Access, method: str, args: Iterable[Any]
                       ) -> KafkaError | None:
    """Why the controller's ``method(*args)`` is refused, or None; a method the door does not
    pass on is an InvalidRequestError."""
    check = CONTROLLER_CHECKS.get(method)
    if check is None:
        from protocols.errors import InvalidRequestError
        return InvalidRequestError(f"{method} is not a request rafka's clients make")
    return check(access, *args)


def visible_image(image: Mapping[str, Any], authorize: Authorize) -> dict:
    """The metadata image as the principal may see it: the topics it may DESCRIBE (as
    Metadata answers), the configs of those it may DESCRIBE_CONFIGS, and with DESCRIBE on
    the cluster the ACLs and the SCRAM users' mechanisms and iterations (``scram_users``;
    the salts and keys never leave the broker), with DESCRIBE_CONFIGS on it the client
    quotas."""
    def allowed(operation: AclOperation) -> set[str]:
        return {name for name in image.get("topics", {})
                if authorize(operation, ResourceType.TOPIC, name)}
    described, configured = allowed(AclOperation.DESCRIBE), allowed(
        AclOperation.DESCRIBE_CONFIGS)
    out = {k: v for k, v in image.items()
           if k not in ("acls", "scram_credentials", "client_quotas")}
    for part, names in (("topics", described), ("topic_ids", described),
                        ("configs", configured), ("topic_configs", configured)):
        if isinstance(image.get(part), Mapping):
            out[part] = {n: v for n, v in image[part].items() if n in names}
    if authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        from actors.controller.scram_credentials import iterations_of
        out["acls"] = image.get("acls") or []
        out["scram_users"] = iterations_of(image.get("scram_credentials"))
    if authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        out["client_quotas"] = image.get("client_quotas") or []   # DescribeClientQuotas'
    return out


def topic_refusals(authorize: Authorize, operation: AclOperation, topics: Iterable[str]
                   ) -> dict[str, KafkaError]:
    """TOPIC_AUTHORIZATION_FAILED for each topic the principal may not do ``operation`` on
    (DESCRIBE for DescribeTopics, DESCRIBE_CONFIGS for DescribeConfigs): the same answer
    for a topic there or not."""
    return {t: _topic_denied() for t in topics
            if not authorize(operation, ResourceType.TOPIC, t)}


# ---- the group and transaction coordinators ------------------------------------------------
GROUP, TXN = "group", "txn"
# What a post-check does to an answer: keep only what the principal may see.
Filter = Callable[[Any], Any]


def _group_denied() -> KafkaError:
    from actors.broker.listener.auth_helper import group_denied
    return group_denied()


def _txn_denied() -> KafkaError:
    from actors.broker.listener.auth_helper import transactional_id_denied
    return transactional_id_denied()


def _may(access: Access, operation: AclOperation, resource_type: ResourceType, name: str,
         denied: Callable[[], KafkaError]) -> KafkaError | None:
    return None if access.authorize(operation, resource_type, name) else denied()


def _topics(access: Access, operation: AclOperation, rows: Iterable) -> KafkaError | None:
    """TOPIC_AUTHORIZATION_FAILED unless every row's topic (its first field) is allowed: a
    coordinator answers such a request with one error, so the refusal is the request's."""
    for topic in {row[0] for row in rows}:
        if not access.authorize(operation, ResourceType.TOPIC, topic):
            return _topic_denied()
    return None


def _first(*checks):
    for check in checks:
        error = check()
        if error is not None:
            return error
    return None


def _group_read(access: Access, group_id: str, *_args: Any):
    return _may(access, AclOperation.READ, ResourceType.GROUP, group_id, _group_denied)


def _commit_offsets(access: Access, group_id: str, _member: str, _generation: int,
                    rows: list, *_args: Any):
    # OffsetCommit: READ on the group, READ on each topic.
    return _first(lambda: _group_read(access, group_id),
                  lambda: _topics(access, AclOperation.READ, rows))


def _txn_write(access: Access, transactional_id: str, *_args: Any):
    return _may(access, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id,
                _txn_denied)


def _txn_commit_offsets(access: Access, transactional_id: str, group_id: str, _pid: int,
                        _epoch: int, _member: str, _generation: int, rows: list,
                        *_args: Any):
    # TxnOffsetCommit: WRITE on the transactional id, READ on the group and each topic.
    return _first(lambda: _txn_write(access, transactional_id),
                  lambda: _group_read(access, group_id),
                  lambda: _topics(access, AclOperation.READ, rows))


def _fetch_offsets(access: Access, group_id: str, partitions: list | None = None,
                   *_args: Any):
    # OffsetFetch: DESCRIBE on the group; the partitions named, DESCRIBE on their topics
    # (all of them: filtered from the answer, as Kafka leaves them out).
    return _first(lambda: _may(access, AclOperation.DESCRIBE, ResourceType.GROUP, group_id,
                               _group_denied),
                  lambda: None if partitions is None else
                  _topics(access, AclOperation.DESCRIBE, partitions))


def _fetch_offsets_filter(access: Access, _group_id: str, partitions: list | None = None,
                          *_args: Any) -> Filter | None:
    if partitions is not None:
        return None
    return lambda answer: answer if isinstance(answer, KafkaError) else [
        row for row in answer
        if access.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, row[0])]


def _on_group(operation: AclOperation):
    def check(access: Access, group_id: str, *_args: Any):
        return _may(access, operation, ResourceType.GROUP, group_id, _group_denied)
    return check


def _delete_offsets(access: Access, group_id: str, partitions: list, *_args: Any):
    # OffsetDelete: DELETE on the group, READ on each topic.
    return _first(lambda: _may(access, AclOperation.DELETE, ResourceType.GROUP, group_id,
                               _group_denied),
                  lambda: _topics(access, AclOperation.READ, partitions))


def _list_groups_filter(access: Access, *_args: Any) -> Filter | None:
    # ListGroups: every group with DESCRIBE on the cluster, else those it may DESCRIBE.
    if access.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    return lambda answer: answer if isinstance(answer, KafkaError) else [
        row for row in answer
        if access.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, row[0])]


def _add_partitions(access: Access, transactional_id: str, _pid: int, _epoch: int,
                    partitions: list, *_args: Any):
    # AddPartitionsToTxn: WRITE on the transactional id and on each topic.
    return _first(lambda: _txn_write(access, transactional_id),
                  lambda: _topics(access, AclOperation.WRITE, partitions))


def _add_offsets(access: Access, transactional_id: str, _pid: int, _epoch: int,
                 group_id: str, *_args: Any):
    # AddOffsetsToTxn: WRITE on the transactional id, READ on the group.
    return _first(lambda: _txn_write(access, transactional_id),
                  lambda: _group_read(access, group_id))


def _describe_txn(access: Access, transactional_id: str, *_args: Any):
    return _may(access, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id,
                _txn_denied)


def _describe_txn_filter(access: Access, *_args: Any) -> Filter:
    # DescribeTransactions: the partitions of topics the principal may DESCRIBE.
    def keep(answer):
        if isinstance(answer, KafkaError) or not isinstance(answer, Mapping):
            return answer
        return {**answer, "partitions": [tp for tp in answer.get("partitions", ())
                                         if access.authorize(AclOperation.DESCRIBE,
                                                             ResourceType.TOPIC, tp[0])]}
    return keep


def _list_transactions_filter(access: Access, *_args: Any) -> Filter:
    # ListTransactions: the transactional ids the principal may DESCRIBE.
    def keep(answer):
        if isinstance(answer, KafkaError):
            return answer
        unknown, listed = answer
        return unknown, [t for t in listed if access.authorize(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t["transactional_id"])]
    return keep


def _allowed(*_args: Any) -> None:
    return None


# (coordinator, method) -> (the check before, the filter of the answer or None).
COORDINATOR_CHECKS: Mapping[tuple[str, str], tuple[Callable[..., KafkaError | None],
                                                   Callable[..., Filter | None]]] = {
    (GROUP, "join_group"): (_group_read, _allowed),
    (GROUP, "sync_group"): (_group_read, _allowed),
    (GROUP, "heartbeat"): (_group_read, _allowed),
    (GROUP, "leave_group"): (_group_read, _allowed),
    (GROUP, "commit_offsets"): (_commit_offsets, _allowed),
    (GROUP, "txn_commit_offsets"): (_txn_commit_offsets, _allowed),
    (GROUP, "fetch_offsets"): (_fetch_offsets, _fetch_offsets_filter),
    (GROUP, "describe_group"): (_on_group(AclOperation.DESCRIBE), _allowed),
    (GROUP, "list_groups"): (_allowed, _list_groups_filter),
    (GROUP, "delete_offsets"): (_delete_offsets, _allowed),
    (GROUP, "delete_group"): (_on_group(AclOperation.DELETE), _allowed),
    (TXN, "init_producer_id"): (_txn_write, _allowed),
    (TXN, "add_partitions_to_txn"): (_add_partitions, _allowed),
    (TXN, "add_offsets_to_txn"): (_add_offsets, _allowed),
    (TXN, "end_txn"): (_txn_write, _allowed),
    (TXN, "describe_transaction"): (_describe_txn, _describe_txn_filter),
    (TXN, "list_transactions"): (_allowed, _list_transactions_filter),
}


def coordinator_refusal(access: Access, kind: str, method: str, args: list
                        ) -> tuple[KafkaError | None, Filter | None]:
    """(why the coordinator's ``method(*args)`` is refused, or None; what to keep of its
    answer, or None for all of it)."""
    checks = COORDINATOR_CHECKS.get((kind, method))
    if checks is None:
        from protocols.errors import InvalidRequestError
        return InvalidRequestError(f"{method} is not a request rafka's clients make of a "
                                   f"{kind} coordinator"), None
    before, after = checks
    refusal = before(access, *args)
    return refusal, (None if refusal is not None else after(access, *args))


def find_coordinator_refusal(access: Access, key: str, key_type: int) -> KafkaError | None:
    """FindCoordinator: DESCRIBE on the group or the transactional id."""
    from protocols.topics import TRANSACTION_KEY_TYPE
    if key_type == TRANSACTION_KEY_TYPE:
        return _describe_txn(access, key)
    return _on_group(AclOperation.DESCRIBE)(access, key)


# ---- the replica hosts' other requests (rafka.Admin's) --------------------------------------
def _delete_records(access: Access, topic: str, *_args: Any):
    return None if access.authorize(AclOperation.DELETE, ResourceType.TOPIC, topic) \
        else _topic_denied()


def _describe_producers(access: Access, partitions: list, *_args: Any):
    return _topics(access, AclOperation.READ, partitions)


HOST_CHECKS: Mapping[str, Callable[..., KafkaError | None]] = {
    "delete_records": _delete_records,                    # DeleteRecords: DELETE
    "describe_producers_many": _describe_producers,       # DescribeProducers: READ
    # WriteTxnMarkers (rafka.Admin.abort_transaction): CLUSTER_ACTION.
    "write_txn_markers_many": _on_cluster(AclOperation.CLUSTER_ACTION),
}


def host_refusal(access: Access, method: str, args: list) -> KafkaError | None:
    check = HOST_CHECKS.get(method)
    if check is None:
        from protocols.errors import InvalidRequestError
        return InvalidRequestError(f"{method} is not a request rafka's clients make of a "
                                   "replica host through the broker")
    return check(access, *args)


def door_sasl_config(broker: Mapping[str, Any], listener_configs: Mapping[str, Any],
                     scram: Callable[[str, str], Any] | None):
    """The door's SaslConfig: SCRAM-SHA-256 and -512 (the cluster's users, as every SCRAM
    listener checks them), and PLAIN with the users of the SASL listeners' PLAIN
    ``sasl.jaas.config`` (a user named by several: the first listener's, in ``listeners``
    order). Sessions live ``connections.max.reauth.ms`` (0: until idle)."""
    from protocols.kafka.sasl import MECHANISMS, PLAIN, SaslConfig
    users: dict[str, str] = {}
    for config in listener_configs.values():
        for user, password in config.plain_users.items():
            users.setdefault(user, password)
    mechanisms = tuple(m for m in MECHANISMS if m != PLAIN or users)
    lifetime = int(broker["connections.max.reauth.ms"])
    return SaslConfig(mechanisms, users, {m: lifetime for m in mechanisms},
                      int(broker["sasl.server.max.receive.size"]), scram)
