"""Zero-copy fetch on the leader's side: a consumer's fetch from a broker on the host's node
is answered with where its records lie (FileRegions), the bytes a read would return, bounded
by the high watermark (the LSO for read_committed) as a consumer's read is (Kafka's
LogSegment.read); followers and brokers on other nodes get the bytes."""
from __future__ import annotations

import os

import pytest

from actors.replica.fetch_many import fetch_many
from actors.timer.system_timer import SystemTimer
from protocols.file_region import FileRegion
from protocols.messages import (READ_COMMITTED, FetchManyRequest, FetchRequest,
                                decode_fetch_many_request, decode_fetch_many_response,
                                encode_fetch_many_request, encode_fetch_many_response)
from tests.actors.replica.test_fetcher import FOLLOWER, LEADER, Host, msg
from tests.clock import ManualClock

NODE = "node-1"


@pytest.fixture
def leader(tmp_path):
    """A leader of a-0 with a follower in its ISR, four records appended, the follower at
    offset 2: the high watermark is 2, the log end 4."""
    clock = ManualClock(1_700_000_000_000)
    timer = SystemTimer(clock)
    host = Host(tmp_path, LEADER, clock, timer)
    core = host.open("a", 0)
    core.become_leader(0, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    for i in range(4):
        core.produce(msg(f"r{i}"), acks=1, timeout_ms=1000)
    answer(host, FetchRequest(FOLLOWER, 2), replica_id=FOLLOWER)
    assert (core.high_watermark, core.log_end_offset) == (2, 4)
    return host, core, clock, timer


def answer(host, fetch: FetchRequest, replica_id: int = -1, node: str = NODE,
           here: str = NODE, max_wait_ms: int = 0):
    answers: list = []
    request = FetchManyRequest(replica_id, max_wait_ms, 1, 1 << 20, (("a", 0, fetch),),
                               regions_on_node=node)
    fetch_many(host.cores, request, host.purgatories.fetch, host.broker_id, answers.append,
               None, here)
    return answers


def region_bytes(region: FileRegion) -> bytes:
    with open(region.path, "rb") as f:
        return os.pread(f.fileno(), region.size, region.position)


def test_a_consumer_fetch_from_this_node_names_the_records_up_to_the_high_watermark(leader):
    host, core, _, _ = leader
    [response] = answer(host, FetchRequest(-1, 0))
    [(_, _, result)] = response.results
    assert isinstance(result.records, FileRegion)
    assert region_bytes(result.records) == core.log.read(0, 1 << 20, max_offset=2)
    assert (result.high_watermark, result.log_end_offset) == (2, 4)


def test_a_read_committed_consumer_is_named_its_records_too(leader):
    host, core, _, _ = leader
    [response] = answer(host, FetchRequest(-1, 0, isolation_level=READ_COMMITTED))
    [(_, _, result)] = response.results
    assert region_bytes(result.records) == core.log.read(0, 1 << 20, max_offset=2)
    assert result.aborted_transactions == ()


def test_followers_and_brokers_on_other_nodes_get_bytes(leader):
    host, core, _, _ = leader
    for fetch, replica_id, node in ((FetchRequest(FOLLOWER, 2), FOLLOWER, NODE),
                                    (FetchRequest(-1, 0), -1, "node-2"),
                                    (FetchRequest(-1, 0), -1, "")):
        [response] = answer(host, fetch, replica_id, node)
        [(_, _, result)] = response.results
        assert isinstance(result.records, bytes), (fetch, node)


def test_a_fetch_that_waited_is_answered_with_a_region_too(leader):
    host, core, clock, timer = leader
    answers = answer(host, FetchRequest(-1, 2), max_wait_ms=500)
    assert answers == []                                 # at the HW: it waits
    answer(host, FetchRequest(FOLLOWER, 4), replica_id=FOLLOWER)   # the HW moves to 4
    assert len(answers) == 1
    [(_, _, result)] = answers[0].results
    assert region_bytes(result.records) == core.log.read(2, 1 << 20)


def test_regions_and_the_followers_start_cross_the_channel(leader):
    host, _, _, _ = leader
    [response] = answer(host, FetchRequest(-1, 0))
    decoded = decode_fetch_many_response(encode_fetch_many_response(response))
    assert decoded.results[0][2].records == response.results[0][2].records
    request = FetchManyRequest(2, 500, 1, 1 << 20, (("a", 0, FetchRequest(2, 7)),),
                               replica_epoch=(3 << 16) | 1, regions_on_node=NODE)
    assert decode_fetch_many_request(encode_fetch_many_request(request)) == request
