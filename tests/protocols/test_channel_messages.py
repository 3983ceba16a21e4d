"""A produce request and a fetch answer between clients and replica hosts: a msgpack head
naming each partition's records by size, then the records end to end, sent where they lie
and read where they arrived."""
from __future__ import annotations

import pytest

from protocols.errors import InvalidRequestError
from protocols.file_region import FileRegion
from protocols.messages import (FetchManyResponse, FetchResult, ProduceManyRequest,
                                decode_fetch_many_response, decode_produce_many_request,
                                encode_fetch_many_response, encode_produce_many_request,
                                fetch_many_response_pieces, produce_many_request_pieces)
from protocols.records import MemoryRecordsBuilder, Record, RecordBatch, encode_batch


def _builder(n: int) -> MemoryRecordsBuilder:
    builder = MemoryRecordsBuilder()
    for i in range(n):
        builder.append(1_700_000_000_000 + i, f"k{i}".encode(), b"v" * i, (), i)
    return builder


def test_a_batch_sent_as_header_and_body_arrives_as_the_batch_build_makes():
    builder = _builder(50)
    header, body = builder.build_parts(producer_id=7, producer_epoch=1, base_sequence=3)
    request = ProduceManyRequest(-1, 30_000, (("t", 0, (header, body)),), "tx", "app")
    pieces = produce_many_request_pieces(request)
    assert pieces[1] is header and pieces[2] is body   # not copied on the way out
    decoded = decode_produce_many_request(b"".join(pieces))
    records = builder.build(producer_id=7, producer_epoch=1, base_sequence=3)
    assert decoded == ProduceManyRequest(-1, 30_000, (("t", 0, records),), "tx", "app")
    batch = RecordBatch(decoded.partitions[0][2])
    batch.ensure_valid()   # the CRC run on from the header into the body
    assert batch.header().producer_id == 7 and batch.header().record_count == 50


def test_partitions_records_of_every_shape_come_back_in_order_as_bytes():
    one = encode_batch([Record(b"a", b"1", 0)])
    two = encode_batch([Record(None, b"x" * 300, 0), Record(b"b", None, 0)])
    request = ProduceManyRequest(1, 500, (("a", 0, one), ("b", 3, memoryview(two)),
                                          ("a", 1, (two[:10], bytearray(two[10:]))),
                                          ("c", 0, b"")))
    decoded = decode_produce_many_request(encode_produce_many_request(request))
    assert decoded.partitions == (("a", 0, one), ("b", 3, two), ("a", 1, two), ("c", 0, b""))
    assert all(type(r) is bytes for _, _, r in decoded.partitions)
    assert (decoded.acks, decoded.timeout_ms, decoded.transactional_id) == (1, 500, None)


def test_a_request_cut_anywhere_or_with_bytes_after_it_is_invalid_request():
    data = encode_produce_many_request(ProduceManyRequest(
        -1, 30_000, (("t", 0, encode_batch([Record(b"k", b"v", 0)])),), None, "app"))
    for cut in range(len(data)):
        with pytest.raises(InvalidRequestError, match="Malformed ProduceManyRequest"):
            decode_produce_many_request(data[:cut])
    with pytest.raises(InvalidRequestError, match="1 bytes after the records"):
        decode_produce_many_request(data + b"\0")


@pytest.mark.parametrize("size", [-1, 1 << 40, "3", None])
def test_a_records_size_that_is_not_a_size_within_the_request_is_invalid_request(size):
    import struct

    import msgpack
    head = msgpack.packb((-1, 30_000, [("t", 0, size)], None, None))
    with pytest.raises(InvalidRequestError, match=r"Malformed ProduceManyRequest .*: "
                       rf"ValueError: records of {size!r} bytes at \d+ of \d+"):
        decode_produce_many_request(struct.pack(">I", len(head)) + head + b"abc")


def _answer() -> FetchManyResponse:
    one = encode_batch([Record(b"a", b"1", 0)])
    two = encode_batch([Record(None, b"x" * 300, 0), Record(b"b", None, 0)], base_offset=5)
    region = FileRegion("/data/t-2/00000000000000000000.log", 1, 2, 0, 10)
    return FetchManyResponse((("t", 0, FetchResult(one, 1, 0, 1)),
                              ("t", 1, FetchResult(b"", 0, 0, 0)),
                              ("t", 2, FetchResult(region, 9, 0, 9)),
                              ("u", 0, FetchResult(two, 7, 5, 7, last_stable_offset=7,
                                                   aborted_transactions=((3, 5),)))),
                             None, 12, 0)


def test_a_fetch_answer_sends_its_records_as_the_log_read_them_and_reads_them_back():
    response = _answer()
    pieces = fetch_many_response_pieces(response)
    assert pieces[1] is response.results[0][2].records   # not copied on the way out
    assert pieces[2] is response.results[3][2].records
    assert len(pieces) == 3                               # no piece for none, or a region
    assert decode_fetch_many_response(b"".join(pieces)) == response


def test_a_consumer_reads_a_fetch_answers_records_where_they_arrived():
    data = bytearray(encode_fetch_many_response(_answer()))
    decoded = decode_fetch_many_response(data, views=True)
    records = [r.records for _, _, r in decoded.results]
    assert isinstance(records[0], memoryview) and records[0].obj is data
    assert [bytes(r) if isinstance(r, memoryview) else r for r in records] == \
        [r.records for _, _, r in _answer().results]


def test_a_fetch_answer_cut_anywhere_or_with_bytes_after_it_is_invalid_request():
    data = encode_fetch_many_response(_answer())
    for cut in range(len(data)):
        with pytest.raises(InvalidRequestError, match="Malformed FetchManyResponse"):
            decode_fetch_many_response(data[:cut])
    with pytest.raises(InvalidRequestError, match="2 bytes after the records"):
        decode_fetch_many_response(data + b"\0\0")
