"""Records written over the cluster's Kafka listener (``ListenerProducer``: Produce to each
partition's leader, idempotent as Kafka's producer), what a Spark task writes with given
only ``kafka.bootstrap.servers``: the same records in the same partitions as
``Producer.send_batch`` through Ray, each once even when an answer is lost or a leader
moves, Kafka's errors; and Kafka's transactional producer over the listener (what a Spark
task's exactly-once write uses): committed records and offsets seen together, aborted ones
never, a zombie fenced."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import rafka
from protocols.errors import (IllegalStateError, InvalidConfigError, KafkaError,
                              KafkaTimeoutError, ProducerFencedError, RecordTooLargeError)
from protocols.kafka.api_keys import ApiKey
from protocols.topics import TopicPartition
from rafka.client.listener_admin import ListenerAdmin
from rafka.client.listener_producer import ListenerProducer
from rafka.consumer.coordinator import CommitFailedError, ConsumerGroupMetadata
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]
SHARE_CLUSTER = True   # each test its own topics

N = 3000
VALUES = [b"v" * (i % 700) if i % 11 else None for i in range(N)]
KEYS = [b"user-%d" % (i % 97) if i % 7 else None for i in range(N)]
HEADERS = [[("trace", b"%d" % i)] if i % 10 == 0 else None for i in range(N)]
STAMPS = [1_790_000_000_000 + i for i in range(N)]


def _table(cluster, topic: str, partitions: int, count: int) -> pa.Table:
    """What the topic holds, partition by partition, without its topic column."""
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = []
    while sum(len(t) for t in got) < count:
        got.append(consumer.poll_arrow(1000, max_records=count, headers=True))
    consumer.close()
    return (pa.concat_tables(got).sort_by([("partition", "ascending"), ("offset", "ascending")])
            .drop_columns(["topic"]))


def test_send_batch_writes_what_the_producer_through_ray_writes(cluster):
    """Keyed records by murmur2 and key-less ones stickily, headers, null values, given
    timestamps, a given partition; small batches (batch.size) so that each leader gets
    several requests in flight."""
    # Old timestamps: kept (retention.ms -1) past the brokers' retention passes.
    cluster.admin().create_topics([rafka.NewTopic(t, 4, 2, config={"retention.ms": -1})
                                   for t in ("lp-ray", "lp-listener")])
    config = {"batch.size": 8192}
    with rafka.Producer(cluster, config) as producer:
        producer.send_batch("lp-ray", VALUES, KEYS, timestamps=STAMPS,
                            headers=HEADERS).result(60)
        producer.send_batch("lp-ray", [b"p2"] * 10, partition=2, timestamps=5).result(60)
    with ListenerProducer(cluster.bootstrap_servers, config) as producer:
        sent = [producer.send_batch("lp-listener", VALUES, KEYS, timestamps=STAMPS,
                                    headers=HEADERS),
                producer.send_batch("lp-listener", [b"p2"] * 10, partition=2,
                                    timestamps=5)]
        producer.flush()
        assert [s.result() for s in sent] == [N, 10]
    through_ray = _table(cluster, "lp-ray", 4, N + 10)
    over_listener = _table(cluster, "lp-listener", 4, N + 10)
    # The keyed records land where Ray's producer puts them; the key-less ones go stickily
    # to some partition on both, so only their multiset is the same.
    for table in (through_ray, over_listener):
        assert len(table) == N + 10
    by_key = {(r["key"], r["value"]): r["partition"] for r in through_ray.to_pylist()
              if r["key"] is not None}
    assert all(by_key[(r["key"], r["value"])] == r["partition"]
               for r in over_listener.to_pylist() if r["key"] is not None)

    def rows(table):
        return sorted((r["key"] or b"", r["value"] or b"", r["timestamp"],
                       tuple((h["key"], h["value"]) for h in r["headers"]))
                      for r in table.to_pylist())
    assert rows(over_listener) == rows(through_ray)
    assert over_listener.filter(pc.equal(over_listener["value"], b"p2"))[
        "partition"].to_pylist() == [2] * 10


def test_each_partition_keeps_the_order_given_with_requests_cut_by_max_request_size(cluster):
    """Batches of several sizes, up to max.in.flight requests per leader, each under
    max.request.size: a partition whose batch did not fit sends none after it until it has
    gone, so every partition holds its records in the order given."""
    cluster.admin().create_topics([rafka.NewTopic("lp-order", 3, 1)])
    values = [b"%d-" % i + b"x" * (i * 37 % 900) for i in range(4000)]
    keys = [b"k%d" % (i % 50) for i in range(4000)]
    config = {"batch.size": 3000, "max.request.size": 5000}
    with ListenerProducer(cluster.bootstrap_servers, config) as producer:
        producer.send_batch("lp-order", values, keys)
        producer.flush()
    table = _table(cluster, "lp-order", 3, 4000)
    for p in range(3):
        got = table.filter(pc.equal(table["partition"], p))["value"].to_pylist()
        assert got == sorted(got, key=lambda v: int(v.split(b"-")[0])), p
    assert sorted(table["value"].to_pylist()) == sorted(values)


def test_a_lost_answer_or_a_moved_leader_writes_each_batch_once(cluster):
    """Idempotence (KIP-98): the connection drops after a request went out, before its
    answer is read; the same batches are sent again with their sequences, and the leader
    writes them once. Then a leader it has wrong answers NOT_LEADER_OR_FOLLOWER and is
    learnt again."""
    cluster.admin().create_topics([rafka.NewTopic("lp-once", 2, 2)])
    with ListenerProducer(cluster.bootstrap_servers, {"batch.size": 4096}) as producer:
        receive = producer._receive
        lost = []

        def lose_first_answer(address, api_key, *args):
            if api_key == ApiKey.PRODUCE and not lost:
                lost.append(address)
                producer._sockets.pop(address).close()   # the answer never comes
                raise ConnectionResetError("connection dropped")
            return receive(address, api_key, *args)
        producer._receive = lose_first_answer
        producer.send_batch("lp-once", [b"%d" % i for i in range(1000)], partition=0)
        producer.flush()
        assert lost
        producer._receive = receive
        tp = TopicPartition("lp-once", 1)
        producer.send_batch("lp-once", [b"x"], partition=1)
        producer.flush()
        leader = producer._leaders[tp]
        producer._leaders[tp] = next(b for b in producer._brokers if b != leader)
        producer.send_batch("lp-once", [b"%d" % i for i in range(500)], partition=1)
        producer.flush()
        assert producer._leaders[tp] == leader
    ends = cluster.admin().list_offsets({("lp-once", p): "latest" for p in range(2)})
    assert [r.offset for r in ends.values()] == [1000, 501]
    values = _table(cluster, "lp-once", 2, 1501)["value"].to_pylist()
    assert values == [b"%d" % i for i in range(1000)] + [b"x"] + [b"%d" % i for i in range(500)]


def test_a_batch_too_large_for_the_topic_is_split_and_sent_again_in_order(cluster):
    """Batches are filled to about 1 MB unless batch.size is set; a topic whose
    max.message.bytes is smaller refuses them (MESSAGE_TOO_LARGE), and each is halved and
    sent again, as Kafka's sender splits it, until it fits: every record once, in order,
    with the sequences of an idempotent producer still following."""
    cluster.admin().create_topics([rafka.NewTopic("lp-split", 2, 2,
                                                  config={"max.message.bytes": "20000"})])
    values = [b"%05d-" % i + b"s" * (i % 200) for i in range(4000)]
    with ListenerProducer(cluster.bootstrap_servers) as producer:
        first = producer.send_batch("lp-split", values[:3000], partition=0)
        second = producer.send_batch("lp-split", values[3000:], partition=1)
        producer.flush()
        assert (first.result(), second.result()) == (3000, 1000)
        again = producer.send_batch("lp-split", [b"after"] * 10, partition=0)
        producer.flush()
        assert again.result() == 10
    table = _table(cluster, "lp-split", 2, 4010)
    by_partition = {p: table.filter(pc.equal(table["partition"], p))["value"].to_pylist()
                    for p in (0, 1)}
    assert by_partition == {0: values[:3000] + [b"after"] * 10, 1: values[3000:]}


def test_a_producer_kept_after_a_failed_write_starts_clean(cluster):
    """A Spark worker keeps its producer for its next tasks: a write that failed part way
    (a record too large for the topic's max.message.bytes: MESSAGE_TOO_LARGE) leaves
    nothing queued, no unread answer on its connections, and the next write goes out under
    a new producer id."""
    cluster.admin().create_topics([rafka.NewTopic("lp-small", 1, 1,
                                                  config={"max.message.bytes": "2000"}),
                                   rafka.NewTopic("lp-next", 2, 1)])
    producer = ListenerProducer(cluster.bootstrap_servers, {"batch.size": 1000})
    sent = [producer.send_batch("lp-next", [b"a" * 500] * 20),
            producer.send_batch("lp-small", [b"b" * 3000])]
    with pytest.raises(RecordTooLargeError, match="Produce to lp-small-0"):
        producer.flush()
    with pytest.raises(RecordTooLargeError):
        sent[1].result()
    assert producer._producer_id == -1 and not producer._queued and not producer._sockets
    again = producer.send_batch("lp-next", [b"c"] * 5)
    producer.flush()
    assert again.result() == 5 and producer._producer_id >= 0
    producer.close()


def test_kafkas_errors(cluster):
    cluster.admin().create_topics([rafka.NewTopic("lp-errors", 1, 1)])
    with pytest.raises(InvalidConfigError, match="Must set acks to all in order to use the "
                                                 "idempotent producer."):
        ListenerProducer(cluster.bootstrap_servers, {"acks": "1", "enable.idempotence": True})
    with ListenerProducer(cluster.bootstrap_servers, {"max.block.ms": 1000,
                                                      "max.request.size": 2000}) as producer:
        with pytest.raises(KafkaTimeoutError, match="Topic lp-none not present in metadata "
                                                    "after 1000 ms."):
            producer.send_batch("lp-none", [b"a"])
        with pytest.raises(RecordTooLargeError, match="The message at index 1 is 3021 bytes "
                                                      "when serialized which is larger than "
                                                      "2000"):
            producer.send_batch("lp-errors", [b"a", b"b" * 3000])
        sent = producer.send_batch("lp-errors", [b"a", b"b"])
        producer.flush()
        assert sent.result() == 2
    # acks=1 without idempotence asked for: Kafka turns idempotence off, and so here.
    with ListenerProducer(cluster.bootstrap_servers, {"acks": "1"}) as producer:
        assert not producer.idempotent
        producer.send_batch("lp-errors", [b"c"])
        producer.flush()
    assert cluster.admin().list_offsets({("lp-errors", 0): "latest"})[
        TopicPartition("lp-errors", 0)].offset == 3


def _settled(cluster, topic: str, partitions: int) -> dict:
    """The topic's last stable offsets once no transaction is open in it (EndTxn is
    answered before its markers are written: the LSO reaches the end just after)."""
    admin = cluster.admin()
    specs = {(topic, p): "latest" for p in range(partitions)}
    return wait_until(lambda: (lambda stable: stable == admin.list_offsets(specs) and stable)(
        admin.list_offsets(specs, "read_committed")), 30, f"no transaction open in {topic}")


def _committed(cluster, topic: str, partitions: int) -> list[bytes]:
    """What read_committed readers see of the topic once no transaction is open in it."""
    stable = _settled(cluster, topic, partitions)
    consumer = rafka.Consumer(cluster, {"isolation.level": "read_committed",
                                        "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got: list[bytes] = []
    try:
        while any(consumer.position(tp) < r.offset for tp, r in stable.items()):
            got += [r.value for r in consumer.poll(500)]
    finally:
        consumer.close()
    return got


def test_transactions_commit_abort_and_offsets_as_kafkas_producer(cluster):
    """KIP-98 over the listener: a committed transaction's records and its group offsets
    are seen together, an aborted one's records never (by read_committed readers), and the
    producer goes on with the next transaction; its batches are sent only once their
    partitions are in the transaction (AddPartitionsToTxn)."""
    cluster.admin().create_topics([rafka.NewTopic("lp-txn", 3, 3)])
    servers = cluster.bootstrap_servers
    with ListenerProducer(servers, {"transactional.id": "lp-txn-1",
                                    "batch.size": 2048}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        sent = producer.send_batch("lp-txn", [b"a%d" % i for i in range(300)],
                                   [b"k%d" % (i % 17) for i in range(300)])
        producer.send_offsets_to_transaction({("lp-txn-src", 0): 42}, "lp-txn-group")
        with ListenerAdmin(servers) as admin:
            # Pending in the open transaction: not the group's yet.
            assert admin.list_consumer_group_offsets("lp-txn-group", [("lp-txn-src", 0)]) == {}
        producer.commit_transaction()
        assert sent.result() == 300
        producer.begin_transaction()
        aborted = producer.send_batch("lp-txn", [b"b%d" % i for i in range(100)])
        producer.flush()
        producer.send_offsets_to_transaction({("lp-txn-src", 0): 99}, "lp-txn-group")
        producer.abort_transaction()
        assert aborted.result() == 100   # written, then aborted: never shown
        producer.begin_transaction()
        producer.send_batch("lp-txn", [b"c%d" % i for i in range(10)], partition=1)
        producer.commit_transaction()
    with ListenerAdmin(servers) as admin:
        offsets = admin.list_consumer_group_offsets("lp-txn-group", [("lp-txn-src", 0)],
                                                    require_stable=True)
    assert offsets[TopicPartition("lp-txn-src", 0)].offset == 42
    assert sorted(_committed(cluster, "lp-txn", 3)) == sorted(
        [b"a%d" % i for i in range(300)] + [b"c%d" % i for i in range(10)])


def test_a_new_instance_fences_the_old_and_close_aborts_an_open_transaction(cluster):
    """init_transactions by a second producer of the same transactional id aborts the
    first's open transaction and fences it (PRODUCER_FENCED on its commit); a producer
    closed inside a transaction aborts it, so read_committed readers are not held back for
    transaction.timeout.ms."""
    cluster.admin().create_topics([rafka.NewTopic("lp-fence", 2, 3)])
    servers = cluster.bootstrap_servers
    old = ListenerProducer(servers, {"transactional.id": "lp-fence-1"})
    old.init_transactions()
    old.begin_transaction()
    old.send_batch("lp-fence", [b"zombie"] * 5)
    old.flush()
    new = ListenerProducer(servers, {"transactional.id": "lp-fence-1"})
    new.init_transactions()
    with pytest.raises(ProducerFencedError):
        old.commit_transaction()
    old.close()
    # Fenced with records still queued: close drops them and does not raise.
    older = ListenerProducer(servers, {"transactional.id": "lp-fence-2"})
    older.init_transactions()
    older.begin_transaction()
    queued = older.send_batch("lp-fence", [b"never sent"] * 2)
    ListenerProducer(servers, {"transactional.id": "lp-fence-2"}).init_transactions()
    with pytest.raises(ProducerFencedError):
        older.send_offsets_to_transaction({("lp-fence-src", 0): 1}, "lp-fence-group")
    older.close()
    with pytest.raises(KafkaError):
        queued.result()
    new.begin_transaction()
    new.send_batch("lp-fence", [b"new"] * 3)
    new.commit_transaction()
    new.begin_transaction()
    new.send_batch("lp-fence", [b"left open"] * 4)
    new.flush()
    new.close()
    assert sorted(_committed(cluster, "lp-fence", 2)) == [b"new"] * 3   # nothing left open


def test_a_failed_batch_discard_or_refused_offsets_make_the_transaction_abort(cluster):
    """A batch the broker refuses (MESSAGE_TOO_LARGE for one record) fails the commit; the
    abort then starts a new epoch (KIP-360: the failed batch left a gap in its sequence)
    and the next transaction commits. Records dropped by ``discard`` leave the transaction
    abortable, not committable without them. Offsets refused for a member the group has
    moved past fail with CommitFailedError, and the abort ends what AddOffsetsToTxn began."""
    cluster.admin().create_topics([rafka.NewTopic("lp-txn-fail", 2, 3,
                                                  config={"max.message.bytes": "2000"})])
    producer = ListenerProducer(cluster.bootstrap_servers, {"transactional.id": "lp-fail-1"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_batch("lp-txn-fail", [b"fine"] * 5, partition=0)
    producer.send_batch("lp-txn-fail", [b"x" * 3000], partition=1)
    with pytest.raises(RecordTooLargeError):
        producer.commit_transaction()
    epoch = producer._epoch
    producer.abort_transaction()
    assert producer._epoch == epoch + 1
    producer.begin_transaction()
    producer.send_batch("lp-txn-fail", [b"next"] * 3, partition=1)
    producer.commit_transaction()

    producer.begin_transaction()
    producer.send_batch("lp-txn-fail", [b"dropped"] * 4)
    producer.discard()
    with pytest.raises(KafkaError):
        producer.commit_transaction()
    producer.abort_transaction()

    producer.begin_transaction()
    producer.send_batch("lp-txn-fail", [b"refused offsets"] * 2)
    stale = ConsumerGroupMetadata("lp-fail-group", generation_id=7, member_id="gone")
    with pytest.raises(CommitFailedError):
        producer.send_offsets_to_transaction({("lp-fail-src", 0): 5}, stale)
    producer.abort_transaction()
    producer.close()
    # "fine" was in the transaction the failed batch aborted.
    assert sorted(_committed(cluster, "lp-txn-fail", 2)) == [b"next"] * 3


def test_transactional_misuse_fails_as_kafkas_producer(cluster):
    servers = cluster.bootstrap_servers
    with pytest.raises(InvalidConfigError, match="Cannot set a transactional.id without also "
                                                 "enabling idempotence."):
        ListenerProducer(servers, {"transactional.id": "x", "enable.idempotence": False})
    with ListenerProducer(servers) as plain:
        with pytest.raises(IllegalStateError, match="Transactional method invoked on a "
                                                    "non-transactional producer."):
            plain.init_transactions()
    producer = ListenerProducer(servers, {"transactional.id": "lp-misuse"})
    with pytest.raises(IllegalStateError, match="Cannot perform a 'send' before completing "
                                                "a call to initTransactions"):
        producer.send_batch("lp-misuse", [b"a"])
    with pytest.raises(IllegalStateError, match="Cannot call beginTransaction before "
                                                "completing a call to initTransactions"):
        producer.begin_transaction()
    producer.init_transactions()
    with pytest.raises(IllegalStateError, match="Cannot call send in state READY"):
        producer.send_batch("lp-misuse", [b"a"])
    producer.close()
