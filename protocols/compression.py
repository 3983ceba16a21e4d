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


def max_decompressed_bytes(compressed_bytes: int) -> int:
    """The most a batch body of this many compressed bytes may decompress to.

    Kafka streams a compressed batch record by record; decompressing a whole body at once
    needs a bound instead, or a few hostile bytes become gigabytes (a zstd frame of 1.5 KB
    decompresses to 50 MB; 1 MB of it, within max.message.bytes, to ~32 GB). gzip cannot
    exceed ~1032:1 and lz4 ~255:1, so honest data meets the bound unless it is both over
    64 MiB and compressed more than 1024-fold."""
    return max(MIN_DECOMPRESSED_BOUND, 1024 * compressed_bytes)


MIN_DECOMPRESSED_BOUND = 64 * 1024 * 1024


def _too_big(codec: str, data: bytes, limit: int) -> CorruptRecordError:
    return CorruptRecordError(f"{codec} data of {len(data)} bytes decompresses to more than "
                              f"{limit} bytes")


def _snappy_raw(data: bytes) -> bytes:
    # The block starts with its uncompressed length (a varint), which the codec allocates
    # before reading further: check it first. A snappy element yields at most 64 bytes per
    # 3 bytes of input (~21:1), so a larger claim is corrupt, not merely large.
    length, shift, pos = 0, 0, 0
    while True:
        if pos >= len(data) or pos == 5:
            raise CorruptRecordError("snappy block has a malformed length preamble")
        byte = data[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        shift += 7
        if not byte & 0x80:
            break
    if length > 32 * len(data) + 64:
        raise CorruptRecordError(f"snappy block of {len(data)} bytes claims {length} "
                                 f"uncompressed bytes")
    return bytes(cramjam.snappy.decompress_raw(data))


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw(data)
    out = bytearray()
    pos = len(XERIAL_HEADER)
    while pos < len(data):
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CorruptRecordError(f"snappy (xerial) block of {length} bytes at {pos - 4} "
                                     f"does not fit the {len(data)} bytes of data")
        out += _snappy_raw(data[pos:pos + length])
        if len(out) > limit:
            raise _too_big("snappy", data, limit)
        pos += length
    return bytes(out)


def _gzip_decompress(data: bytes, limit: int) -> bytes:
    # gzip.decompress, bounded: one member after another, as Java's GZIPInputStream reads.
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits=31)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise _too_big("gzip", data, limit)
        if not inflater.eof:
            raise CorruptRecordError("gzip data ends before the end of its stream")
        data = inflater.unused_data
    return bytes(out)


def _lz4_decompress(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while data:
        frame = lz4.frame.LZ4FrameDecompressor()
        out += frame.decompress(data, max_length=limit + 1 - len(out))
        if len(out) > limit or (not frame.eof and not frame.needs_input):
            raise _too_big("lz4", data, limit)
        if not frame.eof:
            raise CorruptRecordError("lz4 data ends before the end of its frame")
        data = frame.unused_data
    return bytes(out)


def _zstd_decompress(data: bytes, limit: int) -> bytes:
    # Into a buffer of a bounded size, grown while the output does not fit: an uninitialised
    # numpy buffer, so a generous first guess costs no page it does not fill.
    import numpy
    size = min(limit, max(64 * 1024, 8 * len(data)))
    while True:
        buffer = numpy.empty(size, dtype=numpy.uint8)
        try:
            n = cramjam.zstd.decompress_into(data, buffer)
            return buffer[:n].tobytes()
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                raise
            if size >= limit:
                raise _too_big("zstd", data, limit) from None
            size = min(limit, size * 4)


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
    """A batch body decompressed, or CorruptRecordError when it does not decompress or
    decompresses to more than ``max_decompressed_bytes`` (a bound on hostile input)."""
    limit = max_decompressed_bytes(len(data))
    try:
        if codec == "none":
            return data
        if codec == "gzip":
            return _gzip_decompress(data, limit)
        if codec == "snappy":
            return _snappy_decompress(data, limit)
        if codec == "lz4":
            return _lz4_decompress(data, limit)
        if codec == "zstd":
            return _zstd_decompress(data, limit)
    except (OSError, EOFError, zlib.error, RuntimeError, ValueError, struct.error,
            cramjam.DecompressionError) as e:
        raise CorruptRecordError(f"{codec} data does not decompress: {e}") from None
    raise UnsupportedCompressionTypeError(f"unknown compression type {codec!r}")
