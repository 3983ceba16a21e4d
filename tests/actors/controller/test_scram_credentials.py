"""The cluster's SCRAM credentials (``actors.controller.scram_credentials``), checked as
Kafka's ScramControlManager checks AlterUserScramCredentials, and kept in the controller's
image and snapshot."""
import base64

from actors.controller.scram_credentials import alter, lookup
from actors.controller.state import ControllerState
from protocols.errors import (DuplicateResourceError, ResourceNotFoundError,
                              UnacceptableCredentialError, UnsupportedSaslMechanismError)
from protocols.kafka.scram import credential, salted_password

SHA256, SHA512 = 1, 2


def upsert(user, kind=SHA256, iterations=4096, password="pw", salt=b"salt"):
    mechanism = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(kind, "SCRAM-SHA-256")
    return (user, kind, iterations, salt, salted_password(mechanism, password, salt, 4096))


def errors(results):
    return {user: (type(e), str(e)) if e else None for user, e in results}


def test_upsert_keeps_keys_not_the_password_and_lookup_reads_them_back():
    after, results = alter({}, [], [upsert("alice", iterations=8192)])
    assert errors(results) == {"alice": None}
    salt, stored, server, iterations = after["alice"]["SCRAM-SHA-256"]
    expected = credential("SCRAM-SHA-256",
                          salted_password("SCRAM-SHA-256", "pw", b"salt", 4096), b"salt", 8192)
    assert (base64.b64decode(salt), base64.b64decode(stored), base64.b64decode(server),
            iterations) == (b"salt", expected.stored_key, expected.server_key, 8192)
    assert lookup(after, "alice", "SCRAM-SHA-256") == expected
    assert lookup(after, "alice", "SCRAM-SHA-512") is None and lookup(None, "x", "y") is None


def test_kafkas_refusals():
    start, _ = alter({}, [], [upsert("bob", SHA512)])
    after, results = alter(start, [("bob", SHA256), ("", SHA256), ("carol", 9)],
                           [upsert("dave", iterations=4095), upsert("erin", iterations=16385),
                            upsert("bob", SHA512)])
    assert errors(results) == {
        "bob": (ResourceNotFoundError,
                "Attempt to delete a user credential that does not exist"),
        "": (UnacceptableCredentialError, "Username must not be empty"),
        "carol": (UnsupportedSaslMechanismError, "Unknown SCRAM mechanism"),
        "dave": (UnacceptableCredentialError, "Too few iterations"),
        "erin": (UnacceptableCredentialError, "Too many iterations")}
    assert after == start          # nothing of a refused alteration is applied


def test_a_user_altered_twice_in_one_request_is_a_duplicate():
    start, _ = alter({}, [], [upsert("bob", SHA512)])
    after, results = alter(start, [("bob", SHA512)], [upsert("bob"), upsert("ann"),
                                                       upsert("ann", SHA512)])
    assert errors(results) == {
        "bob": (DuplicateResourceError, "A user credential cannot be altered twice in the "
                                        "same request"),
        "ann": (DuplicateResourceError, "A user credential cannot be altered twice in the "
                                        "same request")}
    assert after == start


def test_deleting_a_users_last_mechanism_forgets_the_user():
    start, _ = alter({}, [], [upsert("bob", SHA512)])
    after, results = alter(start, [("bob", SHA512)], [])
    assert errors(results) == {"bob": None} and after == {}


def test_credentials_are_in_the_image_and_survive_a_controller_failover():
    state = ControllerState(lambda: 0)
    msgs, results = state.alter_user_scram_credentials([], [upsert("alice")])
    assert errors(results) == {"alice": None}
    assert "alice" in state.metadata_image()["scram_credentials"]
    again = ControllerState.from_snapshot(state.to_snapshot(), lambda: 0)
    assert again.metadata_image()["scram_credentials"] == \
        state.metadata_image()["scram_credentials"]
    msgs, results = state.alter_user_scram_credentials([("nobody", SHA256)], [])
    assert msgs == []              # nothing changed: no update to send


def test_an_empty_or_oversized_salt_is_refused():
    _, results = alter({}, [], [upsert("a", salt=b""), upsert("b", salt=b"s" * 1025)])
    assert errors(results) == {
        "a": (UnacceptableCredentialError, "The salt and the salted password must not be "
                                           "empty"),
        "b": (UnacceptableCredentialError, "The salt must be at most 1024 bytes")}
