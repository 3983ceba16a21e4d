"""Kafka's ``partition.metadata`` file (KIP-516): which topic, by id, a partition directory
belongs to. A topic deleted and created again under the same name gets a new id, so a
broker that was away while that happened can tell its old log from the new topic's: its
directory is a *stray* log, which Kafka's LogManager moves aside and deletes rather than
serve (the new topic's replica then starts empty and fetches from its leader).

The file is Kafka's, byte for byte::

    version: 0
    topic_id: <the topic id, 22 characters of URL-safe base64>
"""
from __future__ import annotations

import logging
import shutil
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


def claim(directory: Path, topic_id: str) -> bool:
    """Before a partition's log is opened for the topic ``topic_id``: a directory that
    belongs to another topic of the same name (a stray log) is moved aside and deleted;
    then the file names ``topic_id`` (written once, on first open). True if a stray log was
    deleted: the broker's checkpoints of that partition were its, not the new topic's."""
    directory = Path(directory)
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
    write_topic_id(directory, topic_id)
    return found is not None
