"""The cluster's SCRAM credentials (Kafka's ScramControlManager): AlterUserScramCredentials'
deletions and upsertions checked as Kafka checks them, each user's credential per mechanism
kept as salt, StoredKey, ServerKey and iterations (the salted password the client sent is
turned into the two keys here, and dropped). Plain values; ``ControllerState`` holds the
map and puts it in the metadata image, where the brokers' SASL listeners read it."""
from __future__ import annotations

import base64
from typing import Any, Iterable

from protocols.errors import (DuplicateResourceError, KafkaError, ResourceNotFoundError,
                              UnacceptableCredentialError, UnsupportedSaslMechanismError)
from protocols.kafka.scram import MAX_ITERATIONS, MECHANISMS, credential

# Kafka's ScramMechanism types on the wire.
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
TYPES = {name: code for code, name in MECHANISM_TYPES.items()}

# Every credential travels in every metadata update: a salt is kept small (Kafka's admin
# client draws 32 bytes, the RFC asks for 16 or more).
MAX_SALT_BYTES = 1024

# user -> mechanism name -> [salt, stored key, server key (base64), iterations]
Credentials = dict[str, dict[str, list]]


def _check(name: str, mechanism_type: int) -> KafkaError | None:
    if not name:
        return UnacceptableCredentialError("Username must not be empty")
    if mechanism_type not in MECHANISM_TYPES:
        return UnsupportedSaslMechanismError("Unknown SCRAM mechanism")
    return None


def alter(credentials: Credentials, deletions: Iterable[tuple[str, int]],
          upsertions: Iterable[tuple[str, int, int, bytes, bytes]]
          ) -> tuple[Credentials, list[tuple[str, KafkaError | None]]]:
    """(the credentials after, [(user, error or None), ...]): deletions (user, mechanism
    type) and upsertions (user, mechanism type, iterations, salt, salted password), each
    user at most once per request, as Kafka's ScramControlManager.alterCredentials."""
    errors: dict[str, KafkaError] = {}
    to_delete: dict[str, tuple[str, int]] = {}
    to_upsert: dict[str, tuple] = {}
    twice = "A user credential cannot be altered twice in the same request"
    for name, kind in deletions:
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None:
            errors[name] = DuplicateResourceError(twice)
            continue
        error = _check(name, kind) or (
            None if MECHANISM_TYPES[kind] in credentials.get(name, {}) else
            ResourceNotFoundError("Attempt to delete a user credential that does not exist"))
        if error is not None:
            errors[name] = error
        else:
            to_delete[name] = (name, kind)
    for upsertion in upsertions:
        name, kind, iterations = upsertion[0], upsertion[1], upsertion[2]
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
            errors[name] = DuplicateResourceError(twice)
            continue
        error = _check(name, kind)
        if error is None and iterations < MECHANISMS[MECHANISM_TYPES[kind]][1]:
            error = UnacceptableCredentialError("Too few iterations")
        elif error is None and iterations > MAX_ITERATIONS:
            error = UnacceptableCredentialError("Too many iterations")
        elif error is None and not (upsertion[3] and upsertion[4]):
            error = UnacceptableCredentialError("The salt and the salted password must not "
                                                "be empty")
        elif error is None and len(upsertion[3]) > MAX_SALT_BYTES:
            error = UnacceptableCredentialError(f"The salt must be at most {MAX_SALT_BYTES} "
                                                "bytes")
        if error is not None:
            errors[name] = error
        else:
            to_upsert[name] = upsertion
    after = {user: dict(mechs) for user, mechs in credentials.items()}
    results: list[tuple[str, KafkaError | None]] = []
    for name, kind in to_delete.values():
        after[name].pop(MECHANISM_TYPES[kind], None)
        if not after[name]:
            del after[name]
        results.append((name, None))
    for name, kind, iterations, salt, salted in to_upsert.values():
        c = credential(MECHANISM_TYPES[kind], bytes(salted), bytes(salt), iterations)
        after.setdefault(name, {})[MECHANISM_TYPES[kind]] = [
            _b64(c.salt), _b64(c.stored_key), _b64(c.server_key), c.iterations]
        results.append((name, None))
    results.extend(errors.items())
    return after, results


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def lookup(credentials: Any, user: str, mechanism: str):
    """A user's ScramCredential for ``mechanism`` from the image's map, or None."""
    from protocols.kafka.scram import ScramCredential
    entry = (credentials or {}).get(user, {}).get(mechanism)
    if entry is None:
        return None
    salt, stored, server, iterations = entry
    return ScramCredential(base64.b64decode(salt), base64.b64decode(stored),
                           base64.b64decode(server), int(iterations))


def iterations_of(credentials: Credentials | None) -> dict[str, dict[str, int]]:
    """What DescribeUserScramCredentials tells: each user's mechanisms and iterations (never
    the salt or the keys)."""
    return {user: {mechanism: int(entry[3]) for mechanism, entry in by_mechanism.items()}
            for user, by_mechanism in (credentials or {}).items()}
