"""A slice of a segment's ``.log`` file, named instead of read (Kafka's ``FileRecords.slice``).

A fetch answer for a Kafka client is the segment's bytes as they lie in the file: the replica
host that reads the log names where they are, and the broker that answers the client hands
them from the file to the client's socket with ``sendfile`` (the seeds' 零拷贝: page cache to
socket, never copied through Python). Both run on the same node, so the path names the same
file; the device and inode say it is still the file the host read (a compacted segment is
swapped in under the same name). Kafka's rule on the end holds: the slice ends at the high
watermark's batch or at the request's byte limit, whichever is first, so its last batch may
be partial (clients drop a trailing partial batch and fetch it again whole).
"""
from __future__ import annotations

from dataclasses import dataclass

import msgpack


@dataclass(frozen=True, slots=True)
class FileRegion:
    path: str
    device: int
    inode: int
    position: int
    size: int

    def __len__(self) -> int:
        return self.size

    def pack(self) -> bytes:
        return msgpack.packb((self.path, self.device, self.inode, self.position, self.size))

    @classmethod
    def unpack(cls, data: bytes) -> "FileRegion":
        path, device, inode, position, size = msgpack.unpackb(data, raw=False)
        # A segment's .log, by its absolute path: nothing else is ever named.
        if not (isinstance(path, str) and path.startswith("/") and path.endswith(".log")
                and "\0" not in path
                and all(isinstance(v, int) and v >= 0
                        for v in (device, inode, position, size))):
            raise ValueError(f"not a file region: {(path, device, inode, position, size)!r}")
        return cls(path, device, inode, position, size)
