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
import re
import ssl
from pathlib import Path
from typing import Any, Mapping

from actors.broker.config import for_listener
from protocols.config import Password
from protocols.errors import InvalidConfigError
from protocols.kafka.listeners import Endpoint
from protocols.kafka.ssl_principal import SslPrincipalMapper

_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
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


_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                 "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                 "TLS_AES_128_CCM_8_SHA256")
_SUITE = re.compile(r"^TLS_(?:(ECDHE|DHE)_)?(RSA|ECDSA)_WITH_(AES_(128|256)_(GCM|CBC|CCM)"
                    r"|CHACHA20_POLY1305)(?:_(SHA|SHA256|SHA384))?$")


def openssl_cipher(suite: str) -> str:
    """A TLSv1.2 cipher suite by its standard (IANA, Java's) name, as Kafka's
    ssl.cipher.suites names it, in OpenSSL's name (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``
    -> ``ECDHE-RSA-AES128-GCM-SHA256``); an OpenSSL name is kept."""
    m = _SUITE.match(suite)
    if m is None:
        return suite
    kx, auth, cipher, bits, mode, mac = m.groups()
    prefix = f"{kx}-{auth}-" if kx else ""       # TLS_RSA_WITH_...: RSA key exchange
    if cipher == "CHACHA20_POLY1305":
        return prefix + "CHACHA20-POLY1305"
    if mode == "CBC":
        return prefix + f"AES{bits}-" + ("SHA" if mac == "SHA" else mac)
    return prefix + f"AES{bits}-{mode}" + (f"-{mac}" if mac else "")


def _set_cipher_suites(context: ssl.SSLContext, suites: list[str], listener: str) -> None:
    """Only ``suites`` offered. TLSv1.2's by name (standard or OpenSSL's); OpenSSL offers
    TLSv1.3's whatever is set, so a list naming none of them turns TLSv1.3 off, as a JVM
    given only TLSv1.2 suites cannot negotiate TLSv1.3."""
    tls12 = [openssl_cipher(s) for s in suites if s not in _TLS13_SUITES]
    every = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    every.set_ciphers("ALL")
    known = {c["name"] for c in every.get_ciphers()}
    unknown = [s for s, name in zip([s for s in suites if s not in _TLS13_SUITES], tls12)
               if name not in known]
    if unknown:
        raise InvalidConfigError(f"Listener {listener}: ssl.cipher.suites names "
                                 f"{', '.join(unknown)}, which this broker's OpenSSL does not "
                                 "offer")
    if tls12:
        context.set_ciphers(":".join(tls12))
    if len(tls12) == len(suites):
        context.maximum_version = min(context.maximum_version, ssl.TLSVersion.TLSv1_2)


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
        _set_cipher_suites(context, cfg["ssl.cipher.suites"], listener)
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
        # No truststore: the platform's trusted CAs, as Kafka falls back to the JVM's.
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
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
        if endpoint.security_protocol == "SASL_SSL" and \
                f"listener.name.{endpoint.name.lower()}.ssl.client.auth" not in broker:
            # As Kafka's ChannelBuilders: SASL authenticates a SASL_SSL client, so only the
            # listener's own ssl.client.auth asks it for a certificate.
            cfg["ssl.client.auth"] = "none"
        try:
            mapper = SslPrincipalMapper(cfg["ssl.principal.mapping.rules"])
        except ValueError as e:
            raise InvalidConfigError(f"Invalid value for configuration "
                                     f"ssl.principal.mapping.rules: {e}") from None
        out[endpoint.name] = (server_context(cfg, endpoint.name), mapper)
    return out


# The attribute types Java writes by name in an RFC 2253 name (X500Principal.getName());
# every other is written as its OID and the hex of its DER value.
_RFC2253_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST",
                     "2.5.4.10": "O", "2.5.4.11": "OU", "2.5.4.9": "STREET",
                     "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID"}
_ESCAPED = ',=+<>#;"\\'
_STRING_CODECS = {12: "utf-8", 19: "latin-1", 20: "latin-1", 22: "latin-1", 26: "latin-1",
                  30: "utf-16-be", 28: "utf-32-be"}


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    length = bytes([n]) if n < 128 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + \
        n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + content


def _java_value(value: str) -> str:
    """An attribute's value escaped as Java's AVA.toRFC2253String escapes it."""
    chars = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c
                    for c in value)
    lead = len(chars) - len(chars.lstrip(" \r"))
    trail = len(chars.rstrip(" \r"))
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(chars))


def rfc2253(name) -> str:
    """An X.509 name (cryptography's ``x509.Name``) as Java's X500Principal.getName() writes
    it, the string Kafka maps with ssl.principal.mapping.rules: most specific RDN first, the
    standard keywords by name, any other attribute as ``<oid>=#<hex of its DER value>``
    (emailAddress: ``1.2.840.113549.1.9.1=#16...``)."""
    rdns = []
    for rdn in reversed(name.rdns):
        avas = []
        for attribute in rdn:
            oid = attribute.oid.dotted_string
            keyword = _RFC2253_KEYWORDS.get(oid)
            tag = attribute._type.value
            codec = _STRING_CODECS.get(tag)
            if keyword is None or codec is None:
                value = attribute.value
                content = value if isinstance(value, bytes) else \
                    value.encode(codec or "utf-8")
                avas.append(f"{oid}=#{_der(tag, content).hex()}")
            else:
                avas.append(f"{keyword}={_java_value(attribute.value)}")
        rdns.append("+".join(avas))
    return ",".join(rdns)


def peer_subject(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The client certificate's subject as Kafka sees it (``rfc2253``), or None where the
    client showed none."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509
    return rfc2253(x509.load_der_x509_certificate(der).subject)


def principal_of(ssl_object, mapper: SslPrincipalMapper) -> str:
    """A connection's principal (Kafka's DefaultKafkaPrincipalBuilder over SSL)."""
    return mapper.principal(peer_subject(ssl_object))
