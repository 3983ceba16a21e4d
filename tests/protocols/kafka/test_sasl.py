"""The broker's SASL exchange (``protocols.kafka.sasl``) and ``sasl.jaas.config`` values
(``protocols.kafka.jaas``): Kafka's PlainSaslServerTest case by case, then the exchange's
order (SaslServerAuthenticator's states) and JaasConfig's syntax."""
import pytest

from protocols.errors import (IllegalSaslStateError, SaslAuthenticationError,
                              UnsupportedSaslMechanismError)
from protocols.kafka.jaas import JaasConfigError, LoginModule, parse_jaas_config
from protocols.kafka.sasl import SaslConfig, SaslServer

USER_A, PASSWORD_A, USER_B, PASSWORD_B = "userA", "passwordA", "userB", "passwordB"


def plain_server() -> SaslServer:
    server = SaslServer(SaslConfig(("PLAIN",), {USER_A: PASSWORD_A, USER_B: PASSWORD_B}))
    assert server.handshake("PLAIN").error is None
    return server


def message(authzid: str, user: str, password: str) -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


def failure(token: bytes) -> str:
    outcome = plain_server().authenticate(token)
    assert isinstance(outcome.error, SaslAuthenticationError) and outcome.close
    return str(outcome.error)


def test_no_authorization_id_specified():
    server = plain_server()
    outcome = server.authenticate(message("", USER_A, PASSWORD_A))
    assert outcome.error is None and outcome.auth_bytes == b"" and not outcome.close
    assert server.complete and server.principal == "User:userA"


def test_authorization_id_equals_authentication_id():
    assert plain_server().authenticate(message(USER_A, USER_A, PASSWORD_A)).error is None


def test_authorization_id_not_equals_authentication_id():
    assert failure(message(USER_B, USER_A, PASSWORD_A)) == \
        "Authentication failed: Client requested an authorization id that is different " \
        "from username"


def test_empty_tokens():
    assert failure(message("", "", "")) == "Authentication failed: username not specified"
    assert failure(message("", "", "p")) == "Authentication failed: username not specified"
    assert failure(message("", "u", "")) == "Authentication failed: password not specified"
    assert failure(message("a", "", "")) == "Authentication failed: username not specified"
    assert failure(message("a", "", "p")) == "Authentication failed: username not specified"
    assert failure(message("a", "u", "")) == "Authentication failed: password not specified"
    assert failure(b"a\0u\0p\0") == "Invalid SASL/PLAIN response: expected 3 tokens, got 4"
    assert failure(b"\0u") == "Invalid SASL/PLAIN response: expected 3 tokens, got 2"


def test_a_wrong_password_or_an_unknown_user():
    for token in (message("", USER_A, PASSWORD_B), message("", "nobody", PASSWORD_A)):
        assert failure(token) == "Authentication failed: Invalid username or password"


def test_the_exchange_goes_handshake_then_authenticate_once():
    fresh = SaslServer(SaslConfig(("PLAIN",), {USER_A: PASSWORD_A}))
    early = fresh.authenticate(message("", USER_A, PASSWORD_A))
    assert isinstance(early.error, IllegalSaslStateError) and early.close
    unknown = SaslServer(SaslConfig(("PLAIN",), {})).handshake("SCRAM-SHA-256")
    assert isinstance(unknown.error, UnsupportedSaslMechanismError) and unknown.close
    assert unknown.mechanisms == ("PLAIN",)      # the client is told what is enabled
    server = plain_server()
    again = server.handshake("PLAIN")
    assert isinstance(again.error, IllegalSaslStateError) and again.close


def test_jaas_config_as_kafka_writes_it():
    [module] = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required\n'
        '  username="admin" password="admin-secret"\n'
        '  user_admin="admin-secret" user_alice="al\\"ice;=s p" /* a comment */ debug=true;')
    assert module == LoginModule("org.apache.kafka.common.security.plain.PlainLoginModule",
                                 "required", {"username": "admin", "password": "admin-secret",
                                              "user_admin": "admin-secret",
                                              "user_alice": 'al"ice;=s p', "debug": "true"})
    two = parse_jaas_config("a.B required; c.D optional x=\"1\";")
    assert [m.name for m in two] == ["a.B", "c.D"] and two[1].options == {"x": "1"}


def test_jaas_config_read_as_javas_stream_tokenizer_reads_it():
    """What Kafka's JaasConfig makes of quotes, escapes and comments (checked against Java's
    StreamTokenizer configured as Kafka configures it)."""
    [module] = parse_jaas_config(
        "x.Y REQUIRED user_alice='alice-secret' \"user_bob@example.com\"=\"b\\tc\\101\" "
        "k=abc//a comment to the end of the line\n k2=v2 /* another */;")
    assert module.flag == "required"
    assert module.options == {"user_alice": "alice-secret", "user_bob@example.com": "b\tcA",
                              "k": "abc", "k2": "v2"}
    assert "alice-secret" not in repr(module)


@pytest.mark.parametrize("text, error", [
    ("", "Login module not specified in JAAS config"),
    ("a.B", "Login module control flag not specified"),
    ("a.B mandatory;", "Invalid login module control flag 'mandatory'"),
    ("a.B required user_x=;", "Value not specified for key 'user_x'"),
    ("a.B required user_x=123;", "Value not specified for key 'user_x'"),
    ('a.B required user_x="y"', "not terminated by semi-colon"),
    ("a.B required user_x=a@b;", "Value not specified for key 'null'"),
])
def test_jaas_config_kafka_would_refuse(text, error):
    with pytest.raises(JaasConfigError, match=error):
        parse_jaas_config(text)
