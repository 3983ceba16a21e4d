"""Kafka's checkpoint files: ``version``, ``count``, then one entry per line.

Written atomically (to ``<file>.tmp``, fsync, rename, fsync the directory) so a crash leaves
either the old or the new checkpoint, never a torn one.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Generic, NamedTuple, TypeVar

from protocols.errors import KafkaStorageError
from protocols.topics import TopicPartition

T = TypeVar("T")


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def write_atomically(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class CheckpointFile(Generic[T]):
    def __init__(self, path: Path, version: int, to_line: Callable[[T], str],
                 from_line: Callable[[str], T]):
        self.path = Path(path)
        self.version = version
        self._to_line = to_line
        self._from_line = from_line

    def write(self, entries: list[T]) -> None:
        lines = [str(self.version), str(len(entries))] + [self._to_line(e) for e in entries]
        write_atomically(self.path, "\n".join(lines) + "\n")

    def read(self) -> list[T]:
        def malformed(line_no: int, why: str) -> KafkaStorageError:
            return KafkaStorageError(f"Malformed line {line_no} in checkpoint file "
                                     f"{self.path}: {why}")

        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise malformed(data.count(b"\n", 0, e.start) + 1, "not UTF-8 text") from None
        lines = text.splitlines()

        if len(lines) < 2:
            raise malformed(len(lines) + 1, "missing version or entry count")
        try:
            version, count = int(lines[0]), int(lines[1])
        except ValueError:
            raise malformed(1, "version and entry count must be integers") from None
        if version != self.version:
            raise malformed(1, f"unrecognised version {version}, expected {self.version}")
        if len(lines) - 2 != count:
            raise malformed(len(lines), f"expected {count} entries, found {len(lines) - 2}")
        entries = []
        for i, line in enumerate(lines[2:], start=3):
            try:
                entries.append(self._from_line(line))
            except (ValueError, TypeError) as e:
                raise malformed(i, f"{line!r}: {e}") from None
        return entries


def _tp_line(item: tuple[TopicPartition, int]) -> str:
    tp, offset = item
    return f"{tp.topic} {tp.partition} {offset}"


def _tp_parse(line: str) -> tuple[TopicPartition, int]:
    topic, partition, offset = line.split(" ")
    return TopicPartition(topic, int(partition)), int(offset)


class OffsetCheckpointFile:
    """``topic partition offset`` entries: recovery points, log start offsets, HWs."""

    def __init__(self, path: Path):
        self._file = CheckpointFile(path, 0, _tp_line, _tp_parse)
        self.path = self._file.path

    def write(self, offsets: dict[TopicPartition, int]) -> None:
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[TopicPartition, int]:
        return dict(self._file.read())


def _epoch_parse(line: str) -> EpochEntry:
    epoch, start = line.split(" ")
    return EpochEntry(int(epoch), int(start))


class LeaderEpochCheckpointFile:
    """``epoch startOffset`` entries: a partition's ``leader-epoch-checkpoint``."""

    def __init__(self, path: Path):
        self._file = CheckpointFile(path, 0, lambda e: f"{e.epoch} {e.start_offset}",
                                    _epoch_parse)
        self.path = self._file.path

    def write(self, entries: list[EpochEntry]) -> None:
        self._file.write(list(entries))

    def read(self) -> list[EpochEntry]:
        return self._file.read()
