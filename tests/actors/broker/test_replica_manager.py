"""The broker's ReplicaManager (``actors.broker.replica_manager``) without Ray, over hosts that
answer as ``ReplicaHostActor`` does: LeaderAndIsr opens the replicas not open yet on the host
the placement rule names and gives each host its share in one call; StopReplica with delete
forgets the partition's checkpoints and directory."""
from __future__ import annotations

import asyncio

from actors.broker.config import ClusterConfig
from actors.broker.replica_manager import ReplicaManager
from actors.broker.state import BrokerState
from actors.replica.placement import host_index
from protocols.errors import NotLeaderOrFollowerError
from protocols.messages import LeaderAndIsr, StopReplica
from protocols.topics import TopicPartition, partition_dir_name
from protocols.wire import decode, encode


class Call:
    """A fake actor method: ``remote(...)`` records the call and answers ``answer(...)``."""

    def __init__(self, calls: list, name: str, answer=lambda *args: None):
        self.calls, self.name, self.answer = calls, name, answer

    def remote(self, *args):
        self.calls.append((self.name, args))

        async def reply():
            return self.answer(*args)
        return reply()


class FakeHost:
    def __init__(self, refuse: set[tuple[str, int]] = frozenset()):
        self.calls: list = []
        self.open_many = Call(self.calls, "open_many")
        self.become_many = Call(self.calls, "become_many", lambda share, epoch: encode([
            NotLeaderOrFollowerError("refused") if (m.topic, m.partition) in refuse else None
            for m in decode(share)]))
        self.stop_many = Call(self.calls, "stop_many", lambda stops: [
            (t, p, (5, 4, 0)) for t, p, _ in stops])


def manager(tmp_path, hosts: list[FakeHost]) -> ReplicaManager:
    def never(*args):
        raise AssertionError(f"not expected here: {args}")
    m = ReplicaManager(0, "ns", ClusterConfig.parse({}), tmp_path, BrokerState(0), 1,
                       lambda: False, never, never, never)
    m.hosts = list(hosts)
    return m


def leader(topic: str, partition: int) -> LeaderAndIsr:
    return LeaderAndIsr(1, 0, topic, partition, 0, 1, 1, (0,), (0,))


def test_leader_and_isr_opens_replicas_by_placement_and_each_host_gets_one_call(tmp_path):
    hosts = [FakeHost(refuse={("t", 1)}), FakeHost(refuse={("t", 1)})]
    m = manager(tmp_path, hosts)
    messages = [leader("t", p) for p in range(4)]
    errors, applied = asyncio.run(m.become(messages))
    assert [type(e) for e in errors] == [NotLeaderOrFollowerError]
    assert [(a.topic, a.partition) for a in applied] == [("t", p) for p in (0, 2, 3)]
    for p in range(4):
        assert m.host_of("t", p) is hosts[host_index("t", p, 2)]
    for host in hosts:   # each host with replicas here: one open, one LeaderAndIsr share
        assert [name for name, _ in host.calls] in ([], ["open_many", "become_many"])
    # Open already: the next LeaderAndIsr only goes to the hosts.
    m.state.broker_epoch = 3
    asyncio.run(m.become(messages))
    for host in hosts:
        assert [name for name, _ in host.calls] in (
            [], ["open_many", "become_many", "become_many"])
    # Each share names what the host's fetches are to name (KIP-903): nothing before the
    # controller named this broker's registration, then the registration, this host's first
    # start.
    assert {args[1] for host in hosts for name, args in host.calls
            if name == "become_many"} == {-1, 3 << 16}


def test_stop_replica_with_delete_forgets_the_partitions_checkpoints_and_directory(tmp_path):
    host = FakeHost()
    m = manager(tmp_path, [host])
    asyncio.run(m.become([leader("t", 0), leader("t", 1)]))
    (tmp_path / partition_dir_name("t", 0)).mkdir()
    asyncio.run(m.stop_replicas([StopReplica(1, 0, "t", 0, True),
                                 StopReplica(1, 0, "t", 1, False)]))
    assert m.host_of("t", 0) is None and m.host_of("t", 1) is None
    assert not (tmp_path / partition_dir_name("t", 0)).exists()
    # The kept replica's checkpoints are what its host answered on stopping.
    assert m.checkpoints["hw"] == {TopicPartition("t", 1): 5}
    assert m.checkpoints["recovery"] == {TopicPartition("t", 1): 4}
    assert ReplicaManager(0, "ns", ClusterConfig.parse({}), tmp_path, BrokerState(0), 1,
                          lambda: False, None, None, None).checkpoints["hw"] == \
        {TopicPartition("t", 1): 5}
