"""The record a consumer's ``poll`` hands out."""
from __future__ import annotations

from typing import Any, NamedTuple


class ConsumerRecord(NamedTuple):
    """A named tuple, as kafka-python's: built a million times a second, so no dataclass."""
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple = ()
    leader_epoch: int = -1
