"""Client quotas (KIP-13, KIP-55): which quota applies to a user and client id and which
clients share its rate, and the throttle time a client over it gets; Kafka's own
ClientQuotaManagerTest cases (testQuotaConfigPrecedence, testQuotaViolation), on the pure
manager with a clock the test moves."""
from __future__ import annotations

from actors.broker.client_quota_manager import ClientQuotaManager, Rate
from protocols.kafka.client_quotas import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, entity

SAMPLES = 11   # Kafka's quota.window.num


class Clock:
    def __init__(self):
        self.ms = 1_000_000

    def sleep(self, ms: int) -> None:
        self.ms += ms


def manager(quotas: dict, key: str = PRODUCER_BYTE_RATE) -> ClientQuotaManager:
    return ClientQuotaManager(key, lambda: quotas)


def set_quota(quotas: dict, value: float | None, **names) -> None:
    e = entity(**names)
    if value is None:
        quotas.get(e, {}).pop(PRODUCER_BYTE_RATE, None)
    else:
        quotas.setdefault(e, {})[PRODUCER_BYTE_RATE] = value


def test_quota_config_precedence():
    """Kafka's testQuotaConfigPrecedence, case by case."""
    quotas: dict = {}
    clock = Clock()
    m = manager(quotas)

    def check(user, client, bound, value, throttled):
        assert m.quota(user, client) == bound, (user, client)
        throttle = m.record_and_get_throttle_ms(user, client, value * SAMPLES, clock.ms)
        assert (throttle > 0) == throttled, (user, client, value, throttle)

    set_quota(quotas, 1000, user=None)
    set_quota(quotas, 2000, client_id=None)
    set_quota(quotas, 3000, user=None, client_id=None)
    set_quota(quotas, 4000, user="userA")
    set_quota(quotas, 5000, user="userA", client_id="client1")
    set_quota(quotas, 6000, user="userB")
    set_quota(quotas, 7000, user="userB", client_id="client1")
    set_quota(quotas, 8000, user="userB", client_id=None)
    set_quota(quotas, 10000, user="userC")
    set_quota(quotas, 9000, client_id="client1")

    check("userA", "client1", 5000, 4500, False)   # <user, client> over <user>
    check("userA", "client2", 4000, 4500, True)    # <user> over <client> and defaults
    check("userA", "client3", 4000, 0, True)       # <user> shared by the user's clients
    check("userA", "client1", 5000, 0, False)      # <user, client> its own
    check("userB", "client1", 7000, 8000, True)
    check("userB", "client2", 8000, 7000, False)   # <user, default client>: each its own
    check("userB", "client3", 8000, 7000, False)
    check("userD", "client1", 3000, 3500, True)    # <default user, default client>
    check("userD", "client2", 3000, 2500, False)
    check("userE", "client1", 3000, 2500, False)

    set_quota(quotas, None, user=None, client_id=None)   # back to the <user> default
    check("userD", "client1", 1000, 0, False)       # other tags: a new rate
    check("userE", "client4", 1000, 1500, True)
    check("userF", "client4", 1000, 800, False)     # <default user> shared by its clients
    check("userF", "client5", 1000, 800, True)

    set_quota(quotas, None, user=None)               # back to the <client-id> default
    check("userF", "client4", 2000, 0, False)       # <default client> shared across users
    check("userF", "client5", 2000, 0, False)
    check("userF", "client5", 2000, 2500, True)
    check("userG", "client5", 2000, 0, True)

    set_quota(quotas, 8000, user="userA")
    set_quota(quotas, 10000, user="userA", client_id="client1")
    check("userA", "client2", 8000, 0, False)
    check("userA", "client2", 8000, 4500, True)     # the sum of new and earlier values
    check("userA", "client1", 10000, 0, False)
    check("userA", "client1", 10000, 6000, True)
    set_quota(quotas, None, user="userA", client_id="client1")
    check("userA", "client6", 8000, 0, True)        # the shared user quota
    set_quota(quotas, 11000, user="userA", client_id="client6")
    check("userA", "client6", 11000, 8500, False)
    set_quota(quotas, 12000, user="userA", client_id=None)
    set_quota(quotas, None, user="userA", client_id="client6")
    check("userA", "client6", 12000, 4000, True)


def test_quota_violation():
    """Kafka's testQuotaViolation: 400 B/s under a 500 B/s quota never throttles; a spike
    to 600 B/s over 10.5 s is throttled (600 - 500) / 500 * 10.5 s = 2100 ms; once the spike's
    window rolls over, no more throttling."""
    quotas = {entity(client_id=None): {PRODUCER_BYTE_RATE: 500}}
    clock = Clock()
    m = manager(quotas)
    for _ in range(10):
        assert m.record_and_get_throttle_ms("ANONYMOUS", "unknown", 400, clock.ms) == 0
        clock.sleep(1000)
    clock.sleep(500)
    assert m.record_and_get_throttle_ms("ANONYMOUS", "unknown", 2300, clock.ms) == 2100
    clock.sleep(2100)
    for _ in range(10):
        m.record_and_get_throttle_ms("ANONYMOUS", "unknown", 400, clock.ms)
        clock.sleep(1000)
    assert m.record_and_get_throttle_ms("ANONYMOUS", "unknown", 0, clock.ms) == 0


def test_no_quota_no_throttle_and_unrecord_takes_a_value_back():
    quotas: dict = {}
    clock = Clock()
    m = manager(quotas)
    assert m.record_and_get_throttle_ms("alice", "c", 10 ** 12, clock.ms) == 0
    quotas[entity(user="alice")] = {PRODUCER_BYTE_RATE: 1000}
    assert m.record_and_get_throttle_ms("alice", "c", 50_000, clock.ms) > 0
    m.unrecord("alice", "c", 50_000, clock.ms)
    assert m.record_and_get_throttle_ms("alice", "c", 100, clock.ms) == 0


def test_a_request_quota_throttles_at_most_one_window():
    """ClientRequestQuotaManager caps a throttle at quota.window.size.seconds."""
    quotas = {entity(user="alice"): {REQUEST_PERCENTAGE: 1.0}}
    m = manager(quotas, REQUEST_PERCENTAGE)
    assert m.record_and_get_throttle_ms("alice", "c", 10_000.0, 0) == 1000


def test_a_rate_spans_at_least_samples_minus_one_windows():
    rate = Rate(samples=11, window_ms=1000)
    rate.record(1000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == 100.0
    rate.record(1000, 12_500)   # the first window is out of the span by now
    assert rate.measure(12_500) == 100.0


def test_hosts_of_one_broker_hold_a_client_to_the_brokers_quota_together():
    """A broker's replica hosts each measure their part of a client's rate and hear the
    others' (usage_elsewhere): a client sending 300 B/s to each of two hosts under a
    500 B/s quota is throttled by both once they have heard, though neither alone sees
    it over; another client's rate, and a rate at one host only, are left alone."""
    from actors.broker.client_quota_manager import BrokerQuotas, usage_elsewhere
    from protocols.kafka.client_quotas import CONSUMER_BYTE_RATE
    image = {"client_quotas": [[[["client-id", "app"]], {PRODUCER_BYTE_RATE: 500}]]}
    clock = Clock()
    hosts = [BrokerQuotas(lambda: image, lambda: clock.ms) for _ in range(2)]
    for _ in range(10):
        for h in hosts:
            assert h.record(h.produce, "User:ANONYMOUS", "app", 300) == 0
        clock.sleep(1000)
    first, second = (h.usage() for h in hosts)
    # By the quota's metric tags: a client id's quota is shared by every user with it.
    assert first == [(PRODUCER_BYTE_RATE, "", "app", 300.0)]
    told = usage_elsewhere([first, second, [(CONSUMER_BYTE_RATE, "bob", "", 7.0)]])
    assert told == [[(PRODUCER_BYTE_RATE, "", "app", 300.0),
                     (CONSUMER_BYTE_RATE, "bob", "", 7.0)],
                    [(PRODUCER_BYTE_RATE, "", "app", 300.0),
                     (CONSUMER_BYTE_RATE, "bob", "", 7.0)],
                    [(PRODUCER_BYTE_RATE, "", "app", 600.0)]]
    for h, elsewhere in zip(hosts, told):
        h.set_elsewhere(elsewhere)
    # ~300 B/s here and 300 B/s at the other host: 600 B/s over a 500 B/s quota.
    assert all(h.record(h.produce, "User:ANONYMOUS", "app", 300) > 0 for h in hosts)
    assert hosts[0].record(hosts[0].produce, "User:ANONYMOUS", "other", 10 ** 6) == 0
    # What the others measured is forgotten when the broker stops telling (two windows).
    hosts[1].set_elsewhere(told[1])
    clock.sleep(2000)
    assert hosts[1].record(hosts[1].produce, "User:ANONYMOUS", "app", 0) == 0
    hosts[0].set_elsewhere([])
    clock.sleep(11_000)
    assert hosts[0].record(hosts[0].produce, "User:ANONYMOUS", "app", 300) == 0
