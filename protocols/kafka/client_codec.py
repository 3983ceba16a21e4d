"""Kafka's wire protocol from a client's side, sans I/O: a request's frame from plain values,
a response's header and body from its frame. The schemas are Kafka's own through
``kio``, as ``protocols.kafka.codec`` reads and builds the broker's side (``build`` makes
the entity from plain values for both)."""
from __future__ import annotations

import struct
from typing import Any, Mapping

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer

from protocols.kafka.codec import _Chunks, build
from protocols.kafka.reader import read_entity


def request_frame(api_key: int, version: int, values: Mapping[str, Any],
                  correlation_id: int, client_id: str) -> bytes:
    """The size-prefixed frame of a request of ``values`` (request header v1, or v2 for a
    flexible version, as the schema says)."""
    cls = load_request_schema(api_key, version)
    out = _Chunks()
    entity_writer(cls.__header_schema__)(out, cls.__header_schema__(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
        client_id=client_id))
    entity_writer(cls)(out, build(cls, values))
    body = b"".join(out)
    return struct.pack(">i", len(body)) + body


def parse_response(frame: bytes, api_key: int, version: int) -> tuple[Any, Any]:
    """(header, body) of a response frame without its size prefix."""
    cls = load_response_schema(api_key, version)
    header, used = read_entity(cls.__header_schema__, frame, 0)
    return header, read_entity(cls, frame, used)[0]
