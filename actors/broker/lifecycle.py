"""The broker's side of its channel to the controller (Kafka's BrokerLifecycleManager):
finding the controller or racing to become it, registering, heartbeating, and fencing a
controller that has stopped, but never one this broker merely cannot reach
(``actors.controller.lease``).

Every call that waits on the GCS (name lookups, the lease) runs off the event loop
(``actors.named``), and every call to the controller is bounded by a session timeout: a
call sent while a link was down may never be answered, and the next heartbeat asks again.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import ray
from ray.exceptions import ActorAlreadyExistsError

from actors.controller.actor import ControllerActor
from actors.controller.lease import LEASE_KEY, LeaseReading, lease_expired
from actors.named import gcs_get, here, lookup
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
    """Mixed into ``BrokerActor``, whose fields it uses: ``broker_id``, ``incarnation``,
    ``rack``, ``endpoints``, ``cluster_name``, ``namespace``, ``data_dir``, ``cfg``,
    ``state``, ``channel`` (a ``ControllerChannel``), ``_controller`` and ``_stopping``."""

    async def _ensure_controller(self):
        """The controller's handle, racing to become it when there is none."""
        while not self._stopping:
            if self._controller is not None:
                return self._controller
            try:
                handle = await lookup(CONTROLLER, self.namespace, self._session_s())
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
                await asyncio.wait_for(handle.ping.remote(), self._session_s())
            except asyncio.TimeoutError:  # frozen, or out of reach: fence it if it is frozen
                self.channel.unanswered_call("ping")
                await self._fence_if_lease_expired(handle, lease_before)
                await asyncio.sleep(0.05)
                continue
            except Exception as e:  # dead, its name not yet freed: race again
                self.channel.last_error = f"ping: {e!r}"[:300]
                await asyncio.sleep(0.05)
                continue
            self._controller = handle
            return handle
        raise asyncio.CancelledError()

    def _session_s(self) -> float:
        return self.cfg.controller.get("broker.session.timeout.ms", 9000) / 1000

    async def _join(self) -> None:
        """Register with the controller (found, or become), asking again until one answers.
        A controller that dies meanwhile (killed as a zombie by another broker: long fault
        run, seed 138) or fails the call is looked up again, as a heartbeat does; before,
        the broker's start ended there and it never registered."""
        while True:
            controller = await self._ensure_controller()
            lease_before = self._read_lease_soon()
            try:
                await asyncio.wait_for(self._register(controller), self._session_s())
                return
            except asyncio.TimeoutError:  # unanswered: a link down, a frozen controller
                self.channel.unanswered_call("register")
                log.warning("broker %d: the controller did not answer its registration "
                            "within %.1f s; asking again", self.broker_id, self._session_s())
                await self._fence_if_lease_expired(controller, lease_before)
            except Exception as e:  # noqa: BLE001 - died, or answered an error
                self.channel.last_error = f"register: {e!r}"[:300]
                log.warning("broker %d: registering with the controller failed (%r); "
                            "finding the controller again", self.broker_id, e)
                self._controller = None
                await asyncio.sleep(REGISTER_RETRY_S)

    async def _register(self, controller) -> None:
        epoch = await controller.register_broker.remote(self.broker_id, self.incarnation,
                                                        self.rack, self.endpoints)
        self.state.on_registered(epoch)
        self.channel.registered_epoch, self.channel.registered_at = epoch, time.monotonic()
        self.channel.answered()

    async def _heartbeats(self) -> None:
        interval = self.cfg.broker["broker.heartbeat.interval.ms"] / 1000
        while not self._stopping:
            await asyncio.sleep(interval)
            controller = None
            lease_before = None
            try:
                controller = await self._ensure_controller()
                lease_before = self._read_lease_soon()
                _, register = await asyncio.wait_for(
                    controller.heartbeat.remote(self.broker_id, self.incarnation),
                    self._session_s())
                self.channel.answered()
                if register:
                    # Bounded like the heartbeat: a call sent while the link was down may
                    # never be answered, and the next heartbeat asks again.
                    await asyncio.wait_for(self._register(controller), self._session_s())
            except asyncio.CancelledError:
                raise
            except asyncio.TimeoutError:
                self.channel.unanswered_call("heartbeat")
                if controller is not None and lease_before is not None:
                    await self._fence_if_lease_expired(controller, lease_before)
            except Exception as e:  # died: race for the name
                log.info("broker %d: controller lost (%r)", self.broker_id, e)
                self.channel.last_error = f"heartbeat: {e!r}"[:300]
                self._controller = None

    def _read_lease_soon(self) -> asyncio.Task:
        """The controller's lease read from the GCS (``actors.controller.lease``), as a
        task: None when the GCS does not answer within half a session."""
        async def read() -> LeaseReading | None:
            try:
                value = await gcs_get(LEASE_KEY.format(name=self.cluster_name),
                                      self._session_s() / 2)
            except Exception:  # noqa: BLE001 - no answer from the GCS: unknown
                return None
            return LeaseReading(value, int(time.monotonic() * 1000))
        return asyncio.get_running_loop().create_task(read())

    async def _fence_if_lease_expired(self, controller, lease_before: asyncio.Task) -> bool:
        """A controller left a call unanswered for a session: kill it (freeing its name for
        a successor) only if its lease stood still meanwhile. A lease that moved on, or one
        this broker cannot read because it is the one cut off, leaves it be."""
        before, after = await lease_before, await self._read_lease_soon()
        session_ms = int(self._session_s() * 1000)
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
        self._controller = None
        return True
