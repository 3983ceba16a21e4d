"""Client quotas on a real cluster (issue 44, step 3): set and described with Kafka's own
kafka-configs.sh (AlterClientQuotas / DescribeClientQuotas over the wire), with ``rafka
configs`` and with rafka.Admin, kept in the cluster's metadata as Kafka keeps them."""
from __future__ import annotations

import pytest

from tests.runtime.conftest import cluster_with
from tests.runtime.test_kafka_java_tools import KafkaTools
from tests.runtime.test_tools import rafka_cli

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(ray_session, tmp_path_factory):
    with cluster_with(tmp_path_factory.mktemp("quotas")) as c:
        yield c


@pytest.fixture(scope="module")
def kafka(cluster, tmp_path_factory) -> KafkaTools:
    from benchmarks.kafka_peer import classpath
    return KafkaTools(classpath(), tmp_path_factory.mktemp("quota-tools"),
                      cluster.bootstrap_servers)


def configs(kafka: KafkaTools, *args: str, check: bool = True):
    return kafka.tool("kafka.admin.ConfigCommand", *args, check=check)


def test_kafka_configs_sets_and_describes_user_and_client_quotas(cluster, kafka):
    out = configs(kafka, "--alter", "--entity-type", "users", "--entity-name", "alice",
                  "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert "Completed updating config for user alice." in out.stdout
    configs(kafka, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-name", "app", "--add-config",
            "request_percentage=25.5")
    configs(kafka, "--alter", "--entity-type", "clients", "--entity-default",
            "--add-config", "producer_byte_rate=4096")
    described = configs(kafka, "--describe", "--entity-type", "users", "--entity-name",
                        "alice").stdout
    assert "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, " \
           "producer_byte_rate=1048576.0" in described
    both = configs(kafka, "--describe", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-name", "app").stdout
    assert "Quota configs for user-principal 'alice', client-id 'app' are " \
           "request_percentage=25.5" in both
    default = configs(kafka, "--describe", "--entity-type", "clients",
                      "--entity-default").stdout
    assert "Quota configs for the default client-id are producer_byte_rate=4096.0" in default
    # rafka's own tool reads what Kafka's wrote, and writes what Kafka's reads.
    ours = rafka_cli(cluster, "configs", "--describe", "--entity-type", "users",
                     "--entity-name", "alice")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.splitlines()[0] == "Quota configs for user-principal 'alice' are " \
                                          "consumer_byte_rate=2097152.0, " \
                                          "producer_byte_rate=1048576.0"
    out = rafka_cli(cluster, "configs", "--alter", "--entity-type", "users", "--entity-name",
                    "alice", "--delete-config", "consumer_byte_rate", "--add-config",
                    "producer_byte_rate=65536")
    assert out.returncode == 0 and "Completed updating config for user alice." in out.stdout, \
        out.stderr
    assert "Quota configs for user-principal 'alice' are producer_byte_rate=65536.0" in \
        configs(kafka, "--describe", "--entity-type", "users", "--entity-name",
                "alice").stdout
    out = rafka_cli(cluster, "configs", "--alter", "--entity-type", "users",
                    "--entity-default", "--add-config", "consumer_byte_rate=1000")
    assert "Completed updating default config for users in the cluster." in out.stdout, \
        out.stderr


def test_bad_quotas_are_refused_with_kafkas_errors(cluster, kafka):
    refused = configs(kafka, "--alter", "--entity-type", "users", "--entity-name", "bob",
                      "--add-config", "producer_byte_rate=10.5", check=False)
    assert refused.returncode != 0
    assert "producer_byte_rate cannot be a fractional value." in refused.stdout + \
        refused.stderr
    out = rafka_cli(cluster, "configs", "--alter", "--entity-type", "clients",
                    "--entity-name", "app", "--add-config", "request_percentage=0")
    assert out.returncode != 0
    assert "INVALID_REQUEST: Quota request_percentage must be greater than 0" in out.stderr
    out = rafka_cli(cluster, "configs", "--alter", "--entity-type", "clients",
                    "--entity-name", "app", "--delete-config", "consumer_byte_rate")
    assert out.returncode != 0 and "Invalid config(s): consumer_byte_rate" in out.stderr


def test_rafka_admin_alters_and_describes_client_quotas(cluster):
    from protocols.errors import InvalidRequestError
    from protocols.kafka.client_quotas import MATCH_EXACT, MATCH_SPECIFIED, entity
    admin = cluster.admin()
    results = admin.alter_client_quotas([
        ({"user": "carol"}, {"producer_byte_rate": 2048}),
        ({"user": "carol", "client-id": None}, {"consumer_byte_rate": 4096}),
        ({"ip": "10.0.0.1", "user": "carol"}, {"producer_byte_rate": 1})])
    assert results[entity(user="carol")] is None
    assert results[entity(user="carol", client_id=None)] is None
    assert isinstance(results[entity(ip="10.0.0.1", user="carol")], InvalidRequestError)
    found = admin.describe_client_quotas([("user", MATCH_EXACT, "carol")])
    assert found == {entity(user="carol"): {"producer_byte_rate": 2048.0},
                     entity(user="carol", client_id=None): {"consumer_byte_rate": 4096.0}}
    assert list(admin.describe_client_quotas([("user", MATCH_EXACT, "carol")],
                                             strict=True)) == [entity(user="carol")]
    admin.alter_client_quotas([({"user": "carol"}, {"producer_byte_rate": None})])
    assert entity(user="carol") not in admin.describe_client_quotas(
        [("user", MATCH_SPECIFIED, None)])
