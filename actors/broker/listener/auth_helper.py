"""The listener's questions to the authorizer (Kafka's AuthHelper): may this request's
principal, from its host, do an operation on a resource. Without an authorizer configured
(``authorizer.class.name`` empty, the default) every answer is yes, as in Kafka.

The authorizer is rebuilt from the ACLs of each metadata image the broker gets (when they
changed) and keeps its answers for that image's life.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from protocols.errors import (ClusterAuthorizationFailedError, GroupAuthorizationFailedError,
                              KafkaError, TopicAuthorizationFailedError,
                              TransactionalIdAuthorizationFailedError)
from protocols.kafka.acl import CLUSTER_NAME, AclOperation, ResourceType, parse_super_users
from protocols.kafka.authorizer import OPERATIONS_NOT_REQUESTED, Authorizer
from protocols.kafka.codec import Request


class AuthHelper:
    def __init__(self, image: Callable[[], Mapping[str, Any]], enabled: bool = False,
                 super_users: str | None = None, allow_everyone_if_no_acl_found: bool = False):
        self.image = image
        self.enabled = enabled
        self.super_users = parse_super_users(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: Any = None
        self._authorizer: Authorizer | None = None

    def authorizer(self) -> Authorizer | None:
        """The authorizer of the ACLs as they are now; None without one configured."""
        if not self.enabled:
            return None
        acls = self.image().get("acls") or []
        if self._authorizer is None or acls is not self._acls:
            from actors.controller.acls import acls_of
            if self._authorizer is None or acls != self._acls:
                self._authorizer = Authorizer(acls_of(acls), self.super_users,
                                              self.allow_everyone_if_no_acl_found)
            self._acls = acls
        return self._authorizer

    def authorize(self, request: Request, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        authorizer = self.authorizer()
        return authorizer is None or authorizer.authorize(
            request.principal, request.host, operation, resource_type, name)

    def authorize_cluster(self, request: Request, operation: AclOperation) -> bool:
        return self.authorize(request, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def allowed(self, request: Request, operation: AclOperation,
                resource_type: ResourceType, names: Iterable[str]) -> set[str]:
        """The names among ``names`` the request may do ``operation`` on."""
        authorizer = self.authorizer()
        if authorizer is None:
            return set(names)
        return {n for n in set(names) if authorizer.authorize(
            request.principal, request.host, operation, resource_type, n)}

    def topic_refusal(self, request: Request, operation: AclOperation
                      ) -> Callable[[str | None], KafkaError | None] | None:
        """For ``PartitionRoute.split``: TOPIC_AUTHORIZATION_FAILED for a topic the request
        may not do ``operation`` on (checked before whether it exists, as Kafka does: the
        answer is the same for a topic there or not); None where allowed, for a topic id
        this broker does not know (answered UNKNOWN_TOPIC_ID first), and without an
        authorizer."""
        authorizer = self.authorizer()
        if authorizer is None:
            return None

        def refused(name: str | None) -> KafkaError | None:
            if name is None or authorizer.authorize(request.principal, request.host,
                                                    operation, ResourceType.TOPIC, name):
                return None
            return topic_denied()
        return refused

    def authorize_by_resource_type(self, request: Request, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        authorizer = self.authorizer()
        return authorizer is None or authorizer.authorize_by_resource_type(
            request.principal, request.host, operation, resource_type)

    def authorized_operations(self, request: Request, resource_type: ResourceType,
                              name: str, requested: bool = True) -> int:
        """A response's ``authorized_operations``: Kafka's sentinel when the client did not
        ask for it; every operation of the type's when no authorizer is configured."""
        if not requested:
            return OPERATIONS_NOT_REQUESTED
        authorizer = self.authorizer()
        if authorizer is None:
            from protocols.kafka.authorizer import SUPPORTED_OPERATIONS
            return sum(1 << op for op in SUPPORTED_OPERATIONS.get(resource_type, ()))
        return authorizer.authorized_operations(request.principal, request.host,
                                                resource_type, name)


# Kafka's errors with their default messages, as its handlers answer them.
def topic_denied() -> KafkaError:
    return TopicAuthorizationFailedError("Topic authorization failed.")


def group_denied() -> KafkaError:
    return GroupAuthorizationFailedError("Group authorization failed.")


def cluster_denied() -> KafkaError:
    return ClusterAuthorizationFailedError("Cluster authorization failed.")


def transactional_id_denied() -> KafkaError:
    return TransactionalIdAuthorizationFailedError("Transactional Id authorization failed.")
