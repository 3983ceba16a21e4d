"""Names of the files in a partition directory (Kafka's LogFileUtils)."""
from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SNAPSHOT_SUFFIX = ".snapshot"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"


def filename_prefix(offset: int) -> str:
    """Kafka names segment files by base offset, zero-padded to 20 digits."""
    return f"{offset:020d}"


def segment_file(directory: Path, base_offset: int, suffix: str, extra: str = "") -> Path:
    return Path(directory) / f"{filename_prefix(base_offset)}{suffix}{extra}"


def offset_from_file(path: Path) -> int:
    """``00000000000000018913.log`` (or ``.log.swap`` ...) -> 18913."""
    stem = Path(path).name.split(".", 1)[0]
    if len(stem) != 20 or not stem.isdigit():
        raise ValueError(f"{path} is not named by a 20-digit base offset")
    return int(stem)
