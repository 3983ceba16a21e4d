"""Ray's GCS from rafka's processes: starting, finding and fencing named actors (names:
``actors.names``), and reads and writes of its key-value store, each bounded (Ray's own wait
for ever) and made one at a time on one thread per process."""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray
from ray.exceptions import ActorAlreadyExistsError, RpcError
from ray.experimental.internal_kv import internal_kv_get_gcs_client
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from protocols.errors import KafkaTimeoutError

NAME_FREE_TIMEOUT_S = 30.0  # how long a restarted broker waits for its old actors' names
# How long a read or write of the GCS's store may wait for its answer. Ray's own
# _internal_kv_get and _internal_kv_put wait for ever: one made while the host was cut off
# from the head never returned after healing, and every later GCS call of that process
# waited behind it on its GCS thread.
KV_TIMEOUT_S = 10.0


def here() -> NodeAffinitySchedulingStrategy:
    """Schedule on the node this code runs on."""
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


async def create_named(actor_cls, name: str, namespace: str, *args, **options) -> Any:
    """Create a named actor on this node, waiting while a dead predecessor still holds the
    name (Ray frees it shortly after the owner process dies). With ``get_if_exists=True``,
    the live actor of that name if there is one."""
    deadline = time.monotonic() + NAME_FREE_TIMEOUT_S
    while True:
        try:
            return actor_cls.options(name=name, namespace=namespace, scheduling_strategy=here(),
                                     **options).remote(*args)
        except (ActorAlreadyExistsError, ValueError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


# Ray's name lookups and store reads and writes go to the GCS and wait for its answer: on a
# host cut off from the head that is up to a minute, and from an actor's event loop it would
# stop everything the actor serves. They run on a thread of their own, one at a time (no
# two threads of a process use Ray's GCS client at once); a caller gives up on one after
# its own timeout.
_GCS_CALLS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rafka-gcs")


class _GcsThread:
    """What the GCS thread is doing, for ``gcs_backlog``. A call whose caller gave up
    before it ran is cancelled and never runs; it is counted done then."""
    submitted = 0
    done = 0
    running: str | None = None
    started = 0.0

    @classmethod
    def run(cls, fn, *args) -> Any:
        cls.running, cls.started = getattr(fn, "__name__", repr(fn)), time.monotonic()
        try:
            return fn(*args)
        finally:
            cls.running = None

    @classmethod
    def finished(cls, _future) -> None:
        cls.done += 1


async def gcs_call(fn, *args) -> Any:
    """``fn(*args)``, a call that waits on the GCS, on the process's GCS thread."""
    _GcsThread.submitted += 1
    future = _GCS_CALLS.submit(_GcsThread.run, fn, *args)
    future.add_done_callback(_GcsThread.finished)
    return await asyncio.wrap_future(future)


def kv_get(key: str, timeout_s: float = KV_TIMEOUT_S) -> bytes | None:
    """A key of the GCS's store (on the calling thread), waiting at most ``timeout_s``;
    raises when the GCS has not answered by then."""
    return internal_kv_get_gcs_client().internal_kv_get(key.encode(), None, timeout=timeout_s)


def kv_put(key: str, value: bytes, timeout_s: float = KV_TIMEOUT_S) -> None:
    """Set a key of the GCS's store (on the calling thread), waiting at most ``timeout_s``;
    raises when the GCS has not answered by then."""
    internal_kv_get_gcs_client().internal_kv_put(key.encode(), value, True, None,
                                                 timeout=timeout_s)


def kv_del(key: str, timeout_s: float = KV_TIMEOUT_S) -> int:
    """Delete a key of the GCS's store (on the calling thread), waiting at most
    ``timeout_s``; the number of keys deleted (0 or 1)."""
    return internal_kv_get_gcs_client().internal_kv_del(key.encode(), False, None,
                                                        timeout=timeout_s)


def kv_keys(prefix: str, timeout_s: float = KV_TIMEOUT_S) -> list[str]:
    """The keys of the GCS's store starting with ``prefix``, waiting at most ``timeout_s``."""
    return [k.decode() for k in
            internal_kv_get_gcs_client().internal_kv_keys(prefix.encode(), None,
                                                          timeout=timeout_s)]


def as_kafka_timeout(call, *args):
    """``call(*args)``, one of the ``kv_*`` calls, made for a client (a driver's
    ``rafka.Cluster``): Ray's deadline error (a GCS that did not answer, e.g. a driver cut off
    from the head) becomes Kafka's TimeoutException, naming the call."""
    try:
        return call(*args)
    except RpcError as e:
        raise KafkaTimeoutError(f"Ray's GCS did not answer {call.__name__}({args[0]!r}) "
                                f"in time: {e}") from e


def gcs_backlog() -> dict:
    """The process's GCS calls not yet done, and the one running with how long it has run
    (a call stuck on the GCS holds up every later one: shown in describe())."""
    running = _GcsThread.running
    return {"waiting": _GcsThread.submitted - _GcsThread.done, "running": running,
            "running_s": round(time.monotonic() - _GcsThread.started, 1) if running else 0.0}


async def lookup(name: str, namespace: str, timeout_s: float = 10.0) -> Any | None:
    """The live actor of that name, or None when there is none. Raises TimeoutError when
    the GCS does not answer in time (this host may be cut off from the head)."""
    def get():
        try:
            return ray.get_actor(name, namespace=namespace)
        except ValueError:
            return None
    return await asyncio.wait_for(gcs_call(get), timeout_s)


async def gcs_get(key: str, timeout_s: float = 5.0) -> bytes | None:
    """A key of the GCS's store as the GCS holds it now (always asked: nothing cached).
    Raises when the GCS does not answer within ``timeout_s``: Ray's RpcError (deadline
    exceeded) from the read itself, or TimeoutError while it waits behind other calls."""
    return await asyncio.wait_for(gcs_call(kv_get, key, timeout_s), timeout_s)
