"""The cluster's client quotas (Kafka's ClientQuotaControlManager): AlterClientQuotas'
alterations checked as Kafka checks them and applied, each entity's quotas kept as {key:
value}. Plain values; ``ControllerState`` holds the map and puts it in the metadata image,
where the brokers' quota managers read it."""
from __future__ import annotations

from typing import Iterable

from protocols.errors import InvalidRequestError, KafkaError
from protocols.kafka.client_quotas import Entity, alteration_error, describe_entity

ClientQuotas = dict[Entity, dict[str, float]]


def alter(quotas: ClientQuotas, alterations: Iterable[tuple[Iterable, Iterable]],
          validate_only: bool = False
          ) -> tuple[ClientQuotas, list[tuple[Entity, KafkaError | None]]]:
    """(the quotas after, [(entity, error or None)] in the request's order): each
    alteration is (entity's (type, name) pairs, ops (key, value, remove)); an entity's ops
    apply together or not at all, as in Kafka's alterClientQuotas."""
    after = {e: dict(values) for e, values in quotas.items()}
    results: list[tuple[Entity, KafkaError | None]] = []
    seen: set[Entity] = set()
    for pairs, ops in alterations:
        pairs = tuple(tuple(p) for p in pairs)
        e: Entity = tuple(sorted(pairs))
        changes: dict[str, float | None] = {}
        error: KafkaError | None = None
        for key, value, remove in ops:
            if key in changes:
                error = InvalidRequestError(f"Duplicate quota key {key} not updating quota for "
                                            f"this entity {describe_entity(e)}")
            changes[key] = None if remove else float(value)
        if e in seen:
            error = InvalidRequestError(f"Ignoring duplicate entity {describe_entity(e)}")
        seen.add(e)
        # The types as given (sorting would hide a type given twice).
        error = error or alteration_error(pairs, changes)
        results.append((e, error))
        if error is not None or validate_only:
            continue
        values = after.setdefault(e, {})
        for key, value in changes.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        if not values:
            del after[e]
    return after, results


def to_stored(quotas: ClientQuotas) -> list:
    """As the snapshot and the image hold them: [[[type, name], ...], {key: value}]."""
    return [[[list(p) for p in e], dict(values)] for e, values in sorted(
        quotas.items(), key=lambda item: [(t, n or "") for t, n in item[0]])]


def from_stored(stored: Iterable) -> ClientQuotas:
    return {tuple((t, n) for t, n in e): dict(values) for e, values in stored}
