"""Kafka wire requests and responses for tests, through Kafka's schemas (kio): a request's
frame from plain values, a response read off a socket."""
from __future__ import annotations

import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from protocols.kafka.codec import build


def request_bytes(api_key: int, version: int, values: dict, correlation_id: int = 1,
                  client_id: str = "test") -> bytes:
    """A size-prefixed request frame of ``values`` (``protocols.kafka.codec.build``)."""
    cls = load_request_schema(api_key, version)
    writer = type("W", (list,), {"write": list.append})()
    entity_writer(cls.__header_schema__)(writer, cls.__header_schema__(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
        client_id=client_id))
    entity_writer(cls)(writer, build(cls, values))
    body = b"".join(writer)
    return struct.pack(">i", len(body)) + body


def parse_response(data: bytes, api_key: int, version: int):
    """(header, body) of a response frame without its size prefix."""
    cls = load_response_schema(api_key, version)
    header, used = entity_reader(cls.__header_schema__)(data, 0)
    return header, entity_reader(cls)(data, used)[0]


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
