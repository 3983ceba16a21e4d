"""Client quotas for rafka's own clients at a replica host (actors.replica.host_quotas):
who a request is held to quotas as, a fetch capped to what the quota allows in one go, a
throttled fetch answered without its records but with everything else, and produce and
request-time throttles, on the pure class with a clock the test moves."""
from __future__ import annotations

from dataclasses import dataclass

from actors.replica.host_quotas import ANONYMOUS, HostQuotas
from protocols.messages import FetchManyRequest, FetchManyResponse, FetchResult

QUOTAS = [[[["client-id", "app"], ["user", "ANONYMOUS"]],   # as the image holds them
           {"producer_byte_rate": 1000, "consumer_byte_rate": 2000}],
          [[["user", "alice"]], {"request_percentage": 1.0}]]


@dataclass(frozen=True)
class Caller:
    principal: str


def quotas() -> tuple[HostQuotas, list]:
    clock = [1_000_000]
    q = HostQuotas(lambda: clock[0])
    q.update(QUOTAS)
    return q, clock


def test_who_a_request_is_held_to_quotas_as():
    q, _ = quotas()
    assert q.subject("app") == (ANONYMOUS, "app")            # a token holder: rafka's client
    assert q.subject(None) is None                           # a broker's listener
    assert q.subject("app", replica_id=2) is None            # a follower's fetch
    assert q.subject(None, Caller("User:alice")) == ("User:alice", "")   # a door client
    assert q.subject("x", Caller("User:alice")) == ("User:alice", "x")
    q.update([])
    assert q.subject("app") is None                          # no quota: nothing recorded


def test_a_fetch_is_capped_and_a_throttled_one_answered_without_records():
    q, clock = quotas()
    subject = q.subject("app")
    request = FetchManyRequest(-1, 500, 1, 50 * 2**20, (), client_id="app")
    # consumer_byte_rate 2000 over quota.window.num - 1 windows of 1 s.
    capped = q.cap_fetch(request, subject)
    assert (capped.max_bytes, capped.min_bytes) == (20_000, 1)
    assert q.cap_fetch(request, None).max_bytes == 50 * 2**20
    response = FetchManyResponse((("t", 0, FetchResult(b"x" * 15_000, 9, 0, 9)),
                                  ("t", 1, FetchResult(b"", 4, 0, 4))), None, 7)
    assert q.fetched(subject, response, 0) is response       # 15 kB: within 10 windows
    throttled = q.fetched(subject, response, 0)              # 30 kB: over
    assert throttled.throttle_time_ms > 0 and throttled.session_id == 7
    assert [(t, p, r.records, r.high_watermark) for t, p, r in throttled.results] == \
        [("t", 0, b"", 9), ("t", 1, b"", 4)]
    clock[0] += 20_000
    assert q.fetched(subject, response, 0) is response       # the bytes not sent: not counted


def test_produce_and_request_time_throttles():
    q, clock = quotas()
    assert q.produced(q.subject("app"), 9_000, 0, 1) == 0
    assert q.produced(q.subject("app"), 9_000, 0, 1) > 0
    assert q.produced(None, 10 ** 9, 10 ** 12, 1) == 0
    alice = q.subject(None, Caller("User:alice"))
    assert q.produced(alice, 100, 1_000_000, 1) == 0         # 0.1% of a second in 10 s
    assert q.produced(alice, 100, 10 ** 9, 0) == 0           # acks=0: no request quota
    assert q.produced(alice, 100, 2 * 10 ** 9, -1) == 1000   # capped at one window


def test_a_fetch_over_its_request_time_is_answered_without_records():
    """Kafka's handleFetchRequest: the longer of the byte and request throttles; either
    strips the records."""
    q, _ = quotas()
    alice = q.subject(None, Caller("User:alice"))
    response = FetchManyResponse((("t", 0, FetchResult(b"x" * 100, 9, 0, 9)),))
    throttled = q.fetched(alice, response, 2 * 10 ** 9)
    assert throttled.throttle_time_ms == 1000
    assert throttled.results[0][2].records == b""
