"""A fetch answer's batches buffered for poll and poll_arrow (Kafka's CompletedFetch):
consecutive batches decoded together give each batch's records, headers and all, as the
per-record decoder reads them; a fetch that began inside a batch hands out nothing before
its offset; the records before a corrupt batch are handed out, then its error raised."""
from __future__ import annotations

import pytest

from protocols.errors import CorruptRecordError
from protocols.records import RECORDS_OFFSET, Record, encode_batch, iter_batches
from protocols.topics import TopicPartition
from rafka.consumer.config import CONSUMER_CONFIG
from rafka.consumer.fetch_buffer import buffer_fetched
from rafka.consumer.fetcher import Fetcher
from rafka.consumer.subscription_state import PartitionState

TP = TopicPartition("t", 0)


def batch(offset: int, n: int, headers_every: int = 0) -> bytes:
    # Kafka-sized batches: a few records each, keys and values of differing sizes, a
    # header on some records.
    return encode_batch([Record(b"user-%d" % (offset + i), b"v" * (offset + i) * 7,
                                1_000 + offset + i,
                                (("trace", b"%d" % i), ("h", None))
                                if headers_every and i % headers_every == 0 else ())
                         for i in range(n)], base_offset=offset)


def fetched(records: bytes, fetch_offset: int = 0, arrow: bool = False,
            check_crcs: bool = True):
    """What poll (or poll_arrow) hands out of one fetch, and the error it raised, if any."""
    fetcher = Fetcher(CONSUMER_CONFIG.parse({}), None, lambda tp, st: None)
    st = PartitionState(position=fetch_offset)
    error = None
    try:
        buffer_fetched(st, records, fetch_offset, as_arrow=arrow, check_crcs=check_crcs)
    except CorruptRecordError as e:
        error = e
    if arrow:
        table = fetcher.drain_arrow({TP: st}, 10_000, headers=True)
        got = [] if table is None else [
            (o, k, v, tuple((h["key"], h["value"]) for h in hs)) for o, k, v, hs in zip(
                *(table[c].to_pylist() for c in ("offset", "key", "value", "headers")))]
    else:
        got = [(r.offset, r.key, r.value, r.headers) for r in fetcher.drain_buffered({TP: st})]
    return got, error


def expected(records: bytes, fetch_offset: int = 0):
    return [(o, k, v, h) for b in iter_batches(records) for o, _, k, v, h in b.record_tuples()
            if o >= fetch_offset]


@pytest.mark.parametrize("arrow", [False, True])
@pytest.mark.parametrize("headers_every", [0, 3])
def test_many_small_batches_give_each_batchs_records(arrow, headers_every):
    # 40 batches of 1-7 records: too few in each for the columnar path alone, located
    # together (some records with headers, one with a null header value).
    sizes = [1 + i % 7 for i in range(40)]
    starts = [sum(sizes[:i]) for i in range(40)]
    records = b"".join(batch(s, n, headers_every) for s, n in zip(starts, sizes))
    got, error = fetched(records, arrow=arrow)
    assert error is None
    assert got == expected(records) and len(got) == sum(sizes)


@pytest.mark.parametrize("arrow", [False, True])
def test_a_fetch_that_began_inside_a_batch_starts_at_its_offset(arrow):
    records = batch(0, 30, 4) + batch(30, 30, 4)
    got, _ = fetched(records, fetch_offset=12, arrow=arrow)
    assert got == expected(records, 12) and got[0][0] == 12


@pytest.mark.parametrize("arrow", [False, True])
@pytest.mark.parametrize("check_crcs", [True, False])
def test_the_records_before_a_corrupt_batch_are_handed_out_then_its_error(arrow, check_crcs):
    good = batch(0, 20, 3) + batch(20, 20, 3)
    bad = bytearray(batch(40, 20, 3))
    bad[RECORDS_OFFSET] = 0x7F   # the first record's length: far past the batch
    if not check_crcs:
        bad_batch = next(iter_batches(bytes(bad)))
        assert bad_batch.compute_checksum() != bad_batch.header().crc
    got, error = fetched(good + bytes(bad) + batch(60, 5), arrow=arrow, check_crcs=check_crcs)
    assert got == expected(good)
    assert error is not None


@pytest.mark.parametrize("arrow", [False, True])
def test_the_records_before_a_batch_of_impossible_length_are_handed_out(arrow):
    # A batch header whose batchLength is below the v2 header's: the records of the whole
    # batches before it are handed out, then CorruptRecordError.
    good = batch(0, 5, 2) + batch(5, 5, 2)
    got, error = fetched(good + (0).to_bytes(8, "big") + (20).to_bytes(4, "big"), arrow=arrow)
    assert got == expected(good)
    assert error is not None and "smaller than the minimum" in str(error)


def test_a_header_key_that_is_not_utf8_fails_the_fetch_after_the_records_before_it():
    good = batch(0, 20, 3)
    bad = encode_batch([Record(b"k", b"v", 1_000, (("tr\xffce".encode("latin-1"), b"1"),))]
                       * 20, base_offset=20)
    got, error = fetched(good + bad)
    assert got == expected(good)
    assert error is not None and "does not decode" in str(error)


def test_grouped_batches_go_through_the_deserializers():
    records = b"".join(batch(s, 10, 4) for s in range(0, 100, 10))
    fetcher = Fetcher(CONSUMER_CONFIG.parse({}), None, lambda tp, st: None)
    st = PartitionState(position=0)
    buffer_fetched(st, records, 0, key_de=bytes.decode, value_de=len)
    got = [(r.offset, r.key, r.value, r.headers) for r in fetcher.drain_buffered({TP: st})]
    assert got == [(o, k.decode(), len(v), h) for o, k, v, h in expected(records)]
