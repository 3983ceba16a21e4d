"""A client's frames to a replica host over a real socket."""
from __future__ import annotations

import random
import socket
import threading

from rafka.client.network_client import _BUFFERS_PER_CALL, _Connection


def test_a_frame_of_many_buffers_arrives_whole_through_partial_sends():
    # More buffers than one sendmsg takes, some empty, through a socket whose send buffer
    # holds a fraction of them: each call sends part of a buffer, which the next resumes.
    rng = random.Random(42)
    pieces = [rng.randbytes(rng.choice([0, 1, 7, 300, 5_000, 70_000]))
              for _ in range(3 * _BUFFERS_PER_CALL)]
    pieces[5] = memoryview(bytearray(b"a view of a bytearray"))
    sender, receiver = socket.socketpair()
    with sender, receiver:
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sender.settimeout(30)
        receiver.settimeout(30)
        got = []
        reading = threading.Thread(target=lambda: got.append(
            _Connection("host", receiver).read_frame()))
        reading.start()
        _Connection("host", sender).send(17, 3, pieces)
        reading.join(30)
        assert got and got[0][:2] == (17, 3)
        assert got[0][2] == b"".join(pieces)


def test_a_small_frame_of_buffers_is_one_joined_send():
    sender, receiver = socket.socketpair()
    with sender, receiver:
        receiver.settimeout(30)
        _Connection("host", sender).send(1, 3, [b"head", b"", memoryview(b"records")])
        assert _Connection("host", receiver).read_frame() == (1, 3, bytearray(b"headrecords"))


def test_a_frame_a_host_stops_reading_times_out_within_the_sockets_timeout():
    import time

    import pytest
    sender, receiver = socket.socketpair()
    with sender, receiver:
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sender.settimeout(0.5)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            _Connection("host", sender).send(2, 3, [bytes(1 << 20)] * 8)
        assert time.monotonic() - started < 5
        assert sender.gettimeout() == 0.5   # the socket's own timeout, as it was
