"""SSL listeners: each SSL listener's TLS context (``protocols.kafka.ssl_context``, from
Kafka's ``ssl.*`` settings, a listener's own first) and a connection's principal from the
certificate its client showed.
"""
from __future__ import annotations

import ssl
from typing import Any, Mapping

from actors.broker.config import for_listener
from protocols.errors import InvalidConfigError
from protocols.kafka.listeners import Endpoint
from protocols.kafka.ssl_context import server_context
from protocols.kafka.ssl_principal import SslPrincipalMapper


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
        out[endpoint.name] = (server_context(cfg, f"Listener {endpoint.name}"), mapper)
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
