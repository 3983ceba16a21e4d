"""The record-batch codecs, framed as Kafka's Java client writes them.

gzip: a gzip stream. snappy: xerial's framing (what Kafka's SnappyOutputStream writes); raw
snappy is accepted on read. lz4: an LZ4 frame with independent 64 KB blocks and no content
checksum (KafkaLZ4BlockOutputStream); any valid frame is accepted on read. zstd: a zstd frame.
"""
from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame

from protocols.errors import CorruptRecordError, UnsupportedCompressionTypeError

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {name: i for i, name in enumerate(COMPRESSION_TYPES)}
CODEC_NAMES = {i: name for name, i in CODEC_IDS.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024  # xerial's default block size
_I32 = struct.Struct(">i")


def _snappy_compress(data: bytes) -> bytes:
    out = bytearray(XERIAL_HEADER)
    for i in range(0, max(len(data), 1), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[i:i + XERIAL_BLOCK]))
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = len(XERIAL_HEADER)
    while pos < len(data):
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + length]))
        pos += length
    return bytes(out)


def compress(codec: str, data: bytes) -> bytes:
    if codec == "none":
        return data
    if codec == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == "snappy":
        return _snappy_compress(data)
    if codec == "lz4":
        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                  block_linked=False, content_checksum=False)
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(data, level=3))
    raise UnsupportedCompressionTypeError(f"unknown compression type {codec!r}")


def decompress(codec: str, data: bytes) -> bytes:
    try:
        if codec == "none":
            return data
        if codec == "gzip":
            return gzip.decompress(data)
        if codec == "snappy":
            return _snappy_decompress(data)
        if codec == "lz4":
            return lz4.frame.decompress(data)
        if codec == "zstd":
            return bytes(cramjam.zstd.decompress(data))
    except (OSError, EOFError, zlib.error, RuntimeError, ValueError, struct.error,
            cramjam.DecompressionError) as e:
        raise CorruptRecordError(f"{codec} data does not decompress: {e}") from None
    raise UnsupportedCompressionTypeError(f"unknown compression type {codec!r}")
