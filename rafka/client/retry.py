"""Retrying a request until a deadline: the one rule every client (producer, consumer, admin)
follows, as Kafka's clients retry a retriable error every ``retry.backoff.ms`` until their
timeout runs out.

Which errors are worth another attempt is Kafka's classification: a ``KafkaError`` says so
itself (``retriable``, Kafka's RetriableException); an actor that died under the request or
did not answer in time is a lost connection (Kafka's NetworkException and TimeoutException,
both retriable); anything else (a bug, a bad argument) is raised at once.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

from protocols.errors import KafkaError

T = TypeVar("T")

MIN_ATTEMPT_S = 0.1   # an attempt made just before the deadline still gets this long


def is_retriable(error: BaseException) -> bool:
    if isinstance(error, KafkaError):
        return error.retriable
    import ray
    return isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError))


def retry_until(deadline: float, attempt: Callable[[float], T], *, backoff_s: float,
                on_retry: Callable[[BaseException], None] | None = None,
                retriable: Callable[[BaseException], bool] = is_retriable) -> T:
    """``attempt(seconds_left)`` until it returns. An error it raises that is retriable is
    tried again after ``backoff_s`` (``on_retry(error)`` first: forget a leader, say) while
    ``deadline`` (``time.monotonic()``) is ahead; past it, or for an error that is not
    retriable, the error is raised. ``retriable`` is Kafka's classification unless a caller
    waiting for something else (a name to be free, a broker to register) says otherwise."""
    while True:
        try:
            return attempt(max(MIN_ATTEMPT_S, deadline - time.monotonic()))
        except Exception as e:
            if not retriable(e) or time.monotonic() >= deadline:
                raise
            if on_retry is not None:
                on_retry(e)
            time.sleep(min(backoff_s, max(0.0, deadline - time.monotonic())))
