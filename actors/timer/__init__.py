"""Kafka's timing wheel, SystemTimer and delayed-operation purgatory, plus the TimerActor.

Importing this package does not import Ray: the pure parts are re-exported here; the Ray
actor lives in ``actors.timer.actor``.
"""
from actors.timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from actors.timer.system_timer import AsyncioTimer, SystemTimer, ThreadedTimer, monotonic_ms
from actors.timer.wheel import TimerTask, TimerTaskEntry, TimerTaskList, TimingWheel

__all__ = [
    "AsyncioTimer",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "SystemTimer",
    "ThreadedTimer",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
    "monotonic_ms",
]
