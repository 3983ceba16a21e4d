"""Client quotas' model (KIP-13 client ids, KIP-55 users, KIP-124 request time, KIP-546
the quota APIs), pure: an entity is (entity type, name) pairs, a name of None being the
type's ``<default>``; quota keys with Kafka's types; DescribeClientQuotas' filter as Kafka's
ClientQuotasImage.describe reads it; which quota applies to a (user, client id), and which
clients share its rate, as Kafka's DefaultQuotaCallback decides (quotaLimit,
quotaMetricTags)."""
from __future__ import annotations

from typing import Iterable, Mapping

from protocols.errors import InvalidRequestError, KafkaError, UnsupportedVersionError

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# Kafka's QuotaConfig: the keys a user / client-id entity takes, and an ip one, with types.
USER_AND_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long",
                        REQUEST_PERCENTAGE: "double", CONTROLLER_MUTATION_RATE: "double"}
IP_KEYS = {CONNECTION_CREATION_RATE: "int"}
LIMITS = {"long": 2 ** 63 - 1, "int": 2 ** 31 - 1}

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = tuple[tuple[str, "str | None"], ...]   # sorted by entity type
Quotas = Mapping[Entity, Mapping[str, float]]


def entity(**names: str | None) -> Entity:
    """``entity(user="alice", client_id=None)``: alice's quota for every client id
    (``<default>``)."""
    return tuple(sorted((k.replace("_", "-"), v) for k, v in names.items()))


def describe_entity(e: Entity) -> str:
    """As Kafka writes a ClientQuotaEntity in its messages."""
    return "ClientQuotaEntity(entries=" + "{" + ", ".join(
        f"{t}={n}" for t, n in e) + "})"


def alteration_error(e: Entity, values: Mapping[str, float | None]) -> KafkaError | None:
    """Why AlterClientQuotas refuses these values for entity ``e`` (None: it takes them), as
    Kafka's ClientQuotaControlManager checks them. A value of None removes the key."""
    if not e:
        return InvalidRequestError("Invalid empty client quota entity")
    types = [t for t, _ in e]
    if len(set(types)) != len(types):
        duplicate = next(t for t in types if types.count(t) > 1)
        return InvalidRequestError(f"Invalid client quota entity, duplicate entity entry "
                                   f"{duplicate}")
    for t in types:
        if t not in ENTITY_TYPES:
            return InvalidRequestError(f"Unhandled client quota entity type: {t}")
    if IP in types:
        if len(types) > 1:
            return InvalidRequestError("Invalid quota entity combination, IP entity should"
                                       "not be combined with User or ClientId")
        keys = IP_KEYS
    else:
        keys = USER_AND_CLIENT_KEYS
    for key, value in values.items():
        if value is None:
            continue
        kind = keys.get(key)
        if kind is None:
            return InvalidRequestError(f"Invalid configuration key {key}")
        if value <= 0.0:
            return InvalidRequestError(f"Quota {key} must be greater than 0")
        if kind in LIMITS:
            if value > LIMITS[kind]:
                article = "an" if kind == "int" else "a"
                return InvalidRequestError(f"Proposed value for {key} is too large for "
                                           f"{article} {kind.upper()}.")
            if abs(value % 1.0) > 1e-6:
                return InvalidRequestError(f"{key} cannot be a fractional value.")
    return None


def filter_error(components: Iterable[tuple[str, int, str | None]]) -> KafkaError | None:
    """A DescribeClientQuotas filter's error, as Kafka's ClientQuotasImage.describe checks
    it: (entity type, match type, match) per component."""
    seen: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            return InvalidRequestError("Invalid empty entity type.")
        if entity_type in seen:
            return InvalidRequestError(f"Entity type {entity_type} cannot appear more than "
                                       "once in the filter.")
        if entity_type not in ENTITY_TYPES:
            return UnsupportedVersionError(f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT and match is None:
            return InvalidRequestError("Request specified MATCH_TYPE_EXACT, but set match "
                                       "string to null.")
        if match_type == MATCH_DEFAULT and match is not None:
            return InvalidRequestError("Request specified MATCH_TYPE_DEFAULT, but also "
                                       "specified a match string.")
        if match_type == MATCH_SPECIFIED and match is not None:
            return InvalidRequestError("Request specified MATCH_TYPE_SPECIFIED, but also "
                                       "specified a match string.")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return InvalidRequestError(f"Unknown match type {match_type}")
        seen.add(entity_type)
    if IP in seen and len(seen) > 1:
        return InvalidRequestError("Invalid entity filter component combination. IP filter "
                                   "component should not be used with user or clientId "
                                   "filter component.")
    return None


def matching(quotas: Quotas, components: Iterable[tuple[str, int, str | None]],
             strict: bool) -> list[tuple[Entity, Mapping[str, float]]]:
    """The entities a (valid) filter selects, with their quotas (ClientQuotasImage's
    ``matches``): each exact or default component names the entity's name for that type,
    each specified one only that the type is there; ``strict``: no other types."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for entity_type, match_type, match in components:
        if match_type == MATCH_SPECIFIED:
            typed.add(entity_type)
        else:
            exact[entity_type] = None if match_type == MATCH_DEFAULT else match
    out = []
    for e, values in quotas.items():
        names = dict(e)
        if strict and len(names) != len(exact) + len(typed):
            continue
        if all(t in names and names[t] == n for t, n in exact.items()) and \
                all(t in names for t in typed):
            out.append((e, values))
    return out


def quota_bound(quotas: Quotas, key: str, user: str, client_id: str
                ) -> tuple[float | None, tuple[str, str]]:
    """(the quota ``key`` of a client, or None; the (user, client id) its rate is kept
    under) as Kafka's DefaultQuotaCallback: the first entity in the precedence order that
    has a ``key`` quota decides both (1 user and client id, 2 user and default client, 3
    user, 4 default user and client id, 5 default user and default client, 6 default user,
    7 client id, 8 default client). ``user``: the principal's name ("" for none)."""
    def has(**names: str | None) -> bool:
        return key in quotas.get(entity(**names), {})

    def value(**names: str | None) -> float:
        return quotas[entity(**names)][key]
    # The metric tags (which clients share one rate), as quotaMetricTags picks them.
    if has(user=user, client_id=client_id) or has(user=user, client_id=None):
        tags = (user, client_id)
    elif has(user=user):
        tags = (user, "")
    elif has(user=None, client_id=client_id) or has(user=None, client_id=None):
        tags = (user, client_id)
    elif has(user=None):
        tags = (user, "")
    else:
        tags = ("", client_id)
    # The bound, as quotaLimit finds it for those tags.
    tag_user, tag_client = tags
    for names in (((dict(user=tag_user, client_id=tag_client),
                    dict(user=tag_user, client_id=None),
                    dict(user=None, client_id=tag_client),
                    dict(user=None, client_id=None)) if tag_user and tag_client else
                   (dict(user=tag_user), dict(user=None)) if tag_user else
                   (dict(client_id=tag_client), dict(client_id=None)) if tag_client else ())):
        if has(**names):
            return value(**names), tags
    return None, tags
