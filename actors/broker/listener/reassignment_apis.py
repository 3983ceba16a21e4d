"""Partition reassignment over the Kafka listener (part of Kafka's KafkaApis):
AlterPartitionReassignments and ListPartitionReassignments (KIP-455), answered by the
controller that rafka's own ``Admin.alter_partition_reassignments`` calls, so
``kafka-reassign-partitions.sh`` and an AdminClient move the same partitions.

A reassignment adds the target replicas, waits until they are in the ISR, then drops the
replicas not in the target (``ControllerState.reassign_partitions``); a null target cancels
one in flight (NO_REASSIGNMENT_IN_PROGRESS when there is none).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

from actors.broker.listener.auth_helper import AuthHelper, cluster_denied
from protocols.errors import InvalidReplicationFactorError, KafkaError
from protocols.kafka.acl import AclOperation
from protocols.kafka.codec import Request, build, error_fields, response_class

def target_replicas(image: Mapping[str, Any], ongoing: Mapping[tuple[str, int], tuple],
                    topic: str, partition: int) -> list[int] | None:
    """A partition's replicas as they will be once what is in flight completes (None: no
    such partition)."""
    if (topic, partition) in ongoing:
        replicas, _, removing = ongoing[(topic, partition)]
        return [r for r in replicas if r not in removing]
    state = image.get("topics", {}).get(topic, {}).get(partition)
    return None if state is None else list(state["replicas"])


class ReassignmentApis:
    def __init__(self, image: Callable[[], Mapping[str, Any]],
                 controller_call: Callable[..., Awaitable[Any]],
                 auth: AuthHelper | None = None):
        self.image = image
        self.auth = auth or AuthHelper(image)   # ALTER / DESCRIBE on the cluster
        self.controller_call = controller_call   # AdminApis.controller_call

    async def _ongoing(self, partitions: list | None) -> dict | KafkaError:
        answer = await self.controller_call("list_reassignments", partitions)
        if isinstance(answer, KafkaError):
            return answer
        return {(t, p): (replicas, adding, removing)
                for t, p, replicas, adding, removing in answer}

    async def alter(self, request: Request):
        body = request.body
        allow_rf_change = getattr(body, "allow_replication_factor_change", True)
        response: dict[str, Any] = {"throttle_time": 0, "responses": []}
        if request.api_version >= 1:
            response["allow_replication_factor_change"] = allow_rf_change
        if not self.auth.authorize_cluster(request, AclOperation.ALTER):
            denied = error_fields(cluster_denied())
            return build(response_class(request), {**response, **denied, "responses": [
                {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                 **denied} for p in t.partitions]}
                for t in body.topics]})
        ongoing = await self._ongoing(None)
        if isinstance(ongoing, KafkaError):
            return build(response_class(request), {**response, **error_fields(ongoing)})
        image = self.image()
        for topic in body.topics:
            answers = []
            for part in topic.partitions:
                p = part.partition_index
                error: Any
                if part.replicas is None:
                    error = await self.controller_call("cancel_reassignment", topic.name, p)
                else:
                    current = target_replicas(image, ongoing, topic.name, p)
                    if not allow_rf_change and current is not None and \
                            len(part.replicas) != len(current):
                        error = InvalidReplicationFactorError(
                            f"The replication factor of {topic.name}-{p} would change from "
                            f"{len(current)} to {len(part.replicas)}, and the request does "
                            "not allow that")
                    else:
                        error = await self.controller_call(
                            "reassign_partitions", {(topic.name, p): list(part.replicas)})
                answers.append({"partition_index": p, **error_fields(
                    error if isinstance(error, KafkaError) else None)})
            response["responses"].append({"name": topic.name, "partitions": answers})
        return build(response_class(request), {**response, **error_fields(None)})

    async def list(self, request: Request):
        topics = request.body.topics
        if not self.auth.authorize_cluster(request, AclOperation.DESCRIBE):
            return build(response_class(request), {"throttle_time": 0, "topics": [],
                                                   **error_fields(cluster_denied())})
        wanted = None if topics is None else [
            (t.name, p) for t in topics for p in t.partition_indexes]
        ongoing = await self._ongoing(wanted)
        if isinstance(ongoing, KafkaError):
            return build(response_class(request), {"throttle_time": 0, "topics": [],
                                                   **error_fields(ongoing)})
        by_topic: dict[str, list] = {}
        for (t, p), (replicas, adding, removing) in ongoing.items():
            by_topic.setdefault(t, []).append({
                "partition_index": p, "replicas": replicas, "adding_replicas": adding,
                "removing_replicas": removing})
        return build(response_class(request), {
            "throttle_time": 0, **error_fields(None),
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
