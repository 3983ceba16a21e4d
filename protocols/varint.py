"""Kafka's zig-zag variable-length integers (ByteUtils.writeVarint / writeVarlong)."""
from __future__ import annotations

from protocols.errors import CorruptRecordError

_CACHE = [bytes([((n << 1) ^ (n >> 63)) & 0x7F]) for n in range(0, 64)]


def encode_varint(value: int) -> bytes:
    """Zig-zag then base-128, least significant group first. Works for 32 and 64 bits."""
    if 0 <= value < 64:
        return _CACHE[value]
    z = (value << 1) ^ (value >> 63)
    z &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def size_of_varint(value: int) -> int:
    return len(encode_varint(value))


def decode_unsigned_varint(buf, pos: int) -> tuple[int, int]:
    """(the base-128 value before zig-zag decoding, next position). Raises
    CorruptRecordError past 10 bytes."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """(value, next position). Raises CorruptRecordError past 10 bytes."""
    z, pos = decode_unsigned_varint(buf, pos)
    return (z >> 1) ^ -(z & 1), pos
