"""Delayed operations and the purgatory (Kafka's DelayedOperation, DelayedOperationPurgatory).

The operations here model the real ones that the replicas run: a produce that
waits for the partition's high watermark (acks=all), a fetch that waits for fetch.min.bytes
across partitions, and an operation that only ever times out.
"""
from __future__ import annotations

import random
import sys
import threading
from dataclasses import dataclass

import pytest

from actors.timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from actors.timer.system_timer import SystemTimer
from protocols.errors import KafkaError
from tests.clock import ManualClock

pytestmark = pytest.mark.timeout(60)



@dataclass
class PartitionState:
    high_watermark: int = 0
    bytes_available: int = 0


class DelayedProduceModel(DelayedOperation):
    """acks=all: done once the high watermark passes the last produced offset."""

    def __init__(self, delay_ms: int, partition: PartitionState, required_offset: int):
        super().__init__(delay_ms)
        self.partition = partition
        self.required_offset = required_offset
        self.responses: list[str] = []
        self.reasons: list[str] = []

    def try_complete(self) -> bool:
        if self.partition.high_watermark >= self.required_offset:
            if self.force_complete():
                self.reasons.append("event")
                return True
        return False

    def on_complete(self) -> None:
        ok = self.partition.high_watermark >= self.required_offset
        self.responses.append("NONE" if ok else "REQUEST_TIMED_OUT")

    def on_expiration(self) -> None:
        self.reasons.append("expiry")


class DelayedFetchModel(DelayedOperation):
    """Done once fetch.min.bytes are available across the fetched partitions."""

    def __init__(self, delay_ms: int, partitions: list[PartitionState], min_bytes: int):
        super().__init__(delay_ms)
        self.partitions = partitions
        self.min_bytes = min_bytes
        self.completions = 0
        self.expired = False

    def try_complete(self) -> bool:
        if sum(p.bytes_available for p in self.partitions) >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expired = True


class TimeoutOnly(DelayedOperation):
    def __init__(self, delay_ms: int):
        super().__init__(delay_ms)
        self.completions = 0
        self.expirations = 0

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expirations += 1


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0)


@pytest.fixture
def purgatory(clock):
    p = DelayedOperationPurgatory("Produce", SystemTimer(clock, name="produce"), broker_id=0)
    yield p
    p.shutdown()


@pytest.fixture
def frequent_switches():
    # Make the interpreter switch threads far more often so races actually interleave.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


# -- single-threaded semantics ----------------------------------------------------------------

def test_an_operation_that_can_complete_now_is_neither_watched_nor_timed(purgatory):
    tp = PartitionState(high_watermark=10)
    op = DelayedProduceModel(30_000, tp, required_offset=10)
    assert purgatory.try_complete_else_watch(op, [("t", 0)]) is True
    assert op.responses == ["NONE"] and op.is_completed
    assert purgatory.watched == 0 and purgatory.delayed == 0


def test_produce_completes_when_the_high_watermark_passes_its_offset(purgatory, clock):
    tp = PartitionState(high_watermark=4)
    op = DelayedProduceModel(30_000, tp, required_offset=7)
    assert purgatory.try_complete_else_watch(op, [("t", 0)]) is False
    assert purgatory.watched == 1 and purgatory.delayed == 1

    tp.high_watermark = 6
    assert purgatory.check_and_complete(("t", 0)) == 0
    assert not op.is_completed and purgatory.watched == 1

    tp.high_watermark = 7
    assert purgatory.check_and_complete(("t", 0)) == 1
    assert op.responses == ["NONE"] and op.reasons == ["event"]
    # Completion cancels its timer task and leaves the watch list.
    assert purgatory.watched == 0 and purgatory.delayed == 0
    clock.now_ms = 60_000
    purgatory.advance_clock(0)
    assert op.responses == ["NONE"] and op.reasons == ["event"]


def test_produce_times_out_after_its_delay(purgatory, clock):
    tp = PartitionState(high_watermark=0)
    op = DelayedProduceModel(1_500, tp, required_offset=3)
    purgatory.try_complete_else_watch(op, [("t", 0)])
    clock.now_ms = 1_499
    purgatory.advance_clock(0)
    assert not op.is_completed
    clock.now_ms = 1_500
    purgatory.advance_clock(0)
    assert op.responses == ["REQUEST_TIMED_OUT"] and op.reasons == ["expiry"]
    assert purgatory.delayed == 0
    # Still on the watch list until an event on its key or a purge sweeps it out.
    assert purgatory.watched == 1
    tp.high_watermark = 3
    assert purgatory.check_and_complete(("t", 0)) == 0
    assert purgatory.watched == 0
    assert op.responses == ["REQUEST_TIMED_OUT"]


def test_zero_delay_operation_expires_at_once(purgatory):
    op = TimeoutOnly(0)
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.delayed == 0


def test_fetch_watched_on_several_partitions_completes_on_any_of_them(purgatory, clock):
    p0, p1 = PartitionState(), PartitionState()
    op = DelayedFetchModel(500, [p0, p1], min_bytes=100)
    assert purgatory.try_complete_else_watch(op, [("t", 0), ("t", 1)]) is False
    assert purgatory.watched == 2 and purgatory.delayed == 1
    p0.bytes_available = 60
    assert purgatory.check_and_complete(("t", 0)) == 0
    p1.bytes_available = 40
    assert purgatory.check_and_complete(("t", 1)) == 1
    assert op.completions == 1 and not op.expired
    # The other key still lists the completed operation (Kafka does the same).
    assert purgatory.watch_keys == [("t", 0)] and purgatory.watched == 1
    assert purgatory.purge_completed() == 1
    assert purgatory.watched == 0 and purgatory.watch_keys == []


def test_watch_without_a_check_waits_for_an_event_on_any_key_or_its_expiry(purgatory, clock):
    # A replica host's fetch has just read its partitions on the host's only thread:
    # ``watch`` adds it without checking it twice more.
    p0, p1 = PartitionState(bytes_available=100), PartitionState()
    op = DelayedFetchModel(500, [p0, p1], min_bytes=100)
    purgatory.watch(op, [("t", 0), ("t", 1)])
    assert not op.is_completed                     # not checked: its caller just did
    assert purgatory.watched == 2 and purgatory.delayed == 1
    assert purgatory.check_and_complete(("t", 1)) == 1
    assert op.completions == 1 and not op.expired
    idle = DelayedFetchModel(500, [PartitionState()], min_bytes=1)
    purgatory.watch(idle, [("t", 2)])
    clock.now_ms = 500
    purgatory.advance_clock(0)
    assert idle.completions == 1 and idle.expired


def test_watch_with_no_key_waits_for_its_timeout_or_a_key_watched_later(purgatory, clock):
    # A fetch session whose partitions are all parked waits on none of them; one that wakes
    # up is added to the waiting fetch (``watch_key``) by the session's listener.
    timed_out = DelayedFetchModel(500, [PartitionState()], min_bytes=1)
    purgatory.watch(timed_out, [])
    assert purgatory.watched == 0 and purgatory.delayed == 1
    clock.now_ms = 500
    purgatory.advance_clock(0)
    assert timed_out.completions == 1 and timed_out.expired
    woken = DelayedFetchModel(500, [p := PartitionState()], min_bytes=1)
    purgatory.watch(woken, [])
    p.bytes_available = 1
    purgatory.watch_key(woken, ("t", 3))
    assert purgatory.check_and_complete(("t", 3)) == 1
    assert woken.completions == 1 and not woken.expired


def test_listeners_hear_every_event_on_their_key_before_its_operations_are_checked(purgatory):
    heard = []
    ops = []

    class Listener:
        def on_key_event(self, key):
            heard.append(key)
            # what a fetch session does: a waiting fetch is watched under the woken key now
            purgatory.watch_key(ops[0], key)

    op = DelayedFetchModel(500, [PartitionState(bytes_available=1)], min_bytes=1)
    ops.append(op)
    purgatory.watch(op, [])
    listener = Listener()
    purgatory.listen(("t", 0), listener)
    assert purgatory.check_and_complete(("t", 1)) == 0 and heard == []
    assert purgatory.check_and_complete(("t", 0)) == 1      # checked in the same call
    assert heard == [("t", 0)] and op.completions == 1
    purgatory.unlisten(("t", 0), listener)
    purgatory.check_and_complete(("t", 0))
    assert heard == [("t", 0)]


def test_fetch_without_enough_bytes_returns_on_max_wait(purgatory, clock):
    p0 = PartitionState(bytes_available=10)
    op = DelayedFetchModel(500, [p0], min_bytes=100)
    purgatory.try_complete_else_watch(op, [("t", 0)])
    clock.now_ms = 500
    purgatory.advance_clock(0)
    assert op.completions == 1 and op.expired


def test_purge_runs_once_completed_operations_exceed_the_interval(clock):
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock),
                                          purge_interval_requests=3)
    ops = [TimeoutOnly(10_000) for _ in range(4)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [("t", i)])
    ops[0].force_complete()
    ops[1].force_complete()
    # 4 watched since the last purge, 2 still delayed: 2 <= 3, no purge yet.
    purgatory.advance_clock(0)
    assert purgatory.watched == 4 and purgatory.delayed == 2
    ops[2].force_complete()
    ops[3].force_complete()
    # 4 - 0 > 3: the next reaper step sweeps the watch lists.
    purgatory.advance_clock(0)
    assert purgatory.watched == 0 and purgatory.watch_keys == []
    purgatory.shutdown()


def test_purge_is_also_triggered_by_new_requests(clock):
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock),
                                          purge_interval_requests=2)
    for i in range(3):
        op = TimeoutOnly(10_000)
        purgatory.try_complete_else_watch(op, [("t", i)])
        op.force_complete()
    # Watched since the last purge 3, still delayed 1: 3 - 1 <= 2, nothing purged yet.
    assert purgatory.watched == 3
    op = TimeoutOnly(10_000)
    purgatory.try_complete_else_watch(op, [("t", 9)])
    assert purgatory.watched == 1  # only the live one remains
    purgatory.shutdown()


def test_an_operation_on_many_keys_counts_once_per_key_towards_the_purge(clock):
    """A fetch for many idle partitions leaves an entry under every key when it expires;
    they are swept after purge_interval_requests entries, not operations."""
    purgatory = DelayedOperationPurgatory("Fetch", SystemTimer(clock),
                                          purge_interval_requests=5)
    first = TimeoutOnly(10_000)
    purgatory.try_complete_else_watch(first, [("t", i) for i in range(4)])
    first.force_complete()
    assert purgatory.watched == 4                 # 4 entries - 0 delayed <= 5: kept
    second = TimeoutOnly(10_000)
    purgatory.try_complete_else_watch(second, [("t", i) for i in range(4)])
    assert purgatory.watched == 4                 # 8 - 1 > 5: the first one's swept
    purgatory.shutdown()


def test_cancel_for_key_stops_watching_without_completing(purgatory, clock):
    ops = [TimeoutOnly(100) for _ in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
    assert purgatory.cancel_for_key("k") == ops
    assert purgatory.watched == 0 and purgatory.delayed == 0
    clock.now_ms = 1_000
    purgatory.advance_clock(0)
    assert all(op.completions == 0 for op in ops)


def test_watch_keys_must_not_be_empty(purgatory):
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(TimeoutOnly(10), [])


def test_shutdown_stops_the_timer(clock):
    timer = SystemTimer(clock)
    purgatory = DelayedOperationPurgatory("Produce", timer)
    purgatory.try_complete_else_watch(TimeoutOnly(10), ["k"])
    purgatory.shutdown()
    assert timer.is_shutdown and purgatory.delayed == 0
    with pytest.raises(KafkaError):
        purgatory.try_complete_else_watch(TimeoutOnly(10), ["k"])


def test_force_complete_returns_true_only_once():
    op = TimeoutOnly(10)
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.completions == 1


# -- races -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_events_racing_expiry_complete_each_operation_exactly_once(seed, frequent_switches):
    rng = random.Random(seed)
    clock = ManualClock(0)
    purgatory = DelayedOperationPurgatory("Produce", SystemTimer(clock),
                                          purge_interval_requests=50)
    partitions = [PartitionState() for _ in range(3)]
    ops = []
    for i in range(1200):
        p = rng.randrange(3)
        op = DelayedProduceModel(rng.randint(1, 100), partitions[p], rng.randint(1, 100))
        assert purgatory.try_complete_else_watch(op, [("t", p)]) is False
        ops.append(op)
    event_completions = []
    step = threading.Barrier(4)

    def raise_hw(p: int):
        # A follower fetch moving the high watermark, then the event on its key.
        done = 0
        for hw in range(1, 101):
            step.wait()  # lock-step with the reaper, so both paths win some operations
            partitions[p].high_watermark = hw
            done += purgatory.check_and_complete(("t", p))
        event_completions.append(done)

    def expire():
        # The reaper, with time moving one millisecond per step.
        for now in range(1, 101):
            step.wait()
            clock.now_ms = now
            purgatory.advance_clock(0)

    threads = [threading.Thread(target=raise_hw, args=(p,)) for p in range(3)]
    threads.append(threading.Thread(target=expire))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    clock.now_ms = 1_000
    purgatory.advance_clock(0)

    for op in ops:
        assert len(op.responses) == 1, op.responses
        assert len(op.reasons) == 1, op.reasons
    by_event = sum(1 for op in ops if op.reasons == ["event"])
    by_expiry = sum(1 for op in ops if op.reasons == ["expiry"])
    assert by_event + by_expiry == len(ops)
    assert sum(event_completions) == by_event
    assert by_event > 0 and by_expiry > 0  # both paths really raced
    assert purgatory.delayed == 0
    purgatory.purge_completed()
    assert purgatory.watched == 0


def test_concurrent_force_complete_runs_on_complete_once(frequent_switches):
    ops = [TimeoutOnly(10) for _ in range(300)]
    barrier = threading.Barrier(6)
    wins = [0] * 6

    def hammer(n: int):
        barrier.wait()
        for op in ops:
            if op.force_complete():
                wins[n] += 1

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(wins) == len(ops)
    assert all(op.completions == 1 for op in ops)


class AwaitFlag(DelayedOperation):
    def __init__(self, flags: list[bool], index: int):
        super().__init__(10**9)
        self.flags = flags
        self.index = index
        self.completions = 0

    def try_complete(self) -> bool:
        return self.flags[self.index] and self.force_complete()

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        pass


def test_no_event_is_lost_between_the_check_and_the_watch(frequent_switches):
    """Each operation gets exactly one event, fired while it is being registered. Whichever
    way they interleave, the operation completes (the double check in
    try_complete_else_watch): a missed event would strand it, as no second event comes."""
    clock = ManualClock(0)
    purgatory = DelayedOperationPurgatory("Produce", SystemTimer(clock),
                                          purge_interval_requests=100)
    n = 20_000
    flags = [False] * n
    ops: list[AwaitFlag] = []
    barrier = threading.Barrier(2)

    def produce():
        barrier.wait()
        for i in range(n):
            op = AwaitFlag(flags, i)
            ops.append(op)  # from here on the event for key i may fire
            purgatory.try_complete_else_watch(op, [("tp", i)])

    def replicate():
        barrier.wait()
        for i in range(n):
            while len(ops) <= i:
                pass
            flags[i] = True
            purgatory.check_and_complete(("tp", i))

    threads = [threading.Thread(target=produce), threading.Thread(target=replicate)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stranded = [op.index for op in ops if not op.is_completed]
    assert stranded == []
    assert all(op.completions == 1 for op in ops)
    assert purgatory.delayed == 0
    purgatory.purge_completed()
    assert purgatory.watched == 0
    purgatory.shutdown()
