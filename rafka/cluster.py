"""``rafka.Cluster``: start, find, operate and stop a rafka cluster on Ray.

    cluster = rafka.Cluster.start(num_brokers=3, data_dir="rafka-data")   # embedded default
    cluster = rafka.Cluster.connect("default")     # from any driver, task or actor
    cluster.admin().create_topics([rafka.NewTopic("t", 6, 3)])
    cluster.shutdown()

Brokers are detached actors named ``broker-<id>`` in the namespace ``rafka-<name>``; what a
connecting process needs to know (data directory, configuration, brokers' nodes) is kept in
Ray's GCS key-value store under ``rafka/<name>/cluster``.
"""
from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any, Mapping

import msgpack

from actors.names import CONTROLLER, broker_name, namespace_for, timer_name
from protocols.errors import (BrokerNotAvailableError, InvalidRequestError, KafkaError,
                              KafkaTimeoutError, LeaderNotAvailableError,
                              UnknownTopicOrPartitionError)
from protocols.wire import decode
from rafka.client.retry import is_retriable, retry_until

log = logging.getLogger(__name__)

INFO_KEY = "rafka/{name}/cluster"
_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,64}$")


def _ray():
    import ray
    return ray


POLL_S = 0.05   # how often a wait below looks again


class _NotYet(Exception):
    """What a wait below is waiting for has not happened yet: looked at again until the
    deadline, then ``error`` is raised."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def _is_not_yet(error: BaseException) -> bool:
    return isinstance(error, _NotYet)


def _wait(timeout_s: float, attempt):
    """``attempt(seconds_left)`` until it returns rather than raising ``_NotYet``, for
    ``timeout_s``: then the ``_NotYet``'s error is raised."""
    try:
        return retry_until(time.monotonic() + timeout_s, attempt, backoff_s=POLL_S,
                           retriable=_is_not_yet)
    except _NotYet as e:
        raise e.error from None


def _kv(call: str, *args):
    """``actors.gcs``'s KV call of that name, its deadline error Kafka's TimeoutException
    (imported here: ``import rafka`` does not import Ray)."""
    from actors import gcs
    return gcs.as_kafka_timeout(getattr(gcs, call), *args)


# What a broker asks of Ray's ``node:<address>`` resource (1.0 per node): a share small
# enough for any number of brokers on one node.
NODE_RESOURCE_SHARE = 0.001


def _addresses_if_unique(ray, brokers: Mapping[int, str]) -> dict[int, str]:
    """Each broker's node address, if every alive node has an address of its own (else
    none: nodes sharing an address, as in a one-machine test cluster, are told apart by
    node id only, and brokers are pinned to node ids)."""
    alive = [n for n in ray.nodes() if n["Alive"]]
    by_node = {n["NodeID"]: n["NodeManagerAddress"] for n in alive}
    if len(set(by_node.values())) != len(by_node):
        return {}
    return {b: by_node[node] for b, node in brokers.items()}


# A secret in the cluster's settings keeps its type through Ray's KV store (where the
# settings live to start brokers again, as Kafka's live in server.properties): a Password,
# shown [hidden] wherever the settings are printed.
_PASSWORD_EXT = 1


def _pack_info(info: Mapping[str, Any]) -> bytes:
    from protocols.config import Password

    def ext(value):
        if isinstance(value, Password):
            return msgpack.ExtType(_PASSWORD_EXT, value.value.encode())
        raise TypeError(f"cannot pack {type(value).__name__}")
    return msgpack.packb(info, use_bin_type=True, default=ext)


def _unpack_info(raw: bytes) -> dict:
    def ext(code: int, data: bytes):
        from protocols.config import Password
        if code != _PASSWORD_EXT:
            raise ValueError(f"unknown msgpack extension {code} in a cluster's info")
        return Password(data.decode())
    return msgpack.unpackb(raw, strict_map_key=False, ext_hook=ext)


class Cluster:
    def __init__(self, name: str, info: Mapping[str, Any]):
        self.name = name
        self.namespace = namespace_for(name)
        self.data_dir = info["data_dir"]
        self.config = dict(info["config"])
        self.broker_nodes: dict[int, str] = {int(b): n for b, n in info["brokers"].items()}
        # Each broker's node address when brokers are placed by address (one node per
        # address): a node restarted on the same host, with a new Ray node id, gets its
        # broker back (Ray restarts the actor there), as a rebooted Kafka host does.
        self.broker_addresses: dict[int, str] = {
            int(b): a for b, a in info.get("addresses", {}).items()}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_controller", None)   # this process's; looked up again where unpickled
        return state

    def __repr__(self) -> str:
        return (f"Cluster(name={self.name!r}, brokers={sorted(self.broker_nodes)}, "
                f"data_dir={self.data_dir!r})")

    # ---- start and connect -----------------------------------------------------------------
    @classmethod
    def start(cls, num_brokers: int = 3, data_dir: str | Path = "rafka-data",
              config: Mapping[str, Any] | None = None, name: str = "default", *,
              address: str | None = None, timeout_s: float = 120.0,
              nodes: list[str] | None = None, place_by_address: bool = True,
              **config_kwargs: Any) -> "Cluster":
        """Start ``num_brokers`` brokers on the current Ray instance (a local one is started
        when none is connected) and wait until each has registered with the controller.
        Brokers are spread over the alive Ray nodes, round robin. Starting on a data_dir
        that holds an earlier run recovers its topics and records. ``nodes`` (Ray node
        ids) restricts the brokers to those nodes. Each broker is placed by its node's
        address (``place_by_address``, the default) where every node has an address of its
        own: a node that dies and comes back at the same address (a rebooted host, with a
        new Ray node id) gets its broker back, restarted there by Ray. Nodes sharing an
        address (several Ray nodes on one machine), or ``place_by_address=False``, pin
        each broker to its node id instead."""
        from actors.broker.config import ClusterConfig
        from rafka.client.ray_runtime import ensure_ray

        if not _NAME.match(name):
            raise InvalidRequestError(f"Invalid cluster name {name!r}: use 1-64 of "
                                      "[a-zA-Z0-9._-]")
        if num_brokers < 1:
            raise InvalidRequestError(f"num_brokers must be >= 1, got {num_brokers}")
        ray = _ray()
        given = dict(config or {}, **config_kwargs)
        given.setdefault("offsets.topic.replication.factor", min(3, num_brokers))
        given.setdefault("transaction.state.log.replication.factor", min(3, num_brokers))
        given.setdefault("transaction.state.log.min.isr", min(
            2, int(given["transaction.state.log.replication.factor"])))
        parsed = ClusterConfig.parse(given)
        ensure_ray(address)
        existing = _kv("kv_get", INFO_KEY.format(name=name))
        if existing is not None:
            running = cls(name, _unpack_info(existing))
            if running._any_broker_alive():
                raise InvalidRequestError(f"A rafka cluster named '{name}' is already running "
                                          f"on this Ray cluster; use Cluster.connect('{name}')")
        alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        if nodes:
            unknown = set(nodes) - set(alive)
            if unknown:
                raise InvalidRequestError(f"Ray nodes {sorted(unknown)} are not alive")
        nodes = list(nodes or alive)
        brokers = {b: nodes[b % len(nodes)] for b in range(num_brokers)}
        info = {"data_dir": str(Path(data_dir).resolve()), "config": parsed.to_dict(),
                "brokers": brokers,
                "addresses": _addresses_if_unique(ray, brokers) if place_by_address else {}}
        Path(info["data_dir"]).mkdir(parents=True, exist_ok=True)
        _kv("kv_put", INFO_KEY.format(name=name), _pack_info(info))
        cluster = cls(name, info)
        for b in range(num_brokers):
            cluster._create_broker(b)
        cluster.wait_for_brokers(range(num_brokers), timeout_s)
        return cluster

    @classmethod
    def connect(cls, name: str | None = None, address: str | None = None,
                bootstrap_servers: str | None = None) -> "Cluster":
        """Attach to a running cluster from any driver, Ray task or actor: the one named
        ``name`` (default ``default``), or the one whose Kafka listeners include one of
        ``bootstrap_servers`` (``host:port,...``, as Kafka's tools take it)."""
        from rafka.client.ray_runtime import ensure_ray

        ensure_ray(address or "auto")
        if bootstrap_servers is not None:
            found = cls._by_listener(bootstrap_servers)
            if name is not None and found.name != name:
                raise InvalidRequestError(
                    f"{bootstrap_servers} is a listener of rafka cluster '{found.name}', not "
                    f"of '{name}'")
            return found
        name = name or "default"
        raw = _kv("kv_get", INFO_KEY.format(name=name))
        if raw is None:
            raise BrokerNotAvailableError(f"No rafka cluster named '{name}' is running on "
                                          "this Ray cluster")
        return cls(name, _unpack_info(raw))

    @staticmethod
    def running() -> list[str]:
        """The names of the rafka clusters of the Ray cluster this process is connected to."""
        prefix, suffix = INFO_KEY.split("{name}")
        return sorted(k[len(prefix):-len(suffix)] for k in _kv("kv_keys", INFO_KEY.split("{")[0])
                      if k.startswith(prefix) and k.endswith(suffix))

    @classmethod
    def _by_listener(cls, bootstrap_servers: str) -> "Cluster":
        """The running cluster one of whose brokers listens at one of the addresses (host
        names resolved, so ``localhost:9092`` finds ``127.0.0.1:9092``)."""
        import socket

        def endpoint(text: str) -> tuple[str, int]:
            host, sep, port = text.strip().rpartition(":")
            if not sep or not port.isdigit():
                raise InvalidRequestError(f"Invalid bootstrap server {text.strip()!r}: "
                                          "expected host:port")
            try:
                return socket.gethostbyname(host.strip("[]")), int(port)
            except OSError:
                return host, int(port)
        wanted = {endpoint(s) for s in bootstrap_servers.split(",") if s.strip()}
        seen = []
        for name in cls.running():
            try:
                cluster = cls.connect(name)
                servers = ",".join(a for a in cluster.listeners().values() if a)
            except KafkaError:
                continue
            seen.append(f"{name} ({servers})")
            if wanted & {endpoint(s) for s in servers.split(",") if s}:
                return cluster
        raise BrokerNotAvailableError(
            f"No rafka cluster on this Ray cluster listens at {bootstrap_servers}; running: "
            + ("; ".join(seen) or "none"))

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ---- handles ---------------------------------------------------------------------------
    def _create_broker(self, broker_id: int) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from actors.broker.actor import BrokerActor

        node = self.broker_nodes[broker_id]
        on_node = sum(1 for n in self.broker_nodes.values() if n == node)
        address = self.broker_addresses.get(broker_id)
        placement = ({"resources": {f"node:{address}": NODE_RESOURCE_SHARE}} if address else
                     {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)})
        def create(_left: float) -> None:
            try:
                BrokerActor.options(
                    name=broker_name(broker_id), namespace=self.namespace, lifetime="detached",
                    **placement,
                ).remote(self.name, broker_id, self.data_dir, self.config,
                         brokers_on_node=on_node)
            except ValueError as e:  # the stopped broker's name is not free yet
                raise _NotYet(e) from None
        _wait(30, create)

    def broker(self, broker_id: int):
        try:
            return _ray().get_actor(broker_name(broker_id), namespace=self.namespace)
        except ValueError:
            raise BrokerNotAvailableError(f"Broker {broker_id} is not running") from None

    def controller(self, timeout_s: float = 30.0):
        """The controller's handle (waiting while brokers elect one)."""
        ray = _ray()

        def ping(_left: float):
            try:
                handle = ray.get_actor(CONTROLLER, namespace=self.namespace)
                ray.get(handle.ping.remote(), timeout=5)
                return handle
            except Exception:
                raise _NotYet(KafkaTimeoutError(f"No controller in cluster '{self.name}' "
                                                f"after {timeout_s} s")) from None
        return _wait(timeout_s, ping)

    def replica(self, topic: str, partition: int, broker_id: int):
        """A handle on broker ``broker_id``'s replica of topic-partition (calls go to the
        replica host holding it); UNKNOWN_TOPIC_OR_PARTITION when there is none."""
        from actors.replica.locate import locate_replica
        return locate_replica(self.namespace, topic, partition, broker_id)

    def metadata(self, timeout_s: float = 30.0) -> dict:
        """The controller's metadata image: brokers, controller id and epoch, topics with
        each partition's leader, leader epoch, replicas and ISR, topic configs.

        A read changes nothing, so when the controller dies under it (its broker's process
        killed: the controller lives and dies with the broker that won it, as in Kafka) the
        request goes again to the next controller, as Kafka's clients go on to another
        broker after a failed metadata request."""
        ray = _ray()
        # The controller found last time is asked first (a streaming query's source reads
        # the metadata at every trigger: looking the controller up and pinging it each
        # time tripled its calls); one that died or does not answer is looked up again.
        known = self.__dict__.get("_controller")
        if known is not None:
            started = time.monotonic()
            try:
                return decode(ray.get(known.metadata.remote(), timeout=min(5.0, timeout_s)))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                self._controller = None
                timeout_s = max(0.0, timeout_s - (time.monotonic() - started))

        def read(left: float) -> dict:
            handle = self.controller(left)
            try:
                image = decode(ray.get(handle.metadata.remote()))
            except ray.exceptions.RayActorError:
                raise _NotYet(KafkaTimeoutError(f"No controller of cluster '{self.name}' "
                                                f"answered a metadata request within "
                                                f"{timeout_s} s")) from None
            self._controller = handle
            return image
        return _wait(timeout_s, read)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of the live brokers' Kafka listeners (``PLAINTEXT``): what a
        Kafka client's ``bootstrap.servers`` takes."""
        return self.listener_addresses("PLAINTEXT")

    def listener_addresses(self, listener: str) -> str:
        """``host:port,...`` of the live brokers' listener named ``listener`` (``SSL``, or
        a name of ``listener.security.protocol.map``); "" where none has it."""
        return self.listeners().get(listener.upper(), "")

    def listeners(self) -> dict[str, str]:
        """{listener name: ``host:port,...``} of the live brokers' Kafka listeners."""
        from protocols.kafka.listeners import bootstrap_servers
        brokers = {b: info.get("endpoints", [])
                   for b, info in self.metadata()["brokers"].items()}
        names = dict.fromkeys(name for endpoints in brokers.values()
                              for name, _, _ in endpoints)
        return {name: bootstrap_servers(brokers, name) for name in names}

    def leader(self, topic: str, partition: int, timeout_s: float = 30.0) -> tuple[int, Any]:
        """(broker id, replica handle) of the partition's leader, once it leads."""
        ray = _ray()

        def find(_left: float) -> tuple[int, Any]:
            try:
                p = self.metadata()["topics"][topic][partition]
            except KeyError:
                raise UnknownTopicOrPartitionError(
                    f"Unknown partition {topic}-{partition}") from None
            except Exception as e:
                # The controller died under the request (fenced by the brokers, restarted):
                # its successor answers the next one, as Kafka's clients go on to the next
                # controller.
                if not is_retriable(e):
                    raise
                raise _NotYet(e) from None
            if p["leader"] >= 0:
                try:
                    handle = self.replica(topic, partition, p["leader"])
                    state = ray.get(handle.describe.remote(), timeout=5)
                    if state["role"] == "leader" and state["leader_epoch"] == p["leader_epoch"]:
                        return p["leader"], handle
                except Exception:
                    pass
            raise _NotYet(LeaderNotAvailableError(f"No leader for {topic}-{partition} after "
                                                  f"{timeout_s} s"))
        return _wait(timeout_s, find)

    def admin(self, config: Mapping[str, Any] | None = None):
        """A ``rafka.Admin``; ``config``: Kafka's client settings (its SASL ones sign in)."""
        from rafka.admin import Admin
        return Admin(self, config)

    # ---- operating -------------------------------------------------------------------------
    def _any_broker_alive(self) -> bool:
        ray = _ray()
        for b in self.broker_nodes:
            try:
                ray.get(self.broker(b).pid.remote(), timeout=5)
                return True
            except Exception:
                continue
        return False

    def wait_for_brokers(self, broker_ids, timeout_s: float = 120.0) -> None:
        """Wait until these brokers have started and registered with the controller."""
        ray = _ray()
        wanted = set(broker_ids)
        deadline = time.monotonic() + timeout_s

        def ready(b: int, left: float) -> None:
            try:
                ray.get(self.broker(b).wait_ready.remote(), timeout=left)
            except BrokerNotAvailableError as e:
                raise _NotYet(e) from None
            except ray.exceptions.GetTimeoutError:
                raise KafkaTimeoutError(f"Broker {b} did not start within {timeout_s} s")

        def registered(_left: float) -> None:
            live = set(self.metadata()["brokers"])
            if not wanted <= live:
                raise _NotYet(KafkaTimeoutError(f"Brokers {sorted(wanted - live)} did not "
                                                f"register within {timeout_s} s"))
        for b in sorted(wanted):
            _wait(deadline - time.monotonic(), lambda left, b=b: ready(b, left))
        _wait(deadline - time.monotonic(), registered)

    def broker_pid(self, broker_id: int) -> int:
        return _ray().get(self.broker(broker_id).pid.remote())

    def stop_broker(self, broker_id: int, controlled: bool = True) -> None:
        """Stop one broker: controlled shutdown (leaders move away first), logs closed
        cleanly, then its actors end. ``start_broker`` brings it back."""
        ray = _ray()
        handle = self.broker(broker_id)
        ray.get(handle.shutdown.remote(controlled))
        ray.kill(handle, no_restart=True)

        def name_freed(_left: float) -> None:
            try:
                ray.get_actor(broker_name(broker_id), namespace=self.namespace)
            except ValueError:
                return
            raise _NotYet(KafkaTimeoutError(f"Broker {broker_id}'s name is still taken"))
        try:
            _wait(30, name_freed)
        except KafkaTimeoutError:
            pass   # its successor's start waits for the name in turn (``_create_broker``)

    def start_broker(self, broker_id: int, timeout_s: float = 60.0) -> None:
        if broker_id not in self.broker_nodes:
            raise InvalidRequestError(f"Broker {broker_id} is not part of cluster "
                                      f"'{self.name}' (brokers {sorted(self.broker_nodes)})")
        self._create_broker(broker_id)
        self.wait_for_brokers([broker_id], timeout_s)

    def shutdown(self) -> None:
        """Stop every broker cleanly (logs flushed and checkpointed, clean-shutdown markers
        written, the metadata snapshot on disk); the next ``start`` on the same data_dir
        recovers everything."""
        from actors.controller.actor import forget_snapshot

        ray = _ray()
        handles = {}   # broker id -> handle, for the brokers running
        for b in sorted(self.broker_nodes):
            try:
                handles[b] = self.broker(b)
            except KafkaError:
                continue
        refs = {b: h.shutdown.remote(False) for b, h in handles.items()}
        for b, ref in refs.items():
            try:
                ray.get(ref, timeout=60)
            except Exception as e:  # it is killed below anyway; its next start recovers
                log.warning("broker %d did not shut down cleanly: %r", b, e)
        for h in handles.values():
            ray.kill(h, no_restart=True)
        nodes = set(self.broker_nodes.values()) | {   # the nodes' timers (detached), also
            n["NodeID"] for n in ray.nodes()            # on nodes that came back since
            if n["Alive"] and n["NodeManagerAddress"] in set(self.broker_addresses.values())}
        for node in nodes:
            try:
                ray.kill(ray.get_actor(timer_name(node), namespace=self.namespace),
                         no_restart=True)
            except ValueError:
                pass   # no timer on that node (never started, or already gone)
        forget_snapshot(self.name)
        _kv("kv_del", INFO_KEY.format(name=self.name))
