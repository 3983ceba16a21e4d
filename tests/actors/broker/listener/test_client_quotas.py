"""DescribeClientQuotas on the listener (``admin_apis``): no quota can be set yet, so every
filter Kafka accepts selects nothing; the filters Kafka refuses are refused with its
INVALID_REQUEST messages; DESCRIBE_CONFIGS on the cluster is needed under an authorizer."""
import asyncio

import pytest

from actors.broker.listener.admin_apis import AdminApis
from actors.broker.listener.api_versions import SUPPORTED
from actors.broker.listener.auth_helper import AuthHelper
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.codec import parse_request
from tests.kafka_wire import request_bytes

EXACT, DEFAULT, ANY = 0, 1, 2


def describe(*components, principal="User:admin", authorizer=False):
    frame = request_bytes(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {
        "components": [{"entity_type": t, "match_type": m, "match": n}
                       for t, m, n in components], "strict": False})[4:]
    request = parse_request(frame, SUPPORTED, principal=principal, host="127.0.0.1")
    image = {"acls": []}
    apis = AdminApis(0, lambda: image, None, None,
                     auth=AuthHelper(lambda: image, authorizer, "User:admin"))
    return asyncio.run(apis.describe_client_quotas(request))


@pytest.mark.parametrize("components", [
    [], [("user", EXACT, "alice")], [("user", DEFAULT, None), ("client-id", ANY, None)],
    [("ip", EXACT, "10.0.0.1")]])
def test_every_filter_selects_no_quota(components):
    answer = describe(*components)
    assert answer.error_code == 0 and answer.entries == ()


@pytest.mark.parametrize("components, code, message", [
    ([("group", ANY, None)], 35, "Unsupported entity type group"),
    ([("", ANY, None)], 42, "Invalid empty entity type."),
    ([("group", ANY, None), ("group", ANY, None)], 35, "Unsupported entity type group"),
    ([("user", ANY, None), ("user", EXACT, "a")], 42,
     "Entity type user cannot appear more than once in the filter."),
    ([("user", EXACT, None)], 42,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", DEFAULT, "a")], 42,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("client-id", ANY, "a")], 42,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], 42, "Unknown match type 7"),
    ([("ip", ANY, None), ("user", ANY, None)], 42,
     "Invalid entity filter component combination. IP filter component should not be "
     "used with user or clientId filter component."),
])
def test_filters_kafka_refuses(components, code, message):
    """Kafka's ClientQuotasImage.describe, check by check."""
    answer = describe(*components)
    assert (answer.error_code, answer.error_message) == (code, message)
    assert answer.entries is None


def test_describe_configs_on_the_cluster_is_needed():
    assert describe(principal="User:bob", authorizer=True).error_code == 31
    assert describe(principal="User:admin", authorizer=True).error_code == 0
