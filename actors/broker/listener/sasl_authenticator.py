"""SASL listeners (``SASL_PLAINTEXT``, ``SASL_SSL``): each listener's mechanisms and users
from Kafka's settings, and SaslHandshake / SaslAuthenticate answered from a connection's
``protocols.kafka.sasl.SaslServer`` (Kafka's SaslServerAuthenticator). The socket server
routes a SASL connection's requests here until it is authenticated."""
from __future__ import annotations

from typing import Any, Mapping

from actors.broker.config import for_listener, jaas_config
from protocols.errors import IllegalSaslStateError, InvalidConfigError
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.codec import (InvalidRequest, Request, build, error_fields,
                                   response_class)
from protocols.kafka.jaas import parse_jaas_config
from protocols.kafka.listeners import Endpoint
from protocols.kafka.sasl import (MECHANISMS, PLAIN, PLAIN_LOGIN_MODULE, Outcome, SaslConfig,
                                  SaslServer)

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def listener_sasl(broker: Mapping[str, Any], listeners: list[Endpoint]
                  ) -> dict[str, SaslConfig]:
    """Each SASL listener's mechanisms and PLAIN users; settings that cannot make one raise
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
        out[name] = SaslConfig(mechanisms, users)
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
        "session_lifetime": 0}), outcome


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
    """One SASL connection's frames until it is authenticated (Kafka's
    SaslServerAuthenticator): SaslHandshake and SaslAuthenticate are answered here,
    ApiVersions goes on to KafkaApis, anything else closes the connection. After a
    SaslHandshake v0 the next frame is the mechanism's token itself, with no request header,
    and its answer a bare frame (Kafka's "enableKafkaSaslAuthenticateHeaders" off)."""

    def __init__(self, config: SaslConfig):
        self.server = SaslServer(config)
        self._raw_token = False

    @property
    def complete(self) -> bool:
        return self.server.complete

    def receive(self, frame: bytes, parse) -> tuple[Request | None, Any, Outcome | None]:
        """(request, response, outcome) for a frame answered here (request None: a bare
        token, its response bytes); (request, None, None) for ApiVersions, which KafkaApis
        answers. ``parse`` turns a frame into a Request."""
        if self._raw_token:
            self._raw_token = False
            outcome = self.server.authenticate(frame)
            return None, outcome.auth_bytes, outcome
        request = parse(frame)
        if request.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            response, outcome = answer(self.server, request)
            if request.api_key == ApiKey.SASL_HANDSHAKE and request.api_version == 0 \
                    and outcome.error is None:
                self._raw_token = True
            return request, response, outcome
        if request.api_key == ApiKey.API_VERSIONS:
            return request, None, None
        raise InvalidRequest(f"Unexpected Kafka request of type {ApiKey(request.api_key).name} "
                             "during SASL handshake")
