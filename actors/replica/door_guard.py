"""What a Ray door client (``actors.broker.ray_door``) may do with its produce, fetch and
ListOffsets requests: Kafka's checks for the same requests, partition by partition. Each
guard takes the request and the principal's ``authorize(operation, resource type, name)``
and gives back the part of the request that may go on (None: nothing) and how to put the
answer to it together with the refusals, in the request's order. Plain values: the replica
host and the broker call them."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from protocols.errors import KafkaError
from protocols.kafka.acl import CLUSTER_NAME, AclOperation, ResourceType
from protocols.messages import (FetchManyRequest, FetchManyResponse, FetchResult,
                                ProduceManyRequest, ProduceResult)

Authorize = Callable[[AclOperation, ResourceType, str], bool]


def _topic_denied() -> KafkaError:
    from protocols.errors import TopicAuthorizationFailedError
    return TopicAuthorizationFailedError("Topic authorization failed.")


def _split(items: Sequence[tuple], refusal: Callable[[str], KafkaError | None]
           ) -> tuple[list[tuple], dict[int, KafkaError]]:
    """``items`` (each naming its topic first) kept, and the refused ones' errors by index."""
    kept, refused = [], {}
    memo: dict[str, KafkaError | None] = {}
    for i, item in enumerate(items):
        topic = item[0]
        if topic not in memo:
            memo[topic] = refusal(topic)
        if memo[topic] is None:
            kept.append(item)
        else:
            refused[i] = memo[topic]
    return kept, refused


def _merge(count: int, answers: Sequence, refused: dict[int, object]) -> list:
    """``count`` answers in order: the refusals' at their indexes, ``answers`` between."""
    it = iter(answers)
    return [refused[i] if i in refused else next(it) for i in range(count)]


def guard_produce(request: ProduceManyRequest, authorize: Authorize
                  ) -> tuple[ProduceManyRequest | None, Callable[[list], list]]:
    """Produce: WRITE on each topic (TOPIC_AUTHORIZATION_FAILED), and a transactional
    producer's WRITE on its transactional id (every partition refused
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise), as Kafka's handleProduceRequest."""
    tid = request.transactional_id
    if tid is not None and not authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                         tid):
        from protocols.errors import TransactionalIdAuthorizationFailedError
        denied = TransactionalIdAuthorizationFailedError(
            "Transactional Id authorization failed.")
        kept, refused = [], dict.fromkeys(range(len(request.partitions)), denied)
    else:
        kept, refused = _split(request.partitions, lambda t: None if authorize(
            AclOperation.WRITE, ResourceType.TOPIC, t) else _topic_denied())
    errors = {i: (request.partitions[i][0], request.partitions[i][1], ProduceResult(error=e))
              for i, e in refused.items()}

    def merge(results: list) -> list:
        return _merge(len(request.partitions), results, errors)
    return (replace(request, partitions=tuple(kept)) if kept else None), merge


def guard_fetch(request: FetchManyRequest, authorize: Authorize
                ) -> tuple[FetchManyRequest | None, Callable[[FetchManyResponse | None],
                                                             FetchManyResponse]]:
    """Fetch: a consumer's, READ on each topic. Checked on the answer, so that it holds
    for the partitions an incremental fetch session (KIP-227) reads without naming them:
    a refused partition's records are not sent, its error is. A follower's fetch
    (replica id >= 0) needs CLUSTER_ACTION, as in Kafka (every partition refused
    otherwise: the request's, or any partition's, replica id); records come as bytes, never as file regions (those are for a broker on
    the host's node)."""
    follower = request.replica_id >= 0 or any(f.replica_id >= 0
                                              for _, _, f in request.partitions)
    if follower and not authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                  CLUSTER_NAME):
        def refuse_all(_: FetchManyResponse | None) -> FetchManyResponse:
            return FetchManyResponse(tuple(
                (t, p, FetchResult(error=_topic_denied(), fetch_offset=f.fetch_offset))
                for t, p, f in request.partitions))
        return None, refuse_all
    memo: dict[str, bool] = {}

    def readable(topic: str) -> bool:
        if topic not in memo:
            memo[topic] = authorize(AclOperation.READ, ResourceType.TOPIC, topic)
        return memo[topic]

    def check(response: FetchManyResponse | None) -> FetchManyResponse:
        assert response is not None
        return replace(response, results=tuple(
            (t, p, r) if readable(t) else
            (t, p, FetchResult(error=_topic_denied(), leader_epoch=r.leader_epoch,
                               fetch_offset=r.fetch_offset))
            for t, p, r in response.results))
    return replace(request, regions_on_node=""), check


def guard_list_offsets(requests: Sequence[tuple], authorize: Authorize
                       ) -> tuple[list[tuple], Callable[[list], list]]:
    """ListOffsets: DESCRIBE on each topic (the answers are each partition's, encoded by
    the caller: ``merge(answers, encode)``)."""
    kept, refused = _split(requests, lambda t: None if authorize(
        AclOperation.DESCRIBE, ResourceType.TOPIC, t) else _topic_denied())

    def merge(answers: list, encode: Callable[[object], bytes]) -> list:
        return _merge(len(requests), answers, {i: encode(e) for i, e in refused.items()})
    return kept, merge
