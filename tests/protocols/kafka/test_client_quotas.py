"""Client quotas' model (protocols.kafka.client_quotas): AlterClientQuotas' checks as
Kafka's ClientQuotaControlManager makes them, DescribeClientQuotas' filter as
ClientQuotasImage.describe reads it, and the quota a client gets."""
from __future__ import annotations

import pytest

from protocols.errors import InvalidRequestError, UnsupportedVersionError
from protocols.kafka.client_quotas import (MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED,
                                           alteration_error, entity, filter_error, matching,
                                           quota_bound)


@pytest.mark.parametrize("e, values, message", [
    ((), {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ((("user", "a"), ("user", "b")), {}, "duplicate entity entry user"),
    ((("group", "g"),), {}, "Unhandled client quota entity type: group"),
    ((("ip", "1.2.3.4"), ("user", "a")), {}, "IP entity should"),
    (entity(user="a"), {"connection_creation_rate": 5.0}, "Invalid configuration key "
                                                          "connection_creation_rate"),
    (entity(ip="1.2.3.4"), {"producer_byte_rate": 5.0}, "Invalid configuration key"),
    (entity(user="a"), {"producer_byte_rate": 0.0}, "Quota producer_byte_rate must be greater "
                                                    "than 0"),
    (entity(user="a"), {"producer_byte_rate": 10.5}, "producer_byte_rate cannot be a "
                                                     "fractional value."),
    (entity(user="a"), {"consumer_byte_rate": 2.0 ** 64}, "too large for a LONG."),
    (entity(ip=None), {"connection_creation_rate": 2.0 ** 40}, "too large for an INT."),
])
def test_alterations_refused_as_kafka_refuses_them(e, values, message):
    error = alteration_error(e, values)
    assert isinstance(error, InvalidRequestError) and message in str(error)


def test_alterations_taken():
    assert alteration_error(entity(user="a", client_id=None),
                            {"producer_byte_rate": 1024.0, "request_percentage": 12.5,
                             "controller_mutation_rate": None}) is None
    assert alteration_error(entity(ip=None), {"connection_creation_rate": 10.0}) is None
    assert alteration_error(entity(user="a"), {"nonsense": None}) is None   # a removal


QUOTAS = {
    entity(user="alice"): {"producer_byte_rate": 1000.0},
    entity(user="alice", client_id="app"): {"consumer_byte_rate": 2000.0},
    entity(user=None): {"producer_byte_rate": 500.0},
    entity(client_id="app"): {"request_percentage": 50.0},
    entity(ip="10.0.0.1"): {"connection_creation_rate": 3.0},
}


@pytest.mark.parametrize("components, strict, expected", [
    ([("user", MATCH_EXACT, "alice")], False,
     [entity(user="alice"), entity(user="alice", client_id="app")]),
    ([("user", MATCH_EXACT, "alice")], True, [entity(user="alice")]),
    ([("user", MATCH_DEFAULT, None)], False, [entity(user=None)]),
    ([("user", MATCH_SPECIFIED, None)], False,
     [entity(user="alice"), entity(user="alice", client_id="app"), entity(user=None)]),
    ([("client-id", MATCH_EXACT, "app")], True, [entity(client_id="app")]),
    ([("user", MATCH_SPECIFIED, None), ("client-id", MATCH_SPECIFIED, None)], True,
     [entity(user="alice", client_id="app")]),
    ([("ip", MATCH_SPECIFIED, None)], False, [entity(ip="10.0.0.1")]),
    ([], False, list(QUOTAS)),
    ([], True, []),
])
def test_describe_filters_select_as_kafkas_image_does(components, strict, expected):
    assert filter_error(components) is None
    assert [e for e, _ in matching(QUOTAS, components, strict)] == expected


@pytest.mark.parametrize("components, error, message", [
    ([("", MATCH_EXACT, "a")], InvalidRequestError, "Invalid empty entity type."),
    ([("user", MATCH_EXACT, "a"), ("user", MATCH_DEFAULT, None)], InvalidRequestError,
     "cannot appear more than once"),
    ([("group", MATCH_EXACT, "g")], UnsupportedVersionError, "Unsupported entity type group"),
    ([("user", MATCH_EXACT, None)], InvalidRequestError, "MATCH_TYPE_EXACT, but set match"),
    ([("user", MATCH_DEFAULT, "a")], InvalidRequestError, "MATCH_TYPE_DEFAULT, but also"),
    ([("user", MATCH_SPECIFIED, "a")], InvalidRequestError, "MATCH_TYPE_SPECIFIED, but also"),
    ([("user", 7, None)], InvalidRequestError, "Unknown match type 7"),
    ([("ip", MATCH_SPECIFIED, None), ("user", MATCH_SPECIFIED, None)], InvalidRequestError,
     "IP filter component should not be used with user or clientId"),
])
def test_bad_describe_filters(components, error, message):
    found = filter_error(components)
    assert isinstance(found, error) and message in str(found)


def test_the_quota_a_client_gets_and_who_shares_its_rate():
    assert quota_bound(QUOTAS, "producer_byte_rate", "alice", "app") == (1000.0,
                                                                         ("alice", ""))
    assert quota_bound(QUOTAS, "producer_byte_rate", "bob", "x") == (500.0, ("bob", ""))
    assert quota_bound(QUOTAS, "consumer_byte_rate", "alice", "app") == (2000.0,
                                                                         ("alice", "app"))
    assert quota_bound(QUOTAS, "consumer_byte_rate", "bob", "app") == (None, ("", "app"))
    assert quota_bound(QUOTAS, "request_percentage", "bob", "app") == (50.0, ("", "app"))
