"""What the controller sends to brokers. Every request carries the controller epoch, so a
broker can reject one from a controller that has since been replaced."""
from __future__ import annotations

from dataclasses import dataclass, field

from protocols.errors import StaleControllerEpochError


@dataclass(frozen=True)
class LeaderAndIsr:
    controller_epoch: int
    broker_id: int
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    is_new: bool = False


@dataclass(frozen=True)
class StopReplica:
    controller_epoch: int
    broker_id: int
    topic: str
    partition: int
    delete_partition: bool


@dataclass(frozen=True)
class UpdateMetadata:
    controller_epoch: int
    broker_id: int
    image: dict = field(compare=False)


def check_controller_epoch(current: int, received: int) -> None:
    """A broker's guard: requests from an older controller are refused."""
    if received < current:
        raise StaleControllerEpochError(
            f"Received a request with controller epoch {received}, older than the current "
            f"controller epoch {current}")
