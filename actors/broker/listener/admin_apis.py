"""The administrative APIs of the Kafka listener (part of Kafka's KafkaApis): InitProducerId,
CreateTopics, DeleteTopics, CreatePartitions, DescribeCluster, ListGroups, DescribeGroups,
DeleteGroups, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, ElectLeaders and
DescribeLogDirs, answered by the controller and the group coordinators that rafka's own
Admin calls, so ``kafka-topics.sh`` and an AdminClient change the same cluster.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any, Awaitable, Callable, Iterable, Mapping

from actors.broker.listener.auth_helper import (AuthHelper, cluster_denied, group_denied,
                                                topic_denied)
from actors.broker.listener.group_apis import call_coordinator
from actors.broker.listener.metadata_apis import controller_id, kafka_uuid_text, topic_uuid
from protocols.errors import (DuplicateResourceError, ElectionNotNeededError,
                              InvalidRequestError, KafkaError, TopicAuthorizationFailedError,
                              PreferredLeaderNotAvailableError, ResourceNotFoundError,
                              TopicAlreadyExistsError, UnknownTopicIdError,
                              UnknownTopicOrPartitionError)
from protocols.kafka.acl import AclOperation, ResourceType
from protocols.kafka.authorizer import OPERATIONS_NOT_REQUESTED
from protocols.kafka.codec import Request, build, error_fields, response_class
from protocols.topics import validate_topic_name
from protocols.wire import decode

log = logging.getLogger(__name__)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
# ConfigSource: where a value comes from (DescribeConfigs v1+).
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# ConfigType (v3+), by ConfigDef type.
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
                "list": 7, "class": 8, "password": 9}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def config_text(value: Any) -> str | None:
    """A config value as Kafka prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def topic_config_entries(overrides: Mapping[str, Any], broker_log: Mapping[str, Any],
                         keys: Iterable[str] | None) -> list[dict]:
    """DescribeConfigs' entries for a topic: every topic config (or ``keys``), its effective
    value and where it comes from."""
    from storage.config import TOPIC_CONFIG, effective_topic_config, topic_defaults_from_broker
    effective = effective_topic_config(overrides, broker_log)
    from_broker = topic_defaults_from_broker(broker_log)
    wanted = TOPIC_CONFIG.names() if keys is None else [k for k in keys if k in effective]
    return [{"name": k, "value": config_text(effective[k]), "read_only": False,
             "config_source": DYNAMIC_TOPIC_CONFIG if k in overrides else
             STATIC_BROKER_CONFIG if k in from_broker else DEFAULT_CONFIG,
             "is_sensitive": False, "synonyms": [],
             "config_type": CONFIG_TYPES.get(TOPIC_CONFIG.keys[k].type, 0),
             "documentation": TOPIC_CONFIG.keys[k].doc or None} for k in wanted]


def broker_config_entries(broker_log: Mapping[str, Any], broker: Mapping[str, Any],
                          keys: Iterable[str] | None) -> list[dict]:
    """DescribeConfigs' entries for a broker: its settings (the cluster's log.* ones, then
    the broker's own, a listener's own as listener.name.<l>.<key>), each read-only,
    STATIC_BROKER_CONFIG where set and DEFAULT_CONFIG where not. A secret (a password, a
    key, a JAAS config) is Kafka's sensitive: its value is never sent."""
    from actors.broker.config import BROKER_CONFIG
    from protocols.config import Password
    settings = {**broker_log, **broker}
    wanted = sorted(settings) if keys is None else [k for k in keys if k in settings]
    entries = []
    for k in wanted:
        value, defined = settings[k], BROKER_CONFIG.keys.get(k)
        sensitive = isinstance(value, Password) or (defined is not None
                                                     and defined.type == "password")
        entries.append({
            "name": k, "value": None if sensitive else config_text(value), "read_only": True,
            "config_source": DEFAULT_CONFIG if defined is not None and
            value == defined.default and k not in broker_log else STATIC_BROKER_CONFIG,
            "is_sensitive": sensitive, "synonyms": [],
            "config_type": CONFIG_TYPES.get(defined.type, 0) if defined is not None else 0,
            "documentation": (defined.doc or None) if defined is not None else None})
    return entries


def incremental_changes(current: Mapping[str, Any], ops: Iterable[tuple[str, int, Any]]
                        ) -> dict[str, Any]:
    """IncrementalAlterConfigs' operations as ``alter_topic_config``'s changes (None:
    back to the default): SET, DELETE, and APPEND / SUBTRACT on a list config's ``current``
    (effective) value."""
    changes: dict[str, Any] = {}
    for name, op, value in ops:
        if op == SET:
            changes[name] = value
        elif op == DELETE:
            changes[name] = None
        elif op in (APPEND, SUBTRACT):
            now = changes.get(name, current.get(name))
            items = [] if now is None else (list(now) if isinstance(now, (list, tuple))
                                            else [v for v in str(now).split(",") if v])
            given = [v for v in str(value or "").split(",") if v]
            items = items + [v for v in given if v not in items] if op == APPEND \
                else [v for v in items if v not in given]
            changes[name] = ",".join(items)
        else:
            raise InvalidRequestError(f"Unknown config operation {op} for {name}")
    return changes

BROKERS_ENDPOINT_TYPE = 1
MISMATCHED_ENDPOINT_TYPE = 114


class AdminApis:
    def __init__(self, broker_id: int, image: Callable[[], Mapping[str, Any]],
                 controller: Callable[[], Awaitable[Any]],
                 coordinator: Callable[[], Awaitable[Any]],
                 broker_log: Mapping[str, Any] | None = None, log_dir: str | None = None,
                 auth: AuthHelper | None = None,
                 broker_config: Mapping[str, Any] | None = None):
        self.broker_id = broker_id
        self.auth = auth or AuthHelper(image)   # who may do what (authorizer.class.name)
        self.image = image
        self.controller = controller     # the controller's handle (waits for one)
        self.coordinator = coordinator   # this broker's GroupCoordinatorActor
        self.broker_log = dict(broker_log or {})   # the cluster's log.* settings
        self.broker_config = dict(broker_config or {})   # the broker's own settings
        self.log_dir = log_dir                     # this broker's one log directory

    async def controller_call(self, method: str, *args) -> Any:
        """The controller's decoded answer, or the KafkaError it raised or answered."""
        try:
            controller = await self.controller()
            answer = await getattr(controller, method).remote(*args)
        except KafkaError as e:
            return e
        except Exception as e:   # the controller moved under the request
            from protocols.errors import NotControllerError
            return NotControllerError(f"The controller changed while handling {method}: "
                                      f"{e!r}")
        return decode(answer) if isinstance(answer, bytes) else answer

    async def _coordinator_call(self, method: str, *args) -> Any:
        return await call_coordinator(self.coordinator, method, *args)

    # ---- topics ----------------------------------------------------------------------------
    async def create_topics(self, request: Request):
        """CreateTopics: CREATE on the cluster or on each topic (TOPIC_AUTHORIZATION_FAILED,
        checked before whether it exists); a topic made by a client that may not
        DESCRIBE_CONFIGS it is answered without its partitions and replication factor
        (Kafka's topic_config_error_code)."""
        body = request.body
        results = []
        created = []
        anywhere = self.auth.authorize_cluster(request, AclOperation.CREATE)
        names = [t.name for t in body.topics]
        creatable = set(names) if anywhere else self.auth.allowed(
            request, AclOperation.CREATE, ResourceType.TOPIC, names)
        describable = self.auth.allowed(request, AclOperation.DESCRIBE_CONFIGS,
                                        ResourceType.TOPIC, names)
        for t in body.topics:
            if t.name not in creatable:
                results.append({"name": t.name, **error_fields(
                                    TopicAuthorizationFailedError("Authorization failed.")),
                                "num_partitions": -1, "replication_factor": -1,
                                "configs": []})
                continue
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
            config = {c.name: c.value for c in t.configs}
            partitions = None if assignment or t.num_partitions == -1 else int(t.num_partitions)
            rf = None if assignment or t.replication_factor == -1 else int(t.replication_factor)
            if body.validate_only:
                error = self._validate_new_topic(t.name)
            else:
                answer = await self.controller_call("create_topic", t.name, partitions, rf,
                                                     config, assignment)
                error = answer if isinstance(answer, KafkaError) else None
                if error is None:
                    created.append(t.name)
            results.append({"name": t.name, **error_fields(error),
                            "num_partitions": -1 if error else (
                                len(assignment) if assignment else (partitions or -1)),
                            "replication_factor": -1 if error else (
                                len(next(iter(assignment.values()))) if assignment
                                else (rf or -1)),
                            "configs": []})
            if error is None and t.name not in describable:
                results[-1].update({"num_partitions": -1, "replication_factor": -1,
                                    "topic_config_error_code": topic_denied().code})
        if created:
            ids = await self._topic_ids()
            for r in results:
                if r["name"] in ids:
                    r["topic_id"] = ids[r["name"]]
        return build(response_class(request), {"throttle_time": 0, "topics": results})

    def _validate_new_topic(self, name: str) -> KafkaError | None:
        try:
            validate_topic_name(name)
        except KafkaError as e:
            return e
        if name in self.image().get("topics", {}):
            return TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        return None

    async def _topic_ids(self) -> dict[str, uuid.UUID]:
        image = await self.controller_call("metadata")
        if isinstance(image, KafkaError):
            return {}
        return {name: topic_uuid(text) for name, text in image.get("topic_ids", {}).items()}

    async def delete_topics(self, request: Request):
        body = request.body
        if request.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in body.topics]
        else:
            wanted = [(name, None) for name in body.topic_names]
        by_id = {v: k for k, v in self.image().get("topic_ids", {}).items()}
        # DELETE on the cluster, or DESCRIBE and DELETE on each topic: a client that may not
        # describe a topic hears TOPIC_AUTHORIZATION_FAILED whether it exists or not.
        anywhere = self.auth.authorize_cluster(request, AclOperation.DELETE)

        def may(operation: AclOperation, name: str) -> bool:
            return anywhere or self.auth.authorize(request, operation, ResourceType.TOPIC,
                                                   name)
        results = []
        for name, topic_id in wanted:
            if name is None and topic_id is not None:
                name = by_id.get(kafka_uuid_text(topic_id))
                if name is None:
                    results.append({"name": None, "topic_id": topic_id,
                                    **error_fields(UnknownTopicIdError(
                                        f"Unknown topic id {topic_id}"))})
                    continue
                if not may(AclOperation.DELETE, name):
                    results.append({"name": name if may(AclOperation.DESCRIBE, name)
                                    else None, "topic_id": topic_id,
                                    **error_fields(topic_denied())})
                    continue
            elif name is not None and not may(AclOperation.DESCRIBE, name):
                results.append({"name": name, "topic_id": topic_id,
                                **error_fields(topic_denied())})
                continue
            elif name is not None and not may(AclOperation.DELETE, name):
                # One that may describe it hears whether it exists, as from Kafka.
                results.append({"name": name, "topic_id": topic_id, **error_fields(
                    topic_denied() if name in self.image().get("topics", {}) else
                    UnknownTopicOrPartitionError(f"Topic '{name}' does not exist"))})
                continue
            answer = await self.controller_call("delete_topic", name)
            results.append({"name": name, "topic_id": topic_id,
                            **error_fields(answer if isinstance(answer, KafkaError)
                                            else None)})
        return build(response_class(request), {"throttle_time": 0, "responses": results})

    async def create_partitions(self, request: Request):
        body = request.body
        results = []
        allowed = self.auth.allowed(request, AclOperation.ALTER, ResourceType.TOPIC,
                                    [t.name for t in body.topics])
        for t in body.topics:
            assignment = None if t.assignments is None else [list(a.broker_ids)
                                                             for a in t.assignments]
            if t.name not in allowed:
                error = topic_denied()
            elif body.validate_only:
                error = None if t.name in self.image().get("topics", {}) else \
                    UnknownTopicOrPartitionError(f"Topic '{t.name}' does not exist")
            else:
                answer = await self.controller_call("create_partitions", t.name,
                                                     int(t.count), assignment)
                error = answer if isinstance(answer, KafkaError) else None
            results.append({"name": t.name, **error_fields(error)})
        return build(response_class(request), {"throttle_time": 0, "results": results})

    # ---- SCRAM credentials (KIP-554) ------------------------------------------------------
    async def alter_user_scram_credentials(self, request: Request):
        body = request.body
        if not self.auth.authorize_cluster(request, AclOperation.ALTER):
            users = sorted({d.name for d in body.deletions} | {u.name for u in body.upsertions})
            return build(response_class(request), {"throttle_time": 0, "results": [
                {"user": user, **error_fields(cluster_denied())} for user in users]})
        answer = await self.controller_call(
            "alter_user_scram_credentials",
            [[d.name, int(d.mechanism)] for d in body.deletions],
            [[u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
              bytes(u.salted_password)] for u in body.upsertions])
        if isinstance(answer, KafkaError):   # the controller could not be reached
            users = dict.fromkeys([d.name for d in body.deletions] +
                                  [u.name for u in body.upsertions])
            answer = [(user, answer) for user in users]
        return build(response_class(request), {"throttle_time": 0, "results": [
            {"user": user, **error_fields(error)} for user, error in answer]})

    async def describe_user_scram_credentials(self, request: Request):
        """From the metadata image, as Kafka's ScramImage.describe: every user with a
        credential where none is named; a user named twice or without one, an error."""
        from actors.controller.scram_credentials import TYPES
        stored = self.image().get("scram_credentials", {})
        named = [u.name for u in (request.body.users or ())]
        if not self.auth.authorize_cluster(request, AclOperation.DESCRIBE):
            denied = error_fields(cluster_denied())
            return build(response_class(request), {
                "throttle_time": 0, **denied, "results": [
                    {"user": user, **denied, "credential_infos": []} for user in named]})
        users = dict.fromkeys(named or sorted(stored), False)
        for name in named:
            users[name] = named.count(name) > 1
        results = []
        for user, twice in users.items():
            if twice:
                results.append({"user": user, "error_code": DuplicateResourceError.code,
                                "error_message": "Cannot describe SCRAM credentials for the "
                                                 f"same user twice in a single request: {user}",
                                "credential_infos": []})
            elif user not in stored:
                results.append({"user": user, "error_code": ResourceNotFoundError.code,
                                "error_message": "Attempt to describe a user credential that "
                                                 f"does not exist: {user}",
                                "credential_infos": []})
            else:
                results.append({"user": user, "error_code": 0, "error_message": None,
                                "credential_infos": [
                                    {"mechanism": TYPES[m], "iterations": entry[3]}
                                    for m, entry in sorted(stored[user].items())]})
        return build(response_class(request), {"throttle_time": 0, "error_code": 0,
                                               "error_message": None, "results": results})

    # ---- client quotas (KIP-546) -----------------------------------------------------------
    async def describe_client_quotas(self, request: Request):
        """The quotas of the entities a filter selects, from the metadata image (Kafka's
        ClientQuotasImage.describe); DESCRIBE_CONFIGS on the cluster is needed."""
        from actors.broker.client_quota_manager import quotas_of
        from protocols.kafka.client_quotas import filter_error, matching
        if not self.auth.authorize_cluster(request, AclOperation.DESCRIBE_CONFIGS):
            return build(response_class(request), {
                "throttle_time": 0, "error_code": cluster_denied().code,
                "error_message": None, "entries": None})
        components = [(c.entity_type, int(c.match_type), c.match)
                      for c in request.body.components]
        error = filter_error(components)
        if error is not None:
            return build(response_class(request), {"throttle_time": 0, **error_fields(error),
                                                   "entries": None})
        found = matching(quotas_of(self.image()), components, bool(request.body.strict))
        return build(response_class(request), {
            "throttle_time": 0, "error_code": 0, "error_message": None, "entries": [
                {"entity": [{"entity_type": t, "entity_name": n} for t, n in e],
                 "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
                for e, values in found]})

    async def alter_client_quotas(self, request: Request):
        """AlterClientQuotas, decided by the controller (ALTER_CONFIGS on the cluster)."""
        body = request.body
        alterations = [[[[c.entity_type, c.entity_name] for c in entry.entity],
                        [[op.key, float(op.value), bool(op.remove)] for op in entry.ops]]
                       for entry in body.entries]

        def entry(pairs, error) -> dict:
            return {**error_fields(error),
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in pairs]}
        if not self.auth.authorize_cluster(request, AclOperation.ALTER_CONFIGS):
            return build(response_class(request), {"throttle_time": 0, "entries": [
                entry(pairs, cluster_denied()) for pairs, _ in alterations]})
        answer = await self.controller_call("alter_client_quotas", alterations,
                                            bool(body.validate_only))
        if isinstance(answer, KafkaError):   # the controller could not be reached
            answer = [(pairs, answer) for pairs, _ in alterations]
        return build(response_class(request), {"throttle_time": 0, "entries": [
            entry(pairs, error) for (pairs, error) in answer]})

    # ---- cluster ---------------------------------------------------------------------------
    async def describe_cluster(self, request: Request):
        image = self.image()
        endpoint_type = int(getattr(request.body, "endpoint_type", BROKERS_ENDPOINT_TYPE))
        brokers = [{"broker_id": b, "host": host, "port": port, "rack": info.get("rack")}
                   for b, info in sorted(image.get("brokers", {}).items())
                   for name, host, port in info.get("endpoints", [])
                   if name == request.listener]
        if endpoint_type != BROKERS_ENDPOINT_TYPE:
            # Kafka's answer to a broker asked for controllers' endpoints: the controller is
            # an actor here, with no endpoint of its own.
            return build(response_class(request), {
                "throttle_time": 0, "error_code": MISMATCHED_ENDPOINT_TYPE,
                "error_message": "The request was sent to an endpoint of the wrong type.",
                "endpoint_type": endpoint_type, "cluster_id": image.get("cluster_id", ""),
                "controller_id": -1, "brokers": []})
        return build(response_class(request), {
            "throttle_time": 0, "error_code": 0, "error_message": None,
            "endpoint_type": endpoint_type, "cluster_id": image.get("cluster_id", ""),
            "controller_id": controller_id(self.broker_id, {b["broker_id"] for b in brokers}),
            "brokers": brokers, "cluster_authorized_operations":
                self._cluster_operations(request) if getattr(
                    request.body, "include_cluster_authorized_operations", False)
                else OPERATIONS_NOT_REQUESTED})

    def _cluster_operations(self, request: Request) -> int:
        """The cluster's authorized operations (0 to a client that may not describe it)."""
        from protocols.kafka.acl import CLUSTER_NAME
        if not self.auth.authorize_cluster(request, AclOperation.DESCRIBE):
            return 0
        return self.auth.authorized_operations(request, ResourceType.CLUSTER, CLUSTER_NAME)

    # ---- groups (this broker's coordinator's, as Kafka's ListGroups) ------------------------
    async def list_groups(self, request: Request):
        body = request.body
        answer = await self._coordinator_call("list_groups")
        if isinstance(answer, KafkaError):
            return build(response_class(request), {"throttle_time": 0,
                                                   "error_code": answer.code, "groups": []})
        states = {s.lower() for s in (getattr(body, "states_filter", None) or ())}
        types = {t.lower() for t in (getattr(body, "types_filter", None) or ())}
        # Every group to a client that may describe the cluster, else those it may describe.
        visible = None if self.auth.authorize_cluster(request, AclOperation.DESCRIBE) else \
            self.auth.allowed(request, AclOperation.DESCRIBE, ResourceType.GROUP,
                              [g for g, _, _ in answer])
        groups = [{"group_id": g, "protocol_type": protocol_type, "group_state": state,
                   "group_type": "classic"}
                  for g, protocol_type, state in answer
                  if (not states or state.lower() in states)
                  and (not types or "classic" in types)
                  and (visible is None or g in visible)]
        return build(response_class(request), {"throttle_time": 0, "error_code": 0,
                                               "groups": groups})

    async def describe_groups(self, request: Request):
        out = []
        operations = request.api_version >= 3 and bool(
            getattr(request.body, "include_authorized_operations", False))
        for group_id in request.body.groups:
            if not self.auth.authorize(request, AclOperation.DESCRIBE, ResourceType.GROUP,
                                       group_id):
                out.append({"error_code": group_denied().code, "group_id": group_id,
                            "group_state": "", "protocol_type": "", "protocol_data": "",
                            "members": []})
                continue
            answer = await self._coordinator_call("describe_group", group_id)
            if isinstance(answer, KafkaError):
                out.append({"error_code": answer.code, "group_id": group_id,
                            "group_state": "", "protocol_type": "", "protocol_data": "",
                            "members": []})
                continue
            out.append({"error_code": 0, "group_id": group_id,
                        "group_state": answer["state"],
                        "protocol_type": answer["protocol_type"],
                        "protocol_data": answer["protocol"],
                        "members": [{"member_id": m["member_id"],
                                     "group_instance_id": m["group_instance_id"],
                                     "client_id": m["client_id"], "client_host": "",
                                     "member_metadata": b"",
                                     "member_assignment": m["assignment"]
                                     if isinstance(m["assignment"], bytes) else b""}
                                    for m in answer["members"]],
                        "authorized_operations": self.auth.authorized_operations(
                            request, ResourceType.GROUP, group_id, operations)})
        return build(response_class(request), {"throttle_time": 0, "groups": out})

    async def delete_groups(self, request: Request):
        results = []
        for group_id in dict.fromkeys(request.body.groups_names):
            if not self.auth.authorize(request, AclOperation.DELETE, ResourceType.GROUP,
                                       group_id):
                results.append({"group_id": group_id, "error_code": group_denied().code})
                continue
            answer = await self._coordinator_call("delete_group", group_id)
            results.append({"group_id": group_id,
                            "error_code": answer.code if isinstance(answer, KafkaError)
                            else 0})
        return build(response_class(request), {"throttle_time": 0, "results": results})


    # ---- configs ---------------------------------------------------------------------------
    async def describe_configs(self, request: Request):
        """Topics' configs (their overrides over the cluster's log.* settings over Kafka's
        defaults, each with its source) and this broker's."""
        image = self.image()
        results = []
        for r in request.body.resources:
            keys = None if r.configuration_keys is None else list(r.configuration_keys)
            out = {"resource_type": r.resource_type, "resource_name": r.resource_name,
                   "error_code": 0, "error_message": None, "configs": []}
            refused = self._config_refusal(request, r, AclOperation.DESCRIBE_CONFIGS)
            if refused is not None:
                out.update(error_fields(refused))
            elif r.resource_type == TOPIC_RESOURCE:
                overrides = image.get("configs", {}).get(r.resource_name)
                if overrides is None:
                    out.update(error_fields(UnknownTopicOrPartitionError(
                        f"Topic '{r.resource_name}' does not exist")))
                else:
                    out["configs"] = topic_config_entries(overrides, self.broker_log, keys)
            elif r.resource_type == BROKER_RESOURCE:
                out["configs"] = broker_config_entries(self.broker_log, self.broker_config,
                                                       keys)
            else:
                out.update(error_fields(InvalidRequestError(
                    f"Resource type {r.resource_type} is not served (topics: 2, brokers: 4)")))
            results.append(out)
        return build(response_class(request), {"throttle_time": 0, "results": results})

    def _config_refusal(self, request: Request, resource, operation: AclOperation
                        ) -> KafkaError | None:
        """DESCRIBE_CONFIGS / ALTER_CONFIGS on a topic (TOPIC_AUTHORIZATION_FAILED, before
        whether it exists) or, for a broker's configs, on the cluster."""
        if resource.resource_type == TOPIC_RESOURCE:
            return None if self.auth.authorize(request, operation, ResourceType.TOPIC,
                                               resource.resource_name) else topic_denied()
        if resource.resource_type == BROKER_RESOURCE:
            return None if self.auth.authorize_cluster(request, operation) \
                else cluster_denied()
        return None

    async def _alter_topic(self, name: str, changes: dict, validate_only: bool
                           ) -> KafkaError | None:
        if name not in self.image().get("topics", {}):
            return UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
        if validate_only:
            from storage.config import TOPIC_CONFIG
            try:
                TOPIC_CONFIG.parse({k: v for k, v in changes.items() if v is not None},
                                   defaults=False)
            except KafkaError as e:
                return e
            return None
        answer = await self.controller_call("alter_topic_config", name, changes)
        return answer if isinstance(answer, KafkaError) else None

    async def _alter(self, request: Request, changes_of, broker_no_op=lambda r: False
                     ) -> Any:
        results = []
        for r in request.body.resources:
            refused = self._config_refusal(request, r, AclOperation.ALTER_CONFIGS)
            if refused is not None:
                error = refused
            elif r.resource_type != TOPIC_RESOURCE:
                error: KafkaError | None = None if broker_no_op(r) else InvalidRequestError(
                    "Only topic configs can be altered: brokers' configs are static here")
            else:
                try:
                    changes = changes_of(r)
                    error = await self._alter_topic(r.resource_name, changes,
                                                    bool(request.body.validate_only))
                except KafkaError as e:
                    error = e
            results.append({"resource_type": r.resource_type,
                            "resource_name": r.resource_name, **error_fields(error)})
        return build(response_class(request), {"throttle_time": 0, "responses": results})

    async def incremental_alter_configs(self, request: Request):
        """SET / DELETE, and APPEND / SUBTRACT on a list config's effective value (its
        default when the topic does not override it, as Kafka does)."""
        from storage.config import effective_topic_config
        image = self.image()

        def changes(r) -> dict:
            overrides = image.get("configs", {}).get(r.resource_name, {})
            wanted = incremental_changes(
                effective_topic_config(overrides, self.broker_log),
                [(c.name, int(c.config_operation), c.value) for c in r.configs])
            # Deleting what the topic does not override deletes nothing, whatever the name,
            # as in Kafka (kafka-reassign-partitions --verify deletes the replication
            # throttles, which rafka does not have, from every topic it moved).
            return {k: v for k, v in wanted.items() if v is not None or k in overrides}

        def deletes_only(r) -> bool:
            # A broker has no dynamic configs here, so deleting some (as
            # kafka-reassign-partitions --verify does with its throttles) deletes nothing
            # and succeeds, as deleting an unset config does in Kafka.
            return r.resource_type == BROKER_RESOURCE and all(
                int(c.config_operation) == DELETE for c in r.configs)
        return await self._alter(request, changes, deletes_only)

    async def alter_configs(self, request: Request):
        """The legacy AlterConfigs: the given configs replace all of the topic's overrides."""
        image = self.image()

        def changes(r) -> dict:
            given = {c.name: c.value for c in r.configs}
            current = image.get("configs", {}).get(r.resource_name, {})
            return {**{k: None for k in current if k not in given}, **given}
        return await self._alter(request, changes)

    # ---- leaders ---------------------------------------------------------------------------
    async def elect_leaders(self, request: Request):
        """Preferred-leader elections (``kafka-leader-election --election-type preferred``):
        ELECTION_NOT_NEEDED where the first replica already leads, PREFERRED_LEADER_NOT_
        AVAILABLE where it cannot (out of the ISR or down). Unclean elections on request are
        refused: the controller elects uncleanly only for offline partitions, when
        unclean.leader.election.enable says so."""
        body = request.body
        topics = self.image().get("topics", {})
        if not self.auth.authorize_cluster(request, AclOperation.ALTER):
            denied = error_fields(cluster_denied())
            return build(response_class(request), {
                "throttle_time": 0, "error_code": denied["error_code"],
                "replica_election_results": [
                    {"topic": tp.topic, "partition_result": [
                        {"partition_id": p, **denied} for p in tp.partitions]}
                    for tp in body.topic_partitions or ()]})
        if body.topic_partitions is None:   # every partition not led by its first replica
            wanted = [(t, p) for t, ps in topics.items() for p, st in ps.items()
                      if st["leader"] != st["replicas"][0]]
        else:
            wanted = [(tp.topic, p) for tp in body.topic_partitions for p in tp.partitions]
        results: dict[tuple[str, int], KafkaError | None] = {}
        candidates = []
        for topic, partition in wanted:
            st = topics.get(topic, {}).get(partition)
            if st is None:
                results[(topic, partition)] = UnknownTopicOrPartitionError(
                    f"Unknown partition {topic}-{partition}")
            elif int(getattr(body, "election_type", 0)) != 0:
                results[(topic, partition)] = InvalidRequestError(
                    "Only preferred elections (type 0) are served")
            elif st["leader"] == st["replicas"][0]:
                results[(topic, partition)] = ElectionNotNeededError(
                    "Leader election not needed for topic partition.")
            else:
                candidates.append((topic, partition))
        if candidates:
            answer = await self.controller_call("elect_preferred_leaders",
                                                 [list(tp) for tp in candidates])
            image = {} if isinstance(answer, KafkaError) else \
                await self.controller_call("metadata")
            for topic, partition in candidates:
                st = (image.get("topics", {}).get(topic, {}).get(partition)
                      if isinstance(image, dict) else None)
                if isinstance(answer, KafkaError):
                    results[(topic, partition)] = answer
                elif st is not None and st["leader"] == st["replicas"][0]:
                    results[(topic, partition)] = None
                else:
                    results[(topic, partition)] = PreferredLeaderNotAvailableError(
                        f"Failed to elect the preferred leader of {topic}-{partition}")
        by_topic: dict[str, list] = {}
        for (topic, partition), error in results.items():
            fields = error_fields(error)
            by_topic.setdefault(topic, []).append({"partition_id": partition,
                                                   "error_code": fields["error_code"],
                                                   "error_message": fields["error_message"]})
        return build(response_class(request), {
            "throttle_time": 0, "error_code": 0,
            "replica_election_results": [{"topic": t, "partition_result": ps}
                                         for t, ps in by_topic.items()]})

    # ---- log directories -------------------------------------------------------------------
    async def describe_log_dirs(self, request: Request):
        """This broker's log directory (one per broker here): each partition's size on disk
        (its segment and index files), and the disk's total and usable bytes (v4)."""
        import asyncio
        wanted = None if request.body.topics is None else {
            (t.topic, p) for t in request.body.topics for p in t.partitions}
        if not self.auth.authorize_cluster(request, AclOperation.DESCRIBE):
            return build(response_class(request), {
                "throttle_time": 0, "error_code": cluster_denied().code, "results": []})
        if self.log_dir is None:
            return build(response_class(request), {"throttle_time": 0, "error_code": 0,
                                                   "results": []})
        sizes, total, usable = await asyncio.to_thread(log_dir_sizes, self.log_dir)
        topics: dict[str, list] = {}
        for (topic, partition), size in sorted(sizes.items()):
            if wanted is None or (topic, partition) in wanted:
                topics.setdefault(topic, []).append({"partition_index": partition,
                                                     "partition_size": size, "offset_lag": 0,
                                                     "is_future_key": False})
        return build(response_class(request), {
            "throttle_time": 0, "error_code": 0, "results": [{
                "error_code": 0, "log_dir": self.log_dir, "total_bytes": total,
                "usable_bytes": usable,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]})


def log_dir_sizes(log_dir: str) -> tuple[dict[tuple[str, int], int], int, int]:
    """({(topic, partition): bytes of its files}, disk total bytes, disk usable bytes) of a
    broker's log directory."""
    import os
    from pathlib import Path

    from protocols.topics import parse_partition_dir_name
    sizes = {}
    for entry in Path(log_dir).iterdir():
        if not entry.is_dir():
            continue
        try:
            tp = parse_partition_dir_name(entry.name)
        except (KafkaError, ValueError):
            continue   # not a partition's directory
        sizes[(tp.topic, tp.partition)] = sum(f.stat().st_size for f in entry.iterdir()
                                              if f.is_file())
    disk = os.statvfs(log_dir)
    return sizes, disk.f_blocks * disk.f_frsize, disk.f_bavail * disk.f_frsize
