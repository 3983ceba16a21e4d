"""The controller's lease: how a broker tells a controller that is frozen or cut off from
the head from one it merely cannot reach itself.

The controller can change nothing without writing its checkpoint to the GCS, so the GCS
is where its authority lives. It renews a lease there every ``renew_interval_ms``. A
broker whose call to the controller goes unanswered for a session timeout reads the lease
(from the GCS, never from a cache) when the call went out and again when it timed out: a
lease that stood still that long belongs to a controller that cannot act, and the broker
fences it. A lease that moved on belongs to a controller the rest of the cluster reaches,
and a lease the broker cannot read at all means the broker is the one cut off: either
way the controller stays. (Before the lease, a broker cut off from every host killed the
controller on its own judgement; Ray held the kill for the GCS and carried it out after
healing, on the controller every other broker had reached all along.)
"""
from __future__ import annotations

from dataclasses import dataclass

LEASE_KEY = "rafka/{name}/controller-lease"


def renew_interval_ms(session_timeout_ms: int) -> int:
    """Six renewals per broker session: a broker's window of half a session sees three."""
    return max(100, session_timeout_ms // 6)


def lease_value(controller_epoch: int, renewal: int) -> bytes:
    return f"{controller_epoch}:{renewal}".encode()


def superseded(stored: bytes | None, controller_epoch: int) -> bool:
    """Whether the lease in the GCS is a newer controller's: the one renewing it must stop
    (its renewals would keep a successor's lease moving even when that successor froze)."""
    return stored is not None and int(stored.split(b":", 1)[0]) > controller_epoch


@dataclass(frozen=True)
class LeaseReading:
    """The lease as read from the GCS (None: no controller ever wrote one) and when, by
    the reader's monotonic clock."""
    value: bytes | None
    at_ms: int


def lease_expired(before: LeaseReading, after: LeaseReading, session_timeout_ms: int) -> bool:
    """Whether two readings show a controller that stopped renewing: the same value over
    at least half a session, three renewals missed."""
    return before.value == after.value and \
        after.at_ms - before.at_ms >= session_timeout_ms // 2
