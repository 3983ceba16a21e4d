"""One fetcher per (follower host, leader host) pair (docs/architecture.md, "Replication
between hosts"): Kafka's ReplicaFetcherThread and the leader's multi-partition fetch with one
DelayedFetch, pure.

Two hosts hold three partitions each (leaders on host L, followers on host F, real log
files); the requests the fetcher builds are answered by ``fetch_many`` and
``offsets_for_epochs`` as the leader host answers them.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from actors.replica.fetch_many import fetch_many, offsets_for_leader_epochs
from actors.replica.fetcher import ReplicaFetcher
from actors.replica.partition import PartitionReplica, Purgatories, ReplicaConfig
from actors.timer.system_timer import SystemTimer
from protocols.errors import NotLeaderOrFollowerError
from protocols.messages import (FetchManyRequest, FetchManyResponse,
                                OffsetsForLeaderEpochRequest)
from protocols.records import Record, encode_batch
from storage import Log
from tests.clock import ManualClock

LEADER, FOLLOWER = 1, 2
PARTITIONS = [("a", 0), ("a", 1), ("b", 0)]


def msg(value: str) -> bytes:
    return encode_batch([Record(None, value.encode(), 1_000)])


class Host:
    def __init__(self, root: Path, broker_id: int, clock: ManualClock, timer: SystemTimer):
        self.root, self.broker_id, self.clock = root, broker_id, clock
        self.purgatories = Purgatories.create(timer, broker_id)
        self.cores: dict[tuple[str, int], PartitionReplica] = {}
        self.sessions = None  # a FetchSessionCache to serve fetch sessions (KIP-227)

    def open(self, topic: str, partition: int) -> PartitionReplica:
        log = Log.open(self.root / f"broker-{self.broker_id}" / f"{topic}-{partition}",
                       {"min.insync.replicas": 2}, clock=self.clock)
        core = PartitionReplica(topic, partition, self.broker_id, log, clock=self.clock,
                                config=ReplicaConfig(), purgatories=self.purgatories)
        self.cores[(topic, partition)] = core
        return core

    def answer_fetch(self, request: FetchManyRequest) -> list[FetchManyResponse]:
        answers: list[FetchManyResponse] = []
        fetch_many(self.cores, request, self.purgatories.fetch, self.broker_id, answers.append,
                   self.sessions)
        return answers

    def answer_epochs(self, request: OffsetsForLeaderEpochRequest) -> list:
        return offsets_for_leader_epochs(self.cores, request, self.broker_id)


def make_hosts(root: Path, partitions, sessions=None):
    """A leader host and a follower host sharing ``partitions`` (all led on the first), and
    the follower host's fetcher for them. ``sessions(clock)``: the leader's session cache."""
    clock = ManualClock(1_700_000_000_000)
    timer = SystemTimer(clock)
    leader_host, follower_host = (Host(root, LEADER, clock, timer),
                                  Host(root, FOLLOWER, clock, timer))
    if sessions is not None:
        leader_host.sessions = sessions(clock)
    fetcher = ReplicaFetcher(FOLLOWER, ReplicaConfig(replica_fetch_wait_max_ms=500), clock)
    for topic, partition in partitions:
        leader_host.open(topic, partition).become_leader(0, 0, [LEADER, FOLLOWER],
                                                         [LEADER, FOLLOWER])
        follower = follower_host.open(topic, partition)
        follower.become_follower(LEADER, 0, 0, [LEADER, FOLLOWER])
        fetcher.add_partition(follower)
    return clock, timer, leader_host, follower_host, fetcher


@pytest.fixture
def hosts(tmp_path):
    return make_hosts(tmp_path, PARTITIONS)


def round_trip(fetcher: ReplicaFetcher, leader_host: Host, timer=None, clock=None):
    request = fetcher.next_request()
    if isinstance(request, OffsetsForLeaderEpochRequest):
        fetcher.on_epoch_end_offsets(request, leader_host.answer_epochs(request))
        return request
    answers = leader_host.answer_fetch(request)
    if not answers and timer is not None:             # parked: let max_wait run out
        clock.advance(request.max_wait_ms)
        timer.advance_clock()
    assert len(answers) == 1, "a fetch is answered exactly once"
    fetcher.on_fetch_response(answers[0])
    return request


def test_truncation_first_then_one_request_for_every_shared_partition(hosts):
    clock, timer, leader_host, follower_host, fetcher = hosts
    first = fetcher.next_request()
    assert isinstance(first, OffsetsForLeaderEpochRequest)
    assert sorted((t, p) for t, p, *_ in first.partitions) == sorted(PARTITIONS)
    round_trip(fetcher, leader_host)
    second = fetcher.next_request()
    assert isinstance(second, FetchManyRequest) and second.replica_id == FOLLOWER
    assert sorted((t, p) for t, p, _ in second.partitions) == sorted(PARTITIONS)


def test_data_on_any_partition_answers_the_parked_request_and_moves_each_hw(hosts):
    clock, timer, leader_host, follower_host, fetcher = hosts
    round_trip(fetcher, leader_host)                   # truncation
    request = fetcher.next_request()
    answers = leader_host.answer_fetch(request)
    assert answers == []                               # nothing anywhere: it waits, once
    done = []
    leader_host.cores[("b", 0)].produce(msg("x"), acks=-1, timeout_ms=5000,
                                        on_done=done.append)
    assert len(answers) == 1                           # the append on b-0 answered it
    by_tp = {(t, p): r for t, p, r in answers[0].results}
    assert by_tp[("b", 0)].records and not by_tp[("a", 0)].records
    fetcher.on_fetch_response(answers[0])
    assert follower_host.cores[("b", 0)].log_end_offset == 1
    round_trip(fetcher, leader_host, timer, clock)     # the follower's position reaches HW
    assert leader_host.cores[("b", 0)].high_watermark == 1
    assert [r.error for r in done] == [None]           # acks=all answered
    assert all(leader_host.cores[tp].high_watermark == 0 for tp in PARTITIONS[:2])


def test_a_parked_request_expires_after_max_wait_with_no_records(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host)
    answers = leader_host.answer_fetch(fetcher.next_request())
    clock.advance(499)
    timer.advance_clock()
    assert answers == []
    clock.advance(1)
    timer.advance_clock()
    assert len(answers) == 1 and all(not r.records and r.error is None
                                      for _, _, r in answers[0].results)


def test_a_leadership_move_on_one_partition_answers_the_request(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host)
    answers = leader_host.answer_fetch(fetcher.next_request())
    leader_host.cores[("a", 1)].become_follower(FOLLOWER, 1, 1, [LEADER, FOLLOWER])
    leader_host.purgatories.fetch.check_and_complete(("a", 1))
    assert len(answers) == 1
    errors = {(t, p): r.error for t, p, r in answers[0].results}
    assert isinstance(errors[("a", 1)], NotLeaderOrFollowerError)
    assert errors[("a", 0)] is None


def test_an_erroring_partition_backs_off_alone(hosts):
    clock, timer, leader_host, follower_host, fetcher = hosts
    round_trip(fetcher, leader_host)
    del leader_host.cores[("a", 1)]                    # the leader host no longer has it
    request = round_trip(fetcher, leader_host)         # answered at once: an error
    assert len(request.partitions) == 3
    again = fetcher.next_request()
    assert sorted((t, p) for t, p, _ in again.partitions) == [("a", 0), ("b", 0)]
    assert fetcher.next_wakeup_ms() == clock() + 50    # first backoff: 50 ms
    clock.advance(50)
    assert len(fetcher.next_request().partitions) == 3


def test_a_failed_request_backs_off_every_partition_in_it_exponentially(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host)
    waits = []
    for _ in range(7):
        request = fetcher.next_request()
        assert request is not None
        fetcher.on_error(request)
        assert fetcher.next_request() is None
        waits.append(fetcher.next_wakeup_ms() - clock())
        clock.advance(waits[-1])
    assert waits == [50, 100, 200, 400, 800, 1000, 1000]   # up to replica.fetch.backoff.ms


def test_answers_for_an_epoch_the_partition_has_left_are_not_applied(hosts):
    clock, timer, leader_host, follower_host, fetcher = hosts
    round_trip(fetcher, leader_host)
    request = fetcher.next_request()
    leader_host.cores[("a", 0)].produce(msg("x"), acks=1, timeout_ms=1000)
    answers = leader_host.answer_fetch(request)
    follower_host.cores[("a", 0)].become_follower(LEADER, 1, 1, [LEADER, FOLLOWER])
    fetcher.on_fetch_response(answers[0])
    assert follower_host.cores[("a", 0)].log_end_offset == 0
    fetcher.remove_partition("a", 0)
    assert sorted((t, p) for t, p, _ in fetcher.next_request().partitions) == PARTITIONS[1:]


def test_min_bytes_counts_over_the_request_and_max_bytes_bounds_the_response(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host)
    request = fetcher.next_request()
    big = dataclasses.replace(request, min_bytes=2 * len(msg("x" * 100)) - 1)
    answers = leader_host.answer_fetch(big)
    leader_host.cores[("a", 0)].produce(msg("x" * 100), acks=1, timeout_ms=1000)
    assert answers == []                               # one batch is not min_bytes yet
    leader_host.cores[("b", 0)].produce(msg("y" * 100), acks=1, timeout_ms=1000)
    assert len(answers) == 1
    one_batch = len(msg("x" * 100))
    small = dataclasses.replace(request, max_bytes=one_batch)
    sizes = [len(r.records) for _, _, r in leader_host.answer_fetch(small)[0].results]
    assert sizes == [one_batch, 0, 0]                  # the response is full after a-0


def test_the_compact_wire_form_of_a_fetch_round_trips(hosts):
    from protocols.errors import OffsetOutOfRangeError
    from protocols.messages import (FetchResult, decode_fetch_many_request,
                                    decode_fetch_many_response, encode_fetch_many_request,
                                    encode_fetch_many_response)
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host)
    request = fetcher.next_request()
    assert decode_fetch_many_request(encode_fetch_many_request(request)) == request
    response = FetchManyResponse((("a", 0, FetchResult(msg("x"), 1, 0, 1, None, 3, 0)),
                                  ("b", 0, FetchResult(b"", 5, 2, 9,
                                                       OffsetOutOfRangeError("gone"), 3, 1))))
    back = decode_fetch_many_response(encode_fetch_many_response(response))
    assert back.results[0] == response.results[0]
    error = back.results[1][2].error
    assert isinstance(error, OffsetOutOfRangeError) and str(error) == "gone"
    assert back.results[1][2].log_end_offset == 9


# ---- FetcherPlacement: which fetcher each follower is in (Kafka's AbstractFetcherManager) --

def make_placement(clock):
    from actors.replica.fetcher_placement import FetcherPlacement
    return FetcherPlacement(lambda: ReplicaFetcher(FOLLOWER, ReplicaConfig(), clock))


def test_followers_sharing_a_leader_host_share_one_fetcher_and_an_emptied_one_goes(tmp_path):
    clock, timer, leader_host, follower_host, _ = make_hosts(tmp_path, PARTITIONS)
    placement = make_placement(clock)
    a0, a1, b0 = (follower_host.cores[tp] for tp in PARTITIONS)
    first, created = placement.place(a0, "host-1")
    assert created
    assert placement.place(a1, "host-1") == (first, False)
    other, created = placement.place(b0, "host-3")
    assert created and other is not first
    assert sorted(first.partitions) == [("a", 0), ("a", 1)]
    assert placement.remove("a", 0) is None              # host-1's fetcher still has a-1
    assert placement.remove("a", 1) == "host-1"          # now empty: the shell stops it
    assert set(placement.fetchers) == {"host-3"} and not placement.is_placed("a", 1)
    assert placement.remove("a", 1) is None              # removing twice is harmless


def test_a_partition_moves_between_fetchers_only_by_being_removed_first(tmp_path):
    clock, timer, leader_host, follower_host, _ = make_hosts(tmp_path, PARTITIONS)
    placement = make_placement(clock)
    a0 = follower_host.cores[("a", 0)]
    placement.place(a0, "host-1")
    with pytest.raises(ValueError, match="remove it first"):
        placement.place(a0, "host-3")
    placement.place(a0, "host-1")                       # a new epoch, same leader host
    assert placement.remove("a", 0) == "host-1"
    placement.place(a0, "host-3")
    assert set(placement.fetchers) == {"host-3"}


def test_a_dead_leader_hosts_followers_are_released_to_be_placed_again(tmp_path):
    clock, timer, leader_host, follower_host, _ = make_hosts(tmp_path, PARTITIONS)
    placement = make_placement(clock)
    for tp in PARTITIONS:
        placement.place(follower_host.cores[tp], "host-1")
    follower_host.cores[("b", 0)].become_leader(1, 1, [FOLLOWER], [LEADER, FOLLOWER])
    released = placement.release("host-1")
    # b-0 leads now: it has no leader host to find; the two that still follow are returned.
    assert sorted((r.topic, r.partition) for r in released) == [("a", 0), ("a", 1)]
    assert not placement.fetchers and not placement.placed
    assert placement.release("host-1") == []
