"""Getting onto a Ray instance: the local one rafka starts for the embedded default, or the
one a driver, task or actor is already connected to."""
from __future__ import annotations

import json
import os
import secrets

# Ray passes a task argument or return value up to max_direct_call_object_size (100 KiB by
# default) inline; anything bigger goes through the plasma object store, which for a
# produce request or a fetch answer costs more than the work itself. Produce requests
# (max.request.size, 1 MiB) and fetch answers (max.partition.fetch.bytes /
# replica.fetch.max.bytes, 1 MiB) fit under this, so they go directly between processes.
#
# Ray starts worker processes at nice 15 so that they cannot starve the raylet. Here the
# workers are the brokers and replicas: every produce, follower fetch and consumer fetch
# runs in them, and at nice 15 they queue behind any client process on the node (measured
# with benchmarks/clients.py: end-to-end p99 at 10,000 records/s 32-34 ms at nice 15,
# 26-28 ms at 0). A Kafka broker runs at normal priority; so do ours on the instance rafka
# starts itself.
RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 4 * 1024 * 1024, "worker_niceness": 0}
RAY_SYSTEM_CONFIG_JSON = json.dumps(RAY_SYSTEM_CONFIG)


def prepare_local_token_auth() -> None:
    """Ray 2.60 turns token authentication on for a new local cluster and, with no token
    around, writes one to ~/.ray/auth_token. Keep auth on but give a local instance a
    throw-away token through the environment (inherited by the raylet and workers), so that
    nothing is written to the home directory. An explicit RAY_AUTH_MODE wins."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    if "RAY_AUTH_TOKEN" not in os.environ and "RAY_AUTH_TOKEN_PATH" not in os.environ:
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    # This process read its Ray config when ray was imported; re-read it so the driver
    # agrees with its children on the mode (what ray itself does when it enables auth).
    from ray._raylet import Config
    Config.initialize("")


def ensure_ray(address: str | None = None, **init_kwargs) -> None:
    """Connect to Ray unless already connected: to ``address`` (or RAY_ADDRESS) when given,
    else start a local instance (the embedded default)."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address is None:
        prepare_local_token_auth()
        init_kwargs.setdefault("include_dashboard", False)
        init_kwargs.setdefault("_system_config", RAY_SYSTEM_CONFIG)
    ray.init(address=address, ignore_reinit_error=True, **init_kwargs)
