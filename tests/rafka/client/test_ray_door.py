"""The credentials rafka's own clients sign in with at the Ray door
(``rafka.client.ray_door.credentials``): Kafka's ``sasl.jaas.config`` or librdkafka's
``sasl.username`` / ``sasl.password``, with ``sasl.mechanism``."""
import pytest

from protocols.config import Password
from protocols.errors import InvalidConfigError
from rafka.client.ray_door import Credentials, credentials

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="alice" password="alice-secret";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="bob" password="b=ob,secret";')


@pytest.mark.parametrize("config, expected", [
    ({}, None),
    (None, None),
    ({"acks": "all"}, None),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS},
     Credentials("PLAIN", "alice", "alice-secret")),
    ({"sasl.mechanism": "scram-sha-512", "sasl.jaas.config": Password(SCRAM_JAAS)},
     Credentials("SCRAM-SHA-512", "bob", "b=ob,secret")),
    ({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "c"},
     Credentials("SCRAM-SHA-256", "carol", "c")),
    # Kafka's clients take either login module's username and password for either mechanism.
    ({"sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": PLAIN_JAAS},
     Credentials("SCRAM-SHA-256", "alice", "alice-secret")),
])
def test_credentials_in_either_of_kafkas_forms(config, expected):
    assert credentials(config) == expected


def test_the_password_is_not_in_the_credentials_repr():
    assert "alice-secret" not in repr(credentials(
        {"sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS}))


@pytest.mark.parametrize("config, error", [
    ({"sasl.jaas.config": PLAIN_JAAS}, "sasl.mechanism None"),
    ({"sasl.mechanism": "GSSAPI", "sasl.jaas.config": PLAIN_JAAS}, "GSSAPI"),
    ({"sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"},
     "Krb5LoginModule; rafka's clients sign in with"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": "PlainLoginModule required"},
     "sasl.jaas.config: .*semi-colon"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "alice"}, "username and a password"),
])
def test_settings_that_name_no_usable_user_are_refused(config, error):
    with pytest.raises(InvalidConfigError, match=error):
        credentials(config)
