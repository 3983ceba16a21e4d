"""Kafka wire requests and responses for tests, through Kafka's schemas (kio): a request's
frame from plain values, a response read off a socket."""
from __future__ import annotations

import socket
import struct

from protocols.kafka.client_codec import parse_response, request_frame

__all__ = ["parse_response", "read_response", "recv_exactly", "request_bytes"]


def request_bytes(api_key: int, version: int, values: dict, correlation_id: int = 1,
                  client_id: str = "test") -> bytes:
    """A size-prefixed request frame of ``values`` (``protocols.kafka.codec.build``)."""
    return request_frame(api_key, version, values, correlation_id, client_id)


def read_response(sock: socket.socket, api_key: int, version: int):
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    return parse_response(recv_exactly(sock, size), api_key, version)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out
