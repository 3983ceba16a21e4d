"""The clients' one retry rule (rafka/client/retry.py): retriable errors are tried again every
backoff until the deadline, then raised; others are raised at once."""
from __future__ import annotations

import time

import pytest
from ray.exceptions import GetTimeoutError

from protocols.errors import (InvalidRecordError, KafkaTimeoutError, NetworkError,
                              NotLeaderOrFollowerError)
from rafka.client.retry import is_retriable, retry_until


def test_kafkas_classification():
    assert is_retriable(NotLeaderOrFollowerError("moved"))
    assert is_retriable(NetworkError("gone")) and is_retriable(KafkaTimeoutError("late"))
    assert is_retriable(GetTimeoutError("no answer"))     # an actor that did not answer
    assert not is_retriable(InvalidRecordError("bad"))
    assert not is_retriable(ValueError("a bug"))


def test_a_retriable_error_is_retried_after_a_backoff_until_an_attempt_succeeds():
    seen, forgotten = [], []

    def attempt(left_s: float) -> str:
        seen.append(left_s)
        if len(seen) < 3:
            raise NotLeaderOrFollowerError("leader moved")
        return "ok"
    started = time.monotonic()
    assert retry_until(started + 30, attempt, backoff_s=0.02, on_retry=forgotten.append) == "ok"
    assert len(seen) == 3 and len(forgotten) == 2
    assert time.monotonic() - started >= 0.04
    assert all(0 < left <= 30 for left in seen)


def test_past_the_deadline_the_last_error_is_raised():
    calls = []

    def attempt(left_s: float):
        calls.append(left_s)
        raise NetworkError(f"attempt {len(calls)}")
    with pytest.raises(NetworkError):
        retry_until(time.monotonic() + 0.1, attempt, backoff_s=0.02)
    assert len(calls) >= 2


def test_an_error_that_is_not_retriable_is_raised_at_once():
    calls = []

    def attempt(left_s: float):
        calls.append(left_s)
        raise InvalidRecordError("no")
    with pytest.raises(InvalidRecordError):
        retry_until(time.monotonic() + 30, attempt, backoff_s=0.01)
    assert len(calls) == 1
