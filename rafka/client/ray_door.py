"""rafka's own clients at the Ray door (``actors/broker/ray_door.py``): who they are, proven
to a broker with Kafka's SASL settings, and their requests passed through that broker's
checks.

Credentials, as a Kafka client takes them (either form):

    sasl.mechanism=SCRAM-SHA-512            (or SCRAM-SHA-256, PLAIN)
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";
    # or librdkafka's: sasl.username=alice  sasl.password=alice-secret

A cluster with an authorizer (``authorizer.class.name``) is guarded: every client goes
through the door, as ``User:ANONYMOUS`` without credentials. Credentials given to a client
of a cluster without one are still checked (a wrong password is refused).
"""
from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from protocols.errors import (BrokerNotAvailableError, InvalidConfigError,
                              SaslAuthenticationError)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# The login modules whose username and password a Kafka client signs in with (either, for
# any of the mechanisms: both put them where Kafka's SASL clients read them).
LOGIN_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                 "org.apache.kafka.common.security.scram.ScramLoginModule")


@dataclass(frozen=True)
class Credentials:
    mechanism: str
    username: str
    password: str = field(repr=False)


def define_sasl(config_def):
    """Kafka's client security settings on a client's ConfigDef: what its SASL ones name
    signs in at the door (``security.protocol`` is taken for Kafka's client files, and
    means nothing through Ray)."""
    from protocols.config import one_of
    return (config_def
            .define("security.protocol", "string", "PLAINTEXT",
                    one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))
            .define("sasl.mechanism", "string", "GSSAPI")
            .define("sasl.jaas.config", "password", None, nullable=True)
            .define("sasl.username", "string", None, nullable=True)
            .define("sasl.password", "password", None, nullable=True))


def credentials(config: Mapping[str, Any] | None) -> Credentials | None:
    """The user a client's config names (``sasl.jaas.config``, or ``sasl.username`` and
    ``sasl.password``), with ``sasl.mechanism``; None when it names none."""
    config = config or {}
    jaas, user = config.get("sasl.jaas.config"), config.get("sasl.username")
    if jaas is None and user is None:
        return None
    mechanism = str(config.get("sasl.mechanism", "")).upper()
    if mechanism not in MECHANISMS:
        raise InvalidConfigError(
            f"sasl.mechanism {config.get('sasl.mechanism')!r} is not one rafka's clients "
            f"sign in with ({', '.join(MECHANISMS)})")
    if jaas is not None:
        from protocols.kafka.jaas import JaasConfigError, parse_jaas_config
        text = getattr(jaas, "value", jaas)    # a protocols.config Password, or a str
        try:
            modules = parse_jaas_config(str(text))
        except JaasConfigError as e:
            raise InvalidConfigError(f"sasl.jaas.config: {e}") from None
        module = modules[0]
        if module.name not in LOGIN_MODULES:
            raise InvalidConfigError(f"sasl.jaas.config names {module.name}; rafka's clients "
                                     f"sign in with {' or '.join(LOGIN_MODULES)}")
        user, password = module.options.get("username"), module.options.get("password")
    else:
        password = config.get("sasl.password")
        password = getattr(password, "value", password)
    if not user or password is None:
        raise InvalidConfigError("sasl.jaas.config (or sasl.username) needs both a username "
                                 "and a password")
    return Credentials(mechanism, str(user), str(password))


def sign_in(broker, creds: Credentials, timeout_s: float) -> str:
    """A session at ``broker`` (an actor handle) for ``creds``: the SASL exchange, one Ray
    call per step; raises SaslAuthenticationError (or the broker's error) on refusal."""
    import ray

    from protocols.kafka.scram import ScramClient, ScramError
    from protocols.wire import decode

    def step(exchange, token: bytes):
        exchange, answer, session, error = decode(ray.get(
            broker.ray_door_authenticate.remote(exchange, creds.mechanism, token),
            timeout=timeout_s))
        if error is not None:
            raise error
        return exchange, bytes(answer), session

    if creds.mechanism == "PLAIN":
        _, _, session = step(None, f"\0{creds.username}\0{creds.password}".encode())
        return session
    client = ScramClient(creds.mechanism, creds.username, creds.password,
                         secrets.token_urlsafe(24))
    try:
        exchange, server_first, _ = step(None, client.first())
        _, server_final, session = step(exchange, client.final(server_first))
    except ScramError as e:
        raise SaslAuthenticationError(str(e)) from None
    try:
        client.verify(server_final)
    except ScramError as e:   # not the broker we asked: its session is not ours to use
        broker.ray_door_close.remote(session)
        raise SaslAuthenticationError(str(e)) from None
    return session


class RayDoor:
    """One client's way in: its principal's session at one broker, signed in on first use
    and again when the session is gone (idle, expired, the broker restarted)."""

    def __init__(self, cluster, config: Mapping[str, Any] | None = None,
                 timeout_s: float = 60.0):
        self.cluster = cluster
        self.credentials = credentials(config)
        self.timeout_s = timeout_s
        self.guarded = (self.credentials is not None
                        or bool(cluster.config.get("authorizer.class.name")))
        self._lock = threading.Lock()
        self._broker = None
        self._session: str | None = None
        self._host: str | None = None

    def sign_in(self) -> None:
        """Sign in now, if it has credentials (a wrong password is refused here, not at the
        first request)."""
        if self.credentials is not None:
            self._signed_in()

    def _signed_in(self) -> tuple[Any, str | None]:
        """(the broker, the session), signing in at the first broker that answers."""
        with self._lock:
            if self._broker is not None:
                return self._broker, self._session
            import ray
            error: BaseException | None = None
            from protocols.errors import BrokerNotAvailableError
            for broker_id in sorted(self.cluster.broker_nodes):
                try:
                    broker = self.cluster.broker(broker_id)
                    session = (None if self.credentials is None else
                               sign_in(broker, self.credentials, self.timeout_s))
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError,
                        BrokerNotAvailableError) as e:   # stopped, or going: the next one
                    error = e
                    continue
                if self._host is None:
                    self._host = ray.util.get_node_ip_address()
                self._broker, self._session = broker, session
                return broker, session
            raise BrokerNotAvailableError(f"No broker answered to sign in: {error!r}")

    def forget(self) -> None:
        """Sign in again on the next request (its session was found gone)."""
        with self._lock:
            self._broker, self._session = None, None

    def seen(self, answer: Any) -> Any:
        """An answer of a DoorCoordinator call, read: a session found gone is forgotten
        (signed in again next time) and answered as COORDINATOR_NOT_AVAILABLE, which its
        callers retry."""
        if isinstance(answer, SaslAuthenticationError):
            self.forget()
            from protocols.errors import CoordinatorNotAvailableError
            return CoordinatorNotAvailableError(f"Signing in again: {answer}")
        return answer

    def coordinator(self, kind: str, coordinator_id: int) -> "DoorCoordinator":
        """A group (``kind`` "group") or transaction ("txn") coordinator reached through
        this door: ``coordinator.method.remote(*args)`` as on its actor handle."""
        return DoorCoordinator(self, kind, coordinator_id)

    def host(self, replica_host) -> "DoorCoordinator":
        """A replica host's requests rafka.Admin makes (DeleteRecords, DescribeProducers,
        WriteTxnMarkers), through this door: ``host.method.remote(*args)``."""
        return DoorCoordinator(self, "host", replica_host)

    def _forget(self, session: str | None) -> None:
        with self._lock:
            if self._session == session:
                self._broker, self._session = None, None

    def call(self, method: str, *args: Any) -> Any:
        """The broker's decoded answer to ``ray_door_<method>(session, host, *args)``,
        signing in again once when the session is gone."""
        import ray

        from protocols.wire import decode
        for attempt in (0, 1):
            broker, session = self._signed_in()
            try:
                answer = decode(ray.get(getattr(broker, f"ray_door_{method}").remote(
                    session, self._host, *args), timeout=self.timeout_s))
            except ray.exceptions.RayActorError as e:
                self._forget(session)
                from protocols.errors import NotControllerError
                raise NotControllerError(f"The broker went away while handling {method}; "
                                         f"retry ({type(e).__name__})") from None
            if isinstance(answer, SaslAuthenticationError) and session is not None \
                    and attempt == 0:
                self._forget(session)
                continue
            return answer
        raise AssertionError("unreachable")

    def call_many(self, method: str, calls: list[tuple]) -> list[Any]:
        """``call`` for each tuple of arguments in ``calls``, every one sent before any
        answer is awaited; a call that failed is answered by its exception."""
        import ray

        from protocols.errors import NotControllerError
        from protocols.wire import decode
        broker, session = self._signed_in()
        refs = [getattr(broker, f"ray_door_{method}").remote(session, self._host, *args)
                for args in calls]
        answers: list[Any] = []
        for ref, args in zip(refs, calls):
            try:
                answer = decode(ray.get(ref, timeout=self.timeout_s))
                if isinstance(answer, SaslAuthenticationError) and session is not None:
                    self._forget(session)   # its session ended: signed in again by call
                    answer = self.call(method, *args)
            except ray.exceptions.RayActorError as e:
                self._forget(session)
                answer = NotControllerError(f"The broker went away while handling {method}; "
                                            f"retry ({type(e).__name__})")
            except Exception as e:
                answer = e
            answers.append(answer)
        return answers

    def submit(self, method: str, *args: Any):
        """``call`` without waiting: (the call's concurrent future, its session), for
        ``answer``."""
        broker, session = self._signed_in()
        return getattr(broker, f"ray_door_{method}").remote(
            session, self._host, *args).future(), session

    def answer(self, raw: bytes, session: str | None) -> Any:
        """A ``submit``'s decoded answer; a session gone is forgotten (signed in again
        next time) and its error returned."""
        from protocols.wire import decode
        answer = decode(raw)
        if isinstance(answer, SaslAuthenticationError) and session is not None:
            self._forget(session)
        return answer

    def admit(self, replica_host) -> tuple[str, int, bytes, str | None]:
        """Where ``replica_host`` listens and a ticket for one connection as this client's
        principal (its produce and fetch requests checked there)."""
        answer = self.call("admit", replica_host)
        if isinstance(answer, BaseException):
            raise answer
        return tuple(answer)

    def close(self) -> None:
        with self._lock:
            broker, session = self._broker, self._session
            self._broker, self._session = None, None
        if broker is not None and session is not None:
            try:
                broker.ray_door_close.remote(session)
            except Exception:   # the broker is gone, and the session with it
                pass


class DoorCoordinator:
    """An actor handle's stand-in: ``.method.remote(*args)`` goes to the door's broker,
    which checks it and passes it on (a ref to the answer, encoded as the actor's)."""

    def __init__(self, door: RayDoor, kind: str, target: Any):
        self._door, self._kind, self._target = door, kind, target

    def __getattr__(self, method: str) -> "_DoorMethod":
        if method.startswith("_"):
            raise AttributeError(method)
        return _DoorMethod(self._door, self._kind, self._target, method)


class _DoorMethod:
    __slots__ = ("door", "kind", "target", "method")

    def __init__(self, door: RayDoor, kind: str, target: Any, method: str):
        self.door, self.kind, self.target, self.method = door, kind, target, method

    def remote(self, *args: Any):
        import ray
        try:
            broker, session = self.door._signed_in()
        except Exception as e:   # no broker to sign in at, or refused: the answer says so
            from protocols.errors import KafkaError
            from protocols.wire import encode
            return ray.put(encode(e if isinstance(e, KafkaError) else
                                  BrokerNotAvailableError(repr(e))))
        if self.kind == "host":
            return broker.ray_door_host.remote(session, self.door._host, self.target,
                                               self.method, list(args))
        return broker.ray_door_coordinator.remote(session, self.door._host, self.kind,
                                                  self.target, self.method, list(args))
