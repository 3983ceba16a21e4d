"""Fetch sessions (KIP-227) between a follower host's fetcher and a leader host, pure: the
cases of Kafka's FetchSessionTest and FetchSessionHandlerTest that apply to replication.

The fixture of ``test_fetcher`` (two hosts, three partitions, real log files) with a session
cache on the leader host.
"""
from __future__ import annotations

import random

import pytest

from actors.replica.fetch_many import fetch_many
from actors.replica.fetch_session import EVICTION_MS, CachedPartition, FetchSessionCache
from protocols.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from protocols.fetch_session_handler import FINAL_EPOCH, INITIAL_EPOCH
from protocols.messages import (FetchManyRequest, FetchRequest, OffsetsForLeaderEpochRequest,
                                encode_fetch_many_request)
from tests.actors.replica.test_fetcher import FOLLOWER, LEADER, PARTITIONS, make_hosts, msg, round_trip
from tests.clock import ManualClock


def make_session_hosts(root, partitions, slots=1000):
    hosts = make_hosts(root, partitions,
                       lambda clock: FetchSessionCache(slots, clock, rng=random.Random(7)))
    round_trip(hosts[4], hosts[2])  # OffsetsForLeaderEpoch first, as always
    return hosts


@pytest.fixture
def hosts(tmp_path):
    return make_session_hosts(tmp_path, PARTITIONS)


def names(request):
    return sorted((t, p) for t, p, _ in request.partitions)


def test_the_first_fetch_is_full_and_opens_a_session_then_fetches_name_nothing_idle(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    first = round_trip(fetcher, leader_host, timer, clock)
    assert first.session_epoch == INITIAL_EPOCH and names(first) == sorted(PARTITIONS)
    [session] = leader_host.sessions.sessions.values()
    assert fetcher.session.session_id == session.id and session.size == 3
    answers = leader_host.answer_fetch(second := fetcher.next_request())
    assert (second.session_id, second.session_epoch) == (session.id, 1)
    assert second.partitions == () and second.forgotten == ()
    clock.advance(500)
    timer.advance_clock()
    # Nothing new on any partition: the answer carries none of them.
    assert len(answers) == 1 and answers[0].results == ()
    assert answers[0].session_id == session.id
    fetcher.on_fetch_response(answers[0])
    assert fetcher.next_request().session_epoch == 2


def test_an_idle_fetch_does_not_grow_with_the_partitions_of_the_session(tmp_path):
    sizes = {}
    for n in (3, 60):
        parts = [("t", p) for p in range(n)]
        clock, timer, leader_host, _, fetcher = make_session_hosts(tmp_path / str(n), parts)
        round_trip(fetcher, leader_host, timer, clock)        # full: the session opens
        sizes[n] = len(encode_fetch_many_request(fetcher.next_request()))  # incremental
    assert sizes[3] == sizes[60]


def test_only_partitions_whose_position_moved_are_named_and_data_and_hw_flow(hosts):
    clock, timer, leader_host, follower_host, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)          # full: session opened
    done = []
    leader_host.cores[("b", 0)].produce(msg("x"), acks=-1, timeout_ms=5000,
                                        on_done=done.append)
    request = round_trip(fetcher, leader_host, timer, clock)
    assert request.partitions == ()                          # nobody moved yet
    assert follower_host.cores[("b", 0)].log_end_offset == 1
    request = round_trip(fetcher, leader_host, timer, clock)
    assert names(request) == [("b", 0)]                      # b-0's position moved to 1
    assert request.partitions[0][2].fetch_offset == 1
    assert leader_host.cores[("b", 0)].high_watermark == 1
    assert [r.error for r in done] == [None]                # acks=all: the quiet ones count
    round_trip(fetcher, leader_host, timer, clock)          # the HW reaches the follower
    assert follower_host.cores[("b", 0)].high_watermark == 1


def test_quiet_partitions_still_count_as_fetching_for_the_isr(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    for _ in range(100):                                     # 100 idle fetches of 500 ms
        round_trip(fetcher, leader_host, timer, clock)
    assert clock() - 1_700_000_000_000 >= 50_000            # > replica.lag.time.max.ms
    for tp in PARTITIONS:
        core = leader_host.cores[tp]
        assert core.maybe_shrink_isr() is None and core.isr == [LEADER, FOLLOWER]


def test_an_idle_fetch_moves_no_isr_and_a_follower_that_moved_is_checked(hosts):
    # fetch_many names the partitions whose ISR may have changed (the host sends their
    # AlterPartition): an in-sync follower asking again from the log end moves nothing, so
    # an idle session of a thousand partitions costs no ISR check.
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)
    answers = []
    moved = fetch_many(leader_host.cores, fetcher.next_request(), leader_host.purgatories.fetch,
                       LEADER, answers.append, leader_host.sessions)
    assert moved == []
    clock.advance(500)
    timer.advance_clock()
    fetcher.on_fetch_response(answers[0])
    leader = leader_host.cores[("b", 0)]
    leader.on_alter_partition_result([LEADER], leader.partition_epoch + 1)  # it had fallen out
    moved = fetch_many(leader_host.cores, fetcher.next_request(), leader_host.purgatories.fetch,
                       LEADER, lambda response: None, leader_host.sessions)
    assert moved == [("b", 0)]                              # caught up again: expand the ISR
    assert leader.pending_alter.new_isr == (LEADER, FOLLOWER)


# ---- parked partitions: an idle session's fetch costs nothing per partition ------------
def idle(fetcher, leader_host, timer, clock, rounds=1):
    for _ in range(rounds):
        round_trip(fetcher, leader_host, timer, clock)


def test_an_idle_session_parks_its_partitions_and_an_append_wakes_the_waiting_fetch(hosts):
    clock, timer, leader_host, follower_host, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)          # full: the session opens
    idle(fetcher, leader_host, timer, clock)                # nothing to say anywhere: parked
    [session] = leader_host.sessions.sessions.values()
    assert sorted(session.parked) == sorted(PARTITIONS) and session.fetch_partitions() == ()
    purgatory = leader_host.purgatories.fetch
    purgatory.purge_completed()
    answers = leader_host.answer_fetch(fetcher.next_request())
    assert answers == [] and purgatory.watched == 0         # it waits on no partition
    leader_host.cores[("b", 0)].produce(msg("x"), acks=1, timeout_ms=1000)
    assert len(answers) == 1                                # the append woke it at once
    assert [(t, p) for t, p, r in answers[0].results if r.records] == [("b", 0)]
    fetcher.on_fetch_response(answers[0])
    assert follower_host.cores[("b", 0)].log_end_offset == 1
    assert sorted(session.parked) == [("a", 0), ("a", 1)]   # b-0 is read again until idle
    idle(fetcher, leader_host, timer, clock, rounds=3)      # position, then HW, then quiet
    assert follower_host.cores[("b", 0)].high_watermark == 1
    assert sorted(session.parked) == sorted(PARTITIONS)


def test_a_parked_follower_stays_in_sync_while_its_session_fetches_and_leaves_when_it_stops(
        hosts):
    # replica.lag.time.max.ms (30 s) reads a parked follower's last fetch from its session.
    clock, timer, leader_host, _, fetcher = hosts
    idle(fetcher, leader_host, timer, clock, rounds=2)
    core = leader_host.cores[("a", 0)]
    assert ("a", 0) in leader_host.sessions.sessions[fetcher.session.session_id].parked
    idle(fetcher, leader_host, timer, clock, rounds=80)     # 40 s of idle fetches
    assert core.maybe_shrink_isr() is None and core.isr == [LEADER, FOLLOWER]
    clock.advance(30_001)                                   # the follower stops fetching
    assert core.maybe_shrink_isr().new_isr == (LEADER,)


def test_an_append_records_a_parked_followers_last_fetch_as_caught_up(hosts):
    # Kafka's rule at the follower's next fetch: caught up if it fetched from where our log
    # ended at its previous fetch; the previous fetch was the session's last one.
    clock, timer, leader_host, _, fetcher = hosts
    idle(fetcher, leader_host, timer, clock, rounds=2)
    idle(fetcher, leader_host, timer, clock, rounds=60)     # 30 s parked
    last_fetch = clock()
    state = leader_host.cores[("a", 0)].followers[FOLLOWER]
    assert state.parked_in is not None and state.caught_up_ms() == last_fetch - 500
    leader_host.cores[("a", 0)].produce(msg("x"), acks=1, timeout_ms=1000)
    assert state.parked_in is None
    assert state.last_fetch_ms == state.last_caught_up_ms == last_fetch - 500


def test_an_ended_session_unparks_everything_and_stops_listening(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    idle(fetcher, leader_host, timer, clock, rounds=2)
    [session] = leader_host.sessions.sessions.values()
    assert len(session.parked) == 3
    leader_host.sessions.remove(session.id)
    assert session.parked == {} and leader_host.purgatories.fetch._listeners_by_key == {}
    assert all(core.followers[FOLLOWER].parked_in is None
               for core in leader_host.cores.values())


def test_delete_records_on_a_parked_partition_tells_its_fetcher_the_new_log_start(hosts):
    clock, timer, leader_host, follower_host, fetcher = hosts
    leader = leader_host.cores[("a", 0)]
    for value in "xyz":
        leader.produce(msg(value), acks=1, timeout_ms=1000)
    idle(fetcher, leader_host, timer, clock, rounds=6)      # replicated, HW told, parked
    [session] = leader_host.sessions.sessions.values()
    assert ("a", 0) in session.parked and leader.high_watermark == 3
    answers = leader_host.answer_fetch(fetcher.next_request())
    assert answers == []
    leader.delete_records(2, timeout_ms=1000)
    assert answers == []               # no bytes for min_bytes: it waits, as Kafka's does,
    clock.advance(500)                 # and its answer carries the partition again
    timer.advance_clock()
    assert len(answers) == 1
    [(_, _, result)] = answers[0].results
    assert result.log_start_offset == 2
    fetcher.on_fetch_response(answers[0])
    assert follower_host.cores[("a", 0)].log.log_start_offset == 2


def test_a_new_leader_epoch_on_a_parked_partition_answers_the_fetcher_at_once(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    idle(fetcher, leader_host, timer, clock, rounds=2)
    answers = leader_host.answer_fetch(fetcher.next_request())
    leader_host.cores[("a", 1)].become_leader(1, 1, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    assert len(answers) == 1
    [(topic, partition, result)] = answers[0].results
    assert (topic, partition) == ("a", 1) and result.error is not None


def test_an_idle_fetcher_names_nothing_until_something_happens_to_a_partition(hosts):
    # The fetcher's side of the same: an idle request looks at no partition; one whose log
    # start retention moved (outside any answer) is named in the next request.
    clock, timer, leader_host, follower_host, fetcher = hosts
    leader = leader_host.cores[("a", 0)]
    for value in "xyz":
        leader.produce(msg(value), acks=1, timeout_ms=1000)
    idle(fetcher, leader_host, timer, clock, rounds=6)
    request = round_trip(fetcher, leader_host, timer, clock)
    assert request.partitions == () and fetcher._changed == {}
    follower_host.cores[("a", 0)].log.delete_records(2)    # say, retention
    fetcher.partition_changed("a", 0)
    [(topic, partition, named)] = fetcher.next_request().partitions
    assert (topic, partition, named.log_start_offset) == ("a", 0, 2)


def test_a_position_that_moved_during_a_truncation_round_is_named_in_the_next_fetch(hosts):
    # A fetch answer moves b-0 on; a partition added meanwhile must truncate first, so the
    # next request is OffsetsForLeaderEpoch: the fetch after it still names b-0's position.
    clock, timer, leader_host, follower_host, fetcher = hosts
    idle(fetcher, leader_host, timer, clock, rounds=2)
    leader_host.cores[("b", 0)].produce(msg("x"), acks=1, timeout_ms=1000)
    round_trip(fetcher, leader_host, timer, clock)          # b-0's record arrives
    leader_host.open("c", 0).become_leader(0, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    newcomer = follower_host.open("c", 0)
    newcomer.become_follower(LEADER, 0, 0, [LEADER, FOLLOWER])
    fetcher.add_partition(newcomer)
    request = round_trip(fetcher, leader_host, timer, clock)
    assert isinstance(request, OffsetsForLeaderEpochRequest)
    request = round_trip(fetcher, leader_host, timer, clock)
    assert names(request) == [("b", 0), ("c", 0)]
    assert leader_host.cores[("b", 0)].high_watermark == 1


def test_an_unknown_session_id_gets_fetch_session_id_not_found_and_a_full_fetch_follows(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)
    leader_host.sessions.sessions.clear()                   # e.g. the leader host restarted
    request = fetcher.next_request()
    [answer] = leader_host.answer_fetch(request)
    assert isinstance(answer.error, FetchSessionIdNotFoundError) and answer.results == ()
    assert answer.error.code == 70 and answer.error.retriable
    fetcher.on_fetch_response(answer)
    again = fetcher.next_request()
    assert (again.session_id, again.session_epoch) == (0, INITIAL_EPOCH)
    assert names(again) == sorted(PARTITIONS)


def test_a_wrong_epoch_gets_invalid_fetch_session_epoch_and_a_full_fetch_closes_it(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)
    old = fetcher.session.session_id
    request = fetcher.next_request()
    leader_host.answer_fetch(request)                       # answered, but say the answer
    clock.advance(500)                                      # was lost: the fetcher sends
    timer.advance_clock()                                   # the same epoch again
    [answer] = leader_host.answer_fetch(request)
    assert isinstance(answer.error, InvalidFetchSessionEpochError) and answer.error.code == 71
    fetcher.on_fetch_response(answer)
    again = fetcher.next_request()
    assert (again.session_id, again.session_epoch) == (old, INITIAL_EPOCH)
    answers = leader_host.answer_fetch(again)
    clock.advance(500)
    timer.advance_clock()
    assert len(answers) == 1 and answers[0].session_id not in (0, old)
    assert list(leader_host.sessions.sessions) == [answers[0].session_id]


def test_a_partition_the_fetcher_drops_is_forgotten_by_the_session(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)
    fetcher.remove_partition("a", 1)
    request = round_trip(fetcher, leader_host, timer, clock)
    assert request.forgotten == (("a", 1),) and request.partitions == ()
    [session] = leader_host.sessions.sessions.values()
    assert sorted(session.partitions) == [("a", 0), ("b", 0)]


def test_a_partition_in_error_is_answered_and_told_its_high_watermark_again(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)
    leader_host.cores[("a", 1)].become_follower(FOLLOWER, 1, 1, [LEADER, FOLLOWER])
    answers = leader_host.answer_fetch(fetcher.next_request())
    assert [(t, p) for t, p, _ in answers[0].results] == [("a", 1)]
    [session] = leader_host.sessions.sessions.values()
    assert session.partitions[("a", 1)].high_watermark == -1


def test_a_partition_that_got_records_moves_to_the_end_of_the_session(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)
    leader_host.cores[("a", 0)].produce(msg("x"), acks=1, timeout_ms=1000)
    round_trip(fetcher, leader_host, timer, clock)
    [session] = leader_host.sessions.sessions.values()
    assert list(session.partitions) == [("a", 1), ("b", 0), ("a", 0)]


def test_a_leader_without_session_slots_serves_full_fetches(tmp_path):
    clock, timer, leader_host, _, fetcher = make_session_hosts(tmp_path, PARTITIONS, slots=0)
    for _ in range(3):
        request = round_trip(fetcher, leader_host, timer, clock)
        assert request.session_epoch == INITIAL_EPOCH and names(request) == sorted(PARTITIONS)


def test_an_emptied_session_ends_and_a_sessionless_full_fetch_is_served(hosts):
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)
    [session] = leader_host.sessions.sessions.values()
    request = FetchManyRequest(FOLLOWER, 0, 1, 1 << 20, (), session.id, 1, tuple(PARTITIONS))
    [answer] = leader_host.answer_fetch(request)
    assert answer.session_id == 0 and len(leader_host.sessions) == 0
    sessionless = FetchManyRequest(FOLLOWER, 0, 1, 1 << 20,
                                   (("a", 0, FetchRequest(FOLLOWER, 0, 0)),), 0, FINAL_EPOCH)
    [answer] = leader_host.answer_fetch(sessionless)
    assert answer.session_id == 0 and len(answer.results) == 1
    assert len(leader_host.sessions) == 0


# ---- the cache and its eviction (Kafka's FetchSessionTest: testSessionCache,
# testPrivilegedSessionHandling, testResizeCachedSessions) -------------------------------
def parts(n):
    return {("t", p): CachedPartition(FetchRequest(-1, 0)) for p in range(n)}


def test_a_full_cache_takes_a_new_session_only_for_a_stale_or_less_valuable_one():
    clock = ManualClock(0)
    cache = FetchSessionCache(3, clock, rng=random.Random(1))
    small, medium, big = (cache.maybe_create_session(False, parts(n)) for n in (1, 5, 10))
    assert len(cache) == 3 and 0 not in (small, medium, big)
    clock.advance(10)
    # A consumer with fewer partitions than any: no slot, it fetches without a session.
    assert cache.maybe_create_session(False, parts(0)) == 0
    # A consumer worth more than the smallest takes its slot.
    bigger = cache.maybe_create_session(False, parts(2))
    assert bigger != 0 and small not in cache.sessions and cache.evictions == 1
    # A follower takes a consumer's slot whatever its size.
    follower = cache.maybe_create_session(True, parts(1))
    assert follower != 0 and bigger not in cache.sessions
    f2 = cache.maybe_create_session(True, parts(1))
    f3 = cache.maybe_create_session(True, parts(1))
    assert 0 not in (f2, f3) and all(s.privileged for s in cache.sessions.values())
    # ... but never another follower's, unless that one went stale.
    assert cache.maybe_create_session(True, parts(100)) == 0
    clock.advance(EVICTION_MS + 1)
    cache.touch(cache.sessions[follower])
    cache.touch(cache.sessions[f2])
    consumer = cache.maybe_create_session(False, parts(0))
    assert consumer != 0 and f3 not in cache.sessions       # the stale one went
    assert cache.evictions == 5


def test_an_idle_fetch_that_expires_unchecked_reads_its_partitions_once(hosts, monkeypatch):
    import actors.replica.fetch_many as fetch_many_module
    clock, timer, leader_host, _, fetcher = hosts
    round_trip(fetcher, leader_host, timer, clock)              # full: the session opens
    reads = []
    real = fetch_many_module.read_partitions
    monkeypatch.setattr(fetch_many_module, "read_partitions",
                        lambda *a, **k: reads.append(1) or real(*a, **k))
    answers = leader_host.answer_fetch(fetcher.next_request())  # idle: parks
    clock.advance(500)
    timer.advance_clock()
    assert len(answers) == 1 and answers[0].results == () and len(reads) == 1
    fetcher.on_fetch_response(answers[0])
    # Checked by an append while it waits: read again when it completes, with the records.
    answers = leader_host.answer_fetch(fetcher.next_request())
    leader_host.cores[PARTITIONS[0]].produce(msg("v"), acks=1, timeout_ms=5000,
                                             on_done=lambda result: None)
    assert len(answers) == 1 and len(reads) == 3
    assert [(t, p) for t, p, r in answers[0].results if r.records] == [PARTITIONS[0]]
