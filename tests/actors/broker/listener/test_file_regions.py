"""Zero-copy fetch on the broker's side: a replica host's FileRegion opened and checked
(Kafka's FileRecords held open while its bytes are sent), and a response's record sets sent
from the file with sendfile between the bytes around them, over a real socket."""
from __future__ import annotations

import asyncio
import os
import struct

import msgpack
import pytest

from actors.broker.listener.file_regions import OpenRegion, open_region
from actors.broker.listener.socket_server import write_response
from protocols.errors import InvalidRequestError, KafkaStorageError
from protocols.file_region import FileRegion
from protocols.messages import (FetchManyResponse, FetchResult, decode_fetch_many_response,
                                encode_fetch_many_response)

DATA = bytes(range(256)) * 64   # 16 KiB


def region_of(path, position: int, size: int) -> FileRegion:
    stat = os.stat(path)
    return FileRegion(str(path), stat.st_dev, stat.st_ino, position, size)


@pytest.fixture
def segment(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(DATA)
    return path


def read_all(opened: OpenRegion) -> bytes:
    return os.pread(opened.file.fileno(), opened.size, opened.position)


def test_a_region_is_opened_when_it_is_still_the_file_the_host_read(segment):
    opened = open_region(region_of(segment, 100, 1000))
    assert len(opened) == 1000 and read_all(opened) == DATA[100:1100]
    # Retention deletes the segment before the answer is sent: the bytes stay readable.
    segment.rename(segment.with_suffix(".log.deleted"))
    segment.with_suffix(".log.deleted").unlink()
    assert read_all(opened) == DATA[100:1100]
    opened.close()


def test_a_region_of_a_file_gone_swapped_or_shorter_is_not_opened(segment, tmp_path):
    region = region_of(segment, 100, 1000)
    assert open_region(region_of(segment, 100, len(DATA))) is None       # past the end
    swapped = tmp_path / "cleaned"
    swapped.write_bytes(DATA)
    os.replace(swapped, segment)     # compaction's swap: same name, another file
    assert open_region(region) is None
    segment.unlink()
    assert open_region(region) is None


def test_a_region_that_cannot_be_opened_otherwise_is_a_storage_error(tmp_path):
    """Not gone, not another file, but not openable (here a directory; out of file
    descriptors alike): KAFKA_STORAGE_ERROR, which clients retry after a back-off."""
    odd = tmp_path / "00000000000000000000.log"
    odd.mkdir()
    with pytest.raises(KafkaStorageError, match="Cannot open"):
        open_region(region_of(odd, 0, 1))


def test_only_a_segment_file_by_its_absolute_path_is_a_region():
    def answer(records) -> bytes:
        return encode_fetch_many_response(FetchManyResponse((("t", 0, FetchResult(records)),)))
    for path in ("relative/00000000000000000000.log", "/etc/passwd", "/a/b.log\0x"):
        with pytest.raises(InvalidRequestError, match="Malformed FetchManyResponse"):
            decode_fetch_many_response(answer(FileRegion(path, 1, 2, 0, 10)))
    good = FileRegion("/data/t-0/00000000000000000000.log", 1, 2, 0, 10)
    assert decode_fetch_many_response(answer(good)).results[0][2].records == good
    head = msgpack.packb(([("t", 0, "7", -1, -1, -1, None, -1, -1, -1, None)], None, 0, 0))
    with pytest.raises(InvalidRequestError, match="neither a size nor a file region"):
        decode_fetch_many_response(struct.pack(">I", len(head)) + head)


def serve_once(chunks, tls=None):
    """A server writing ``chunks`` with ``write_response`` to its one client; what the
    client read, and the server's error if any. ``tls``: (server's SSL context, client's)."""
    async def run():
        failed: list = []
        sent: list = []

        async def handle(reader, writer):
            try:
                sent.append(await write_response(writer, chunks))
                await writer.drain()
            except Exception as e:
                failed.append(e)
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0,
                                            ssl=tls[0] if tls else None)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                       ssl=tls[1] if tls else None)
        got = await reader.read()
        writer.close()
        server.close()
        return got, failed, sent
    return asyncio.run(run())


def test_a_response_sends_its_regions_from_the_file_between_its_bytes(segment):
    first = open_region(region_of(segment, 0, 5000))
    second = open_region(region_of(segment, 9000, 7000))
    got, failed, sent = serve_once([b"head", first, b"middle" * 20_000, second, b"tail"])
    assert failed == [] and sent == [12_000]
    assert got == b"head" + DATA[:5000] + b"middle" * 20_000 + DATA[9000:16000] + b"tail"
    assert first.file.closed and second.file.closed


def test_a_file_cut_short_after_it_was_opened_ends_the_connection(segment):
    opened = open_region(region_of(segment, 0, len(DATA)))
    os.truncate(segment, 1000)       # a leader truncated as it became a follower
    got, failed, _ = serve_once([b"head", opened, b"tail"])
    assert got == b"head" + DATA[:1000]          # no tail: the client sees the cut
    assert len(failed) == 1 and "truncated" in str(failed[0])
    assert opened.file.closed
