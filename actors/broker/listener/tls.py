"""SSL listeners: the broker's TLS context from Kafka's ``ssl.*`` settings, and a
connection's principal from the certificate its client showed.

Keystores and truststores are read as Kafka reads them:

- ``ssl.keystore.type=PEM``: the private key and certificate chain either in the settings
  themselves (``ssl.keystore.key``, ``ssl.keystore.certificate.chain``) or in one file at
  ``ssl.keystore.location`` (key and chain together); an encrypted key (PKCS#8) is opened
  with ``ssl.key.password``. Trusted certificates in ``ssl.truststore.certificates`` or a
  file at ``ssl.truststore.location``.
- ``PKCS12`` (and ``JKS``, Kafka's default type: a keystore made by keytool since Java 9 is
  PKCS12 whatever it is called): the file at the location, opened with the store's password.
  A real JKS file cannot be read here: the error says how to convert it.

The key never touches the disk: it is handed to OpenSSL through an in-memory file
(``memfd_create``). ``ssl.client.auth`` none / requested / required is OpenSSL's no /
optional / required peer verification against the truststore.
"""
from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any, Mapping

from actors.broker.config import for_listener
from protocols.config import Password
from protocols.errors import InvalidConfigError
from protocols.kafka.listeners import Endpoint
from protocols.kafka.ssl_principal import SslPrincipalMapper

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
           "required": ssl.CERT_REQUIRED}


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    return value.value if isinstance(value, Password) else str(value)


def _read(path: str, what: str, listener: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidConfigError(f"Listener {listener}: cannot read {what} {path}: "
                                 f"{e.strerror}") from None


def _pkcs12(data: bytes, password: str | None, kind: str, store_type: str, path: str,
            listener: str):
    from cryptography.hazmat.primitives.serialization import pkcs12
    try:
        return pkcs12.load_key_and_certificates(
            data, password.encode() if password is not None else None)
    except ValueError as e:
        if store_type == "JKS" and data[:4] == b"\xfe\xed\xfe\xed":
            raise InvalidConfigError(
                f"Listener {listener}: {path} is a JKS {kind}, which this broker cannot "
                f"read; convert it to PKCS12 (keytool -importkeystore -srckeystore {path} "
                f"-destkeystore {Path(path).stem}.p12 -deststoretype PKCS12) or give PEM "
                f"(ssl.{kind}.type=PEM)") from None
        raise InvalidConfigError(f"Listener {listener}: cannot open the {kind} {path} as "
                                 f"{store_type}: {e} (wrong ssl.{kind}.password?)") from None


def keystore_pem(cfg: Mapping[str, Any], listener: str) -> tuple[bytes, bytes]:
    """(private key, certificate chain), both PEM, the key unencrypted (to be handed to
    OpenSSL in memory only)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography import x509
    store_type = cfg["ssl.keystore.type"]
    location = cfg["ssl.keystore.location"]
    inline_key = _secret(cfg["ssl.keystore.key"])
    if store_type == "PEM":
        if inline_key is not None:
            chain = _secret(cfg["ssl.keystore.certificate.chain"])
            if chain is None:
                raise InvalidConfigError(f"Listener {listener}: ssl.keystore.key is set "
                                         "without ssl.keystore.certificate.chain")
            key_pem, chain_pem = inline_key.encode(), chain.encode()
        elif location is not None:
            key_pem = chain_pem = _read(location, "the keystore", listener)
        else:
            raise InvalidConfigError(f"Listener {listener}: an SSL listener needs a keystore "
                                     "(ssl.keystore.location, or ssl.keystore.key and "
                                     "ssl.keystore.certificate.chain with "
                                     "ssl.keystore.type=PEM)")
        password = _secret(cfg["ssl.key.password"])
        try:
            key = serialization.load_pem_private_key(
                key_pem, password.encode() if password is not None else None)
        except (ValueError, TypeError) as e:
            raise InvalidConfigError(f"Listener {listener}: cannot read the keystore's "
                                     f"private key: {e} (ssl.key.password?)") from None
        try:
            certs = x509.load_pem_x509_certificates(chain_pem)
        except ValueError as e:
            raise InvalidConfigError(f"Listener {listener}: cannot read the keystore's "
                                     f"certificate chain: {e}") from None
    else:
        if location is None:
            raise InvalidConfigError(f"Listener {listener}: an SSL listener needs a keystore "
                                     "(ssl.keystore.location)")
        key, cert, more = _pkcs12(_read(location, "the keystore", listener),
                                  _secret(cfg["ssl.keystore.password"]), "keystore",
                                  store_type, location, listener)
        if key is None or cert is None:
            raise InvalidConfigError(f"Listener {listener}: the keystore {location} holds no "
                                     "private key with its certificate")
        certs = [cert, *more]
    unencrypted = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return unencrypted, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def truststore_pem(cfg: Mapping[str, Any], listener: str) -> str | None:
    """The trusted certificates, PEM, or None where no truststore is configured."""
    from cryptography.hazmat.primitives import serialization
    store_type = cfg["ssl.truststore.type"]
    location = cfg["ssl.truststore.location"]
    inline = _secret(cfg["ssl.truststore.certificates"])
    if store_type == "PEM":
        if inline is not None:
            return inline
        return None if location is None else _read(location, "the truststore",
                                                   listener).decode()
    if location is None:
        return None
    key, cert, more = _pkcs12(_read(location, "the truststore", listener),
                              _secret(cfg["ssl.truststore.password"]), "truststore",
                              store_type, location, listener)
    certs = ([cert] if cert is not None else []) + list(more)
    if not certs:
        raise InvalidConfigError(f"Listener {listener}: the truststore {location} holds no "
                                 "certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _load_chain(context: ssl.SSLContext, key_pem: bytes, chain_pem: bytes) -> None:
    """OpenSSL reads a key only from a file: an in-memory one, gone when closed."""
    fd = os.memfd_create("rafka-ssl-keystore", os.MFD_CLOEXEC)
    try:
        os.write(fd, chain_pem + b"\n" + key_pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def server_context(cfg: Mapping[str, Any], listener: str) -> ssl.SSLContext:
    """The TLS context of an SSL listener, from its ssl.* settings
    (``actors.broker.config.for_listener``). Bad settings raise InvalidConfigError naming
    the listener and the setting."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [_VERSIONS[v] for v in cfg["ssl.enabled.protocols"]]
    if not enabled:
        raise InvalidConfigError(f"Listener {listener}: ssl.enabled.protocols is empty")
    context.minimum_version, context.maximum_version = min(enabled), max(enabled)
    if cfg["ssl.cipher.suites"]:
        try:
            context.set_ciphers(":".join(cfg["ssl.cipher.suites"]))
        except ssl.SSLError:
            raise InvalidConfigError(
                f"Listener {listener}: no cipher of ssl.cipher.suites "
                f"{','.join(cfg['ssl.cipher.suites'])} is known to OpenSSL (TLSv1.2 suites "
                "by OpenSSL's names, e.g. ECDHE-RSA-AES128-GCM-SHA256)") from None
    _load_chain(context, *keystore_pem(cfg, listener))
    auth = cfg["ssl.client.auth"]
    trusted = truststore_pem(cfg, listener)
    if trusted is not None:
        try:
            context.load_verify_locations(cadata=trusted)
        except ssl.SSLError as e:
            raise InvalidConfigError(f"Listener {listener}: cannot read the truststore's "
                                     f"certificates: {e}") from None
    elif auth != "none":
        raise InvalidConfigError(f"Listener {listener}: ssl.client.auth={auth} needs a "
                                 "truststore to check clients' certificates against "
                                 "(ssl.truststore.location or ssl.truststore.certificates)")
    context.verify_mode = _VERIFY[auth]
    return context


def listener_tls(broker: Mapping[str, Any], listeners: list[Endpoint]
                 ) -> dict[str, tuple[ssl.SSLContext, SslPrincipalMapper]]:
    """Each SSL and SASL_SSL listener's TLS context and principal mapper, from the broker's settings
    (a listener's own ``listener.name.<name>.ssl.*`` first)."""
    out = {}
    for endpoint in listeners:
        if endpoint.security_protocol not in ("SSL", "SASL_SSL"):
            continue
        cfg = for_listener(broker, endpoint.name)
        try:
            mapper = SslPrincipalMapper(cfg["ssl.principal.mapping.rules"])
        except ValueError as e:
            raise InvalidConfigError(f"Invalid value for configuration "
                                     f"ssl.principal.mapping.rules: {e}") from None
        out[endpoint.name] = (server_context(cfg, endpoint.name), mapper)
    return out


def peer_subject(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The client certificate's subject as an RFC 2253 name (``CN=client,O=Org``), or None
    where the client showed none."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def principal_of(ssl_object, mapper: SslPrincipalMapper) -> str:
    """A connection's principal (Kafka's DefaultKafkaPrincipalBuilder over SSL)."""
    return mapper.principal(peer_subject(ssl_object))
