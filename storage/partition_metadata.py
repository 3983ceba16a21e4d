"""Kafka's ``partition.metadata`` file (KIP-516): which topic, by id, a partition directory
belongs to. A topic deleted and created again under the same name gets a new id, so a
broker that was away while that happened can tell its old log from the new topic's: its
directory is a *stray* log, which Kafka's LogManager moves aside and deletes rather than
serve (the new topic's replica then starts empty and fetches from its leader).

The file is Kafka's, byte for byte::

    version: 0
    topic_id: <the topic id, 22 characters of URL-safe base64>

As in Kafka (``UnifiedLog.initializeTopicId``), a new log's id is recorded in memory and the
file is written off the path that opens the log ("flush-metadata-file", scheduled), and at
the latest when the log closes: opening ten thousand replicas at once would otherwise wait
for twenty thousand fsyncs. A file lost to a crash before its flush is written again the
next time the replica opens, as a file never written would be.
"""
from __future__ import annotations

import logging
import shutil
import threading
import uuid
from pathlib import Path

from protocols.errors import KafkaStorageError
from storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "partition.metadata"
CURRENT_VERSION = 0


def read_topic_id(directory: Path) -> str | None:
    """The topic id the directory's file names (None: no file yet); a file that does not
    parse is a KafkaStorageError naming it."""
    path = Path(directory) / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise KafkaStorageError(f"Malformed {path}: not UTF-8 text ({e})") from None
    fields = {}
    for line in text.splitlines():
        name, sep, value = line.partition(": ")
        if not sep:
            raise KafkaStorageError(f"Malformed line in {path}: {line!r}")
        fields[name] = value.strip()
    if fields.get("version") != str(CURRENT_VERSION) or not fields.get("topic_id"):
        raise KafkaStorageError(f"Unrecognized content in {path}: {text!r}")
    return fields["topic_id"]


def write_topic_id(directory: Path, topic_id: str) -> None:
    write_atomically(Path(directory) / FILE_NAME,
                     f"version: {CURRENT_VERSION}\ntopic_id: {topic_id}\n")


class PartitionMetadataFile:
    """Kafka's PartitionMetadataFile: ``record`` keeps the id to write, ``maybe_flush``
    writes it (atomically, fsynced) if one is pending. Either may run on any thread."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._pending: str | None = None
        self._lock = threading.Lock()

    def record(self, topic_id: str) -> None:
        with self._lock:
            self._pending = topic_id

    @property
    def dirty(self) -> bool:
        return self._pending is not None

    def discard(self) -> None:
        """The partition is being deleted: nothing is to be written (a write in progress is
        waited for, so that none lands in a directory being moved)."""
        with self._lock:
            self._pending = None

    def maybe_flush(self) -> None:
        with self._lock:
            if self._pending is not None:
                write_topic_id(self.directory, self._pending)
                self._pending = None


def claim(file: PartitionMetadataFile, topic_id: str) -> bool:
    """Before a partition's log is opened for the topic ``topic_id``: a directory that
    belongs to another topic of the same name (a stray log) is moved aside and deleted;
    then ``topic_id`` is recorded in ``file`` unless it names it already (its owner flushes
    it). True if a stray log was deleted: the broker's checkpoints of that partition were
    its, not the new topic's."""
    directory = file.directory
    found = read_topic_id(directory)
    if found == topic_id:
        return False
    if found is not None:
        stray = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-stray")
        log.warning("%s holds topic id %s, not %s: a stray log of a deleted topic of the "
                    "same name; deleting it (moved to %s first)", directory, found, topic_id,
                    stray.name)
        directory.rename(stray)
        shutil.rmtree(stray, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    file.record(topic_id)
    return found is not None
