"""Kafka's ``listeners`` / ``advertised.listeners`` values: ``NAME://host:port`` entries,
comma-separated (``PLAINTEXT://127.0.0.1:0``; an empty host binds every interface; port 0
takes a free one), and ``listener.security.protocol.map``, which says what each listener
name speaks (``INTERNAL:SSL,EXTERNAL:SSL``; by default each security protocol's own name)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from protocols.errors import InvalidConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default listener.security.protocol.map.
DEFAULT_PROTOCOL_MAP = ("SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,"
                        "SASL_PLAINTEXT:SASL_PLAINTEXT")
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>-?\d+)$")


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_protocol_map(value: str | None) -> dict[str, str]:
    """``listener.security.protocol.map`` -> {listener name: security protocol}."""
    mapping: dict[str, str] = {}
    for raw in str(value if value is not None else DEFAULT_PROTOCOL_MAP).split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"Invalid value {entry!r} for configuration listener.security.protocol.map: "
                f"expected LISTENER_NAME:SECURITY_PROTOCOL, the protocol one of "
                f"{', '.join(SECURITY_PROTOCOLS)}")
        if name in mapping:
            raise InvalidConfigError(
                f"Invalid value {value!r} for configuration listener.security.protocol.map: "
                f"listener {name} is mapped twice")
        mapping[name] = protocol
    return mapping


def parse_listeners(value: str | None, config: str = "listeners",
                    protocol_map: dict[str, str] | None = None) -> list[Endpoint]:
    protocols = parse_protocol_map(None) if protocol_map is None else protocol_map
    if value is None or not str(value).strip():
        return []
    endpoints = []
    for raw in str(value).split(","):
        entry = raw.strip()
        m = _ENTRY.match(entry)
        if m is None:
            raise InvalidConfigError(f"Invalid value {entry!r} for configuration {config}: "
                                     "expected NAME://host:port")
        name, host, port = m["name"].upper(), m["host"].strip("[]"), int(m["port"])
        protocol = protocols.get(name)
        if protocol is None:
            raise InvalidConfigError(
                f"Invalid value {entry!r} for configuration {config}: no security protocol "
                f"defined for listener {name} (listener.security.protocol.map)")
        if not 0 <= port <= 65535:
            raise InvalidConfigError(f"Invalid value {entry!r} for configuration {config}: "
                                     f"port {port} is out of range")
        endpoints.append(Endpoint(name, host, port, protocol))
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {config}: each "
                                 "listener name must appear once")
    return endpoints


def exposed(listeners: list[Endpoint]) -> list[Endpoint]:
    """The listeners anyone off this machine may reach without TLS or SASL: PLAINTEXT ones
    bound to every interface or to an address other than loopback."""
    import ipaddress

    def loopback(host: str) -> bool:
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
    return [e for e in listeners if e.security_protocol == "PLAINTEXT" and not loopback(e.host)]


def advertised(listeners: list[Endpoint], bound: dict[str, int],
               configured: list[Endpoint], host_address: str = "127.0.0.1"
               ) -> list[Endpoint]:
    """What clients are told (Kafka's advertised.listeners; by default the listeners, with
    the port each was bound to; a listener on every interface is advertised at
    ``host_address``, the node's address other nodes reach, where Kafka would advertise the
    host's canonical name)."""
    if configured:
        return configured
    return [Endpoint(e.name, e.host or host_address, bound.get(e.name, e.port),
                     e.security_protocol) for e in listeners]


def bootstrap_servers(endpoints_by_broker: dict[int, list], name: str = "PLAINTEXT") -> str:
    """``host:port,host:port`` of the brokers' ``name`` listeners (from the metadata image's
    ``[[name, host, port], ...]``), in broker order."""
    return ",".join(f"{host}:{port}" for _, eps in sorted(endpoints_by_broker.items())
                    for n, host, port in eps if n == name)
