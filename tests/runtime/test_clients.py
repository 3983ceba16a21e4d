"""Producer and consumer against a real cluster (seed 001 §10.6-§10.7, docs/architecture.md
"Produce" and "Fetch (consumers)")."""
from __future__ import annotations

import os
import signal
import time
from collections import defaultdict

import pytest
import ray

import rafka
from protocols.arrow_records import HEADERS_TYPE
from protocols.errors import (InvalidConfigError, KafkaTimeoutError, OffsetOutOfRangeError,
                              RecordTooLargeError)
from protocols.partitioner import partition_for_key
from protocols.records import Record, encode_batch
from protocols.topics import TopicPartition
from protocols.wire import decode
from tests.runtime.helpers import (check_read_back_once_in_order, send_through_fault,
                                   wait_until)

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]
SHARE_CLUSTER = True   # each test its own topics; own_cluster for kills


def consume_all(consumer, expected: int, timeout_s: float = 60) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        got += consumer.poll(500)
    return got


def test_keys_go_where_kafka_puts_them_and_come_back_in_order(cluster):
    cluster.admin().create_topics([rafka.NewTopic("t", 3, 2)])
    with rafka.Producer(cluster, {"linger.ms": 2}, key_serializer="string",
                        value_serializer="string") as producer:
        futures = [producer.send("t", f"v{i}", key=f"user-{i % 7}") for i in range(300)]
        producer.flush()
        metas = [f.result(10) for f in futures]
    for i, m in enumerate(metas):
        assert m.partition == partition_for_key(f"user-{i % 7}".encode(), 3)
    per_partition = defaultdict(list)
    for i, m in enumerate(metas):
        per_partition[m.partition].append((m.offset, i))
    for entries in per_partition.values():   # offsets follow send order within a partition
        assert [o for o, _ in entries] == list(range(len(entries)))

    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest", "max.poll.records": 50},
                              value_deserializer="string", key_deserializer="string")
    consumer.assign([("t", p) for p in range(3)])
    records = consume_all(consumer, 300)
    assert len(records) == 300
    by_partition = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r)
    for p, rs in by_partition.items():
        assert [r.offset for r in rs] == list(range(len(rs)))
        assert [r.value for r in rs] == [f"v{i}" for _, i in per_partition[p]]
    assert all(r.key == f"user-{int(r.value[1:]) % 7}" for r in records)

    big, other = sorted(by_partition, key=lambda p: -len(by_partition[p]))[:2]
    tp0, tp1 = TopicPartition("t", big), TopicPartition("t", other)
    n0 = len(by_partition[big])
    assert consumer.position(tp0) == n0
    assert consumer.end_offsets([tp0]) == {tp0: n0}
    assert consumer.beginning_offsets([tp0]) == {tp0: 0}
    consumer.seek(tp0, n0 - 2)
    consumer.pause([tp for tp in consumer.assignment() if tp != tp0])
    again = consume_all(consumer, 2, 10)
    assert [r.offset for r in again] == [n0 - 2, n0 - 1]
    assert consumer.paused() == consumer.assignment() - {tp0}
    consumer.resume([tp1])
    consumer.seek_to_beginning([tp1])
    assert len(consume_all(consumer, len(by_partition[other]), 10)) == len(by_partition[other])
    first_ts = by_partition[big][0].timestamp
    found = consumer.offsets_for_times({tp0: first_ts, tp1: 2**62})
    assert found[tp0].offset == 0 and found[tp1] is None
    consumer.close()
    # read_committed reads to the last stable offset: with no transaction open, the HW.
    committed = rafka.Consumer(cluster, {"isolation.level": "read_committed",
                                         "auto.offset.reset": "earliest"})
    committed.assign([tp0])
    assert committed.end_offsets([tp0]) == {tp0: n0}
    assert [r.offset for r in consume_all(committed, n0, 10)] == list(range(n0))
    committed.close()


def test_bad_client_input_is_refused_clearly(cluster):
    cluster.admin().create_topics([rafka.NewTopic("small", 1, 1)])
    with pytest.raises(InvalidConfigError, match="linger.ms"):
        rafka.Producer(cluster, {"linger.msec": 5})
    with pytest.raises(InvalidConfigError, match="acks"):
        rafka.Producer(cluster, acks="2")
    with pytest.raises(InvalidConfigError, match="idempotent"):
        rafka.Producer(cluster, {"acks": "1", "enable.idempotence": True})
    with rafka.Producer(cluster, {"max.request.size": 100}) as producer:
        with pytest.raises(RecordTooLargeError):
            producer.send("small", b"x" * 200).result(5)
    with pytest.raises(InvalidConfigError, match="auto.offset.reset"):
        rafka.Consumer(cluster, {"auto.offset.reset": "smallest"})


@pytest.mark.own_cluster
def test_idempotent_producer_through_a_leader_kill_writes_each_record_once_in_order(cluster):
    cluster.admin().create_topics([rafka.NewTopic("t", 1, 3, config={"min.insync.replicas": 2})])

    def kill_the_leader():
        leader, _ = cluster.leader("t", 0)
        os.kill(cluster.broker_pid(leader), signal.SIGKILL)
    results = send_through_fault(cluster, "t", kill_the_leader)
    check_read_back_once_in_order(cluster, "t", results)
    wait_until(lambda: sorted(cluster.metadata()["topics"]["t"][0]["isr"]) == [0, 1, 2], 60,
               "the killed broker to rejoin")


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_acks_level_delivers(cluster, acks):
    topic = f"acks-{acks}"
    cluster.admin().create_topics([rafka.NewTopic(topic, 1, 3)])
    with rafka.Producer(cluster, {"acks": acks}) as producer:
        metas = [producer.send(topic, f"{i}".encode()).result(30) for i in range(50)]
    if acks == "0":
        assert {m.offset for m in metas} == {-1}          # no answer awaited: no offsets
    else:
        assert [m.offset for m in metas] == list(range(50))
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([(topic, 0)])
    assert [r.value for r in consume_all(consumer, 50, 30)] == [f"{i}".encode()
                                                                for i in range(50)]


def test_flush_returns_only_when_every_record_is_answered(cluster):
    cluster.admin().create_topics([rafka.NewTopic("flush", 3, 1)])
    with rafka.Producer(cluster, {"acks": "1", "linger.ms": 1000, "batch.size": 2048}) as p:
        futures = [p.send("flush", b"x" * 100) for _ in range(3000)]
        p.flush(30)
        assert all(f.done() for f in futures)
        assert sum(1 for f in futures if f.result(0).offset >= 0) == 3000


def test_compression_codecs_round_trip(cluster):
    cluster.admin().create_topics([rafka.NewTopic("z", 1, 2)])
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        with rafka.Producer(cluster, {"compression.type": codec, "linger.ms": 20}) as p:
            for i in range(100):
                p.send("z", f"{codec}-{i}".encode() * 10, key=codec.encode())
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("z", 0)])
    values = [r.value for r in consume_all(consumer, 400)]
    assert values == [f"{c}-{i}".encode() * 10 for c in ("gzip", "snappy", "lz4", "zstd")
                      for i in range(100)]


def test_max_block_ms_bounds_waiting_for_metadata_and_for_buffer_space(cluster):
    cluster.admin().create_topics([rafka.NewTopic("b", 1, 1)])
    with rafka.Producer(cluster, {"max.block.ms": 200}) as producer:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="not present in metadata after 200 ms"):
            producer.send("no-such-topic", b"x")
        assert time.monotonic() - started < 10
    # A batch that lingers holds its bytes: a second record does not fit buffer.memory.
    with rafka.Producer(cluster, {"buffer.memory": 1000, "batch.size": 100_000,
                                  "linger.ms": 60_000, "max.block.ms": 100}) as producer:
        producer.send("b", b"x" * 600)
        with pytest.raises(KafkaTimeoutError, match="buffer.memory"):
            producer.send("b", b"y" * 600)


def test_retries_of_the_same_batch_are_written_once(cluster):
    """Injected retries: the same idempotent batch sent twice to the leader gets its first
    offsets back; a producer whose requests all time out (request.timeout.ms=5) resends
    every batch and still writes each record once, in order."""
    cluster.admin().create_topics([rafka.NewTopic("dup", 1, 3, config={"min.insync.replicas": 2})])
    _, leader = cluster.leader("dup", 0)
    data = encode_batch([Record(None, b"once")], producer_id=999, producer_epoch=0,
                        base_sequence=0)
    first = decode(ray.get(leader.produce.remote(data, -1, 5000)))
    second = decode(ray.get(leader.produce.remote(data, -1, 5000)))
    assert first.error is None and second.error is None
    assert first.base_offset == second.base_offset == 0
    with rafka.Producer(cluster, {"request.timeout.ms": 5, "linger.ms": 0,
                                  "retry.backoff.ms": 1}) as producer:
        futures = [producer.send("dup", f"{i}".encode()) for i in range(200)]
        results = [f.result(60) for f in futures]
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("dup", 0)])
    values = [r.value for r in consume_all(consumer, 201)]
    assert values == [b"once"] + [f"{i}".encode() for i in range(200)]
    assert [m.offset for m in results] == list(range(1, 201))


def test_fetch_max_bytes_bounds_fetches_but_every_partition_is_read(cluster):
    cluster.admin().create_topics([rafka.NewTopic("wide", 4, 1)])
    with rafka.Producer(cluster) as producer:
        for p in range(4):
            for i in range(20):
                producer.send("wide", f"{p}-{i}".encode() * 20, partition=p)
    # Room for one 1 KiB fetch at a time: partitions take turns, none starves.
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest",
                                        "fetch.max.bytes": 1024,
                                        "max.partition.fetch.bytes": 1024})
    consumer.assign([("wide", p) for p in range(4)])
    records = consume_all(consumer, 80)
    assert sorted((r.partition, r.offset) for r in records) == [
        (p, i) for p in range(4) for i in range(20)]


@pytest.mark.own_cluster
def test_consumer_detects_log_truncation_after_an_unclean_election(cluster):
    """KIP-320: a consumer that read records the new leader never had (an unclean election)
    goes back to where the logs agree (or, with auto.offset.reset=none, says so) instead of
    waiting at an offset the new leader will give to different records."""
    cluster.admin().create_topics([rafka.NewTopic(
        "div", replica_assignment={0: [0, 1]},
        config={"unclean.leader.election.enable": "true", "min.insync.replicas": 1})])
    with rafka.Producer(cluster) as producer:
        for i in range(10):                                   # on both replicas
            producer.send("div", f"old-{i}".encode()).result(30)
    cluster.stop_broker(1)                                    # the follower leaves the ISR
    wait_until(lambda: list(cluster.metadata()["topics"]["div"][0]["isr"]) == [0], 30,
               "the ISR to shrink to the leader")
    with rafka.Producer(cluster) as producer:
        for i in range(10, 20):                               # only on broker 0
            producer.send("div", f"old-{i}".encode()).result(30)

    resetting = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    strict = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    for consumer in (resetting, strict):
        consumer.assign([("div", 0)])
        assert [r.offset for r in consume_all(consumer, 20)] == list(range(20))
        assert consumer.position(("div", 0)) == 20
    strict.config["auto.offset.reset"] = "none"

    cluster.stop_broker(0, controlled=False)                  # the only ISR member is gone
    cluster.start_broker(1)                                   # ... and 1 is elected, unclean
    wait_until(lambda: cluster.metadata()["topics"]["div"][0]["leader"] == 1, 60,
               "broker 1 to lead through an unclean election")
    with rafka.Producer(cluster, {"acks": "1"}) as producer:
        for i in range(3):                                    # offsets 10-12 on the new leader
            producer.send("div", f"new-{i}".encode()).result(30)

    after = consume_all(resetting, 3)
    assert [(r.offset, r.value) for r in after] == [(10 + i, f"new-{i}".encode())
                                                    for i in range(3)]
    with pytest.raises(OffsetOutOfRangeError, match="Truncation detected"):
        consume_all(strict, 1, timeout_s=30)
    resetting.close()
    strict.close()


def test_batches_too_large_for_the_topic_are_split_and_every_record_lands_once(cluster):
    """The topic takes at most 1 KiB per batch, the producer builds 16 KiB ones: each
    MESSAGE_TOO_LARGE batch goes out again in halves (Kafka's splitAndReenqueue), with its
    sequence numbers, so nothing is lost, doubled or reordered; only a single record over
    the limit fails."""
    cluster.admin().create_topics([rafka.NewTopic("small-batches", 1, 2,
                                                  config={"max.message.bytes": 1024})])
    with rafka.Producer(cluster, {"linger.ms": 50, "batch.size": 16_384}) as producer:
        futures = [producer.send("small-batches", f"{i:04d}".encode() * 25) for i in range(300)]
        too_big = producer.send("small-batches", b"x" * 2_000)
        producer.flush(60)
    offsets = [f.result(0).offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 300
    with pytest.raises(RecordTooLargeError):
        too_big.result(0)
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("small-batches", 0)])
    records = consume_all(consumer, 300)
    assert [r.value for r in records] == [f"{i:04d}".encode() * 25 for i in range(300)]
    assert [r.offset for r in records] == offsets
    consumer.close()


def test_send_batch_partitions_as_send_does_and_poll_arrow_reads_spark_columns(cluster):
    # Producer.send_batch (many records as columns, one future) and Consumer.poll_arrow
    # (Spark's Kafka columns): keys by murmur2, null keys sticky per whole batch, an explicit
    # partition, and the per-record metadata in the order given.
    import pyarrow as pa
    # Timestamps from 1970: kept (retention.ms -1) past the brokers' retention passes.
    cluster.admin().create_topics([rafka.NewTopic(t, 3, 2, config={"retention.ms": -1})
                                   for t in ("cols", "cols2")])
    keys = [f"user-{i % 7}".encode() for i in range(500)]
    with rafka.Producer(cluster, {"acks": "all", "batch.size": 4096,
                                  "compression.type": "lz4"}) as producer:
        keyed = producer.send_batch("cols", pa.array([f"v{i}" for i in range(500)]), keys,
                                    timestamps=list(range(1_000, 1_500)))
        sticky = producer.send_batch("cols", [b"s%d" % i for i in range(300)])
        pinned = producer.send_batch("cols", [b"p0", None, b""], partition=2)
        meta = keyed.result(30)
        assert meta.column_names == ["partition", "offset", "timestamp"]
        assert meta["partition"].to_pylist() == [partition_for_key(k, 3) for k in keys]
        assert meta["timestamp"].cast("int64").to_pylist() == list(range(1_000, 1_500))
        per = defaultdict(list)
        for p, o in zip(meta["partition"].to_pylist(), meta["offset"].to_pylist()):
            per[p].append(o)
        assert all(offsets == sorted(offsets) for offsets in per.values())
        assert pinned.result(30)["partition"].to_pylist() == [2, 2, 2]
        assert len(sticky.result(30)) == 300 and sticky.exception() is None
        with pytest.raises(RecordTooLargeError, match="index 1"):
            producer.send_batch("cols", [b"x", b"y" * 2_000_000])
        # Keyed and key-less records in one call: each partition gets its records in the
        # order given (the sticky partition also holds keyed ones: 7 keys over 3 partitions).
        mixed = producer.send_batch("cols2", [b"m%d" % i for i in range(200)],
                                    [None if i % 3 else b"k%d" % (i % 7) for i in range(200)])
        meta = mixed.result(30)
        per = defaultdict(list)
        for p, o in zip(meta["partition"].to_pylist(), meta["offset"].to_pylist()):
            per[p].append(o)
        assert len(per) == 3 and all(offsets == sorted(offsets) for offsets in per.values())
    with rafka.Producer(cluster, value_serializer="string") as producer:
        # A configured serializer is given Python values, from an Arrow array too.
        assert len(producer.send_batch("cols", pa.array(["s1", "s2"]), partition=0)
                   .result(30)) == 2

    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([("cols", p) for p in range(3)])
    tables = []
    deadline = time.monotonic() + 60
    while sum(len(t) for t in tables) < 805 and time.monotonic() < deadline:
        tables.append(consumer.poll_arrow(500, max_records=128, headers=True))
    table = pa.concat_tables(tables)
    assert table.column_names == ["key", "value", "topic", "partition", "offset", "timestamp",
                                  "timestampType", "headers"]
    assert len(table) == 805 and max(len(t) for t in tables) <= 128
    rows = table.to_pylist()
    assert sorted(r["value"] for r in rows if r["key"] is not None) == \
        sorted(f"v{i}".encode() for i in range(500))
    assert [r["value"] for r in rows if r["partition"] == 2 and r["value"] in
            (b"p0", None, b"")] == [b"p0", None, b""]
    assert {r["topic"] for r in rows} == {"cols"} and {r["timestampType"] for r in rows} == {0}
    assert consumer.position(("cols", 0)) == sum(1 for r in rows if r["partition"] == 0)
    assert len(consumer.poll_arrow(100)) == 0
    # Batches fetched after poll_arrow are buffered as Arrow columns; poll still hands them
    # out as ConsumerRecords, headers and all.
    with rafka.Producer(cluster) as producer:
        # Headers, given as pairs or a mapping per record, or as Spark's column of structs,
        # encoded column by column into one batch.
        producer.send_batch("cols", pa.array([b"h1", b"h2", b"h3"]), pa.array(["k", None, "c"]),
                            partition=1,
                            headers=[[("trace", b"t1")], None, {"a": b"1", "b": None}]).result(30)
        producer.send_batch("cols", [b"h4"], partition=1, headers=pa.array(
            [[{"key": "span", "value": b"s"}]], HEADERS_TYPE)).result(30)
    got = consume_all(consumer, 4, 30)
    assert [(r.key, r.value, r.headers, r.partition) for r in got] == \
        [(b"k", b"h1", (("trace", b"t1"),), 1), (None, b"h2", (), 1),
         (b"c", b"h3", (("a", b"1"), ("b", None)), 1), (None, b"h4", (("span", b"s"),), 1)]
    assert isinstance(got[0].timestamp, int) and isinstance(got[0].offset, int)
    consumer.close()
