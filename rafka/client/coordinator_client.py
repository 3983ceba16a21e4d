"""Requests to one group's coordinator actor, or one transactional id's: FindCoordinator
(any broker answers it; the first one asked creates ``__consumer_offsets`` or
``__transaction_state``), then the request itself, looking the coordinator up again on
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE and retrying COORDINATOR_LOAD_IN_PROGRESS, as
Kafka clients do. Used by the consumer, the admin and the transactional producer."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from actors.names import coordinator_name, txn_coordinator_name
from protocols.errors import (CoordinatorLoadInProgressError, CoordinatorNotAvailableError,
                              GroupAuthorizationFailedError, KafkaError, KafkaTimeoutError,
                              NotCoordinatorError, RequestTimedOutError,
                              TransactionalIdAuthorizationFailedError)
from protocols.topics import GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE
from protocols.wire import decode
from rafka.client.retry import retry_until

log = logging.getLogger(__name__)

# Errors after which the coordinator must be looked up again.
COORDINATOR_MOVED = (NotCoordinatorError, CoordinatorNotAvailableError)
# Refusals: raised at once, never retried.
AUTHORIZATION_FAILED = (GroupAuthorizationFailedError, TransactionalIdAuthorizationFailedError)
# Errors worth retrying with the same coordinator after a backoff.
RETRY_SAME = (CoordinatorLoadInProgressError, RequestTimedOutError)


class CoordinatorClient:
    def __init__(self, cluster, metadata, group_id: str, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, key_type: int = GROUP_KEY_TYPE,
                 door: Any = None):
        self.cluster = cluster
        # A guarded Ray door (rafka.client.ray_door): FindCoordinator and every request go
        # through its broker's checks.
        self.door = door if door is not None and door.guarded else None
        self.metadata = metadata
        self.group_id = group_id        # the key: a group id, or a transactional id
        self.key_type = key_type
        self._name_of = txn_coordinator_name if key_type == TRANSACTION_KEY_TYPE \
            else coordinator_name
        self._what = "transactional id" if key_type == TRANSACTION_KEY_TYPE else "group"
        self._kind = "txn" if key_type == TRANSACTION_KEY_TYPE else "group"
        self.request_s = request_timeout_ms / 1000
        self.retry_s = retry_backoff_ms / 1000
        self._lock = threading.Lock()
        self._handle = None
        self.coordinator_id = -1

    def handle(self, deadline: float):
        """The coordinator's actor handle, asking the brokers until ``deadline``."""
        import ray
        while True:
            with self._lock:
                if self._handle is not None:
                    return self._handle
            error: Any = None
            for broker_id in self.metadata.brokers() if self.door is None else [None]:
                try:
                    if self.door is not None:
                        answer = self.door.call("find_coordinator", self.group_id,
                                                self.key_type)
                    else:
                        broker = self.cluster.broker(broker_id)
                        answer = decode(ray.get(
                            broker.find_coordinator.remote(self.group_id, self.key_type),
                            timeout=self.request_s))
                except Exception as e:
                    error = e
                    continue
                if isinstance(answer, AUTHORIZATION_FAILED):
                    raise answer
                if isinstance(answer, KafkaError):
                    error = answer
                    break
                if self.door is not None:
                    handle = self.door.coordinator(self._kind, answer)
                else:
                    try:
                        handle = ray.get_actor(self._name_of(answer),
                                               namespace=self.cluster.namespace)
                    except ValueError:
                        error = CoordinatorNotAvailableError(
                            f"coordinator {answer} is starting")
                        break
                with self._lock:
                    self._handle, self.coordinator_id = handle, answer
                return handle
            self.metadata.refresh()
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"No coordinator for {self._what} {self.group_id} found in "
                                        f"time: {error}")
            time.sleep(self.retry_s)

    def unknown(self, why: Any = "") -> None:
        with self._lock:
            if self._handle is not None:
                log.info("%s %s: coordinator %d unknown (%s)", self._what, self.group_id,
                         self.coordinator_id, why)
            self._handle, self.coordinator_id = None, -1

    def call(self, method: str, *args: Any, deadline: float) -> Any:
        """One request; retriable coordinator errors are retried until ``deadline``, other
        errors come back as values (the last retriable one too, once time is up)."""
        import ray

        def attempt(_left_s: float) -> Any:
            coordinator = self.handle(deadline)
            try:
                answer = decode(ray.get(getattr(coordinator, method).remote(*args),
                                        timeout=self.request_s))
            except Exception as e:   # the coordinator's broker went away
                answer = CoordinatorNotAvailableError(repr(e))
            answer = self.seen(answer)
            if isinstance(answer, COORDINATOR_MOVED + RETRY_SAME):
                raise answer
            return answer

        def on_retry(error: BaseException) -> None:
            if isinstance(error, COORDINATOR_MOVED):
                self.unknown(error)

        try:
            return retry_until(deadline, attempt, backoff_s=self.retry_s, on_retry=on_retry)
        except COORDINATOR_MOVED + RETRY_SAME as e:
            on_retry(e)
            return e
        except AUTHORIZATION_FAILED as e:   # FindCoordinator's refusal: an answer too
            return e

    def seen(self, answer: Any) -> Any:
        """A coordinator's answer as its callers take it: through the Ray door, a session
        found gone is COORDINATOR_NOT_AVAILABLE (retried, signed in again)."""
        return answer if self.door is None else self.door.seen(answer)
