"""TimerActor with real Ray actors: a node's scheduler for delayed and periodic calls."""
from __future__ import annotations

import time

import pytest
import ray

from actors.timer.actor import TimerActor
from protocols.errors import InvalidRequestError

pytestmark = [pytest.mark.ray, pytest.mark.timeout(60)]


@ray.remote(num_cpus=0)
class Recorder:
    """A target actor that notes when (wall clock) and with what each call arrived."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, float]] = []

    def record(self, *args):
        self.calls.append(("record", args, time.time()))

    def fail(self):
        self.calls.append(("fail", (), time.time()))
        raise ValueError("the target's own failure")

    def slow(self, seconds: float):
        self.calls.append(("slow", (seconds,), time.time()))
        time.sleep(seconds)

    def history(self):
        return self.calls


def wait_until(predicate, timeout_s: float = 5.0, interval_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError("condition not met in time")


@pytest.fixture(scope="module")
def timer(ray_session):
    actor = TimerActor.remote("timer-test")
    yield actor
    ray.kill(actor)


@pytest.fixture
def recorder(ray_session):
    actor = Recorder.remote()
    ray.get(actor.history.remote())  # started
    yield actor
    ray.kill(actor)


def test_schedule_calls_the_target_once_after_the_delay(timer, recorder):
    before = time.time()
    task_id = ray.get(timer.schedule.remote(250, recorder, "record", "a", 7, {"k": [1, 2]}))
    assert isinstance(task_id, int)
    assert ray.get(timer.pending.remote()) == 1
    calls = wait_until(lambda: ray.get(recorder.history.remote()))
    assert [(name, args) for name, args, _ in calls] == [("record", ("a", 7, {"k": [1, 2]}))]
    # Not before the delay (1 ms allowance for the millisecond clock's truncation).
    assert calls[0][2] - before >= 0.249
    assert ray.get(timer.pending.remote()) == 0
    time.sleep(0.3)
    assert len(ray.get(recorder.history.remote())) == 1


def test_a_cancelled_task_never_fires(timer, recorder):
    task_id = ray.get(timer.schedule.remote(300, recorder, "record", "never"))
    assert ray.get(timer.cancel.remote(task_id)) is True
    assert ray.get(timer.cancel.remote(task_id)) is False
    assert ray.get(timer.pending.remote()) == 0
    time.sleep(0.5)
    assert ray.get(recorder.history.remote()) == []


def test_tasks_fire_in_expiration_order(timer, recorder):
    # Submitted together (an actor runs one caller's calls in order), so that a slow round
    # trip on a loaded machine cannot reorder the deadlines themselves.
    ray.get([timer.schedule.remote(delay, recorder, "record", tag)
             for delay, tag in ((900, "c"), (300, "a"), (600, "b"))])
    calls = wait_until(lambda: (lambda h: h if len(h) == 3 else None)(
        ray.get(recorder.history.remote())))
    assert [args[0] for _, args, _ in calls] == ["a", "b", "c"]


def test_periodic_task_runs_at_a_fixed_rate_until_cancelled(timer, recorder):
    task_id = ray.get(timer.schedule_periodic.remote(100, recorder, "record", "tick",
                                                     initial_delay_ms=0))
    calls = wait_until(lambda: (lambda h: h if len(h) >= 5 else None)(
        ray.get(recorder.history.remote())))
    gaps = [b[2] - a[2] for a, b in zip(calls, calls[1:])]
    assert all(0.05 < gap < 0.2 for gap in gaps), gaps
    assert ray.get(timer.pending.remote()) == 1
    assert ray.get(timer.cancel.remote(task_id)) is True
    time.sleep(0.05)  # a call already sent may still land
    settled = len(ray.get(recorder.history.remote()))
    time.sleep(0.4)
    assert len(ray.get(recorder.history.remote())) == settled
    assert ray.get(timer.pending.remote()) == 0


def test_periodic_task_default_first_run_is_one_period_away(timer, recorder):
    before = time.time()
    task_id = ray.get(timer.schedule_periodic.remote(300, recorder, "record", "p"))
    calls = wait_until(lambda: ray.get(recorder.history.remote()))
    assert calls[0][2] - before >= 0.299
    ray.get(timer.cancel.remote(task_id))


def test_a_periodic_task_to_a_dead_target_is_cancelled(timer, ray_session):
    victim = Recorder.remote()
    ray.get(victim.history.remote())
    ray.get(timer.schedule_periodic.remote(50, victim, "record", "x", initial_delay_ms=0))
    wait_until(lambda: ray.get(victim.history.remote()))
    ray.kill(victim)
    # The next run finds the target dead: the task is dropped, not retried forever.
    wait_until(lambda: ray.get(timer.pending.remote()) == 0)
    time.sleep(0.3)
    assert ray.get(timer.pending.remote()) == 0


def test_a_one_shot_task_to_a_dead_target_is_dropped_and_the_timer_carries_on(
        timer, recorder, ray_session):
    victim = Recorder.remote()
    ray.get(victim.history.remote())
    ray.kill(victim)
    ray.get(timer.schedule.remote(10, victim, "record", "lost"))
    wait_until(lambda: ray.get(timer.pending.remote()) == 0)
    ray.get(timer.schedule.remote(10, recorder, "record", "still-working"))
    calls = wait_until(lambda: ray.get(recorder.history.remote()))
    assert calls[0][1] == ("still-working",)


def test_a_failing_method_does_not_cancel_its_periodic_task(timer, recorder):
    task_id = ray.get(timer.schedule_periodic.remote(50, recorder, "fail", initial_delay_ms=0))
    wait_until(lambda: len(ray.get(recorder.history.remote())) >= 3)
    assert ray.get(timer.pending.remote()) == 1
    assert ray.get(timer.cancel.remote(task_id)) is True


def test_a_slow_target_is_not_sent_a_backlog(timer, recorder):
    # Period 50 ms, each call takes 300 ms: runs due while one is outstanding are skipped.
    task_id = ray.get(timer.schedule_periodic.remote(50, recorder, "slow", 0.3,
                                                     initial_delay_ms=0))
    time.sleep(1.0)
    ray.get(timer.cancel.remote(task_id))
    time.sleep(0.35)
    calls = ray.get(recorder.history.remote())
    assert 2 <= len(calls) <= 5, len(calls)


def test_unknown_method_is_dropped(timer, recorder):
    ray.get(timer.schedule_periodic.remote(20, recorder, "no_such_method", initial_delay_ms=0))
    wait_until(lambda: ray.get(timer.pending.remote()) == 0)


def test_invalid_arguments_are_rejected(timer, recorder):
    with pytest.raises(InvalidRequestError):
        ray.get(timer.schedule.remote(-1, recorder, "record"))
    with pytest.raises(InvalidRequestError):
        ray.get(timer.schedule_periodic.remote(0, recorder, "record"))
    assert ray.get(timer.pending.remote()) == 0


def test_a_keyed_task_replaces_the_task_of_its_key(timer, recorder):
    # A broker that restarts schedules its periodic work again under the same keys: the
    # shared node timer runs it once, not twice.
    first = ray.get(timer.schedule_periodic.remote(100, recorder, "record", "old",
                                                   key="broker-0:checkpoint"))
    second = ray.get(timer.schedule_periodic.remote(100, recorder, "record", "new",
                                                    initial_delay_ms=0,
                                                    key="broker-0:checkpoint"))
    assert first != second and ray.get(timer.pending.remote()) == 1
    assert ray.get(timer.cancel.remote(first)) is False
    calls = wait_until(lambda: (lambda h: h if len(h) >= 3 else None)(
        ray.get(recorder.history.remote())))
    assert {args for _, args, _ in calls} == {("new",)}
    assert ray.get(timer.cancel.remote(second)) is True
    # A cancelled key is free: a one-shot task under it fires and leaves nothing behind.
    ray.get(timer.schedule.remote(0, recorder, "record", "once", key="broker-0:checkpoint"))
    wait_until(lambda: ray.get(timer.pending.remote()) == 0)


def test_keep_scheduled_schedules_again_when_the_node_timer_restarts(ray_session, recorder):
    import asyncio

    from actors.names import timer_name
    from actors.timer.actor import keep_scheduled

    @ray.remote(num_cpus=0)
    class Broker:
        async def start(self, target):
            self.task = asyncio.get_running_loop().create_task(keep_scheduled(
                "timer-test", [("b:tick", 100, target, "record")], lambda: True))

        def node(self):
            return ray.get_runtime_context().get_node_id()

    broker = Broker.remote()
    ray.get(broker.start.remote(recorder))
    node_timer = wait_until(lambda: _named(timer_name(ray.get(broker.node.remote()))))
    wait_until(lambda: len(ray.get(recorder.history.remote())) >= 2)
    ray.kill(node_timer, no_restart=False)   # its process dies; Ray starts it again, empty
    time.sleep(0.5)
    seen = len(ray.get(recorder.history.remote()))
    wait_until(lambda: len(ray.get(recorder.history.remote())) >= seen + 3, timeout_s=20)
    assert ray.get(node_timer.pending.remote()) == 1
    ray.kill(broker)
    ray.kill(node_timer, no_restart=True)


def _named(name):
    try:
        return ray.get_actor(name, namespace="timer-test")
    except ValueError:
        return None
