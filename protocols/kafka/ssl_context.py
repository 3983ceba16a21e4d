"""TLS contexts from Kafka's ``ssl.*`` settings: a server's (an SSL listener's, the replicas'
channel's) from its keystore, truststore, protocols and cipher suites, and a client's pinned
to the one certificate a replica host showed through Ray (``actors.replica.channel``).

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

from protocols.config import Password
from protocols.errors import InvalidConfigError

_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
           "required": ssl.CERT_REQUIRED}


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    return value.value if isinstance(value, Password) else str(value)


def _read(path: str, what: str, where: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidConfigError(f"{where}: cannot read {what} {path}: "
                                 f"{e.strerror}") from None


def _pkcs12(data: bytes, password: str | None, kind: str, store_type: str, path: str,
            where: str):
    from cryptography.hazmat.primitives.serialization import pkcs12
    try:
        return pkcs12.load_key_and_certificates(
            data, password.encode() if password is not None else None)
    except ValueError as e:
        if store_type == "JKS" and data[:4] == b"\xfe\xed\xfe\xed":
            raise InvalidConfigError(
                f"{where}: {path} is a JKS {kind}, which this broker cannot "
                f"read; convert it to PKCS12 (keytool -importkeystore -srckeystore {path} "
                f"-destkeystore {Path(path).stem}.p12 -deststoretype PKCS12) or give PEM "
                f"(ssl.{kind}.type=PEM)") from None
        raise InvalidConfigError(f"{where}: cannot open the {kind} {path} as "
                                 f"{store_type}: {e} (wrong ssl.{kind}.password?)") from None


def keystore_pem(cfg: Mapping[str, Any], where: str) -> tuple[bytes, bytes]:
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
                raise InvalidConfigError(f"{where}: ssl.keystore.key is set "
                                         "without ssl.keystore.certificate.chain")
            key_pem, chain_pem = inline_key.encode(), chain.encode()
        elif location is not None:
            key_pem = chain_pem = _read(location, "the keystore", where)
        else:
            raise InvalidConfigError(f"{where}: TLS needs a keystore "
                                     "(ssl.keystore.location, or ssl.keystore.key and "
                                     "ssl.keystore.certificate.chain with "
                                     "ssl.keystore.type=PEM)")
        password = _secret(cfg["ssl.key.password"])
        try:
            key = serialization.load_pem_private_key(
                key_pem, password.encode() if password is not None else None)
        except (ValueError, TypeError) as e:
            raise InvalidConfigError(f"{where}: cannot read the keystore's "
                                     f"private key: {e} (ssl.key.password?)") from None
        try:
            certs = x509.load_pem_x509_certificates(chain_pem)
        except ValueError as e:
            raise InvalidConfigError(f"{where}: cannot read the keystore's "
                                     f"certificate chain: {e}") from None
    else:
        if location is None:
            raise InvalidConfigError(f"{where}: TLS needs a keystore "
                                     "(ssl.keystore.location)")
        key, cert, more = _pkcs12(_read(location, "the keystore", where),
                                  _secret(cfg["ssl.keystore.password"]), "keystore",
                                  store_type, location, where)
        if key is None or cert is None:
            raise InvalidConfigError(f"{where}: the keystore {location} holds no "
                                     "private key with its certificate")
        certs = [cert, *more]
    unencrypted = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return unencrypted, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def truststore_pem(cfg: Mapping[str, Any], where: str) -> str | None:
    """The trusted certificates, PEM, or None where no truststore is configured."""
    from cryptography.hazmat.primitives import serialization
    store_type = cfg["ssl.truststore.type"]
    location = cfg["ssl.truststore.location"]
    inline = _secret(cfg["ssl.truststore.certificates"])
    if store_type == "PEM":
        if inline is not None:
            return inline
        return None if location is None else _read(location, "the truststore",
                                                   where).decode()
    if location is None:
        return None
    key, cert, more = _pkcs12(_read(location, "the truststore", where),
                              _secret(cfg["ssl.truststore.password"]), "truststore",
                              store_type, location, where)
    certs = ([cert] if cert is not None else []) + list(more)
    if not certs:
        raise InvalidConfigError(f"{where}: the truststore {location} holds no "
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


def _set_cipher_suites(context: ssl.SSLContext, suites: list[str], where: str) -> None:
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
        raise InvalidConfigError(f"{where}: ssl.cipher.suites names "
                                 f"{', '.join(unknown)}, which this broker's OpenSSL does not "
                                 "offer")
    if tls12:
        context.set_ciphers(":".join(tls12))
    if len(tls12) == len(suites):
        context.maximum_version = min(context.maximum_version, ssl.TLSVersion.TLSv1_2)


def server_context(cfg: Mapping[str, Any], where: str) -> ssl.SSLContext:
    """The TLS context of an SSL listener (or the replicas' channel), from its ssl.*
    settings (``actors.broker.config.for_listener``). Bad settings raise InvalidConfigError
    naming ``where`` ("Listener SSL") and the setting."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [_VERSIONS[v] for v in cfg["ssl.enabled.protocols"]]
    if not enabled:
        raise InvalidConfigError(f"{where}: ssl.enabled.protocols is empty")
    context.minimum_version, context.maximum_version = min(enabled), max(enabled)
    if cfg["ssl.cipher.suites"]:
        _set_cipher_suites(context, cfg["ssl.cipher.suites"], where)
    _load_chain(context, *keystore_pem(cfg, where))
    auth = cfg["ssl.client.auth"]
    trusted = truststore_pem(cfg, where)
    if trusted is not None:
        try:
            context.load_verify_locations(cadata=trusted)
        except ssl.SSLError as e:
            raise InvalidConfigError(f"{where}: cannot read the truststore's "
                                     f"certificates: {e}") from None
    elif auth != "none":
        # No truststore: the platform's trusted CAs, as Kafka falls back to the JVM's.
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = _VERIFY[auth]
    return context


def test_handshake(server: ssl.SSLContext, client: ssl.SSLContext, where: str) -> None:
    """A TLS handshake between the two contexts in memory; InvalidConfigError saying why
    where they cannot agree (a protocol or cipher suite this OpenSSL will not speak)."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    ends = [(client.wrap_bio(client_in, client_out), client_out, server_in),
            (server.wrap_bio(server_in, server_out, server_side=True), server_out, client_in)]
    done = [False, False]
    try:
        for _ in range(20):
            for i, (end, out, other) in enumerate(ends):
                if not done[i]:
                    try:
                        end.do_handshake()
                        done[i] = True
                    except ssl.SSLWantReadError:
                        pass
                data = out.read()
                if data:
                    other.write(data)
            if all(done):
                return
    except ssl.SSLError as e:
        raise InvalidConfigError(f"{where}: no TLS connection can be made with these "
                                 f"settings (ssl.enabled.protocols, ssl.cipher.suites): "
                                 f"{e.reason or e}") from None
    raise InvalidConfigError(f"{where}: a TLS handshake with these settings does not end")


def pinned_client_context(certificate_pem: str) -> ssl.SSLContext:
    """A client's TLS context that trusts exactly ``certificate_pem`` (the first certificate
    of it), whatever names it holds: the replicas' channel's, whose certificate the client
    was given by the host itself through Ray's authenticated control plane, as it was given
    the channel's token."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    leaf = x509.load_pem_x509_certificates(certificate_pem.encode())[0]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False    # the certificate itself is what is trusted
    context.verify_mode = ssl.CERT_REQUIRED
    # The host's settings (ssl.enabled.protocols, ssl.cipher.suites) decide: the caller
    # takes whatever they allow.
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.set_ciphers("ALL:@SECLEVEL=0")
    context.load_verify_locations(
        cadata=leaf.public_bytes(serialization.Encoding.PEM).decode())
    # The leaf is its own anchor: no chain to a CA is asked for.
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context
