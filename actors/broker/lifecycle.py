"""The broker's side of its channel to the controller (Kafka's BrokerLifecycleManager):
finding the controller or racing to become it, registering, heartbeating, and fencing a
controller that has stopped, but never one this broker merely cannot reach
(``actors.controller.lease``).

Every call that waits on the GCS (name lookups, the lease) runs off the event loop
(``actors.gcs``), and every call to the controller is bounded by a session timeout: a
call sent while a link was down may never be answered, and the next heartbeat asks again.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

import ray
from ray.exceptions import ActorAlreadyExistsError

from actors.broker.config import ClusterConfig
from actors.broker.state import BrokerState
from actors.controller.actor import ControllerActor
from actors.controller.lease import LEASE_KEY, LeaseReading, lease_expired
from actors.gcs import gcs_get, here, lookup
from actors.names import CONTROLLER

log = logging.getLogger(__name__)

REGISTER_RETRY_S = 0.5   # after a registration failed at once (not for want of an answer)


@dataclass
class ControllerChannel:
    """What the broker last heard from the controller, shown by ``describe()``: why a broker
    is not back is read there (times are ``time.monotonic()``)."""
    registered_epoch: int = -1
    registered_at: float | None = None
    last_answer_at: float | None = None
    unanswered: int = 0            # calls left unanswered for a session since the last answer
    last_error: str | None = None

    def answered(self) -> None:
        self.last_answer_at, self.unanswered = time.monotonic(), 0

    def unanswered_call(self, what: str) -> None:
        self.unanswered += 1
        self.last_error = f"{what}: no answer within a session"

    def snapshot(self) -> dict:
        now = time.monotonic()

        def ago(t: float | None) -> float | None:
            return None if t is None else round(now - t, 1)
        return {"registered_epoch": self.registered_epoch,
                "registered_s_ago": ago(self.registered_at),
                "last_answer_s_ago": ago(self.last_answer_at),
                "unanswered": self.unanswered, "last_error": self.last_error}


class BrokerLifecycle:
    """One broker's registration and heartbeats, and its handle on the controller. The
    broker actor builds it with what it registers (id, incarnation, rack, its advertised
    endpoints once bound), what a broker racing for the controller starts one with
    (cluster, namespace, data directory, config), and ``state``, told each registration's
    epoch."""

    def __init__(self, broker_id: int, incarnation: str, rack: str | None,
                 endpoints: Callable[[], list], cluster_name: str, namespace: str,
                 data_dir: str, cfg: ClusterConfig, state: BrokerState,
                 stopping: Callable[[], bool]):
        self.broker_id = broker_id
        self.incarnation = incarnation
        self.rack = rack
        self.endpoints = endpoints
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.data_dir = data_dir
        self.cfg = cfg
        self.state = state
        self.stopping = stopping
        self.channel = ControllerChannel()
        self.controller = None   # the controller's handle, once found
        # The broker lost part of what the controller sent it (its replicas' side failed):
        # the next heartbeat registers again, which sends it the whole state.
        self.resync_wanted = False

    async def ensure_controller(self):
        """The controller's handle, racing to become it when there is none."""
        while not self.stopping():
            if self.controller is not None:
                return self.controller
            try:
                handle = await lookup(CONTROLLER, self.namespace, self.session_s())
            except (asyncio.TimeoutError, TimeoutError):
                self.channel.last_error = "looking the controller up: no answer from the GCS"
                continue  # this host may be cut off; ask again
            if handle is None:
                try:
                    handle = ControllerActor.options(
                        name=CONTROLLER, namespace=self.namespace,
                        scheduling_strategy=here()).remote(
                            self.cluster_name, self.namespace, self.data_dir,
                            self.cfg.controller, self.broker_id)
                except (ActorAlreadyExistsError, ValueError):
                    continue  # another broker won the race: take its handle next time round
            lease_before = self._read_lease_soon()
            try:
                await asyncio.wait_for(handle.ping.remote(), self.session_s())
            except asyncio.TimeoutError:  # frozen, or out of reach: fence it if it is frozen
                self.channel.unanswered_call("ping")
                await self._fence_if_lease_expired(handle, lease_before)
                await asyncio.sleep(0.05)
                continue
            except Exception as e:  # dead, its name not yet freed: race again
                self.channel.last_error = f"ping: {e!r}"[:300]
                await asyncio.sleep(0.05)
                continue
            self.controller = handle
            return handle
        raise asyncio.CancelledError()

    def session_s(self) -> float:
        return self.cfg.controller.get("broker.session.timeout.ms", 9000) / 1000

    async def join(self) -> None:
        """Register with the controller (found, or become), asking again until one answers.
        A controller that dies meanwhile (fenced by another broker) or fails the call is
        looked up again, as a heartbeat does: the broker's start must not end there."""
        while True:
            controller = await self.ensure_controller()
            lease_before = self._read_lease_soon()
            try:
                await asyncio.wait_for(self._register(controller), self.session_s())
                return
            except asyncio.TimeoutError:  # unanswered: a link down, a frozen controller
                self.channel.unanswered_call("register")
                log.warning("broker %d: the controller did not answer its registration "
                            "within %.1f s; asking again", self.broker_id, self.session_s())
                await self._fence_if_lease_expired(controller, lease_before)
            except Exception as e:  # noqa: BLE001 - died, or answered an error
                self.channel.last_error = f"register: {e!r}"[:300]
                log.warning("broker %d: registering with the controller failed (%r); "
                            "finding the controller again", self.broker_id, e)
                self.controller = None
                await asyncio.sleep(REGISTER_RETRY_S)

    async def _register(self, controller) -> None:
        epoch = await controller.register_broker.remote(self.broker_id, self.incarnation,
                                                        self.rack, self.endpoints())
        self.state.on_registered(epoch)
        self.channel.registered_epoch, self.channel.registered_at = epoch, time.monotonic()
        self.channel.answered()

    async def heartbeats(self) -> None:
        interval = self.cfg.broker["broker.heartbeat.interval.ms"] / 1000
        while not self.stopping():
            await asyncio.sleep(interval)
            controller = None
            lease_before = None
            try:
                controller = await self.ensure_controller()
                lease_before = self._read_lease_soon()
                _, register = await asyncio.wait_for(
                    controller.heartbeat.remote(self.broker_id, self.incarnation),
                    self.session_s())
                self.channel.answered()
                if register or self.resync_wanted:
                    # Bounded like the heartbeat: a call sent while the link was down may
                    # never be answered, and the next heartbeat asks again.
                    await asyncio.wait_for(self._register(controller), self.session_s())
                    self.resync_wanted = False
            except asyncio.CancelledError:
                raise
            except asyncio.TimeoutError:
                self.channel.unanswered_call("heartbeat")
                if controller is not None and lease_before is not None:
                    await self._fence_if_lease_expired(controller, lease_before)
            except Exception as e:  # died: race for the name
                log.info("broker %d: controller lost (%r)", self.broker_id, e)
                self.channel.last_error = f"heartbeat: {e!r}"[:300]
                self.controller = None

    async def report_replicas_failed(self, lost: list) -> None:
        """Tell the controller that these replicas went down with their host (it moves
        their leadership and ISR places off them), asking again until it answers."""
        backoff_s = self.cfg.broker["replica.fetch.backoff.ms"] / 1000
        while not self.stopping():
            try:
                controller = await self.ensure_controller()
                await asyncio.wait_for(controller.replicas_failed.remote(
                    self.broker_id, [list(tp) for tp in lost]), self.session_s())
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("broker %d: could not report failed replicas yet: %r",
                         self.broker_id, e)
                await asyncio.sleep(backoff_s)

    def _read_lease_soon(self) -> asyncio.Task:
        """The controller's lease read from the GCS (``actors.controller.lease``), as a
        task: None when the GCS does not answer within half a session."""
        async def read() -> LeaseReading | None:
            try:
                value = await gcs_get(LEASE_KEY.format(name=self.cluster_name),
                                      self.session_s() / 2)
            except Exception:  # noqa: BLE001 - no answer from the GCS: unknown
                return None
            return LeaseReading(value, int(time.monotonic() * 1000))
        return asyncio.get_running_loop().create_task(read())

    async def _fence_if_lease_expired(self, controller, lease_before: asyncio.Task) -> bool:
        """A controller left a call unanswered for a session: kill it (freeing its name for
        a successor) only if its lease stood still meanwhile. A lease that moved on, or one
        this broker cannot read because it is the one cut off, leaves it be."""
        before, after = await lease_before, await self._read_lease_soon()
        session_ms = int(self.session_s() * 1000)
        if before is None or after is None:
            log.warning("broker %d: controller unresponsive for a session timeout, and no "
                        "answer from the GCS: this host may be cut off; not fencing it",
                        self.broker_id)
            return False
        if not lease_expired(before, after, session_ms):
            log.warning("broker %d: controller unresponsive for a session timeout but "
                        "renewing its lease; not fencing it", self.broker_id)
            return False
        log.warning("broker %d: controller unresponsive for a session timeout and its lease "
                    "stood still; fencing it", self.broker_id)
        ray.kill(controller, no_restart=True)
        self.controller = None
        return True
