"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's broker runs them (Kafka's
ScramFormatter, ScramMessages and ScramSaslServer): the credential kept for a user (salt,
StoredKey, ServerKey, iterations; never the password) and the server's two steps of one
exchange. Plain values in and out; the server nonce is injected.

    client-first  n,,n=<user>,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<salt, base64>,i=<iterations>
    client-final  c=biws,r=<nonce>,p=<ClientProof, base64>
    server-final  v=<ServerSignature, base64>
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass

# mechanism -> (hash, Kafka's minimum iterations)
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 4096), "SCRAM-SHA-512": ("sha512", 4096)}
MAX_ITERATIONS = 16384   # what AlterUserScramCredentials accepts (Kafka's limit)

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = r"(?:,[A-Za-z]+=[\x01-\x2b\x2d-\x7f]+)*"
_CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m=[\x01-\x2b\x2d-\x7f]+,)?"
                           rf"n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
                           rf"(?P<extensions>{_EXTENSIONS})")
_CLIENT_FINAL = re.compile(rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE})"
                           rf"{_EXTENSIONS},p=(?P<proof>{_BASE64})")


class ScramError(ValueError):
    """The exchange failed; ``authentication`` errors' messages go to the client as they
    are (Kafka's SaslAuthenticationException), others as Kafka's generic one."""

    def __init__(self, message: str, to_client: bool = False):
        super().__init__(message)
        self.to_client = to_client


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(algorithm: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, algorithm).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)


def credential(mechanism: str, salted: bytes, salt: bytes, iterations: int
               ) -> ScramCredential:
    """What the cluster keeps for a user, from the salted password (the client's
    AlterUserScramCredentials sends that, never the password)."""
    algorithm = MECHANISMS[mechanism][0]
    client_key = _hmac(algorithm, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(algorithm, client_key).digest(),
                           _hmac(algorithm, salted, b"Server Key"), iterations)


def username(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One exchange. ``lookup(user)`` gives the user's credential for this mechanism, or
    None; ``server_nonce`` is appended to the client's nonce."""

    def __init__(self, mechanism: str, lookup, server_nonce: str):
        self.mechanism = mechanism
        self.algorithm, self.min_iterations = MECHANISMS[mechanism]
        self.lookup = lookup
        self.server_nonce = server_nonce
        self.user: str | None = None
        self.complete = False
        self._first_bare = self._server_first = self._nonce = None
        self._credential: ScramCredential | None = None

    def client_first(self, message: bytes) -> bytes:
        text = message.decode("utf-8", "replace")
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise ScramError(f"Invalid SCRAM client first message format: {text}")
        user = username(m["saslname"])
        self._credential = self.lookup(user)
        if self._credential is None:
            raise ScramError("Authentication failed: Invalid user credentials")
        if m["authzid"] and username(m["authzid"]) != user:
            raise ScramError("Authentication failed: Client requested an authorization id "
                             "that is different from username", to_client=True)
        if self._credential.iterations < self.min_iterations:
            raise ScramError(f"Iterations {self._credential.iterations} is less than the "
                             f"minimum {self.min_iterations} for {self.mechanism}")
        if re.search(r"(^|,)tokenauth=true(,|$)", m["extensions"][1:]):
            raise ScramError("Authentication failed: delegation tokens are not supported by "
                             "this broker", to_client=True)
        self.user = user
        self._nonce = m["nonce"] + self.server_nonce
        extensions = m["extensions"]
        self._first_bare = f"n={m['saslname']},r={m['nonce']}{extensions}"
        self._server_first = (f"r={m['nonce']}{self.server_nonce},"
                              f"s={base64.b64encode(self._credential.salt).decode()},"
                              f"i={self._credential.iterations}")
        return self._server_first.encode()

    def client_final(self, message: bytes) -> bytes:
        text = message.decode("utf-8", "replace")
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise ScramError(f"Invalid SCRAM client final message format: {text}")
        if m["nonce"] != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        auth_message = (f"{self._first_bare},{self._server_first},"
                        f"c={m['channel']},r={m['nonce']}").encode()
        credential_ = self._credential
        signature = _hmac(self.algorithm, credential_.stored_key, auth_message)
        proof = base64.b64decode(m["proof"])
        if len(proof) != len(signature):
            raise ScramError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.algorithm, client_key).digest(),
                                   credential_.stored_key):
            raise ScramError("Invalid client credentials")
        self.complete = True
        server_signature = _hmac(self.algorithm, credential_.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client's side of one exchange (Kafka's ScramSaslClient): ``first()``, then
    ``final(server_first)``, then ``verify(server_final)``; ``client_nonce`` is injected."""

    def __init__(self, mechanism: str, user: str, password: str, client_nonce: str):
        self.algorithm = MECHANISMS[mechanism][0]
        self.mechanism = mechanism
        self.password = password
        name = user.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={name},r={client_nonce}"
        self._nonce = client_nonce
        self._auth_message: bytes | None = None
        self._salted: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        if not fields.get("r", "").startswith(self._nonce) or "s" not in fields \
                or not fields.get("i", "").isdigit():
            raise ScramError(f"Invalid SCRAM server first message: {text}")
        iterations = int(fields["i"])
        if iterations < MECHANISMS[self.mechanism][1]:
            raise ScramError(f"Requested iterations {iterations} is less than the minimum "
                             f"{MECHANISMS[self.mechanism][1]} for {self.mechanism}")
        self._salted = salted_password(self.mechanism, self.password,
                                       base64.b64decode(fields["s"]), iterations)
        without_proof = f"c=biws,r={fields['r']}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.algorithm, self._salted, b"Client Key")
        signature = _hmac(self.algorithm, hashlib.new(self.algorithm, client_key).digest(),
                          self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Raises ScramError unless the server proved it knows the credential."""
        if self._auth_message is None or self._salted is None:
            raise ScramError("SCRAM server final message before the client's final one")
        expected = _hmac(self.algorithm, _hmac(self.algorithm, self._salted, b"Server Key"),
                         self._auth_message)
        text = server_final.decode("utf-8", "replace")
        try:
            signature = base64.b64decode(text[2:], validate=True)
        except ValueError:
            signature = b""
        if not text.startswith("v=") or not hmac.compare_digest(signature, expected):
            raise ScramError(f"Invalid SCRAM server signature: {text}")
