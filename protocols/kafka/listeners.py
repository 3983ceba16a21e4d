"""Kafka's ``listeners`` / ``advertised.listeners`` values: ``NAME://host:port`` entries,
comma-separated (``PLAINTEXT://127.0.0.1:0``; an empty host binds every interface; port 0
takes a free one)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from protocols.errors import InvalidConfigError

# Security protocols this broker speaks; SSL and SASL are not built yet (a listener naming
# one is refused).
SECURITY_PROTOCOLS = ("PLAINTEXT",)
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>-?\d+)$")


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(value: str | None, config: str = "listeners") -> list[Endpoint]:
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
        if name not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"Invalid value {entry!r} for configuration {config}: listener {name} is not "
                f"supported (supported: {', '.join(SECURITY_PROTOCOLS)})")
        if not 0 <= port <= 65535:
            raise InvalidConfigError(f"Invalid value {entry!r} for configuration {config}: "
                                     f"port {port} is out of range")
        endpoints.append(Endpoint(name, host, port))
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {config}: each "
                                 "listener name must appear once")
    return endpoints


def advertised(listeners: list[Endpoint], bound: dict[str, int],
               configured: list[Endpoint], host_address: str = "127.0.0.1"
               ) -> list[Endpoint]:
    """What clients are told (Kafka's advertised.listeners; by default the listeners, with
    the port each was bound to; a listener on every interface is advertised at
    ``host_address``, the node's address other nodes reach, where Kafka would advertise the
    host's canonical name)."""
    if configured:
        return configured
    return [Endpoint(e.name, e.host or host_address, bound.get(e.name, e.port))
            for e in listeners]


def bootstrap_servers(endpoints_by_broker: dict[int, list], name: str = "PLAINTEXT") -> str:
    """``host:port,host:port`` of the brokers' ``name`` listeners (from the metadata image's
    ``[[name, host, port], ...]``), in broker order."""
    return ",".join(f"{host}:{port}" for _, eps in sorted(endpoints_by_broker.items())
                    for n, host, port in eps if n == name)
