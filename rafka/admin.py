"""``rafka.Admin``: Kafka's AdminClient operations against a rafka cluster.

Topic, partition, reassignment, election and config operations go to the controller actor;
offsets and record deletion go to each partition's leader replica; groups and transactions to
their coordinators. Errors are Kafka's (``TopicAlreadyExistsError``,
``InvalidReplicationFactorError``, ...).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from protocols.errors import (ClusterAuthorizationFailedError, KafkaError,
                              SaslAuthenticationError, NotControllerError, ResourceNotFoundError,
                              UnacceptableCredentialError, UnknownTopicOrPartitionError,
                              UnsupportedSaslMechanismError)
from protocols.kafka.acl import Acl, AclFilter, AclOperation
from protocols.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from protocols.topics import TopicPartition
from protocols.wire import decode



@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int | None = 1
    replication_factor: int | None = 1
    config: Mapping[str, Any] | None = None
    replica_assignment: Mapping[int, list[int]] | None = None


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionInfo]
    config: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterDescription:
    brokers: list[int]
    controller_id: int
    controller_epoch: int


@dataclass(frozen=True)
class ListOffsetsResult:
    offset: int
    timestamp: int


@dataclass(frozen=True)
class ConsumerGroupListing:
    group_id: str
    state: str
    protocol_type: str = "consumer"


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    assignment: set[TopicPartition]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    partition_assignor: str
    coordinator: int
    generation_id: int
    members: list[MemberDescription]


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None     # None: no transaction open
    topic_partitions: list[TopicPartition]


@dataclass(frozen=True)
class ProducerState:
    """One producer a partition's leader keeps state for (Kafka's DescribeProducers)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int                    # -1: no marker written for it yet
    current_transaction_start_offset: int | None


def _raise_if_error(value: Any) -> Any:
    if isinstance(value, KafkaError):
        raise value
    return value


class Admin:
    """``config``: Kafka's client settings; its SASL ones (``sasl.mechanism`` with
    ``sasl.jaas.config``, or ``sasl.username`` and ``sasl.password``) sign in at the Ray door
    (``rafka/client/ray_door.py``), whose checks the topic, config, SCRAM and ACL requests
    pass on a cluster with an authorizer."""

    def __init__(self, cluster, config: Mapping[str, Any] | None = None,
                 timeout_s: float = 60.0):
        from rafka.client.ray_door import RayDoor
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.door = RayDoor(cluster, config, timeout_s)
        # ListOffsets' leaders and their hosts, kept between requests as a Kafka client
        # keeps its metadata: looked up again when a leader does not answer as one, or
        # after metadata.max.age.ms (``ClientMetadata``).
        self._offsets_metadata = None

    def close(self) -> None:
        self.door.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _metadata(self) -> dict:
        """The controller's metadata image, as this client's principal may see it."""
        if self.door.guarded:
            return _raise_if_error(self.door.call("read", "image", []))
        return self.cluster.metadata()

    def _topic_refusals(self, operation: AclOperation, topics: list[str]
                        ) -> dict[str, KafkaError]:
        """TOPIC_AUTHORIZATION_FAILED for the topics this client's principal may not do
        ``operation`` on (none without the door): checked before whether they exist."""
        if not self.door.guarded:
            return {}
        return _raise_if_error(self.door.call("read", "topic_refusals",
                                              [int(operation), topics]))

    def _call(self, method: str, *args: Any) -> Any:
        import ray
        if self.door.guarded:
            return _raise_if_error(self.door.call("admin", method, list(args)))
        handle = self.cluster.controller()
        try:
            answer = ray.get(getattr(handle, method).remote(*args), timeout=self.timeout_s)
        except ray.exceptions.RayActorError as e:
            # The controller died under the request (failover): whether a change was made
            # is unknown, as with Kafka's NOT_CONTROLLER; the caller decides to retry.
            raise NotControllerError(f"The controller changed while handling {method}; "
                                     f"retry ({type(e).__name__})") from None
        return _raise_if_error(decode(answer))

    # ---- topics ----------------------------------------------------------------------------
    def create_topics(self, new_topics: Iterable[NewTopic], wait: bool = True) -> None:
        """Create the topics; with ``wait`` (the default) return once every partition's
        leader serves requests."""
        topics = list(new_topics)
        for t in topics:
            assignment = ({int(p): list(r) for p, r in t.replica_assignment.items()}
                          if t.replica_assignment else None)
            self._call("create_topic", t.name, None if assignment else t.num_partitions,
                       None if assignment else t.replication_factor,
                       dict(t.config or {}), assignment)
        if wait:
            for t in topics:
                self._wait_for_leaders(t.name)

    def _wait_for_leaders(self, topic: str) -> None:
        """Every partition's leader serving; then, for at most the rest of the timeout, its
        in-sync followers' replicas open too (brokers open them after answering the
        controller, so a caller touching a follower next finds it)."""
        from actors.replica.locate import locate_replicas
        deadline = time.monotonic() + self.timeout_s
        partitions = self.cluster.metadata()["topics"][topic]
        for p in sorted(partitions):
            self.cluster.leader(topic, p, max(0.1, deadline - time.monotonic()))
        waiting = [(topic, p, b) for p, info in partitions.items() for b in info["isr"]]
        while waiting and time.monotonic() < deadline:
            found = locate_replicas(self.cluster.namespace, waiting,
                                    max(0.1, deadline - time.monotonic()))
            waiting = [w for w in waiting if w not in found]
            if waiting:
                time.sleep(0.05)

    def delete_topics(self, names: Iterable[str]) -> None:
        for name in names:
            self._call("delete_topic", name)

    def create_partitions(self, new_totals: Mapping[str, int], wait: bool = True) -> None:
        for name, total in new_totals.items():
            self._call("create_partitions", name, total, None)
        if wait:
            for name in new_totals:
                self._wait_for_leaders(name)

    def list_topics(self, internal: bool = False) -> list[str]:
        return sorted(t for t in self._metadata()["topics"]
                      if internal or not t.startswith("__"))

    def describe_topics(self, names: Iterable[str] | None = None
                        ) -> dict[str, TopicDescription]:
        image = self._metadata()
        wanted = list(names) if names is not None else sorted(image["topics"])
        refused = self._topic_refusals(AclOperation.DESCRIBE, wanted)
        out = {}
        for name in wanted:
            if name in refused:
                raise refused[name]
            partitions = image["topics"].get(name)
            if partitions is None:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
            out[name] = TopicDescription(
                name, [PartitionInfo(p, s["leader"], s["leader_epoch"], list(s["replicas"]),
                                     list(s["isr"])) for p, s in sorted(partitions.items())],
                dict(image["configs"].get(name, {})))
        return out

    def describe_topic_lines(self, name: str) -> list[str]:
        """``kafka-topics.sh --describe`` partition lines."""
        return list(self._call("describe_topic", name))

    def describe_cluster(self) -> ClusterDescription:
        image = self._metadata()
        return ClusterDescription(sorted(image["brokers"]), image["controller_id"],
                                  image["controller_epoch"])

    # ---- partitions ------------------------------------------------------------------------
    def alter_partition_reassignments(self, targets: Mapping[tuple[str, int], list[int]]
                                      ) -> None:
        self._call("reassign_partitions", {tuple(tp): list(r) for tp, r in targets.items()})

    def elect_leaders(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Preferred-replica election (all partitions when ``partitions`` is None)."""
        self._call("elect_preferred_leaders",
                   None if partitions is None else [list(tp) for tp in partitions])

    # ---- configs ---------------------------------------------------------------------------
    def describe_configs(self, topics: Iterable[str]) -> dict[str, dict]:
        """Each topic's effective configuration: its overrides over the cluster's
        ``log.*`` defaults over Kafka's."""
        from storage.config import effective_topic_config

        topics = list(topics)
        image = self._metadata()
        refused = self._topic_refusals(AclOperation.DESCRIBE_CONFIGS, topics)
        out = {}
        for name in topics:
            if name in refused:
                raise refused[name]
            if name not in image["configs"]:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
            out[name] = effective_topic_config(image["configs"][name], self.cluster.config)
        return out

    def alter_configs(self, changes: Mapping[str, Mapping[str, Any]]) -> None:
        """Incremental: set the given keys, remove those given as None."""
        for name, config in changes.items():
            self._call("alter_topic_config", name, dict(config))

    # ---- SCRAM credentials (Kafka's Admin.alterUserScramCredentials, KIP-554) ------------
    def alter_user_scram_credentials(
            self, upsertions: Iterable[tuple[str, str, str, int]] = (),
            deletions: Iterable[tuple[str, str]] = ()) -> dict[str, KafkaError | None]:
        """Set users' SCRAM credentials (``(user, mechanism, password, iterations)``:
        a random salt is drawn and the password salted here, as Kafka's admin client does,
        so that neither the password nor anything it could be read back from leaves this
        process) and delete others (``(user, mechanism)``). {user: None, or its error}."""
        import os

        from actors.controller.scram_credentials import TYPES
        from protocols.kafka.scram import salted_password
        ups = []
        for user, mechanism, password, iterations in upsertions:
            if mechanism not in TYPES:
                raise UnsupportedSaslMechanismError(f"Unknown SCRAM mechanism {mechanism}")
            if not password:
                raise UnacceptableCredentialError("Password must not be empty")
            if not 4096 <= int(iterations) <= 16384:
                # Refused here as the controller would, before minutes of hashing.
                raise UnacceptableCredentialError(
                    "Too few iterations" if int(iterations) < 4096 else "Too many iterations")
            salt = os.urandom(32)
            ups.append([user, TYPES[mechanism], int(iterations), salt,
                        salted_password(mechanism, password, salt, int(iterations))])
        dels = [[user, TYPES.get(mechanism, 0)] for user, mechanism in deletions]
        return dict(self._call("alter_user_scram_credentials", dels, ups))

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                        ) -> dict[str, list[tuple[str, int]]]:
        """{user: [(mechanism, iterations), ...]} of the users named (every user with a
        credential where none is); a user named without one raises ResourceNotFoundError."""
        stored = self._cluster_part("scram_users")
        names = list(users) if users is not None else sorted(stored)
        for name in names:
            if name not in stored:
                raise ResourceNotFoundError("Attempt to describe a user credential that does "
                                            f"not exist: {name}")
        return {name: sorted(stored[name].items()) for name in names}

    # ---- client quotas (KIP-546) -----------------------------------------------------------
    def alter_client_quotas(self, alterations: Iterable[tuple[Mapping[str, str | None],
                                                              Mapping[str, float | None]]],
                            validate_only: bool = False) -> dict[tuple, KafkaError | None]:
        """Set or remove quotas (Kafka's alterClientQuotas): each alteration is the entity
        (``{"user": "alice", "client-id": None}``: None is the type's default) and its
        quotas (``{"producer_byte_rate": 1048576, "request_percentage": None}``: None
        removes). {entity as sorted (type, name) pairs: None, or its error}."""
        answer = self._call("alter_client_quotas", [
            [[[t, n] for t, n in entity.items()],
             [[k, 0.0 if v is None else float(v), v is None] for k, v in quotas.items()]]
            for entity, quotas in alterations], validate_only)
        return {tuple(tuple(p) for p in e): error for e, error in answer}

    def describe_client_quotas(self, components: Iterable[tuple[str, int, str | None]] = (),
                               strict: bool = False) -> dict[tuple, dict[str, float]]:
        """The quotas of the entities a filter selects (Kafka's describeClientQuotas):
        ``components`` are (entity type, match type: 0 exact, 1 default, 2 any name, the
        name or None) as ClientQuotaFilterComponent's; ``strict``: entities with no other
        types. {entity as sorted (type, name) pairs: {key: value}}."""
        from actors.broker.client_quota_manager import quotas_of
        from protocols.kafka.client_quotas import filter_error, matching
        components = [tuple(c) for c in components]
        error = filter_error(components)
        if error is not None:
            raise error
        stored = self._cluster_part("client_quotas")
        return {e: dict(v) for e, v in matching(quotas_of({"client_quotas": stored}),
                                                 components, strict)}

    # ---- ACLs ------------------------------------------------------------------------------
    def create_acls(self, acls: Iterable[Acl]) -> list[KafkaError | None]:
        """Store ACLs in the cluster's metadata (Kafka's createAcls): None per ACL stored,
        or its error (InvalidRequestError: an ANY or UNKNOWN value, an empty name, a
        principal without its type). An ACL already stored is not stored twice. They
        guard the Kafka listeners once ``authorizer.class.name`` names Kafka's
        StandardAuthorizer."""
        from actors.controller.acls import to_stored
        return list(self._call("create_acls", [to_stored(a) for a in acls]))

    def describe_acls(self, acl_filter: AclFilter = AclFilter()) -> list[Acl]:
        """The stored ACLs the filter selects (Kafka's describeAcls; the default: all)."""
        from actors.controller.acls import describe, filter_values
        return describe(self._cluster_part("acls"), filter_values(acl_filter))

    def _cluster_part(self, part: str):
        """The image's ``acls``, ``scram_users`` (each user's mechanisms and iterations) or
        ``client_quotas``: left out of the door's image for a principal that may not
        DESCRIBE (client quotas: DESCRIBE_CONFIGS) the cluster."""
        image = self._metadata()
        if not self.door.guarded:
            from actors.controller.scram_credentials import iterations_of
            image = dict(image, scram_users=iterations_of(image.get("scram_credentials")))
        if part not in image:
            raise ClusterAuthorizationFailedError("Cluster authorization failed.")
        return image[part] or ({} if part == "scram_users" else [])

    def delete_acls(self, filters: Iterable[AclFilter]) -> list[list[Acl]]:
        """Remove the ACLs each filter selects (Kafka's deleteAcls): per filter, the ACLs
        it removed (an ACL two filters select is counted by the first); a filter with an
        UNKNOWN value raises InvalidRequestError."""
        from actors.controller.acls import acls_of, filter_values
        answer = self._call("delete_acls", [filter_values(f) for f in filters])
        out = []
        for result in answer:
            if isinstance(result, KafkaError):
                raise result
            out.append(acls_of(result))
        return out

    # ---- offsets and records ---------------------------------------------------------------
    def list_offsets(self, specs: Mapping[tuple[str, int], int | str],
                     isolation_level: str = "read_uncommitted"
                     ) -> dict[TopicPartition, ListOffsetsResult]:
        """``{(topic, partition): "earliest" | "latest" | timestamp_ms}`` -> offsets (latest is
        the high watermark, or at ``read_committed`` the last stable offset, as Kafka's
        ListOffsetsOptions has it; by time, the first offset at or after it, -1 if none).
        One request per leader host (``rafka.client.list_offsets``)."""
        from protocols.messages import ISOLATION_LEVELS
        from rafka.client.metadata import ClientMetadata
        from rafka.client.list_offsets import list_offsets
        wanted = {TopicPartition(*tp): int({"earliest": EARLIEST_TIMESTAMP,
                                            "latest": LATEST_TIMESTAMP}.get(spec, spec))
                  for tp, spec in specs.items()}
        # A retriable answer (a new leader still learning its high watermark, say) is asked
        # again; an unknown partition fails at once, as Kafka's admin client fails it.
        if self._offsets_metadata is None:
            self._offsets_metadata = ClientMetadata(self.cluster, door=self.door)
        found = list_offsets(self._offsets_metadata, wanted, self.timeout_s,
                             backoff_s=0.05, unknown_fails=True,
                             isolation_level=ISOLATION_LEVELS[isolation_level], door=self.door)
        return {tp: ListOffsetsResult(*found[tp]) for tp in wanted}

    # ---- consumer groups -------------------------------------------------------------------
    def _group_client(self, group_id: str):
        from rafka.client.metadata import ClientMetadata
        from rafka.client.coordinator_client import CoordinatorClient
        return CoordinatorClient(self.cluster, ClientMetadata(self.cluster, door=self.door), group_id,
                                 door=self.door)

    def _group_call(self, group_id: str, method: str, *args: Any) -> tuple[Any, int]:
        """(answer, coordinator broker id), errors raised."""
        client = self._group_client(group_id)
        answer = client.call(method, group_id, *args,
                             deadline=time.monotonic() + self.timeout_s)
        return _raise_if_error(answer), client.coordinator_id

    def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        """Every group any coordinator holds (with members or only committed offsets)."""
        import ray
        from actors.names import coordinator_name
        out: dict[str, ConsumerGroupListing] = {}
        for b in sorted(self.cluster.metadata()["brokers"]):
            try:
                handle = (self.door.coordinator("group", b) if self.door.guarded else
                          ray.get_actor(coordinator_name(b), namespace=self.cluster.namespace))
                groups = self._ask(handle, "list_groups")
            except Exception:      # this broker runs no coordinator (yet)
                continue
            if isinstance(groups, KafkaError):   # the same, told through the door
                continue
            for group_id, protocol_type, state in groups:
                out[group_id] = ConsumerGroupListing(group_id, state, protocol_type)
        return [out[g] for g in sorted(out)]

    def describe_consumer_groups(self, group_ids: Iterable[str]
                                 ) -> dict[str, ConsumerGroupDescription]:
        from protocols.consumer_protocol import decode_assignment
        out = {}
        for group_id in group_ids:
            d, coordinator = self._group_call(group_id, "describe_group")
            members = [MemberDescription(
                m["member_id"], m["group_instance_id"], m["client_id"],
                set(decode_assignment(m["assignment"]))
                if m["assignment"] else set()) for m in d["members"]]
            out[group_id] = ConsumerGroupDescription(group_id, d["state"], d["protocol"],
                                                     coordinator, d["generation_id"], members)
        return out

    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None,
                                    require_stable: bool = False
                                    ) -> dict[TopicPartition, Any]:
        """The group's committed ``OffsetAndMetadata`` per partition (all committed
        partitions when ``partitions`` is None). With ``require_stable`` (Kafka's
        ListConsumerGroupOffsetsOptions.requireStable), an offset pending in an open
        transaction is asked for again until the transaction ends."""
        from protocols.messages import OffsetAndMetadata
        wanted = None if partitions is None else [list(tp) for tp in partitions]
        deadline = time.monotonic() + self.timeout_s
        while True:
            rows, _ = self._group_call(group_id, "fetch_offsets", wanted, require_stable)
            unstable = [found[0] for _, _, *found in rows if len(found) == 1]
            if not unstable:
                return {TopicPartition(t, p): OffsetAndMetadata(o, e, m)
                        for t, p, o, e, m in rows if o >= 0}
            if time.monotonic() > deadline:
                raise unstable[0]
            time.sleep(0.05)

    def consumer_group_lag(self, group_id: str) -> dict[TopicPartition, Any]:
        """Each committed partition's ``PartitionLag`` (committed offset, log end offset,
        ``lag``), as kafka-consumer-groups.sh's LAG column and the
        ``kafka_consumergroup_lag`` metric tell it: the log end offset (ListOffsets
        latest) minus the committed offset, never below 0."""
        from actors.metrics.consumer_lag import partition_lags
        topics = self._metadata().get("topics", {})
        # A deleted topic's offsets stay committed: left out, as kafka-consumer-groups.sh
        # shows no LAG for them.
        committed = {tp: c for tp, c in self.list_consumer_group_offsets(group_id).items()
                     if tp.partition in topics.get(tp.topic, {})}
        if not committed:
            return {}
        ends = self.list_offsets({tp: "latest" for tp in committed})
        lags = partition_lags([(group_id, tp.topic, tp.partition, c.offset)
                               for tp, c in committed.items()],
                              {(tp.topic, tp.partition): e.offset for tp, e in ends.items()})
        return {TopicPartition(p.topic, p.partition): p for p in lags}

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit offsets for a group with no active members (as kafka-consumer-groups.sh
        --reset-offsets does); UNKNOWN_MEMBER_ID while it has members."""
        rows = [(tp[0], tp[1], int(o), -1, "") for tp, o in offsets.items()]
        self._group_call(group_id, "commit_offsets", "", -1, rows, None)

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete empty groups and their offsets (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
        for group_id in group_ids:
            self._group_call(group_id, "delete_group")

    def delete_consumer_group_offsets(self, group_id: str,
                                      partitions: Iterable[tuple[str, int]]) -> None:
        """Remove a group's committed offsets of ``partitions`` (Kafka's
        deleteConsumerGroupOffsets, KIP-496). Those of a topic a live member subscribes to
        stay: GroupSubscribedToTopicError names the first."""
        from protocols.errors import error_for_code
        rows, _ = self._group_call(group_id, "delete_offsets", [list(tp) for tp in partitions])
        for topic, partition, code in rows:
            if code:
                raise error_for_code(code, f"Group {group_id} subscribes to {topic}; the "
                                           f"offset of {topic}-{partition} is kept")

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> dict[TopicPartition, int]:
        """Move each partition's log start offset up to the offset (-1: the high watermark);
        returns the new low watermarks once every in-sync replica has followed."""
        out = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            _, handle = self.cluster.leader(tp.topic, tp.partition)
            result = _raise_if_error(self._ask(self._host(handle), "delete_records",
                                               tp.topic, tp.partition, offset, 30_000))
            _raise_if_error(result.error)
            out[tp] = result.low_watermark
        return out

    # ---- transactions ----------------------------------------------------------------------
    def _txn_coordinators(self) -> list[tuple[int, Any]]:
        """(broker id, its transaction coordinator's handle) of every live broker."""
        import ray
        out = []
        for b in sorted(self.cluster.metadata()["brokers"]):
            try:
                out.append((b, self.door.coordinator("txn", b) if self.door.guarded else
                            ray.get(self.cluster.broker(b).txn_coordinator.remote(),
                                    timeout=self.timeout_s)))
            except Exception:      # the broker is going away
                continue
        return out

    def _ask(self, handle, method: str, *args: Any) -> Any:
        """``handle.method(*args)``'s decoded answer (``handle``: an actor's, or the door's
        stand-in); through the door, asked once more, signed in again, when its session
        was found gone."""
        import ray
        answer = decode(ray.get(getattr(handle, method).remote(*args),
                                timeout=self.timeout_s))
        if self.door.guarded and isinstance(answer, SaslAuthenticationError):
            self.door.forget()
            answer = decode(ray.get(getattr(handle, method).remote(*args),
                                    timeout=self.timeout_s))
        return answer

    def _host(self, replica):
        """The host of ``replica`` (a ReplicaHandle), through the door when it is guarded."""
        return self.door.host(replica.host) if self.door.guarded else replica.host

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_filter_ms: int = -1) -> list[TransactionListing]:
        """Every transactional id every coordinator holds (Kafka's listTransactions), with
        its filters: states (``Ongoing``, ``PrepareCommit``, ...), producer ids, and open
        for longer than ``duration_filter_ms``. A coordinator still loading is asked again."""
        from protocols.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError
        states, producer_ids = list(states), [int(p) for p in producer_ids]
        out = []
        for broker_id, coordinator in self._txn_coordinators():
            deadline = time.monotonic() + self.timeout_s
            while True:
                answer = self._ask(coordinator, "list_transactions", producer_ids, states,
                                   duration_filter_ms)
                if not isinstance(answer, CoordinatorLoadInProgressError) \
                        or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if isinstance(answer, CoordinatorNotAvailableError):
                continue   # this broker runs no transaction coordinator (yet): none to list
            unknown, listed = _raise_if_error(answer)
            if unknown:
                from protocols.errors import InvalidRequestError
                raise InvalidRequestError(f"Unknown transaction states: {', '.join(unknown)}")
            out += [TransactionListing(t["transactional_id"], t["producer_id"], t["state"],
                                       broker_id) for t in listed]
        return sorted(out, key=lambda t: t.transactional_id)

    def describe_transactions(self, transactional_ids: Iterable[str]
                              ) -> dict[str, TransactionDescription]:
        """Each id's state at its coordinator (TRANSACTIONAL_ID_NOT_FOUND for one it does
        not know)."""
        from rafka.client.coordinator_client import CoordinatorClient
        from rafka.client.metadata import ClientMetadata
        from protocols.topics import TRANSACTION_KEY_TYPE
        out = {}
        for transactional_id in transactional_ids:
            client = CoordinatorClient(self.cluster, ClientMetadata(self.cluster, door=self.door),
                                       transactional_id, key_type=TRANSACTION_KEY_TYPE,
                                       door=self.door)
            d = _raise_if_error(client.call("describe_transaction", transactional_id,
                                            deadline=time.monotonic() + self.timeout_s))
            start = d["transaction_start_time_ms"]
            out[transactional_id] = TransactionDescription(
                client.coordinator_id, transactional_id, d["state"], d["producer_id"],
                d["producer_epoch"], d["transaction_timeout_ms"],
                None if start < 0 else start,
                [TopicPartition(*tp) for tp in d["partitions"]])
        return out

    def describe_producers(self, partitions: Iterable[tuple[str, int]]
                           ) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition's leader keeps state for, with the first offset of
        any transaction they have open there (Kafka's describeProducers)."""
        out = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            _, handle = self.cluster.leader(tp.topic, tp.partition)
            [found] = _raise_if_error(self._ask(self._host(handle), "describe_producers_many",
                                                [(tp.topic, tp.partition)]))
            out[tp] = [ProducerState(pid, epoch, seq, ts, coordinator_epoch,
                                     None if first < 0 else first)
                       for pid, epoch, seq, ts, coordinator_epoch, first
                       in _raise_if_error(found)]
        return out

    def abort_transaction(self, topic: str, partition: int, producer_id: int,
                          producer_epoch: int, coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's open transaction on one partition (Kafka's
        abortTransaction: a hanging transaction, one its coordinator will never end). A
        coordinator epoch older than the partition's last marker is refused
        (TRANSACTION_COORDINATOR_FENCED)."""
        _, handle = self.cluster.leader(topic, partition)
        [error] = _raise_if_error(self._ask(self._host(handle), "write_txn_markers_many", [
            (topic, partition, int(producer_id), int(producer_epoch),
             max(0, int(coordinator_epoch)), False)], 30_000))
        _raise_if_error(error)
