"""The cluster's configuration: one dict of Kafka's dotted names, split by who uses them.

Controller keys go to ``ControllerState``, broker keys to the broker and its replicas, and
the broker's ``log.*`` keys become every topic's defaults (``storage.config``). An unknown
name is refused with the closest known one, as everywhere else.
"""
from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from actors.controller.state import CONTROLLER_CONFIG
from protocols.config import ConfigDef, at_least, one_of
from protocols.errors import InvalidConfigError
from protocols.kafka.listeners import DEFAULT_PROTOCOL_MAP
from storage.config import BROKER_DEFAULTS, LogConfig

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def inter_broker_listener(broker: Mapping[str, Any]) -> tuple[str, str]:
    """(listener name, security protocol) of the replicas' channel, as Kafka picks its
    inter-broker listener: ``inter.broker.listener.name`` (its protocol from
    listener.security.protocol.map), else the listener named as
    ``security.inter.broker.protocol``. The channel is TLS when that protocol is SSL or
    SASL_SSL, with that listener's ssl.* settings (``for_listener``); a caller is admitted by
    the token it got through Ray, so SASL adds nothing there and is not spoken."""
    from protocols.kafka.listeners import parse_listeners, parse_protocol_map
    name = broker.get("inter.broker.listener.name")
    if not name:
        protocol = broker.get("security.inter.broker.protocol", "PLAINTEXT")
        return protocol, protocol
    protocols = parse_protocol_map(broker.get("listener.security.protocol.map"))
    listeners = [e.name for e in parse_listeners(broker.get("advertised.listeners")
                                                 or broker.get("listeners"),
                                                 protocol_map=protocols)]
    if name.upper() not in listeners:
        raise InvalidConfigError(
            "inter.broker.listener.name must be a listener name defined in "
            "advertised.listeners. The valid options based on currently configured listeners "
            f"are {','.join(listeners)}")
    return name.upper(), protocols[name.upper()]


def _inter_broker(name: str, value: str) -> None:
    if value not in SECURITY_PROTOCOLS:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: No enum "
                                 f"constant {value} in SecurityProtocol "
                                 f"({', '.join(SECURITY_PROTOCOLS)})")


def _authorizer(name: str, value: str) -> None:
    from protocols.kafka.authorizer import STANDARD_AUTHORIZER
    if value not in ("", STANDARD_AUTHORIZER):
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: rafka's authorizer is Kafka's "
            f"{STANDARD_AUTHORIZER} (or empty: no authorizer, every request allowed)")


def _super_users(name: str, value: str | None) -> None:
    from protocols.kafka.acl import parse_super_users
    try:
        parse_super_users(value)
    except ValueError as e:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: {e}") \
            from None


BROKER_CONFIG = (
    ConfigDef()
    .define("broker.heartbeat.interval.ms", "int", 2000, at_least(1))
    .define("replica.lag.time.max.ms", "long", 30_000, at_least(1))
    .define("replica.fetch.wait.max.ms", "int", 500, at_least(0))
    .define("replica.fetch.min.bytes", "int", 1, at_least(1))
    .define("replica.fetch.max.bytes", "int", 1_048_576, at_least(1))
    .define("replica.fetch.backoff.ms", "int", 1000, at_least(0))
    .define("replica.fetch.response.max.bytes", "int", 10_485_760, at_least(0))
    # Per replica host (fetches land on hosts; Kafka's cache is per broker). 0: no sessions.
    .define("max.incremental.fetch.session.cache.slots", "int", 1000, at_least(0))
    # 0: one host per CPU of the node, shared among the brokers on it, at least one each.
    .define("num.replica.hosts", "int", 0, at_least(0))
    .define("replica.high.watermark.checkpoint.interval.ms", "long", 5000, at_least(1))
    .define("log.retention.check.interval.ms", "long", 300_000, at_least(1))
    # Kafka's: the first retention pass (with the deletions and flushes that run beside it)
    # that long after the broker starts, then every check interval.
    .define("log.initial.task.delay.ms", "long", 30_000, at_least(0))
    # Kafka's cleaner: compacted logs looked at every log.cleaner.backoff.ms (Kafka's
    # threads sleep that long when no log is due), none at all when disabled.
    .define("log.cleaner.enable", "boolean", True)
    .define("log.cleaner.backoff.ms", "long", 15_000, at_least(0))
    .define("controlled.shutdown.enable", "boolean", True)
    .define("controlled.shutdown.max.retries", "int", 3, at_least(0))
    .define("controlled.shutdown.retry.backoff.ms", "long", 5000, at_least(0))
    .define("offsets.topic.num.partitions", "int", 50, at_least(1))
    .define("offsets.topic.replication.factor", "int", 3, at_least(1))
    .define("offsets.topic.segment.bytes", "int", 104_857_600, at_least(1))
    .define("offsets.commit.timeout.ms", "int", 5000, at_least(1))
    .define("offsets.load.buffer.size", "int", 5_242_880, at_least(1))
    # The transaction coordinators (actors.txn) and their log, __transaction_state.
    .define("transaction.state.log.num.partitions", "int", 50, at_least(1))
    .define("transaction.state.log.replication.factor", "int", 3, at_least(1))
    .define("transaction.state.log.min.isr", "int", 2, at_least(1))
    .define("transaction.state.log.segment.bytes", "int", 104_857_600, at_least(1))
    .define("transaction.state.log.load.buffer.size", "int", 5_242_880, at_least(1))
    .define("transaction.max.timeout.ms", "int", 900_000, at_least(1))
    .define("transactional.id.expiration.ms", "int", 604_800_000, at_least(1))
    .define("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10_000,
            at_least(1))
    .define("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3_600_000,
            at_least(1))
    .define("transaction.partition.verification.enable", "boolean", True)
    .define("group.initial.rebalance.delay.ms", "int", 3000, at_least(0))
    .define("group.min.session.timeout.ms", "int", 6000, at_least(0))
    .define("group.max.session.timeout.ms", "int", 1_800_000, at_least(0))
    .define("group.max.size", "int", 2_147_483_647, at_least(1))
    # The Kafka listener (actors.broker.listener.socket_server). Port 0: a free port, told
    # to clients through the metadata (Cluster.bootstrap_servers).
    .define("listeners", "string", "PLAINTEXT://127.0.0.1:0")
    .define("advertised.listeners", "string", None, nullable=True)
    .define("socket.request.max.bytes", "int", 104_857_600, at_least(1))
    # Accepted for Kafka's configs' sake: the listener's connections share the broker's
    # event loop (requests go on to the replica hosts, which do the work).
    .define("num.network.threads", "int", 3, at_least(1))
    .define("connections.max.idle.ms", "long", 600_000, at_least(1))
    .define("auto.create.topics.enable", "boolean", True)
    .define("listener.security.protocol.map", "string", DEFAULT_PROTOCOL_MAP)
    # SSL listeners (actors.broker.listener.tls), with Kafka's names and defaults; each may be
    # given for one listener as listener.name.<listener>.<key> (``LISTENER_KEYS``).
    .define("ssl.keystore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM"))
    .define("ssl.keystore.location", "string", None, nullable=True)
    .define("ssl.keystore.password", "password", None, nullable=True)
    .define("ssl.key.password", "password", None, nullable=True)
    .define("ssl.keystore.key", "password", None, nullable=True)
    .define("ssl.keystore.certificate.chain", "password", None, nullable=True)
    .define("ssl.truststore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM"))
    .define("ssl.truststore.location", "string", None, nullable=True)
    .define("ssl.truststore.password", "password", None, nullable=True)
    .define("ssl.truststore.certificates", "password", None, nullable=True)
    .define("ssl.client.auth", "string", "none", one_of("none", "requested", "required"))
    # The JVM's SSLContext protocol; what a listener offers is ssl.enabled.protocols.
    .define("ssl.protocol", "string", "TLSv1.3",
            one_of("TLS", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"))
    .define("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"],
            one_of("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"))
    .define("ssl.cipher.suites", "list", [])
    .define("ssl.principal.mapping.rules", "string", "DEFAULT")
    # A broker's client side of inter-broker TLS; rafka's brokers do not call each other over
    # Kafka's protocol (see security.inter.broker.protocol).
    .define("ssl.endpoint.identification.algorithm", "string", "https")
    # The JVM's key and trust managers, provider and random source: accepted so that a
    # Kafka broker's settings start a rafka broker; OpenSSL has no such choices.
    .define("ssl.keymanager.algorithm", "string", "SunX509")
    .define("ssl.trustmanager.algorithm", "string", "PKIX")
    .define("ssl.secure.random.implementation", "string", None, nullable=True)
    .define("ssl.provider", "string", None, nullable=True)
    # The replica hosts' own channel (followers' fetches, producers' and consumers' requests):
    # SSL serves it over TLS with the broker's ssl.keystore.*.
    .define("security.inter.broker.protocol", "string", "PLAINTEXT", _inter_broker)
    .define("inter.broker.listener.name", "string", None, nullable=True)
    # Kafka brokers' SASL between themselves; the channel admits by token (accepted so that a
    # Kafka broker's settings start a rafka broker).
    .define("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI")
    # SASL listeners (protocols.kafka.sasl). Kafka's default is GSSAPI (Kerberos), which is
    # not built: a SASL listener must name its mechanisms. Each mechanism's users come from
    # listener.name.<listener>.<mechanism>.sasl.jaas.config, as on a Kafka broker.
    .define("sasl.enabled.mechanisms", "list", ["GSSAPI"])
    # KIP-368: an authenticated SASL session's lifetime (0: for ever); per listener and
    # mechanism as listener.name.<listener>.<mechanism>.connections.max.reauth.ms.
    .define("connections.max.reauth.ms", "long", 0, at_least(0))
    .define("sasl.server.max.receive.size", "int", 524_288, at_least(1))
    .define("connection.failed.authentication.delay.ms", "int", 100, at_least(0))
    # ACLs (protocols.kafka.authorizer): empty, no authorizer; Kafka's StandardAuthorizer
    # checks every request against the cluster's ACLs.
    .define("authorizer.class.name", "string", "", _authorizer)
    .define("super.users", "string", None, _super_users, nullable=True)
    .define("allow.everyone.if.no.acl.found", "boolean", False)
)
# The settings a listener may have of its own, as listener.name.<listener>.<key>.
LISTENER_KEYS = frozenset(k for k in BROKER_CONFIG.keys
                          if k.startswith("ssl.") or k == "sasl.enabled.mechanisms")
# listener.name.<listener, lower case>.<one of LISTENER_KEYS>, or
# listener.name.<listener>.<mechanism, lower case>.(sasl.jaas.config|connections.max.reauth.ms).
_LISTENER_KEY = re.compile(r"^listener\.name\.([a-z0-9_]+)\.((ssl\..+)|(sasl\.enabled\.mechanisms)"
                           r"|[a-z0-9-]+\.(sasl\.jaas\.config|connections\.max\.reauth\.ms))$")
JAAS_CONFIG = ConfigDef().define("sasl.jaas.config", "password", None)


def listener_key(name: str) -> tuple[str, str] | None:
    """``listener.name.external.ssl.keystore.location`` -> ("EXTERNAL", "ssl.keystore.location"),
    ``listener.name.sasl_ssl.plain.sasl.jaas.config`` -> ("SASL_SSL", "plain.sasl.jaas.config")
    where the key is a listener's own; else None."""
    m = _LISTENER_KEY.match(name)
    if m is None or (m.group(3) is not None and m.group(3) not in LISTENER_KEYS):
        return None
    return m.group(1).upper(), m.group(2)


def parse_listener_value(name: str, value: Any) -> Any:
    """A listener's own setting's value, converted and checked as its key's."""
    key = listener_key(name)
    assert key is not None, name
    if key[1].endswith(".sasl.jaas.config"):
        from protocols.kafka.jaas import JaasConfigError, parse_jaas_config
        secret = JAAS_CONFIG.parse({"sasl.jaas.config": value}, defaults=False)[
            "sasl.jaas.config"]
        try:
            modules = parse_jaas_config(secret.value)
        except JaasConfigError as e:
            raise InvalidConfigError(f"Invalid value for configuration {name}: {e}") from None
        if len(modules) != 1:
            raise InvalidConfigError(f"Invalid value for configuration {name}: JAAS config "
                                     f"property contains {len(modules)} login modules, "
                                     "should be 1 module")
        return secret
    base = "connections.max.reauth.ms" if key[1].endswith(".connections.max.reauth.ms") \
        else key[1]
    return BROKER_CONFIG.parse({base: value}, defaults=False)[base]


def absolute_locations(broker: dict[str, Any]) -> dict[str, Any]:
    """Keystore and truststore locations made absolute where the settings are given (the
    driver's working directory): a broker reads them from its own."""
    return {k: (os.path.abspath(v) if k.endswith((".keystore.location", ".truststore.location"))
                and isinstance(v, str) else v) for k, v in broker.items()}


def for_listener(broker: Mapping[str, Any], listener: str) -> dict[str, Any]:
    """The broker's listener settings (ssl.*, sasl.enabled.mechanisms) as ``listener``
    sees them: its own where given."""
    prefix = f"listener.name.{listener.lower()}."
    return {k: broker.get(prefix + k, broker[k]) for k in LISTENER_KEYS}


def reauth_ms(broker: Mapping[str, Any], listener: str, mechanism: str) -> int:
    """connections.max.reauth.ms for ``mechanism`` on ``listener``."""
    return broker.get(f"listener.name.{listener.lower()}.{mechanism.lower()}"
                      ".connections.max.reauth.ms", broker["connections.max.reauth.ms"])


def jaas_config(broker: Mapping[str, Any], listener: str, mechanism: str):
    """``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (a Password), or None."""
    return broker.get(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")


LOG_KEYS = frozenset(key for sources in BROKER_DEFAULTS.values() for key, _ in sources)


@dataclass(frozen=True)
class ClusterConfig:
    controller: dict[str, Any] = field(default_factory=dict)
    broker: dict[str, Any] = field(default_factory=dict)
    log: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None = None, **kwargs: Any) -> "ClusterConfig":
        controller: dict[str, Any] = {}
        broker: dict[str, Any] = {}
        log: dict[str, Any] = {}
        listener_keys: dict[str, Any] = {}
        known = set(CONTROLLER_CONFIG.keys) | set(BROKER_CONFIG.keys) | LOG_KEYS
        for source in (config or {}), kwargs:
            for raw, value in source.items():
                name = raw if raw in known else raw.replace("_", ".")
                if listener_key(raw) is not None:
                    listener_keys[raw] = parse_listener_value(raw, value)
                    continue
                if name not in known:
                    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                    hint = f" Did you mean '{close[0]}'?" if close else ""
                    raise InvalidConfigError(f"Unknown configuration '{raw}'.{hint}")
                if name in CONTROLLER_CONFIG.keys:
                    controller[name] = value
                if name in BROKER_CONFIG.keys:
                    broker[name] = value
                if name in LOG_KEYS:
                    log[name] = value
        LogConfig.from_props({}, broker=log)  # bad values fail here, naming the key
        # Both given (a parsed config comes back with every default: PLAINTEXT, unset).
        if broker.get("inter.broker.listener.name") and \
                broker.get("security.inter.broker.protocol", "PLAINTEXT") != "PLAINTEXT":
            raise InvalidConfigError("Only one of inter.broker.listener.name and "
                                     "security.inter.broker.protocol should be set.")
        parsed = cls(CONTROLLER_CONFIG.parse(controller, defaults=False),
                     absolute_locations({**BROKER_CONFIG.parse(broker), **listener_keys}), log)
        inter_broker_listener(parsed.broker)   # a listener name that is none: refused now
        return parsed

    def to_dict(self) -> dict[str, Any]:
        return {**self.log, **self.broker, **self.controller}
