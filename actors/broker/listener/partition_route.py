"""Where the partitions a Kafka request names go on this broker, and the fan-out to the
replica hosts holding their leaders: shared by the listener's request handlers
(``kafka_apis``, ``fetch_apis``)."""
from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable, Mapping

from actors.broker.listener.metadata_apis import kafka_uuid_text
from protocols.errors import (KafkaError, NotLeaderOrFollowerError, UnknownTopicIdError,
                              UnknownTopicOrPartitionError)


class PartitionRoute:
    """Where a partition named in a request goes: this broker's host holding it as leader,
    or the error to answer with (and the leader to name, KIP-951)."""

    def __init__(self, image: Mapping[str, Any], host_of: Callable[[str, int], Any],
                 broker_id: int):
        self.image = image
        self.host_of = host_of
        self.broker_id = broker_id
        self.ids = {v: k for k, v in image.get("topic_ids", {}).items()}

    def name(self, topic: Any) -> str | None:
        """A topic named by name or (v13+) by id -> its name, None if unknown."""
        if isinstance(topic, uuid.UUID):
            return self.ids.get(kafka_uuid_text(topic))
        return topic

    def unknown(self, topic: Any) -> KafkaError:
        if isinstance(topic, uuid.UUID):
            return UnknownTopicIdError(f"Unknown topic id {topic}")
        return UnknownTopicOrPartitionError(f"This server does not host this "
                                            f"topic-partition: {topic}")

    def leader(self, name: str, partition: int) -> tuple[int, int] | None:
        st = self.image.get("topics", {}).get(name, {}).get(partition)
        return None if st is None else (st["leader"], st["leader_epoch"])

    def split(self, topics, partitions_of: str, index_of: str, on_error, item,
              refused: Callable[[str | None], KafkaError | None] | None = None
              ) -> tuple[list, dict, dict]:
        """A request's topics -> (their (topic, partition) keys in order, the answers of the
        partitions that go nowhere (``on_error(error, route, name, partition)``), and per
        host [(key, name, item(partition data))]). ``refused(name)``: the error of a topic
        the request may not touch (the authorizer's), asked before where it is."""
        order, answers, by_host = [], {}, {}
        for topic_data in topics:
            topic = (getattr(topic_data, "name", None) or getattr(topic_data, "topic", None)
                     or getattr(topic_data, "topic_id", None))
            name = self.name(topic)
            denied = refused(name) if refused is not None else None
            for part in getattr(topic_data, partitions_of):
                index = getattr(part, index_of)
                key = (topic, index)
                order.append(key)
                host, error = (None, denied) if denied is not None else self.host(name, index)
                if host is None:
                    answers[key] = on_error(error or self.unknown(topic), self, name, index)
                else:
                    by_host.setdefault(host, []).append((key, name, item(part)))
        return order, answers, by_host

    def with_leader(self, answer: dict, error: KafkaError, name: str | None,
                    partition: int) -> dict:
        """KIP-951: a NOT_LEADER_OR_FOLLOWER answer names the current leader."""
        if isinstance(error, NotLeaderOrFollowerError) and name is not None:
            leader = self.leader(name, partition)
            if leader is not None:
                answer["current_leader"] = {"leader_id": leader[0], "leader_epoch": leader[1]}
        return answer

    def host(self, name: str | None, partition: int) -> tuple[Any, KafkaError | None]:
        if name is None or self.leader(name, partition) is None:
            return None, None
        leader, _ = self.leader(name, partition)
        host = self.host_of(name, partition)
        if leader != self.broker_id or host is None:
            return None, NotLeaderOrFollowerError(
                f"Broker {self.broker_id} is not the leader of {name}-{partition}")
        return host, None


def by_topic(order: list, answers: dict) -> list:
    """[(topic, [answer of each of its partitions, in request order])]."""
    topics: dict[Any, list] = {}
    for key in order:
        topics.setdefault(key[0], []).append(answers[key])
    return list(topics.items())


def leaders_named(answers: dict) -> list[int]:
    return [a["current_leader"]["leader_id"] for a in answers.values()
            if "current_leader" in a and a["current_leader"]["leader_id"] >= 0]


async def gather_hosts(by_host: Mapping[Any, list], call) -> list:
    """``call(host, parts)`` for every host at once: [(host, parts, answer or exception)]."""
    hosts = list(by_host)
    answers = await asyncio.gather(*[call(h, by_host[h]) for h in hosts],
                                   return_exceptions=True)
    return [(h, by_host[h], a) for h, a in zip(hosts, answers)]
