"""Kafka's wire protocol, sans I/O: bytes in, requests out; responses in, bytes out.

The message schemas are Kafka's own, through ``kio`` (generated from Apache Kafka's JSON
message definitions, every API and version, flexible versions and tagged fields included).
This module adds what a broker needs around them:

- ``FrameDecoder``: the 4-byte size-prefixed frames of a connection's byte stream, refusing a
  size over ``socket.request.max.bytes`` (Kafka's InvalidReceiveException: the connection is
  closed) before buffering it;
- ``parse_request``: a frame -> ``Request`` for the (api key, version) pairs the broker serves,
  with Kafka's answers to what it does not serve (an ApiVersions request of an unknown version
  gets the v0 answer with UNSUPPORTED_VERSION and the list; anything else closes the
  connection, as Kafka's SocketServer does);
- ``build``: a response of the request's version from plain values (dicts and lists), so the
  request handlers are written once for every version: a field the version lacks is left
  out, one it has but the handler did not give gets Kafka's zero value;
- ``encode_response``: the size prefix, the response header of the request's version, the
  body, as a list of byte strings (record batches inside it are passed by reference, never
  copied or re-encoded).
"""
from __future__ import annotations

import dataclasses
import datetime
import struct
import typing
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.serial.errors import DecodeError

from protocols.errors import KafkaError
from protocols.kafka.api_keys import ApiKey
from protocols.kafka.reader import read_entity

# Kafka's socket.request.max.bytes default: 100 MiB.
DEFAULT_MAX_REQUEST_BYTES = 104_857_600


class CloseConnection(Exception):
    """What the broker does with a connection that sent this: close it, logging why."""


class InvalidReceive(CloseConnection):
    """A frame size that is negative or over ``socket.request.max.bytes``."""


class InvalidRequest(CloseConnection):
    """A frame that names an API or version the broker does not serve, or does not decode."""


@dataclass(frozen=True)
class NoResponse:
    """A handler's answer to a request that gets none (Produce with acks=0) but whose
    connection is muted for ``throttle_ms`` (a client over its quota)."""
    throttle_ms: int


@dataclass(frozen=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any              # the kio request object; None for an unsupported ApiVersions
    size: int              # the frame's bytes (for logs and quotas)
    listener: str = "PLAINTEXT"         # the name of the listener it came in on
    principal: str = "User:ANONYMOUS"   # who sent it (KafkaPrincipal's text)
    host: str = ""                      # the client's address, as ACLs name hosts


# A read this large or larger, when part of a frame still incomplete, is held as it is (a view
# of it, the read being immutable bytes); smaller ones are copied together, so that neither
# a client trickling bytes (a part each would cost hundreds of bytes a byte) nor a few bytes
# left at the end of a large read (a view would keep all of it) holds more than it sent.
HELD_AS_IS = 16 << 10


class FrameDecoder:
    """A connection's bytes -> its frames (without their size prefix), in order.

    A frame is copied once into the bytes handed out: cut out of the read that holds all of
    it, or, spread over several reads (a producer's megabyte Produce arrives in dozens),
    joined from them when its last byte comes, not grown read by read in a buffer."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES):
        self.max_bytes = max_bytes
        self._parts: list = []     # an incomplete frame's bytes so far (or its size prefix's)
        self._have = 0             # how many bytes _parts hold
        self._size: int | None = None   # the incomplete frame's size, once its prefix is read

    @property
    def pending(self) -> int:
        """Bytes received of a frame not yet complete."""
        return self._have

    def feed(self, data: bytes) -> list[bytes]:
        frames: list[bytes] = []
        rest = memoryview(data)
        while len(rest):
            if self._size is None:
                need = 4 - self._have
                if len(rest) < need:
                    self._hold(rest)
                    return frames
                prefix = rest[:need] if not self._parts else \
                    b"".join([*self._parts, rest[:need]])
                self._parts, self._have, rest = [], 0, rest[need:]
                (size,) = struct.unpack_from(">i", prefix, 0)
                if size < 0 or size > self.max_bytes:
                    raise InvalidReceive(
                        f"Invalid receive (size = {size} larger than {self.max_bytes})"
                        if size > 0 else f"Invalid receive (size = {size})")
                self._size = size
            need = self._size - self._have
            if len(rest) < need:
                self._hold(rest)
                return frames
            frames.append(b"".join([*self._parts, rest[:need]]) if self._parts else
                          bytes(rest[:need]))
            self._parts, self._have, self._size = [], 0, None
            rest = rest[need:]
        return frames

    def _hold(self, rest: memoryview) -> None:
        self._have += len(rest)
        if len(rest) >= HELD_AS_IS:
            self._parts.append(rest)
        elif self._parts and isinstance(self._parts[-1], bytearray) \
                and len(self._parts[-1]) < HELD_AS_IS:
            self._parts[-1] += rest
        else:
            self._parts.append(bytearray(rest))


def parse_request(frame: bytes, supported: Mapping[int, tuple[int, int]],
                  listener: str = "PLAINTEXT", principal: str = "User:ANONYMOUS",
                  host: str = "") -> Request:
    """One frame -> a Request, if ``supported`` ({api_key: (min, max)}) has its version.

    An ApiVersions request of a version the broker does not know comes back with ``body``
    None: its header is read (the header's own version follows from the request's, and
    ApiVersions' fields may grow, so only the header is read) and the caller answers with
    UNSUPPORTED_VERSION (``api_versions_fallback``), as Kafka does so that a newer client
    learns the versions and retries. Anything else unsupported raises InvalidRequest."""
    if len(frame) < 8:
        raise InvalidRequest(f"Request of {len(frame)} bytes is shorter than a request "
                             "header")
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    span = supported.get(api_key)
    if api_key == ApiKey.API_VERSIONS and (span is None or not span[0] <= api_version <= span[1]):
        header_cls = RequestHeaderV2 if api_version >= 3 else RequestHeaderV1
        header = _read(header_cls, frame, 0, api_key, api_version)[0]
        return Request(api_key, api_version, correlation_id, header.client_id, None,
                       len(frame), listener, principal, host)
    if span is None:
        raise InvalidRequest(f"Unknown API key {api_key}")
    if not span[0] <= api_version <= span[1]:
        raise InvalidRequest(f"Unsupported version {api_version} of API key {api_key} "
                             f"(supported: {span[0]}-{span[1]})")
    try:
        request_cls = load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        raise InvalidRequest(f"No schema for version {api_version} of API key "
                             f"{api_key}") from None
    header, used = _read(request_cls.__header_schema__, frame, 0, api_key, api_version)
    # Bytes after the body are ignored, as Kafka's generated readers do (librdkafka 2.16
    # sends three after its all-topics Metadata v13 body).
    body, _ = _read(request_cls, frame, used, api_key, api_version)
    return Request(api_key, api_version, correlation_id, header.client_id, body, len(frame),
                   listener, principal, host)


def _read(cls, frame: bytes, offset: int, api_key: int, api_version: int):
    try:
        return read_entity(cls, frame, offset)
    # kio's primitive readers raise ValueError for an enum value (an error code) or text
    # they do not know, TypeError for a value out of its type's range.
    except (DecodeError, ValueError, TypeError, IndexError) as e:
        raise InvalidRequest(f"Error reading {cls.__name__} (API key {api_key} "
                             f"v{api_version}): {type(e).__name__}: {e}") from None


# ---- responses -----------------------------------------------------------------------------

class _Chunks(list):
    """A writer target: kio writes each field's bytes with ``write``; a list of them avoids
    growing one buffer (a 1 MiB record set would be copied into it)."""
    write = list.append


def encode_response(request: Request, body: Any) -> list[bytes]:
    """The size prefix, the response header (v0, or v1 for a flexible version; ApiVersions
    always v0), the body."""
    header_cls = type(body).__header_schema__
    out = _Chunks()
    entity_writer(header_cls)(out, header_cls(correlation_id=request.correlation_id))
    entity_writer(type(body))(out, body)
    out.insert(0, struct.pack(">i", sum(map(len, out))))
    return out


def response_class(request: Request):
    return load_response_schema(request.api_key, request.api_version)


def build(cls, values: Mapping[str, Any]):
    """A kio entity of ``cls`` from plain values: nested entities from dicts, tuples of them
    from lists, error codes from ints, durations from milliseconds, UUIDs from strings.
    Fields ``cls`` does not have are dropped (they belong to other versions); required
    fields not given, or None where the version cannot say null, get Kafka's zero value."""
    kwargs = {}
    for name, kind, default in _fields(cls):
        if name in values:
            value = values[name]
            # None where this version's field is not nullable (a string that became
            # nullable in a later version): the version's zero value.
            kwargs[name] = _zero(kind) if value is None and not _optional(kind)[1] \
                else _convert(kind, value)
        elif default is dataclasses.MISSING:
            kwargs[name] = _zero(kind)
    return cls(**kwargs)


@lru_cache(maxsize=None)
def _fields(cls) -> tuple:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name],
                  f.default if f.default is not dataclasses.MISSING
                  else (dataclasses.MISSING if f.default_factory is dataclasses.MISSING
                        else f.default_factory()))
                 for f in dataclasses.fields(cls))


def _entity(kind) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _optional(kind):
    """``X | None`` -> X (and whether None is allowed)."""
    args = typing.get_args(kind)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return kind, False


def _convert(kind, value):
    if value is None:
        return None
    inner, _ = _optional(kind)
    origin = typing.get_origin(inner)
    if origin is tuple:
        item = typing.get_args(inner)[0]
        return tuple(_convert(item, v) for v in value)
    if _entity(inner):
        return value if isinstance(value, inner) else build(inner, value)
    if inner is ErrorCode:
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if isinstance(inner, type) and issubclass(inner, datetime.timedelta):
        return value if isinstance(value, datetime.timedelta) \
            else datetime.timedelta(milliseconds=value)
    if inner is uuid.UUID:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    if isinstance(inner, type) and issubclass(inner, datetime.datetime):
        if isinstance(value, datetime.datetime):
            return value
        return None if value < 0 else datetime.datetime.fromtimestamp(
            value / 1000, datetime.timezone.utc)
    return value


def _zero(kind):
    inner, nullable = _optional(kind)
    if nullable:
        return None
    origin = typing.get_origin(inner)
    if origin is tuple:
        return ()
    if _entity(inner):
        return build(inner, {})
    if inner is ErrorCode:
        return ErrorCode.none
    if isinstance(inner, type) and issubclass(inner, datetime.timedelta):
        return datetime.timedelta(0)
    if inner is uuid.UUID:
        return uuid.UUID(int=0)
    if inner is bool:
        return False
    if isinstance(inner, type) and issubclass(inner, str):
        return ""
    if isinstance(inner, type) and issubclass(inner, bytes):
        return b""
    return 0


def error_fields(error: KafkaError | None) -> dict:
    """A response's ``error_code`` and ``error_message`` for ``error`` (None: no error). A
    KafkaError's text is its message, or its protocol name when it was given none."""
    return {"error_code": 0 if error is None else error.code,
            "error_message": None if error is None else str(error)}


# ---- ApiVersions ---------------------------------------------------------------------------

def api_versions_body(request: Request, supported: Mapping[int, tuple[int, int]]):
    """The ApiVersions answer: the APIs and versions this broker serves. A request of a
    version the broker does not know is answered in v0 with UNSUPPORTED_VERSION (35), the
    list still in it (Kafka's KafkaApis.handleApiVersionsRequest)."""
    keys = [{"api_key": int(k), "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(supported.items())]
    if request.body is None:
        cls = load_response_schema(ApiKey.API_VERSIONS, 0)
        return build(cls, {"error_code": ErrorCode.unsupported_version, "api_keys": keys})
    return build(response_class(request), {"error_code": 0, "api_keys": keys,
                                           "throttle_time": 0})


def fallback_request(request: Request) -> Request:
    """The request an unsupported ApiVersions is answered as: version 0 (header v0)."""
    return dataclasses.replace(request, api_version=0)
