"""The broker's side of the Ray door (``actors.broker.ray_door``): rafka's own clients sign in
here over Ray calls and pass their Admin requests through here, checked as the listeners
check Kafka's. The decisions are in ``ray_door``; this shell keeps the sessions, waits the
failed-authentication delay, and calls the controller."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from actors.broker.ray_door import (GROUP, Access, RayDoorSessions, controller_refusal,
                                    coordinator_refusal, find_coordinator_refusal,
                                    host_refusal, topic_refusals, visible_image)
from protocols.errors import KafkaError, SaslAuthenticationError
from protocols.kafka.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DoorCaller:
    """What AuthHelper asks of a request: who, and from where (the client's node address,
    as the client gives it: Ray does not tell the callee who called)."""
    principal: str
    host: str


def _now_ms() -> int:
    return int(time.time() * 1000)


def _host_gone(error: Exception) -> KafkaError:
    """A replica host that died under a request: retriable, the leader located again."""
    from protocols.errors import NotLeaderOrFollowerError
    return NotLeaderOrFollowerError(f"The replica host went away: {error!r}")


class RayDoorApis:
    def __init__(self, broker_id: int, sasl_config: Any, auth: Any,
                 controller_call: Callable[..., Awaitable[Any]],
                 idle_ms: int, failed_delay_ms: int, now_ms: Callable[[], int] = _now_ms,
                 namespace: str = "",
                 find_coordinator: Callable[..., Awaitable[bytes]] | None = None):
        self.broker_id = broker_id
        self.namespace = namespace
        self.find_coordinator_call = find_coordinator
        self.sasl_config = sasl_config
        self.auth = auth
        self.controller_call = controller_call
        self.failed_delay_s = failed_delay_ms / 1000
        self.now_ms = now_ms
        self.sessions = RayDoorSessions(idle_ms)

    async def authenticate(self, exchange: str | None, mechanism: str, token: bytes
                           ) -> tuple[str | None, bytes, str | None, KafkaError | None]:
        """One step of a SASL exchange: (the exchange's id, the server's bytes, the session
        once complete, the error that ended it)."""
        from protocols.kafka.sasl import SaslServer
        now = self.now_ms()
        if not isinstance(token, bytes) or len(token) > self.sasl_config.max_receive_size:
            return None, b"", None, SaslAuthenticationError(
                "A SASL token of at most sasl.server.max.receive.size "
                f"({self.sasl_config.max_receive_size}) bytes was expected")
        if exchange is None:
            server = SaslServer(self.sasl_config)
            outcome = server.handshake(mechanism)
            if outcome.error is not None:
                return None, b"", None, outcome.error
            exchange = self.sessions.begin(server, now)
        else:
            server = self.sessions.exchange(exchange, now)
            if server is None:
                return None, b"", None, SaslAuthenticationError(
                    "Ray door authentication unknown or idle too long: start again")
        outcome = server.authenticate(bytes(token))
        if outcome.error is not None:
            self.sessions.finish(exchange)
            log.info("broker %d: Ray door authentication failed (%s): %s", self.broker_id,
                     mechanism, outcome.error)
            # connection.failed.authentication.delay.ms, as a listener delays its close.
            await asyncio.sleep(self.failed_delay_s)
            return None, b"", None, outcome.error
        if not server.complete:
            return exchange, outcome.auth_bytes, None, None
        self.sessions.finish(exchange)
        session = self.sessions.open(server.principal, server.lifetime_ms, now)
        return None, outcome.auth_bytes, session, None

    def close(self, session: str) -> None:
        self.sessions.close(session)

    def _caller(self, session: str | None, host: str) -> DoorCaller:
        """The session's principal (raises SaslAuthenticationError when it is gone)."""
        return DoorCaller(self.sessions.principal(session, self.now_ms()), host)

    def _access(self, session: str | None, host: str) -> Access:
        caller = self._caller(session, host)

        def authorize(operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
            return self.auth.authorize(caller, operation, resource_type, name)

        def by_resource_type(operation: AclOperation, resource_type: ResourceType) -> bool:
            return self.auth.authorize_by_resource_type(caller, operation, resource_type)
        return Access(authorize, by_resource_type)

    def _refused(self, session: str | None, host: str,
                 check: Callable[[Access], KafkaError | None]) -> KafkaError | None:
        """Why the request is refused: its session gone, or ``check`` of its principal."""
        try:
            return check(self._access(session, host))
        except KafkaError as e:
            return e

    async def admin(self, session: str | None, host: str, method: str, args: list) -> Any:
        """The controller's answer to ``method(*args)``, or why it was refused."""
        refusal = self._refused(session, host,
                                lambda access: controller_refusal(access, method, args))
        if refusal is not None:
            return refusal
        return await self.controller_call(method, *args)

    async def read(self, session: str | None, host: str, what: str, args: list) -> Any:
        """What rafka.Admin reads from the metadata, as the principal may see it: ``image``
        (the controller's, as rafka.Admin reads it without the door: topics it may DESCRIBE;
        the ACLs and SCRAM users with DESCRIBE on the cluster), or ``topic_refusals``
        (``[operation, topics]``: those it may not do the operation on)."""
        try:
            authorize = self._access(session, host).authorize
        except KafkaError as e:
            return e
        if what == "image":
            image = await self.controller_call("metadata")
            return image if isinstance(image, KafkaError) else visible_image(image, authorize)
        if what == "topic_refusals":
            operation, topics = args
            return topic_refusals(authorize, AclOperation(operation), topics)
        from protocols.errors import InvalidRequestError
        return InvalidRequestError(f"nothing called {what} is read through the Ray door")

    async def admit(self, session: str | None, host: str, replica_host) -> Any:
        """``replica_host``'s address and a ticket for one connection of this principal
        (``ReplicaHostActor.admit``): its produce and fetch requests are checked there."""
        try:
            caller = self._caller(session, host)
            return list(await replica_host.admit.remote(caller))
        except KafkaError as e:
            return e
        except Exception as e:   # the host died: the client locates the leader again
            return _host_gone(e)

    async def list_offsets(self, session: str | None, host: str, replica_host,
                           requests: list) -> Any:
        """``replica_host``'s ListOffsets answers (encoded, one per request), the topics the
        principal may not DESCRIBE refused."""
        from actors.replica.door_guard import guard_list_offsets
        from protocols.wire import encode
        try:
            kept, merge = guard_list_offsets(requests, self._access(session, host).authorize)
        except KafkaError as e:
            return e
        try:
            answers = await replica_host.list_offsets_many.remote(kept) if kept else []
        except Exception as e:
            return _host_gone(e)
        return merge(list(answers), encode)

    async def find_coordinator(self, session: str | None, host: str, key: str,
                               key_type: int) -> Any:
        """FindCoordinator's answer, for a principal that may DESCRIBE the group or the
        transactional id."""
        from protocols.wire import decode
        refusal = self._refused(session, host, lambda access: find_coordinator_refusal(
            access, key, key_type))
        if refusal is not None:
            return refusal
        return decode(await self.find_coordinator_call(key, key_type))

    async def coordinator(self, session: str | None, host: str, kind: str,
                          coordinator_id: int, method: str, args: list) -> Any:
        """A group or transaction coordinator's answer to ``method(*args)`` (decoded), as
        the principal may see it, or why it was refused."""
        from actors.gcs import lookup
        from actors.names import coordinator_name, txn_coordinator_name
        from protocols.errors import CoordinatorNotAvailableError
        from protocols.wire import decode
        try:
            refusal, keep = coordinator_refusal(self._access(session, host), kind, method, args)
        except KafkaError as e:
            return e
        if refusal is not None:
            return refusal
        name = (coordinator_name if kind == GROUP else txn_coordinator_name)(coordinator_id)
        try:
            coordinator = await lookup(name, self.namespace)
            if coordinator is None:
                raise CoordinatorNotAvailableError(f"No coordinator {name} (yet)")
            answer = await getattr(coordinator, method).remote(*args)
        except KafkaError as e:
            return e
        except Exception as e:   # its broker went away: the client finds the next one
            return CoordinatorNotAvailableError(f"{name}: {e!r}")
        answer = decode(answer) if isinstance(answer, bytes) else answer
        return answer if keep is None else keep(answer)

    async def host_call(self, session: str | None, host: str, replica_host, method: str,
                        args: list) -> Any:
        """A replica host's answer to rafka.Admin's ``method(*args)`` (decoded), or why it
        was refused."""
        from protocols.wire import decode
        refusal = self._refused(session, host,
                                lambda access: host_refusal(access, method, args))
        if refusal is not None:
            return refusal
        try:
            answer = await getattr(replica_host, method).remote(*args)
        except Exception as e:
            return _host_gone(e)
        return decode(answer) if isinstance(answer, bytes) else answer
