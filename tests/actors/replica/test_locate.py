"""LeaderHostLocator: a host's followers of a new topic's partitions find their leaders'
hosts with one call per broker, not one Ray lookup and one call each (creating 3,334
partitions at RF=3 gave each host 2,222 followers to place at once)."""
from __future__ import annotations

import asyncio
import uuid

import pytest
import ray

from actors.names import broker_name
from actors.replica.locate import LeaderHostLocator
from protocols.errors import UnknownTopicOrPartitionError

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
class Host:
    def name(self) -> str:
        return "host"


@ray.remote(num_cpus=0)
class Broker:
    """A broker's answer to ``replica_hosts``: its host for the partitions it holds (even
    ones), None for the others; every call recorded."""

    def __init__(self, host):
        self.host = host
        self.calls: list[list] = []

    def replica_hosts(self, tps: list) -> list:
        self.calls.append(list(tps))
        return [self.host if p % 2 == 0 else None for _, p in tps]

    def recorded(self) -> list:
        return self.calls


def test_many_followers_locate_their_leaders_in_one_call_per_broker(ray_session):
    namespace = f"locate-{uuid.uuid4().hex[:8]}"
    host = Host.options(namespace=namespace).remote()
    broker = Broker.options(name=broker_name(1), namespace=namespace).remote(host)
    ray.get(broker.recorded.remote())

    async def locate_all():
        locator = LeaderHostLocator(namespace)
        answers = await asyncio.gather(*[locator.locate("t", p, 1) for p in range(1000)],
                                       locator.locate("t", 0, 2),   # no such broker
                                       return_exceptions=True)
        again = await locator.locate("t", 2, 1)   # the broker's handle kept: one more call
        return answers, again

    answers, again = asyncio.run(locate_all())
    found = answers[:1000:2]
    assert all(h.broker_id == 1 and h.topic == "t" for h in found)
    assert [h.partition for h in found] == list(range(0, 1000, 2))
    assert ray.get(found[0].host.name.remote()) == "host"
    assert all(isinstance(e, UnknownTopicOrPartitionError) for e in answers[1:1000:2])
    assert isinstance(answers[1000], UnknownTopicOrPartitionError)
    assert again.partition == 2
    calls = ray.get(broker.recorded.remote())
    assert [len(c) for c in calls] == [1000, 1]
    ray.kill(broker)
    ray.kill(host)


def _dead(actor) -> None:
    """Wait until calls to ``actor`` fail (ray.kill returns before the actor is gone)."""
    import time
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(actor.recorded.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError("the killed broker still answers after 30 s")


def _named_again(host, namespace: str):
    """A broker started again under the name (free once Ray has buried the old one)."""
    import time
    deadline = time.monotonic() + 30
    while True:
        try:
            broker = Broker.options(name=broker_name(1), namespace=namespace).remote(host)
            ray.get(broker.recorded.remote())
            return broker
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_broker_that_died_is_looked_up_afresh(ray_session):
    namespace = f"locate-{uuid.uuid4().hex[:8]}"
    host = Host.options(namespace=namespace).remote()
    first = Broker.options(name=broker_name(1), namespace=namespace).remote(host)
    ray.get(first.recorded.remote())
    locator = LeaderHostLocator(namespace)

    async def locate():
        return await locator.locate("t", 0, 1)

    assert asyncio.run(locate()).partition == 0
    ray.kill(first)
    _dead(first)
    with pytest.raises(UnknownTopicOrPartitionError):
        asyncio.run(locate())            # its old handle fails: absent, handle dropped
    second = _named_again(host, namespace)
    assert asyncio.run(locate()).partition == 0
    assert ray.get(second.recorded.remote()) == [[("t", 0)]]
    ray.kill(second)
    ray.kill(host)
