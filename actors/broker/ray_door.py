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
    the salts and keys never leave the broker)."""
    def allowed(operation: AclOperation) -> set[str]:
        return {name for name in image.get("topics", {})
                if authorize(operation, ResourceType.TOPIC, name)}
    described, configured = allowed(AclOperation.DESCRIBE), allowed(
        AclOperation.DESCRIBE_CONFIGS)
    out = {k: v for k, v in image.items() if k not in ("acls", "scram_credentials")}
    for part, names in (("topics", described), ("topic_ids", described),
                        ("configs", configured), ("topic_configs", configured)):
        if isinstance(image.get(part), Mapping):
            out[part] = {n: v for n, v in image[part].items() if n in names}
    if authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        from actors.controller.scram_credentials import iterations_of
        out["acls"] = image.get("acls") or []
        out["scram_users"] = iterations_of(image.get("scram_credentials"))
    return out


def topic_refusals(authorize: Authorize, operation: AclOperation, topics: Iterable[str]
                   ) -> dict[str, KafkaError]:
    """TOPIC_AUTHORIZATION_FAILED for each topic the principal may not do ``operation`` on
    (DESCRIBE for DescribeTopics, DESCRIBE_CONFIGS for DescribeConfigs): the same answer
    for a topic there or not."""
    return {t: _topic_denied() for t in topics
            if not authorize(operation, ResourceType.TOPIC, t)}


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
