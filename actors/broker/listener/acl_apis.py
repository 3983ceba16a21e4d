"""CreateAcls, DescribeAcls and DeleteAcls on the listener (Kafka's AclApis): the ACLs live in
the cluster's metadata (``actors.controller.acls``); creations and deletions go to the
controller, descriptions are read from this broker's image. Altering ACLs needs ALTER on the
cluster, describing them DESCRIBE; without an authorizer configured each is answered
SECURITY_DISABLED, as Kafka answers."""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

from actors.broker.listener.auth_helper import AuthHelper
from protocols.errors import (ClusterAuthorizationFailedError, KafkaError,
                              SecurityDisabledError)
from protocols.kafka.acl import AclOperation
from protocols.kafka.codec import Request, build, error_fields, response_class

NO_AUTHORIZER = "No Authorizer is configured."


def _filter_values(f) -> list:
    return [int(f.resource_type_filter), f.resource_name_filter, int(f.pattern_type_filter),
            f.principal_filter, f.host_filter, int(f.operation), int(f.permission_type)]


class AclApis:
    def __init__(self, image: Callable[[], Mapping[str, Any]], auth: AuthHelper,
                 controller_call: Callable[..., Awaitable[Any]]):
        self.image = image
        self.auth = auth
        self.controller_call = controller_call

    def _refused(self, request: Request, operation: AclOperation) -> KafkaError | None:
        if not self.auth.enabled:
            return SecurityDisabledError(NO_AUTHORIZER if operation == AclOperation.ALTER
                                         else "No Authorizer is configured on the broker")
        if not self.auth.authorize_cluster(request, operation):
            return ClusterAuthorizationFailedError(
                "Cluster authorization failed.")
        return None

    async def describe_acls(self, request: Request):
        from actors.controller.acls import describe
        body = request.body
        error = self._refused(request, AclOperation.DESCRIBE)
        resources: dict[tuple, list] = {}
        if error is None:
            try:
                found = describe(self.image().get("acls") or [], _filter_values(body))
            except KafkaError as e:
                error, found = e, []
            for acl in found:
                resources.setdefault(
                    (int(acl.resource_type), acl.resource_name, int(acl.pattern_type)),
                    []).append({"principal": acl.principal, "host": acl.host,
                                "operation": int(acl.operation),
                                "permission_type": int(acl.permission)})
        return build(response_class(request), {
            "throttle_time": 0, **error_fields(error),
            "resources": [{"resource_type": rt, "resource_name": name, "pattern_type": pt,
                           "acls": acls} for (rt, name, pt), acls in resources.items()]})

    async def create_acls(self, request: Request):
        creations = request.body.creations
        error = self._refused(request, AclOperation.ALTER)
        if error is None and creations:
            answer = await self.controller_call("create_acls", [
                [int(c.resource_type), c.resource_name, int(c.resource_pattern_type),
                 c.principal, c.host, int(c.operation), int(c.permission_type)]
                for c in creations])
            if isinstance(answer, KafkaError):
                error = answer
            else:
                return build(response_class(request), {
                    "throttle_time": 0, "results": [error_fields(e) for e in answer]})
        return build(response_class(request), {
            "throttle_time": 0, "results": [error_fields(error) for _ in creations]})

    async def delete_acls(self, request: Request):
        filters = request.body.filters
        error = self._refused(request, AclOperation.ALTER)
        if error is None and filters:
            answer = await self.controller_call("delete_acls",
                                                [_filter_values(f) for f in filters])
            if isinstance(answer, KafkaError):
                error = answer
            else:
                return build(response_class(request), {
                    "throttle_time": 0,
                    "filter_results": [_filter_result(r) for r in answer]})
        return build(response_class(request), {
            "throttle_time": 0,
            "filter_results": [{**error_fields(error), "matching_acls": []}
                               for _ in filters]})


def _filter_result(result) -> dict:
    if isinstance(result, KafkaError):
        return {**error_fields(result), "matching_acls": []}
    return {**error_fields(None), "matching_acls": [
        {**error_fields(None), "resource_type": rt, "resource_name": name,
         "pattern_type": pt, "principal": principal, "host": host, "operation": op,
         "permission_type": perm}
        for rt, name, pt, principal, host, op, perm in result]}
