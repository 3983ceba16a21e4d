"""SASL listeners (``SASL_PLAINTEXT``, ``SASL_SSL``): each listener's mechanisms and users
from Kafka's settings, and SaslHandshake / SaslAuthenticate answered from a connection's
``protocols.kafka.sasl.SaslServer`` (Kafka's SaslServerAuthenticator). The socket server
routes a SASL connection's requests here until it is authenticated."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from actors.broker.config import for_listener, jaas_config, reauth_ms
from protocols.errors import IllegalSaslStateError, InvalidConfigError
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.codec import (InvalidRequest, Request, build, error_fields,
                                   response_class)
from protocols.kafka.jaas import parse_jaas_config
from protocols.kafka.listeners import Endpoint
from protocols.kafka.sasl import (MECHANISMS, PLAIN, PLAIN_LOGIN_MODULE, Outcome, SaslConfig,
                                  SaslServer)

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def listener_sasl(broker: Mapping[str, Any], listeners: list[Endpoint],
                  scram: Callable[[str, str], Any] | None = None) -> dict[str, SaslConfig]:
    """Each SASL listener's mechanisms and PLAIN users (SCRAM's credentials are the
    cluster's, ``scram(user, mechanism)``); settings that cannot make one raise
    InvalidConfigError naming the listener and the setting."""
    out = {}
    for endpoint in listeners:
        if endpoint.security_protocol not in SASL_PROTOCOLS:
            continue
        name, lower = endpoint.name, endpoint.name.lower()
        mechanisms = tuple(m.upper() for m in
                           for_listener(broker, name)["sasl.enabled.mechanisms"])
        unsupported = [m for m in mechanisms if m not in MECHANISMS]
        if unsupported or not mechanisms:
            raise InvalidConfigError(
                f"Listener {name}: SASL mechanism {', '.join(unsupported) or '(none)'} is not "
                f"supported (supported: {', '.join(MECHANISMS)}); set "
                f"listener.name.{lower}.sasl.enabled.mechanisms or sasl.enabled.mechanisms")
        users: dict[str, str] = {}
        if PLAIN in mechanisms:
            secret = jaas_config(broker, name, PLAIN)
            if secret is None:
                raise InvalidConfigError(
                    f"Listener {name}: SASL/PLAIN needs listener.name.{lower}.plain.sasl.jaas"
                    f".config ({PLAIN_LOGIN_MODULE} required user_<name>=\"<password>\";)")
            module = parse_jaas_config(secret.value)[0]
            if module.name != PLAIN_LOGIN_MODULE:
                raise InvalidConfigError(
                    f"Listener {name}: listener.name.{lower}.plain.sasl.jaas.config names "
                    f"{module.name}, not {PLAIN_LOGIN_MODULE}")
            users = {k[len("user_"):]: v for k, v in module.options.items()
                     if k.startswith("user_")}
        out[name] = SaslConfig(mechanisms, users,
                               {m: reauth_ms(broker, name, m) for m in mechanisms},
                               broker["sasl.server.max.receive.size"], scram)
    return out


def answer(server: SaslServer, request: Request) -> tuple[Any, Outcome]:
    """The response to a SaslHandshake or SaslAuthenticate of a connection not yet
    authenticated, and what it means for the connection."""
    if request.api_key == ApiKey.SASL_HANDSHAKE:
        outcome = server.handshake(request.body.mechanism)
        return build(response_class(request), {
            "error_code": error_fields(outcome.error)["error_code"],
            "mechanisms": list(outcome.mechanisms)}), outcome
    outcome = server.authenticate(bytes(request.body.auth_bytes))
    return build(response_class(request), {
        **error_fields(outcome.error), "auth_bytes": outcome.auth_bytes,
        "session_lifetime": outcome.session_lifetime_ms}), outcome


def after_authentication(request: Request) -> Any:
    """What KafkaApis answers a SaslHandshake or SaslAuthenticate that reaches it: on a
    connection already authenticated, or on a listener without SASL, as Kafka's does."""
    error = IllegalSaslStateError(
        "SaslHandshake request received after successful authentication"
        if request.api_key == ApiKey.SASL_HANDSHAKE else
        "SaslAuthenticate request received after successful authentication")
    if request.api_key == ApiKey.SASL_HANDSHAKE:
        return build(response_class(request), {"error_code": error.code, "mechanisms": []})
    return build(response_class(request), {**error_fields(error), "auth_bytes": b"",
                                           "session_lifetime": 0})


class Authenticator:
    """One SASL connection's exchanges (Kafka's SaslServerAuthenticator). Until the first
    completes, SaslHandshake and SaslAuthenticate are answered here, ApiVersions goes on to
    KafkaApis, anything else closes the connection. After a SaslHandshake v0 the next frame
    is the mechanism's token itself, with no request header, and its answer a bare frame
    (Kafka's "enableKafkaSaslAuthenticateHeaders" off).

    With connections.max.reauth.ms (KIP-368) a session lasts that long: a client that
    authenticated with SaslAuthenticate v1+ may re-authenticate (a SaslHandshake on the
    authenticated connection begins a new exchange, as the same user with the same
    mechanism), and a request other than that after the session ended closes the
    connection. ``clock``: milliseconds, monotonic."""

    def __init__(self, config: SaslConfig, clock: Callable[[], float]):
        self.config = config
        self.clock = clock
        self.server = SaslServer(config)
        self.session: SaslServer | None = None     # the last exchange completed
        self.session_ends_ms: float | None = None
        self._reauthenticates = False   # the client spoke SaslAuthenticate v1+
        self._raw_token = False

    @property
    def complete(self) -> bool:
        """Authenticated, and not in a re-authentication."""
        return self.server.complete

    @property
    def principal(self) -> str:
        return self.session.principal

    def expired(self) -> bool:
        return self.session_ends_ms is not None and self.clock() > self.session_ends_ms

    def reauthenticating(self, request: Request) -> bool:
        """Whether ``request``, on an authenticated connection, begins a re-authentication
        (then it is answered here, ``take``)."""
        if request.api_key != ApiKey.SASL_HANDSHAKE or not self._reauthenticates \
                or self.session is None or self.session.lifetime_ms <= 0:
            return False
        self.server = SaslServer(self.config, previous=self.session)
        return True

    def receive(self, frame: bytes, parse) -> tuple[Request | None, Any, Outcome | None]:
        """For a frame of an exchange: (request, response, outcome) where it is answered
        here (request None: a bare token, its response bytes); (request, None, None) for
        ApiVersions, which KafkaApis answers. ``parse`` turns a frame into a Request."""
        if self._raw_token:
            outcome = self.server.authenticate(frame)
            # SCRAM's first token is answered with a challenge, and its answer is bare too.
            self._raw_token = outcome.error is None and not self.server.complete
            self._completed(outcome)
            return None, outcome.auth_bytes, outcome
        return self.take(parse(frame))

    def take(self, request: Request) -> tuple[Request, Any, Outcome | None]:
        if request.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            response, outcome = answer(self.server, request)
            if request.api_key == ApiKey.SASL_HANDSHAKE and request.api_version == 0 \
                    and outcome.error is None:
                self._raw_token = True
            if request.api_key == ApiKey.SASL_AUTHENTICATE and request.api_version >= 1:
                self._reauthenticates = True
            self._completed(outcome)
            return request, response, outcome
        if request.api_key == ApiKey.API_VERSIONS:
            return request, None, None
        raise InvalidRequest(f"Unexpected Kafka request of type {ApiKey(request.api_key).name} "
                             "during SASL handshake")

    def _completed(self, outcome: Outcome) -> None:
        if outcome.error is None and self.server.complete:
            self.session = self.server
            self.session_ends_ms = (self.clock() + outcome.session_lifetime_ms
                                    if outcome.session_lifetime_ms > 0 else None)
