"""Reading Kafka's request schemas (``kio``'s entities) from untrusted bytes.

kio's own entity reader is native code that sizes an array by the count the bytes claim
before reading it: a request of 30 bytes claiming 33 billion topics aborts the whole process
("memory allocation of 268959867416 bytes failed"), which for a broker means every client's
connection. This reader walks the same schemas in Python, reads each primitive with kio's
native readers (those check the buffer's bounds), and refuses an array whose count exceeds
the bytes left (every element takes at least one). It also does what Kafka's readers do with
a tagged field nobody defined: skips it (kio raises).
"""
from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from typing import Any, Callable

from kio._kio_native import (get_reader, read_int8, read_int32, read_nullable_legacy_string,
                             read_unsigned_varint)
from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveField,
                                    PrimitiveTupleField, classify_field, get_field_tag,
                                    get_schema_field_type, is_optional)
from kio.serial.errors import BufferUnderflow, DecodeError

Reader = Callable[[bytes, int], tuple[Any, int]]


class ArrayTooLong(DecodeError):
    """An array count larger than the bytes left to hold it."""


def read_entity(cls, buffer: bytes, offset: int = 0) -> tuple[Any, int]:
    """(the entity, bytes it took) from ``buffer`` at ``offset``."""
    return entity_reader(cls)(buffer, offset)


@lru_cache(maxsize=None)
def entity_reader(cls, nullable: bool = False) -> Reader:
    flexible = cls.__flexible__
    is_header = cls.__name__ == "RequestHeader"
    plain: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        reader = _field_reader(f, flexible, is_header, tag is not None)
        if tag is None:
            plain.append((f.name, reader))
        else:
            tagged[int(tag)] = (f.name, reader)

    def read(buffer: bytes, offset: int) -> tuple[Any, int]:
        start = offset
        values = {}
        for name, reader in plain:
            values[name], size = reader(buffer, offset)
            offset += size
        if flexible:
            count, size = read_unsigned_varint(buffer, offset)
            offset += size
            _check_count(count, len(buffer) - offset)
            for _ in range(count):
                tag, size = read_unsigned_varint(buffer, offset)
                offset += size
                length, size = read_unsigned_varint(buffer, offset)
                offset += size
                if offset + length > len(buffer):
                    raise BufferUnderflow("Buffer is exhausted")
                known = tagged.get(tag)
                if known is not None:   # an unknown tag is skipped, as Kafka does
                    name, reader = known
                    values[name], used = reader(buffer[offset:offset + length], 0)
                    if used != length:
                        raise DecodeError(f"Tagged field {tag} of {cls.__name__}: read "
                                          f"{used} of its {length} bytes")
                offset += length
        return cls(**values), offset - start

    if not nullable:
        return read

    def read_nullable(buffer: bytes, offset: int) -> tuple[Any, int]:
        # KIP-893: a nullable struct is preceded by -1 (null) or 1.
        marker, size = read_int8(buffer, offset)
        if marker < 0:
            return None, size
        value, used = read(buffer, offset + size)
        return value, size + used
    return read_nullable


def _field_reader(f, flexible: bool, is_header: bool, is_tag: bool) -> Reader:
    # The request header's client id is a legacy string in every header version.
    if is_header and f.name == "client_id":
        return read_nullable_legacy_string
    optional = False if is_tag else is_optional(f)
    kind = classify_field(f)
    if isinstance(kind, PrimitiveField):
        inner = get_reader(get_schema_field_type(f), flexible, optional)
    elif isinstance(kind, PrimitiveTupleField):
        inner = get_reader(get_schema_field_type(f), flexible, False)
    elif isinstance(kind, EntityField):
        inner = entity_reader(kind.type_, optional)
    elif isinstance(kind, EntityTupleField):
        inner = entity_reader(kind.type_)
    else:   # pragma: no cover - kio's four kinds
        raise TypeError(f"unknown field kind {kind!r}")
    return _array_reader(inner, flexible) if kind.is_array else inner


def _array_reader(item: Reader, flexible: bool) -> Reader:
    def read(buffer: bytes, offset: int) -> tuple[Any, int]:
        if flexible:
            n, size = read_unsigned_varint(buffer, offset)
            count = n - 1       # 0: null
        else:
            count, size = read_int32(buffer, offset)   # -1: null
        if count < 0:
            if count == -1:
                return None, size
            raise DecodeError(f"Negative array length {count}")
        pos = offset + size
        _check_count(count, len(buffer) - pos)
        items = []
        for _ in range(count):
            value, used = item(buffer, pos)
            items.append(value)
            pos += used
        return tuple(items), pos - offset
    return read


def _check_count(count: int, left: int) -> None:
    if count > left:
        raise ArrayTooLong(f"Array of {count} elements in {left} bytes")
