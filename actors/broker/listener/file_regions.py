"""Zero-copy fetch on the broker's side (Kafka's ``FileRecords.writeTo``): a replica host on
this node names where a consumer's records lie (``protocols.file_region.FileRegion``), the
broker opens that file and the socket server sends the bytes with ``sendfile``, from the
page cache to the client's socket, never through Python.

The file is opened, and checked to be the one the host read, as the host's answer arrives:
held open, its bytes stay readable if retention deletes the segment or compaction swaps
another file in under its name before they are sent. A region whose file is gone, is
another file (another device or inode), or is shorter than the region, is answered with no
records: the client fetches the same offset again and is answered afresh. A file cut
shorter after that check (a leader truncated as it became a follower) leaves the response
unfinished: the socket server then closes the connection, as Kafka's does.
"""
from __future__ import annotations

import errno
import logging
import os
from typing import BinaryIO

from protocols.errors import KafkaStorageError
from protocols.file_region import FileRegion

log = logging.getLogger(__name__)


class OpenRegion:
    """A region's file, open, for the socket server to send ``size`` bytes from
    ``position``; closed once sent (or the response abandoned)."""

    __slots__ = ("file", "position", "size")

    def __init__(self, file: BinaryIO, position: int, size: int):
        self.file = file
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        self.file.close()


def open_region(region: FileRegion) -> OpenRegion | None:
    """The region's file opened and checked, or None when it is gone or another (see the
    module's doc). Any other failure to open it (out of file descriptors, no permission) is
    KAFKA_STORAGE_ERROR, which clients retry after a back-off, rather than no records,
    which they would fetch again at once."""
    try:
        file = open(region.path, "rb", buffering=0)
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("cannot open %s to answer a fetch: %s", region.path, e)
        raise KafkaStorageError(f"Cannot open {region.path}: "
                                f"{errno.errorcode.get(e.errno, e.errno)}") from None
    try:
        stat = os.fstat(file.fileno())
    except OSError:
        file.close()
        return None
    if ((stat.st_dev, stat.st_ino) != (region.device, region.inode) or region.size == 0
            or stat.st_size < region.position + region.size):
        file.close()
        return None
    return OpenRegion(file, region.position, region.size)


def close_regions(chunks) -> None:
    """Close the files of a response's regions (sent, or never to be)."""
    for chunk in chunks:
        if isinstance(chunk, OpenRegion):
            chunk.close()
