"""The broker's side of SASL on a Kafka connection (Kafka's SaslServerAuthenticator, with
PlainSaslServer): SaslHandshake names a mechanism, SaslAuthenticate carries its tokens;
until the exchange completes only ApiVersions and those two may be asked. Plain values in,
plain values out: the socket server turns them into responses and closes the connection
where Kafka closes it.

PLAIN (RFC 4616): one token ``[authzid] NUL authcid NUL passwd``, checked against the
``user_<name>="<password>"`` options of the listener's PlainLoginModule
(``listener.name.<listener>.plain.sasl.jaas.config``), as Kafka's
PlainServerCallbackHandler checks them.
"""
from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from protocols.errors import (IllegalSaslStateError, KafkaError, SaslAuthenticationError,
                              UnsupportedSaslMechanismError)
from protocols.kafka.scram import ScramError, ScramServer

PLAIN = "PLAIN"
# Served; GSSAPI (Kerberos) and OAUTHBEARER are not built.
MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass(frozen=True)
class SaslConfig:
    """One SASL listener's mechanisms and PLAIN's users ({name: password})."""
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict, repr=False)
    # connections.max.reauth.ms (KIP-368): a session's lifetime per mechanism (the
    # listener's listener.name.<l>.<mechanism>.connections.max.reauth.ms, else the broker's);
    # 0 or absent, none.
    reauth_ms: Mapping[str, int] = field(default_factory=dict)
    # sasl.server.max.receive.size: the largest frame before authentication.
    max_receive_size: int = 524_288
    # SCRAM: (user, mechanism) -> the user's ScramCredential or None (the cluster's
    # metadata, as it is when asked).
    scram: Callable[[str, str], Any] | None = field(default=None, repr=False, compare=False)


@dataclass
class Outcome:
    """An answer to one SASL request: its error (None: fine), what it carries, and whether
    the connection is closed once it is sent."""
    error: KafkaError | None = None
    mechanisms: tuple[str, ...] = ()
    auth_bytes: bytes = b""
    close: bool = False
    session_lifetime_ms: int = 0    # told in SaslAuthenticate v1+ (KIP-368)


class SaslServer:
    """One exchange of a connection: handshake, then authenticate, then complete. A
    re-authentication (KIP-368) is a new exchange given the session it renews
    (``previous``: its mechanism and user), which may change neither."""

    def __init__(self, config: SaslConfig, previous: "SaslServer | None" = None):
        self.config = config
        self.previous = previous
        self.mechanism: str | None = None
        self.user: str | None = None    # the authenticated name, once complete
        self._scram: ScramServer | None = None

    @property
    def complete(self) -> bool:
        return self.user is not None

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    @property
    def lifetime_ms(self) -> int:
        """The session's lifetime (KIP-368) under the mechanism chosen; 0: for ever."""
        return max(0, self.config.reauth_ms.get(self.mechanism or "", 0))

    def handshake(self, mechanism: str) -> Outcome:
        enabled = self.config.mechanisms
        if self.mechanism is not None or self.complete:
            return Outcome(IllegalSaslStateError("Unexpected SaslHandshake request: a "
                                                 "mechanism was already chosen"),
                           enabled, close=True)
        if mechanism not in enabled:
            return Outcome(UnsupportedSaslMechanismError(
                f"Unsupported SASL mechanism {mechanism}"), enabled, close=True)
        if self.previous is not None and mechanism != self.previous.mechanism:
            return Outcome(SaslAuthenticationError(
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self.previous.mechanism}'"), enabled,
                close=True)
        self.mechanism = mechanism
        return Outcome(mechanisms=enabled)

    def authenticate(self, token: bytes) -> Outcome:
        if self.mechanism is None or self.complete:
            return Outcome(IllegalSaslStateError(
                "Unexpected SaslAuthenticate request: no SaslHandshake before it"
                if self.mechanism is None else
                "SaslAuthenticate request received after successful authentication"),
                close=True)
        final = b""
        try:
            if self.mechanism == PLAIN:
                user = self._plain(token)
            elif self._scram is None:
                self._scram = ScramServer(self.mechanism, self._credential,
                                          secrets.token_urlsafe(24))
                return Outcome(auth_bytes=self._scram.client_first(token))
            else:
                final = self._scram.client_final(token)
                user = self._scram.user
        except SaslAuthenticationError as e:
            return Outcome(e, close=True)
        except ScramError as e:
            # Kafka's SaslServerAuthenticator tells the client only this, unless the error
            # was meant for it.
            return Outcome(SaslAuthenticationError(
                str(e) if e.to_client else
                f"Authentication failed during "
                f"{'re-authentication' if self.previous else 'authentication'} due to invalid "
                f"credentials with SASL mechanism {self.mechanism}"), close=True)
        if self.previous is not None and user != self.previous.user:
            return Outcome(SaslAuthenticationError(
                f"Cannot change principals during re-authentication from "
                f"User.{self.previous.user}: User.{user}"), close=True)
        self.user = user
        return Outcome(auth_bytes=final, session_lifetime_ms=self.lifetime_ms)

    def _credential(self, user: str):
        return None if self.config.scram is None else self.config.scram(user, self.mechanism)

    def _plain(self, token: bytes) -> str:
        parts = token.decode("utf-8", "replace").split("\0", 3)
        if len(parts) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self.config.plain_users.get(username)
        if expected is None or not hmac.compare_digest(password.encode(), expected.encode()):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an "
                                          "authorization id that is different from username")
        return username
