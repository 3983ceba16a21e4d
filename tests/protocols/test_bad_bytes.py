"""Bytes from outside the process that the fuzzer (``tests/fuzz``) found mishandled: record
batches, compressed bodies, messages between actors. One test per finding, named after it."""
from __future__ import annotations

import gzip
import struct
import time

import cramjam
import crc32c
import pytest

from protocols.compression import XERIAL_HEADER, compress, decompress, max_decompressed_bytes
from protocols.errors import (CorruptRecordError, InvalidRequestError,
                              UnsupportedCompressionTypeError)
from protocols.messages import (FetchManyRequest, FetchRequest, decode_fetch_many_request,
                                encode_fetch_many_request)
from protocols.records import (ATTRIBUTES_OFFSET, CRC_OFFSET, RECORDS_COUNT_OFFSET, Record,
                               RecordBatch, encode_batch)
from protocols.wire import decode, encode


def test_a_snappy_block_claiming_4_GiB_is_refused_before_anything_is_allocated():
    # Fifteen bytes made the codec allocate 4 GiB first (and abort the process under a
    # memory limit): the length preamble is checked against what snappy can expand to.
    started = time.perf_counter()
    with pytest.raises(CorruptRecordError, match="claims 4294967295 uncompressed bytes"):
        decompress("snappy", b"\xff\xff\xff\xff\x0f" + b"\x00" * 10)
    assert time.perf_counter() - started < 1


def test_a_zstd_bomb_is_refused_at_the_decompression_bound():
    bomb = bytes(cramjam.zstd.compress(b"\0" * 100_000_000, level=3))   # ~3 KB
    assert max_decompressed_bytes(len(bomb)) < 100_000_000
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        decompress("zstd", bomb)


def test_honest_bodies_of_every_codec_still_decompress_whole():
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        for data in (b"", b"x", bytes(range(256)) * 4000, b"\0" * 3_000_000):
            assert decompress(codec, compress(codec, data)) == data, codec
    # gzip members one after another, as Java's GZIPInputStream reads them
    assert decompress("gzip", gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_a_xerial_snappy_block_of_negative_length_is_refused_not_looped_on():
    # A block length of -4 sent the reader back to where it was, forever.
    with pytest.raises(CorruptRecordError, match="does not fit"):
        decompress("snappy", XERIAL_HEADER + struct.pack(">i", -4) + b"abcd")


def _with_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(bytes(data[ATTRIBUTES_OFFSET:])))
    return bytes(data)


def test_a_batch_with_a_negative_record_count_is_corrupt_not_empty():
    data = bytearray(encode_batch([Record(b"k", b"v", 0)]))
    struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, -1_207_959_551)
    batch = RecordBatch(_with_crc(data))
    batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match="invalid record count -1207959551"):
        batch.record_tuples()


def test_a_record_count_the_body_cannot_hold_is_corrupt_before_columns_are_sized():
    data = bytearray(encode_batch([Record(b"k", b"v", 0)]))
    struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="invalid record count"):
        RecordBatch(_with_crc(data)).record_columns()


def test_an_unknown_codec_id_is_unsupported_compression_not_a_crash():
    data = bytearray(encode_batch([Record(b"k", b"v", 0)]))
    data[ATTRIBUTES_OFFSET + 1] |= 5                 # codec ids 5-7 name nothing
    with pytest.raises(UnsupportedCompressionTypeError, match="codec id 5"):
        RecordBatch(_with_crc(data)).record_tuples()


def test_malformed_actor_messages_are_invalid_request_naming_what_was_read():
    request = encode_fetch_many_request(FetchManyRequest(1, 500, 1, 1 << 20, (
        ("t", 0, FetchRequest(1, 10, 2, 1 << 20)),)))
    with pytest.raises(InvalidRequestError, match="Malformed FetchManyRequest"):
        decode_fetch_many_request(request[:-3])
    with pytest.raises(InvalidRequestError, match="Malformed actor message"):
        decode(encode(FetchRequest(1, 10, 2, 1 << 20))[:-1])
    assert decode_fetch_many_request(request).partitions[0][2].fetch_offset == 10


def test_a_header_count_in_the_billions_with_negative_key_sizes_is_corrupt_not_a_hang():
    # The header loop went backwards on a negative key size and counted to 2**40: a hang.
    from protocols.records import LENGTH_OFFSET, LOG_OVERHEAD, RECORDS_OFFSET, _varint
    fields = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(-1) \
        + _varint(2**40) + _varint(-5) + _varint(-1)
    data = bytearray(encode_batch([Record(None, None, 0)]))[:RECORDS_OFFSET]
    data += _varint(len(fields)) + fields
    struct.pack_into(">i", data, LENGTH_OFFSET, len(data) - LOG_OVERHEAD)
    started = time.perf_counter()
    with pytest.raises(CorruptRecordError, match="invalid number of headers"):
        RecordBatch(_with_crc(data)).record_tuples()
    assert time.perf_counter() - started < 1
