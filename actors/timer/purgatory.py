"""Delayed operations and the purgatory they wait in (Kafka's DelayedOperationPurgatory).

A delayed operation has a timeout and may finish early on an external event: a produce
waiting for the high watermark to pass its offsets, a fetch waiting for ``fetch.min.bytes``.
The purgatory watches each operation under one or more keys (say, a topic partition);
``check_and_complete(key)`` is called when something happens to that key, and the timer
expires what is still waiting when its delay runs out. Each operation completes exactly once,
whichever path gets there first, from any thread.

Lock order (never reversed, so no deadlock): an operation's lock, then the purgatory's lock,
then the timer's lock. The purgatory never calls into an operation while holding its own lock.
"""
from __future__ import annotations

import logging
import threading
from typing import Generic, Hashable, Iterable, Optional, Protocol, TypeVar

from actors.timer.wheel import TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory", "Timer"]

logger = logging.getLogger(__name__)


class Timer(Protocol):
    """What a purgatory needs from its timer (``SystemTimer`` and both drivers fit)."""

    @property
    def size(self) -> int: ...

    def add(self, task: TimerTask) -> None: ...

    def advance_clock(self, timeout_ms: int = 0) -> bool: ...

    def shutdown(self) -> None: ...


class DelayedOperation(TimerTask):
    """An operation that completes within ``delay_ms``: early via ``try_complete`` or on expiry.

    Subclasses implement ``try_complete`` (check the condition; if met, return
    ``self.force_complete()``), ``on_complete`` (build the response: runs exactly once) and
    ``on_expiration`` (runs after ``on_complete`` when the timeout, not an event, completed it).
    """

    def __init__(self, delay_ms: int):
        super().__init__(delay_ms)
        self._completed = False
        # Re-entrant: try_complete runs under it and calls force_complete, which takes it too.
        self.lock = threading.RLock()

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now unless already completed; True iff this call completed it."""
        with self.lock:
            if self._completed:
                return False
            self._completed = True
        self.cancel()
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError

    def on_expiration(self) -> None:
        raise NotImplementedError

    def safe_try_complete(self) -> bool:
        with self.lock:
            if self._completed:
                return False
            return self.try_complete()

    def run(self) -> None:
        # The timer's callback: the delay ran out.
        with self.lock:
            if self.force_complete():
                self.on_expiration()


T = TypeVar("T", bound=DelayedOperation)


class KeyListener(Protocol):
    def on_key_event(self, key: Hashable) -> None: ...


class DelayedOperationPurgatory(Generic[T]):
    """Watches delayed operations by key and expires them through ``timer``.

    Completed operations may linger in the watch lists of keys that saw no event since;
    once more than ``purge_interval_requests`` of them may have piled up (Kafka's
    ``*.purgatory.purge.interval.requests``), the next ``advance_clock`` or
    ``try_complete_else_watch`` sweeps them out.
    """

    def __init__(self, purgatory_name: str, timer: Timer, *, broker_id: int = -1,
                 purge_interval_requests: int = 1000, timer_enabled: bool = True):
        self.purgatory_name = purgatory_name
        self.broker_id = broker_id
        self.purge_interval_requests = purge_interval_requests
        self._timer = timer
        self._timer_enabled = timer_enabled
        self._lock = threading.Lock()
        self._watchers_by_key: dict[Hashable, list[T]] = {}
        # Who hears of every event on a key besides its operations (a fetch session whose
        # idle partitions are not read until something happens to them).
        # A dict (insertion order), not a set: the order they hear in must not depend on ids.
        self._listeners_by_key: dict[Hashable, dict[KeyListener, None]] = {}
        # Watch entries added since the last purge: an over-estimate of those still pending.
        self._estimated_total_operations = 0
        self._shut_down = False

    @property
    def timer(self) -> Timer:
        return self._timer

    def try_complete_else_watch(self, operation: T, watch_keys: Iterable[Hashable]) -> bool:
        """Complete ``operation`` now if it can; else watch it under every key and time it.

        True iff the operation was completed by this call (the caller answers at once).
        """
        keys = list(watch_keys)
        if not keys:
            raise ValueError("the watch key list can't be empty")
        # Check, watch, check again, all under the operation's lock: an event that arrives
        # after the first check finds the operation on its watch list, or the second check
        # sees its effect. Either way no completion is missed.
        with operation.lock:
            if operation.try_complete():
                return True
            self._watch_all(operation, keys)
            if operation.try_complete():
                return True
        self._time(operation)
        return False

    def watch(self, operation: T, watch_keys: Iterable[Hashable]) -> None:
        """Watch and time ``operation`` without checking it: for a caller that has just
        found it incomplete on the thread where every event on its keys happens (a replica
        host's event loop). Nothing can have moved between that check and the watch, so
        ``try_complete_else_watch``'s two checks around it would only repeat the caller's
        work (for a fetch of a thousand partitions, twice a second per fetcher)."""
        keys = list(watch_keys)
        if keys:   # none: it waits for its timeout (or a ``watch_key`` added later)
            with operation.lock:
                self._watch_all(operation, keys)
        self._time(operation)

    def watch_key(self, operation: T, key: Hashable) -> None:
        """Watch a waiting operation under one more key (a listener adding a partition to a
        fetch that waits, while ``check_and_complete`` of that key is under way)."""
        with operation.lock:
            self._watch_all(operation, [key])

    def listen(self, key: Hashable, listener: "KeyListener") -> None:
        """``listener.on_key_event(key)`` is called at every ``check_and_complete(key)``,
        before the key's operations are checked, until ``unlisten``."""
        with self._lock:
            self._listeners_by_key.setdefault(key, {})[listener] = None

    def unlisten(self, key: Hashable, listener: "KeyListener") -> None:
        with self._lock:
            listeners = self._listeners_by_key.get(key)
            if listeners is not None:
                listeners.pop(listener, None)
                if not listeners:
                    del self._listeners_by_key[key]

    def _watch_all(self, operation: T, keys: list[Hashable]) -> None:
        """Under the operation's lock (held by the caller), which every completion takes:
        it cannot complete while its keys are being added, so all are added at once."""
        if operation.is_completed:
            return
        watchers_by_key = self._watchers_by_key
        with self._lock:
            for key in keys:
                watchers = watchers_by_key.get(key)
                if watchers is None:
                    watchers_by_key[key] = [operation]
                else:
                    watchers.append(operation)
            # Counted per watch entry, not per operation: a fetch for a thousand idle
            # partitions leaves a thousand entries behind when it completes.
            self._estimated_total_operations += len(keys)

    def _time(self, operation: T) -> None:
        if not operation.is_completed:
            if self._timer_enabled:
                self._timer.add(operation)
            if operation.is_completed:
                # Completed by another thread between the check and the add.
                operation.cancel()
        self._maybe_purge()

    def check_and_complete(self, key: Hashable) -> int:
        """An event on ``key``: tell its listeners, then try to complete its watchers; how
        many this call completed."""
        if self._listeners_by_key:
            with self._lock:
                listeners = self._listeners_by_key.get(key)
                listeners = list(listeners) if listeners else ()
            for listener in listeners:
                listener.on_key_event(key)
        with self._lock:
            watchers = self._watchers_by_key.get(key)
            snapshot = list(watchers) if watchers else None
        if not snapshot:
            return 0
        completed = 0
        for operation in snapshot:
            if not operation.is_completed and operation.safe_try_complete():
                completed += 1
        with self._lock:
            # Filter the live list (not the snapshot): operations watched meanwhile stay.
            watchers = self._watchers_by_key.get(key)
            if watchers is not None:
                watchers[:] = [op for op in watchers if not op.is_completed]
                if not watchers:
                    del self._watchers_by_key[key]
        if completed:
            logger.debug("key %r unblocked %d %s operations", key, completed,
                         self.purgatory_name)
        return completed

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching ``key``: its operations are cancelled (their timers too), not completed."""
        with self._lock:
            watchers = self._watchers_by_key.pop(key, None)
        if not watchers:
            return []
        for operation in watchers:
            operation.cancel()
        return watchers

    @property
    def watched(self) -> int:
        """Total length of the watch lists (an operation counts once per key it waits on,
        and completed ones count until purged)."""
        with self._lock:
            return sum(len(ops) for ops in self._watchers_by_key.values())

    @property
    def delayed(self) -> int:
        """Operations waiting in the timer for their expiry."""
        return self._timer.size

    @property
    def watch_keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._watchers_by_key)

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Expire what is due (Kafka's reaper step), then purge if it is time."""
        advanced = self._timer.advance_clock(timeout_ms)
        self._maybe_purge()
        return advanced

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list; how many entries were dropped."""
        purged = 0
        with self._lock:
            for key in list(self._watchers_by_key):
                ops = self._watchers_by_key[key]
                kept = [op for op in ops if not op.is_completed]
                purged += len(ops) - len(kept)
                if kept:
                    ops[:] = kept
                else:
                    del self._watchers_by_key[key]
        if purged:
            logger.debug("purged %d completed operations from %s watch lists", purged,
                         self.purgatory_name)
        return purged

    def shutdown(self) -> None:
        """Stop expiring: shut the timer down (pending operations are dropped with it)."""
        self._shut_down = True
        self._timer.shutdown()

    def _maybe_purge(self) -> Optional[int]:
        # Completed-but-still-watched operations are estimated as those watched since the last
        # purge minus those still waiting in the timer.
        delayed = self.delayed
        with self._lock:
            if self._estimated_total_operations - delayed <= self.purge_interval_requests:
                return None
            self._estimated_total_operations = delayed
        return self.purge_completed()
