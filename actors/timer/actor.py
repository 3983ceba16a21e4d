"""TimerActor: a node's scheduler for delayed and periodic work (Kafka's KafkaScheduler role,
built on the timing wheel), shared by the brokers and the controller on the node.

One per node rather than one per broker: an idle Ray actor process costs ~0.8% of a core
(Ray's core worker wakes every 10 ms), and an embedded cluster runs all its brokers on one
node. It is detached, so it outlives any one broker, and restarted by Ray if its process
dies; the work scheduled on it is then gone, so its users keep a ``watch`` call pending and
schedule again when it fails (``keep_scheduled``). A task scheduled with a ``key`` replaces
the task of that key: a broker that restarts schedules its work again without doubling it.

A task names a target actor, a method and its arguments; when the task fires the actor calls
``getattr(target, method).remote(*args)`` and watches the result in the background. A target
found dead (``ActorDiedError`` or any other ``RayActorError`` but a transient
``ActorUnavailableError``) is logged and dropped: its periodic task is cancelled, never retried.
Periodic tasks run at a fixed rate; a run is skipped, not queued, while the previous call to
the target is still outstanding, so a slow target never accumulates a backlog.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional

import ray
from ray.exceptions import (ActorUnavailableError, ActorUnschedulableError, RayActorError,
                            RayTaskError)

from actors.gcs import create_named
from actors.names import timer_name

from protocols.errors import InvalidRequestError

from actors.timer.system_timer import AsyncioTimer, monotonic_ms
from actors.timer.wheel import TimerTask

__all__ = ["TimerActor", "keep_scheduled", "node_timer"]

logger = logging.getLogger(__name__)


@dataclass
class _ScheduledCall:
    task_id: int
    target: Any
    method_name: str
    args: tuple
    period_ms: Optional[int]
    next_fire_ms: int
    timer_task: Optional[TimerTask] = None
    in_flight: bool = False
    key: Optional[str] = None


@ray.remote(num_cpus=0)
class TimerActor:
    """One per node. Methods are coroutines: they all run on the actor's event loop."""

    def __init__(self, label: str = "timer", tick_ms: int = 1, wheel_size: int = 20):
        self.label = label
        self._tick_ms = tick_ms
        self._wheel_size = wheel_size
        # Built on first use: the event loop that runs this actor's methods is not running
        # while __init__ executes.
        self._timer: Optional[AsyncioTimer] = None
        self._scheduled: dict[int, _ScheduledCall] = {}
        self._keys: dict[str, int] = {}   # key -> task id
        self._task_ids = itertools.count(1)
        self._outstanding_calls: set[asyncio.Task] = set()

    def _ensure_timer(self) -> AsyncioTimer:
        if self._timer is None:
            self._timer = AsyncioTimer(tick_ms=self._tick_ms, wheel_size=self._wheel_size,
                                       name=self.label)
        return self._timer

    async def schedule(self, delay_ms: int, target_handle: Any, method_name: str,
                       *args: Any, key: Optional[str] = None) -> int:
        """Call ``target_handle.<method_name>.remote(*args)`` once, ``delay_ms`` from now
        (in place of the task scheduled with ``key``, if any)."""
        if delay_ms < 0:
            raise InvalidRequestError(f"delay_ms must be >= 0, got {delay_ms}")
        return self._add(target_handle, method_name, args, delay_ms, period_ms=None, key=key)

    async def schedule_periodic(self, period_ms: int, target_handle: Any, method_name: str,
                                *args: Any, initial_delay_ms: Optional[int] = None,
                                key: Optional[str] = None) -> int:
        """Call the method every ``period_ms`` (first after ``initial_delay_ms``, default one
        period) until cancelled or the target dies; in place of the task scheduled with
        ``key``, if any."""
        if period_ms <= 0:
            raise InvalidRequestError(f"period_ms must be > 0, got {period_ms}")
        first = period_ms if initial_delay_ms is None else initial_delay_ms
        if first < 0:
            raise InvalidRequestError(f"initial_delay_ms must be >= 0, got {first}")
        return self._add(target_handle, method_name, args, first, period_ms=period_ms,
                         key=key)

    async def cancel(self, task_id: int) -> bool:
        """True iff the task was still scheduled (a one-shot task that fired is not)."""
        call = self._scheduled.get(task_id)
        self._drop(task_id)
        return call is not None

    async def watch(self) -> None:
        """Never answers: a user keeps one call pending to hear at once when this actor's
        process dies (the call fails then) and the work it scheduled here is lost."""
        await asyncio.Event().wait()

    async def pending(self) -> int:
        """Scheduled tasks: one-shot tasks not yet fired plus live periodic tasks."""
        return len(self._scheduled)

    def _add(self, target: Any, method_name: str, args: tuple, delay_ms: int,
             period_ms: Optional[int], key: Optional[str] = None) -> int:
        if not isinstance(method_name, str) or not method_name:
            raise InvalidRequestError(f"method_name must be a method name, got {method_name!r}")
        self._ensure_timer()
        if key is not None and key in self._keys:
            self._drop(self._keys[key])
        task_id = next(self._task_ids)
        call = _ScheduledCall(task_id, target, method_name, tuple(args), period_ms,
                              next_fire_ms=monotonic_ms() + delay_ms, key=key)
        self._scheduled[task_id] = call
        if key is not None:
            self._keys[key] = task_id
        self._arm(call, delay_ms)
        return task_id

    def _arm(self, call: _ScheduledCall, delay_ms: int) -> None:
        call.timer_task = TimerTask(delay_ms, partial(self._fire, call.task_id))
        self._ensure_timer().add(call.timer_task)

    def _fire(self, task_id: int) -> None:
        call = self._scheduled.get(task_id)
        if call is None:
            return
        if call.period_ms is None:
            self._forget(call)
        else:
            self._rearm_periodic(call)
            if call.in_flight:
                logger.debug("timer task %d: previous call to %s still running, skipping",
                             task_id, call.method_name)
                return
        try:
            ref = getattr(call.target, call.method_name).remote(*call.args)
        except Exception:
            logger.exception("timer task %d: cannot call %s; dropping it", task_id,
                             call.method_name)
            self._drop(task_id)
            return
        call.in_flight = True
        watcher = asyncio.ensure_future(self._watch_call(call, ref))
        self._outstanding_calls.add(watcher)
        watcher.add_done_callback(self._outstanding_calls.discard)

    def _rearm_periodic(self, call: _ScheduledCall) -> None:
        # Fixed rate: the next run is due one period after the previous one was due; runs
        # missed while the actor was busy are skipped rather than fired in a burst.
        now = monotonic_ms()
        period = call.period_ms
        due = call.next_fire_ms + period
        if due <= now:
            due += ((now - due) // period + 1) * period
        call.next_fire_ms = due
        self._arm(call, due - now)

    async def _watch_call(self, call: _ScheduledCall, ref: Any) -> None:
        try:
            await ref
        except RayTaskError as e:
            # Caught first: the method's own failure (even one caused by some other dead
            # actor it called) says nothing about whether the target is alive.
            logger.warning("timer task %d: %s raised: %s", call.task_id, call.method_name, e)
        except ActorUnavailableError as e:
            # Transient (the target is restarting or unreachable): a periodic task carries on.
            logger.warning("timer task %d: target unavailable for %s: %s", call.task_id,
                           call.method_name, e)
        except RayActorError as e:
            # Normal when a broker or controller stops: its tasks end with it.
            logger.info("timer task %d: target actor is dead, dropping the task (%s): %s",
                           call.task_id, call.method_name, e)
            self._drop(call.task_id)
        except Exception:
            logger.exception("timer task %d: call to %s failed", call.task_id,
                             call.method_name)
        finally:
            call.in_flight = False

    def _drop(self, task_id: int) -> None:
        call = self._scheduled.get(task_id)
        if call is not None:
            self._forget(call)
            if call.timer_task is not None:
                call.timer_task.cancel()

    def _forget(self, call: _ScheduledCall) -> None:
        del self._scheduled[call.task_id]
        if call.key is not None and self._keys.get(call.key) == call.task_id:
            del self._keys[call.key]


RESCHEDULE_DELAY_S = 0.5


async def node_timer(namespace: str) -> Any:
    """The TimerActor of the node this runs on, created by the first to ask."""
    name = timer_name(ray.get_runtime_context().get_node_id())
    return await create_named(TimerActor, name, namespace, name, get_if_exists=True,
                              lifetime="detached", max_restarts=-1)


async def keep_scheduled(namespace: str, tasks: list[tuple],
                         running: Callable[[], bool]) -> None:
    """Keep ``tasks`` (key, period_ms, target, method[, initial_delay_ms]: the first call
    that long after scheduling, by default one period) scheduled on this node's timer while
    ``running()``: scheduled now, and again whenever the timer's process died and Ray
    started it again (empty). A timer killed for good (the cluster shutting down) ends it."""
    timer = await node_timer(namespace)
    restarted = False
    while running():
        try:
            # Calls to a timer Ray is restarting wait for it; to one killed for good (the
            # cluster shutting down) they fail at once.
            await asyncio.gather(*[
                timer.schedule_periodic.remote(period_ms, target, method, key=key,
                                               initial_delay_ms=initial_delay_ms)
                for key, period_ms, target, method, initial_delay_ms in
                (tuple(task) + (None,) * (5 - len(task)) for task in tasks)])
        except ActorUnavailableError:
            await asyncio.sleep(RESCHEDULE_DELAY_S)  # restarting: try again
            continue
        except RayActorError as e:
            logger.info("the node's timer is gone for good (%r); %s not scheduled", e,
                        [key for key, *_ in tasks])
            return
        if restarted:
            logger.warning("the node's timer was restarted; scheduled %s again",
                           [key for key, *_ in tasks])
        try:
            await timer.watch.remote()
        except RayActorError:
            restarted = True
        except ActorUnschedulableError as e:
            # Ray declared this node dead (cut off past its failure detection): the timer,
            # pinned here, cannot start again, and this process ends with its raylet.
            logger.info("the node's timer cannot start again (%r); %s not scheduled", e,
                        [key for key, *_ in tasks])
            return
        await asyncio.sleep(RESCHEDULE_DELAY_S)
