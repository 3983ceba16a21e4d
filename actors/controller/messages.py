"""The broker's guard on controller requests. The requests themselves (LeaderAndIsr,
StopReplica, UpdateMetadata) are in ``protocols.messages``; each carries the controller
epoch, so a broker can reject one from a controller that has since been replaced."""
from __future__ import annotations

from protocols.errors import StaleControllerEpochError


def check_controller_epoch(current: int, received: int) -> None:
    """A broker's guard: requests from an older controller are refused."""
    if received < current:
        raise StaleControllerEpochError(
            f"Received a request with controller epoch {received}, older than the current "
            f"controller epoch {current}")
