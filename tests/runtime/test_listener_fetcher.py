"""An offset range read over the cluster's Kafka listener (``ListenerFetcher``: Fetch to the
partition's leader, as Kafka's consumer fetches), what a Spark task reads with given only
``kafka.bootstrap.servers``: the same tables as the consumer's through Ray
(``read_tables``), Kafka's read_committed, a leader that moves, Kafka's errors."""
from __future__ import annotations

import pyarrow as pa
import pytest

import rafka
from protocols.errors import KafkaTimeoutError, OffsetOutOfRangeError
from protocols.topics import TopicPartition
from rafka.client.listener_fetcher import ListenerFetcher
from rafka.connectors.offset_ranges import OffsetRange
from rafka.connectors.range_reader import read_tables, read_tables_over_listener
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]
SHARE_CLUSTER = True   # each test its own topics


def _both(cluster, fetcher, r: OffsetRange, **kw) -> tuple[pa.Table, pa.Table]:
    """The range read through Ray and over the listener, each as one table."""
    def one(tables) -> pa.Table:
        tables = list(tables)
        return pa.concat_tables(tables) if tables else None
    return (one(read_tables(cluster, r, **kw)),
            one(read_tables_over_listener(fetcher, r, **kw)))


def test_a_range_reads_the_same_table_as_the_consumer_through_ray(cluster):
    """Keys and values of mixed sizes, headers on some, null keys and values, batches of
    several sizes (send and send_batch), a range starting and ending inside batches."""
    cluster.admin().create_topics([rafka.NewTopic("lf-same", 2, 2)])
    with rafka.Producer(cluster, {"acks": "all", "batch.size": 2048}) as producer:
        for i in range(600):
            producer.send("lf-same", None if i % 7 == 0 else b"v" * (i % 300),
                          key=None if i % 5 == 0 else b"user-%d" % i, partition=i % 2,
                          headers=[("trace", b"%d" % i)] if i % 10 == 0 else None)
        producer.send_batch("lf-same", [b"x" * (20 + i % 500) for i in range(3000)],
                            [b"k%d" % i for i in range(3000)], partition=0).result(60)
    ends = {tp.partition: r.offset for tp, r in cluster.admin().list_offsets(
        {("lf-same", p): "latest" for p in range(2)}).items()}
    assert ends == {0: 3300, 1: 300}
    with ListenerFetcher(cluster.bootstrap_servers) as fetcher:
        for r, kw in ((OffsetRange("lf-same", 0, 0, 3300), {"headers": True}),
                      (OffsetRange("lf-same", 1, 0, 300), {}),
                      (OffsetRange("lf-same", 0, 17, 2999), {"max_records": 1000,
                                                             "headers": True})):
            through_ray, over_listener = _both(cluster, fetcher, r, **kw)
            assert over_listener.equals(through_ray), r
            assert over_listener["offset"].to_pylist() == list(range(r.from_offset,
                                                                     r.until_offset))
            assert over_listener.column_names == through_ray.column_names


def test_read_committed_skips_aborted_transactions_and_markers(cluster):
    """KIP-98's read_committed over the listener: the aborted transaction's records and both
    markers are not handed out; the range still ends where asked."""
    cluster.admin().create_topics([rafka.NewTopic("lf-txn", 1, 3)])
    producer = rafka.Producer(cluster, {"transactional.id": "lf-txn-app"})
    producer.init_transactions()
    for n, commit in ((3, True), (4, False), (2, True)):
        producer.begin_transaction()
        for i in range(n):
            producer.send("lf-txn", b"%s-%d" % (b"c" if commit else b"a", i))
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    tp = TopicPartition("lf-txn", 0)
    # 9 records, 3 markers (the last marker is written after the commit is answered).
    end = wait_until(lambda: cluster.admin().list_offsets(
        {tp: "latest"}, "read_committed")[tp].offset == 12 and 12, 30, "the last marker")
    config = {"isolation.level": "read_committed"}
    with ListenerFetcher(cluster.bootstrap_servers) as fetcher:
        r = OffsetRange("lf-txn", 0, 0, end)
        through_ray, over_listener = _both(cluster, fetcher, r, config=config)
        assert over_listener["value"].to_pylist() == [b"c-0", b"c-1", b"c-2", b"c-0", b"c-1"]
        assert over_listener.equals(through_ray)
        # read_uncommitted hands out the aborted ones too, never the markers.
        assert len(pa.concat_tables(read_tables_over_listener(fetcher, r))) == 9


def test_a_leader_that_moves_is_learnt_again_and_the_range_read_whole(cluster):
    """NOT_LEADER_OR_FOLLOWER from the broker it fetches from: the metadata is read again
    and the leader asked, as Kafka's consumer does; a partition reassigned to another
    broker between a range's fetches is read to its end."""
    cluster.admin().create_topics([rafka.NewTopic("lf-moved", 1, 1)])
    with rafka.Producer(cluster, {"acks": "all", "batch.size": 1024}) as producer:
        for i in range(2000):
            producer.send("lf-moved", b"%d" % i)
    tp = TopicPartition("lf-moved", 0)
    expected = [b"%d" % i for i in range(2000)]
    small = {"max.partition.fetch.bytes": 4096}   # many fetches: the leader asked again
    with ListenerFetcher(cluster.bootstrap_servers) as fetcher:
        r = OffsetRange("lf-moved", 0, 0, 2000)
        tables = read_tables_over_listener(fetcher, r, max_records=500, config=small)
        got = [next(tables)]
        leader = fetcher._leaders[tp]
        fetcher._leaders[tp] = next(b for b in fetcher._brokers if b != leader)
        got += list(tables)
        assert pa.concat_tables(got)["value"].to_pylist() == expected
        assert fetcher._leaders[tp] == leader

        tables = read_tables_over_listener(fetcher, r, max_records=500, config=small)
        got = [next(tables)]
        new = next(b for b in fetcher._brokers if b != leader)
        cluster.admin().alter_partition_reassignments({("lf-moved", 0): [new]})
        wait_until(lambda: cluster.metadata()["topics"]["lf-moved"][0]["replicas"] == (new,),
                   60, "the partition moved")
        got += list(tables)
        assert pa.concat_tables(got)["value"].to_pylist() == expected


def test_records_deleted_under_a_range_fail_it_as_kafkas_consumer_fails(cluster):
    """auto.offset.reset=none, as a range's reader is: OFFSET_OUT_OF_RANGE raised with the
    Java consumer's words; a range past what the partition holds times out, naming it."""
    cluster.admin().create_topics([rafka.NewTopic("lf-gone", 1, 1)])
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        producer.send_batch("lf-gone", [b"%d" % i for i in range(100)]).result(60)
    cluster.admin().delete_records({("lf-gone", 0): 60})
    with ListenerFetcher(cluster.bootstrap_servers) as fetcher:
        with pytest.raises(OffsetOutOfRangeError, match=r"Fetch position FetchPosition"
                           r"\{offset=10\} is out of range for partition lf-gone-0"):
            list(read_tables_over_listener(fetcher, OffsetRange("lf-gone", 0, 10, 100)))
        assert len(pa.concat_tables(read_tables_over_listener(
            fetcher, OffsetRange("lf-gone", 0, 60, 100)))) == 40
        with pytest.raises(KafkaTimeoutError, match=r"lf-gone-0 \[100, 120\) after 1.0 s"):
            list(read_tables_over_listener(fetcher, OffsetRange("lf-gone", 0, 90, 120),
                                           timeout_s=1.0))
