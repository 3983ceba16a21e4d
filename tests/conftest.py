"""Session-wide fixtures shared by several test packages."""
from __future__ import annotations

import os
import secrets

import pytest


# -- Ray: one local instance for the whole session ---------------------------------------------

def _ray_local_token_auth() -> None:
    """Ray 2.60 turns token authentication on for a new local cluster and, with no token
    around, writes one to ~/.ray/auth_token. Keep auth on but give the test cluster its own
    throw-away token through the environment (inherited by the raylet and workers), so the
    tests never touch the home directory. An explicit RAY_AUTH_MODE from the user wins."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    if "RAY_AUTH_TOKEN" not in os.environ and "RAY_AUTH_TOKEN_PATH" not in os.environ:
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    # This process read its Ray config when ray was imported; re-read it so the driver
    # agrees with its children on the mode (what ray itself does when it enables auth).
    from ray._raylet import Config
    Config.initialize("")


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance (2 CPUs, no dashboard, namespace ``rafka-tests``) shared by every
    ``@pytest.mark.ray`` test of the session; shut down when the session ends."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        _ray_local_token_auth()
    ray.init(num_cpus=2, include_dashboard=False, namespace="rafka-tests",
             ignore_reinit_error=True, log_to_driver=True)
    yield ray
    if started_here:
        ray.shutdown()
