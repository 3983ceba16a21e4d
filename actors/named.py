"""Starting a named actor on this node (names: ``actors.names``)."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import ray
from ray.exceptions import ActorAlreadyExistsError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

NAME_FREE_TIMEOUT_S = 30.0  # how long a restarted broker waits for its old actors' names


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
