"""Kafka's LogDirFailureChannel: an I/O error in a log directory takes the whole directory
offline.

A write that fails part-way (ENOSPC, EIO) leaves a segment whose bytes on disk no longer
match what the log holds in memory; appending after it would put acknowledged records
behind a torn batch that recovery cuts off. So the first ``OSError`` of any log operation
marks its log directory offline: every later write to a log in that directory is refused
with KAFKA_STORAGE_ERROR, and the owner is told once (``on_offline``). Kafka's broker then
stops serving the directory's replicas and, when it has no log directory left online, halts
(``ReplicaManager.handleLogDirFailure``: "Shutdown broker because all log dirs in ... have
failed"); a rafka broker has one, so it halts and its replicas recover from their files when
it starts again with room on the disk.

Pure bookkeeping, thread-safe (logs are written from worker threads too); no Ray here.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from protocols.errors import KafkaStorageError

# What ``probe`` writes: one page, so a full filesystem refuses it (an empty file needs no
# block and is created even on a full tmpfs).
PROBE_BYTES = 4096
PROBE_FILE = ".rafka-write-probe"


class LogDirFailureChannel:
    def __init__(self, on_offline: Callable[[str, str], None] | None = None):
        self._on_offline = on_offline
        self._offline: dict[str, str] = {}
        self._lock = threading.Lock()

    def mark_offline(self, log_dir: Path | str, message: str) -> None:
        """Take ``log_dir`` offline for ``message`` (the first error); the owner hears of
        each directory once."""
        key = str(log_dir)
        with self._lock:
            if key in self._offline:
                return
            self._offline[key] = message
        if self._on_offline is not None:
            self._on_offline(key, message)

    def check(self, log_dir: Path | str) -> None:
        """KAFKA_STORAGE_ERROR when ``log_dir`` is offline."""
        message = self._offline.get(str(log_dir))
        if message is not None:
            raise KafkaStorageError(f"Log directory {log_dir} is offline: {message}")

    def offline_dirs(self) -> dict[str, str]:
        with self._lock:
            return dict(self._offline)


def probe(log_dir: Path | str) -> str | None:
    """Whether a page can be written and synced in ``log_dir`` now: None, or the error (a
    broker waits for this before it serves a directory that failed)."""
    path = Path(log_dir) / PROBE_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
        return None
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        try:
            path.unlink()
        except OSError:
            pass
