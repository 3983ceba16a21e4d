"""Unmodified Kafka clients from PyPI and Debian against rafka's Kafka listener (issue 16):
confluent-kafka (librdkafka), kafka-python, aiokafka and kcat (librdkafka's command-line
tool) produce with acks 0, 1 and all, with each of Kafka's four codecs and with
idempotence, to the partitions rafka's producer would pick; consume in three-member groups
that commit, lose a member and rebalance; find offsets for times; administer topics,
configs and groups; and read what rafka's own clients and Spark's ``rafka`` format wrote,
and the other way round.

More of confluent-kafka is in test_kafka_listener.py. One cluster serves the whole module:
each test has its own topics and groups."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time

import pytest
import ray

import rafka
from protocols.partitioner import partition_for_key
from protocols.records import iter_batches
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


SHARE_CLUSTER = True   # one cluster for the module's tests (module_cluster)


@pytest.fixture(scope="module")
def kcat() -> str:
    """Debian's kcat; installed with apt-get when missing (CI runs as root)."""
    found = shutil.which("kcat")
    if found is None:
        result = subprocess.run(["apt-get", "install", "-y", "-q", "kcat"],
                                capture_output=True, text=True, timeout=600)
        found = shutil.which("kcat")
        assert found, "kcat is not installed and apt-get could not install it: " + \
            (result.stdout + result.stderr)[-600:]
    return found


def read_all(cluster, topic: str, partitions: int, expected: int, timeout_s: float = 60):
    """Every record of ``topic`` through rafka's own consumer."""
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    consumer.assign([(topic, p) for p in range(partitions)])
    got: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got += consumer.poll(500)
    finally:
        consumer.close()
    return got


def stored_codecs(cluster, topic: str, partitions: int) -> set[str]:
    """The compression of every batch on the partitions' leaders, as stored."""
    image = cluster.metadata()["topics"][topic]
    codecs = set()
    for p in range(partitions):
        raw = ray.get(cluster.replica(topic, p, image[p]["leader"]).read_local.remote(
            0, 1 << 24))
        codecs |= {b.compression for b in iter_batches(raw)}
    return codecs


def check_placed_like_rafka(got, partitions: int):
    """Each key is on the partition rafka's producer (Java's murmur2) would pick, and the
    records of each partition are in the order they were sent (values ``<codec>-<i>``,
    sent codec after codec)."""
    def sent_order(value: bytes) -> tuple[int, int]:
        prefix, _, i = value.decode().rpartition("-")
        return (CODECS.index(prefix) if prefix in CODECS else 0, int(i))
    for r in got:
        assert r.partition == partition_for_key(r.key, partitions), r
    for p in range(partitions):
        order = [sent_order(r.value) for r in got if r.partition == p]
        assert order == sorted(order)


def check_every_codec_written(cluster, topic: str) -> None:
    """300 records per codec (values ``<codec>-<i>``) on 3 partitions: all there, placed as
    rafka's partitioner places them, in order, and stored with the codec they were sent in."""
    got = read_all(cluster, topic, 3, 300 * len(CODECS))
    assert sorted(r.value for r in got) == sorted(
        b"%s-%d" % (c.encode(), i) for c in CODECS for i in range(300))
    check_placed_like_rafka(got, 3)
    assert stored_codecs(cluster, topic, 3) == set(CODECS)


# ---- producing ------------------------------------------------------------------------------

@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_produces_with_each_codec_where_rafka_would_put_it(cluster, acks):
    from kafka import KafkaProducer
    topic = f"kp-acks-{acks}"
    cluster.admin().create_topics([rafka.NewTopic(topic, 3, 2)])
    for codec in CODECS:
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=acks,
                                 compression_type=None if codec == "none" else codec,
                                 linger_ms=5)
        futures = [producer.send(topic, key=b"k%d" % (i % 23), value=b"%s-%d" % (
            codec.encode(), i)) for i in range(300)]
        producer.flush(30)
        producer.close()
        if acks != 0:      # acks=0 gets no answer, so no offsets
            assert all(f.get(10).offset >= 0 for f in futures)
    check_every_codec_written(cluster, topic)


def test_kafka_python_idempotent_producer_writes_each_record_once(cluster):
    from kafka import KafkaProducer
    cluster.admin().create_topics([rafka.NewTopic("kp-idem", 2, 3)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             enable_idempotence=True, acks="all", compression_type="lz4")
    metas = [producer.send("kp-idem", key=b"k%d" % (i % 5), value=b"v-%d" % i)
             for i in range(2000)]
    producer.flush(30)
    producer.close()
    metas = [m.get(10) for m in metas]
    got = read_all(cluster, "kp-idem", 2, 2000)
    assert {(r.partition, r.offset): r.value for r in got} == {
        (m.partition, m.offset): b"v-%d" % i for i, m in enumerate(metas)}
    check_placed_like_rafka(got, 2)
    image = cluster.metadata()["topics"]["kp-idem"]
    raw = ray.get(cluster.replica("kp-idem", 0, image[0]["leader"]).read_local.remote(
        0, 1 << 24))
    ids = {b.producer_id for b in iter_batches(raw)}
    assert len(ids) == 1 and ids.pop() >= 0


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_aiokafka_produces_with_each_codec_where_rafka_would_put_it(cluster, acks):
    import aiokafka
    topic = f"aio-acks-{acks}"
    cluster.admin().create_topics([rafka.NewTopic(topic, 3, 2)])

    async def produce():
        for codec in CODECS:
            producer = aiokafka.AIOKafkaProducer(
                bootstrap_servers=cluster.bootstrap_servers, acks=acks, linger_ms=5,
                compression_type=None if codec == "none" else codec)
            await producer.start()
            try:
                futures = [await producer.send(topic, key=b"k%d" % (i % 23),
                                               value=b"%s-%d" % (codec.encode(), i))
                           for i in range(300)]
                await producer.flush()
                metas = await asyncio.gather(*futures)
            finally:
                await producer.stop()
            if acks != 0:
                assert all(m.offset >= 0 for m in metas)
    asyncio.run(produce())
    check_every_codec_written(cluster, topic)


def test_aiokafka_idempotent_producer_writes_each_record_once(cluster):
    import aiokafka
    cluster.admin().create_topics([rafka.NewTopic("aio-idem", 2, 3)])

    async def produce():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                             enable_idempotence=True, linger_ms=2)
        await producer.start()
        try:
            futures = [await producer.send("aio-idem", key=b"k%d" % (i % 5),
                                           value=b"v-%d" % i) for i in range(2000)]
            return await asyncio.gather(*futures)
        finally:
            await producer.stop()
    metas = asyncio.run(produce())
    got = read_all(cluster, "aio-idem", 2, 2000)
    assert {(r.partition, r.offset): r.value for r in got} == {
        (m.partition, m.offset): b"v-%d" % i for i, m in enumerate(metas)}
    check_placed_like_rafka(got, 2)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_kafka_produces_with_each_codec_where_rafka_would_put_it(cluster, acks):
    from confluent_kafka import Producer
    topic = f"ck-acks-{acks}"
    cluster.admin().create_topics([rafka.NewTopic(topic, 3, 2)])
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": acks,
                             "compression.type": codec, "linger.ms": 20,
                             "partitioner": "murmur2_random"})
        failed = []
        for i in range(300):
            # Compressible headers: librdkafka sends a batch uncompressed when compressing
            # does not make it smaller.
            producer.produce(topic, key=b"k%d" % (i % 23), value=b"%s-%d" % (codec.encode(), i),
                             headers=[("pad", b"x" * 200)],
                             on_delivery=lambda e, m: e and failed.append(e))
        assert producer.flush(60) == 0 and not failed, failed
    check_every_codec_written(cluster, topic)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_kcat_produces_with_each_codec_where_rafka_would_put_it(cluster, kcat, acks):
    """librdkafka sends a batch uncompressed when compressing does not make it smaller:
    a compressible header on every record makes it smaller."""
    topic = f"kcat-acks-{acks}"
    cluster.admin().create_topics([rafka.NewTopic(topic, 3, 2)])
    for codec in CODECS:
        lines = "".join(f"k{i % 23}:{codec}-{i}\n" for i in range(300))
        result = subprocess.run(
            [kcat, "-b", cluster.bootstrap_servers, "-P", "-t", topic, "-K:",
             "-H", "pad=" + "x" * 200, "-X", "linger.ms=50",
             "-z", codec, "-X", f"acks={acks}", "-X", "partitioner=murmur2_random",
             "-X", "enable.idempotence=" + ("true" if acks == "all" else "false")],
            input=lines, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
    check_every_codec_written(cluster, topic)


# ---- consuming ------------------------------------------------------------------------------

def produce_numbered(cluster, topic: str, start: int, count: int) -> dict:
    """``count`` records through rafka's producer; {value: (partition, offset)}."""
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        futures = [producer.send(topic, b"%d" % i, key=b"k%d" % i)
                   for i in range(start, start + count)]
        producer.flush()
        return {b"%d" % (start + n): (m.partition, m.offset)
                for n, m in enumerate(f.result(10) for f in futures)}


def ends_of(written: dict, partitions: int) -> dict[int, int]:
    return {p: 1 + max(o for q, o in written.values() if q == p) for p in range(partitions)}


def test_kafka_python_three_member_group_commits_and_rebalances_when_one_leaves(cluster):
    """Three kafka-python consumers (one thread each, as the client requires) share six
    partitions; each commits what it read; the third closes (LeaveGroup), the other two
    take its partitions at the next rebalance and read on from its commits."""
    from kafka import KafkaConsumer
    cluster.admin().create_topics([rafka.NewTopic("kp-group", 6, 2)])
    written = produce_numbered(cluster, "kp-group", 0, 3000)
    reads: list[list[bytes]] = [[], [], []]
    assignments: list[set[int]] = [set(), set(), set()]
    stops = [threading.Event() for _ in range(3)]
    errors: list[BaseException] = []

    def member(i: int):
        try:
            consumer = KafkaConsumer(
                "kp-group", bootstrap_servers=cluster.bootstrap_servers, group_id="kp-group",
                auto_offset_reset="earliest", enable_auto_commit=False,
                session_timeout_ms=10_000, heartbeat_interval_ms=1000)
            try:
                while not stops[i].is_set():
                    batches = consumer.poll(timeout_ms=200)
                    reads[i] += [m.value for ms in batches.values() for m in ms]
                    if batches:
                        consumer.commit()
                    assignments[i] = {tp.partition for tp in consumer.assignment()}
            finally:
                consumer.close()       # commits nothing more; sends LeaveGroup
        except BaseException as e:     # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: all(assignments) and sum(map(len, assignments)) == 6
                   and sum(map(len, reads)) >= 3000, 120,
                   "three members sharing six partitions and reading everything")
        assert set().union(*assignments) == set(range(6))
        stops[2].set()
        threads[2].join(30)
        more = produce_numbered(cluster, "kp-group", 3000, 3000)
        wait_until(lambda: assignments[0] | assignments[1] == set(range(6))
                   and not assignments[0] & assignments[1], 120,
                   "the two members left taking every partition")
        wait_until(lambda: len(set(reads[0] + reads[1] + reads[2])) == 6000, 120,
                   "every record read")
    finally:
        for s in stops:
            s.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert set(reads[0] + reads[1] + reads[2]) == {b"%d" % i for i in range(6000)}
    committed = cluster.admin().list_consumer_group_offsets("kp-group")
    assert {tp.partition: o.offset for tp, o in committed.items()} == \
        ends_of({**written, **more}, 6)


def test_aiokafka_three_member_group_commits_and_rebalances_when_one_leaves(cluster):
    import aiokafka
    cluster.admin().create_topics([rafka.NewTopic("aio-group", 6, 2)])
    written = produce_numbered(cluster, "aio-group", 0, 3000)

    async def run():
        members = [aiokafka.AIOKafkaConsumer(
            "aio-group", bootstrap_servers=cluster.bootstrap_servers, group_id="aio-group",
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=10_000, heartbeat_interval_ms=1000) for _ in range(3)]
        reads: list[list[bytes]] = [[], [], []]
        stop = [False, False, False]

        async def member(i: int):
            while not stop[i]:
                batches = await members[i].getmany(timeout_ms=200)
                reads[i] += [m.value for ms in batches.values() for m in ms]
                if batches:
                    await members[i].commit()

        async def until(condition, what: str, timeout_s: float = 120):
            deadline = time.monotonic() + timeout_s
            while not condition():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                await asyncio.sleep(0.1)

        def shares():
            return [{tp.partition for tp in m.assignment()} for m in members]

        for m in members:
            await m.start()
        tasks = [asyncio.create_task(member(i)) for i in range(3)]
        try:
            await until(lambda: all(shares()) and sum(map(len, shares())) == 6
                        and sum(map(len, reads)) >= 3000, "three members reading everything")
            assert set().union(*shares()) == set(range(6))
            stop[2] = True
            await tasks[2]
            await members[2].stop()          # LeaveGroup
            more = await asyncio.to_thread(produce_numbered, cluster, "aio-group", 3000, 3000)
            await until(lambda: shares()[0] | shares()[1] == set(range(6))
                        and not shares()[0] & shares()[1], "the two left taking everything")
            await until(lambda: len(set(reads[0] + reads[1] + reads[2])) == 6000,
                        "every record read")
        finally:
            stop[:] = [True] * 3
            await asyncio.gather(*tasks, return_exceptions=True)
            for m in members[:2]:
                await m.stop()
        return reads, more

    reads, more = asyncio.run(run())
    assert set(reads[0] + reads[1] + reads[2]) == {b"%d" % i for i in range(6000)}
    committed = cluster.admin().list_consumer_group_offsets("aio-group")
    assert {tp.partition: o.offset for tp, o in committed.items()} == \
        ends_of({**written, **more}, 6)


def test_confluent_kafka_three_member_group_commits_and_rebalances_when_one_leaves(cluster):
    from confluent_kafka import Consumer
    cluster.admin().create_topics([rafka.NewTopic("ck-group", 6, 2)])
    written = produce_numbered(cluster, "ck-group", 0, 3000)
    config = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "ck-group",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "session.timeout.ms": 10_000}
    members = [Consumer(config) for _ in range(3)]
    reads: list[list[bytes]] = [[], [], []]
    active = [0, 1, 2]

    def poll_all(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for i in active:
                got = [m for m in members[i].consume(200, 0.05) if m.error() is None]
                reads[i] += [m.value() for m in got]
                if got:
                    members[i].commit(asynchronous=False)

    def shares() -> list[set[int]]:
        return [{tp.partition for tp in members[i].assignment()} for i in active]
    try:
        for m in members:
            m.subscribe(["ck-group"])
        deadline = time.monotonic() + 120
        while not (all(shares()) and sum(map(len, shares())) == 6
                   and sum(map(len, reads)) >= 3000):
            assert time.monotonic() < deadline, "three members never read everything"
            poll_all(0.5)
        assert set().union(*shares()) == set(range(6))
        members[2].close()                  # LeaveGroup
        active = [0, 1]
        more = produce_numbered(cluster, "ck-group", 3000, 3000)
        deadline = time.monotonic() + 120
        while not (set().union(*shares()) == set(range(6))
                   and len(set(reads[0] + reads[1] + reads[2])) == 6000):
            assert time.monotonic() < deadline, "the two left never read everything"
            poll_all(0.5)
    finally:
        for i in active:
            members[i].close()
    assert set(reads[0] + reads[1] + reads[2]) == {b"%d" % i for i in range(6000)}
    committed = cluster.admin().list_consumer_group_offsets("ck-group")
    assert {tp.partition: o.offset for tp, o in committed.items()} == \
        ends_of({**written, **more}, 6)


def test_kcat_three_member_group_commits_and_rebalances_when_one_leaves(cluster, kcat):
    """Three ``kcat -G`` processes in one group split six partitions and commit; one is
    stopped (SIGTERM: it leaves the group), the other two take its partitions and read on
    from its commits: every record is read, the three shares are disjoint, and the group's
    offsets end at the partitions' ends."""
    cluster.admin().create_topics([rafka.NewTopic("kcat-group", 6, 2)])
    written = produce_numbered(cluster, "kcat-group", 0, 1500)

    def group():
        (g,) = cluster.admin().describe_consumer_groups(["kcat-group"]).values()
        return g

    def committed():
        return {tp.partition: o.offset for tp, o in
                cluster.admin().list_consumer_group_offsets("kcat-group").items()}
    members = [subprocess.Popen(
        [kcat, "-b", cluster.bootstrap_servers, "-G", "kcat-group", "kcat-group",
         "-o", "beginning", "-f", "%p %o %s\n", "-X", "session.timeout.ms=10000",
         "-X", "auto.commit.interval.ms=200"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs: list[str] = []
    try:
        wait_until(lambda: group().state == "Stable" and len(group().members) == 3, 90,
                   "a stable group of three")
        shares = [{tp.partition for tp in m.assignment} for m in group().members]
        assert sorted(p for share in shares for p in share) == list(range(6))
        wait_until(lambda: committed() == ends_of(written, 6), 90, "commits at the ends")
        leaver = members.pop()
        leaver.terminate()           # SIGTERM: kcat leaves the group and exits
        outs.append(leaver.communicate(timeout=30)[0])
        wait_until(lambda: group().state == "Stable" and len(group().members) == 2, 90,
                   "a stable group of the two left")
        more = produce_numbered(cluster, "kcat-group", 1500, 1500)
        wait_until(lambda: committed() == ends_of({**written, **more}, 6), 90,
                   "the two members' commits at the new ends")
    finally:
        for m in members:
            m.terminate()
            outs.append(m.communicate(timeout=30)[0])
    lines = [line.split() for out in outs for line in out.splitlines() if line.strip()]
    assert {v for _, _, v in lines} == {k.decode() for k in {**written, **more}}
    assert {(int(p), int(o)) for p, o, _ in lines} == set({**written, **more}.values())


def test_offsets_for_times_from_kafka_python_aiokafka_and_kcat(cluster, kcat):
    import aiokafka
    from kafka import KafkaConsumer, TopicPartition
    # Timestamps from 1970: kept (retention.ms -1) past the brokers' retention passes.
    cluster.admin().create_topics([rafka.NewTopic("times", 1, 2, config={"retention.ms": -1})])
    with rafka.Producer(cluster, {"acks": "all"}) as producer:
        for i in range(10):
            producer.send("times", b"%d" % i, timestamp=1_000_000 + 1000 * i)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        tp = TopicPartition("times", 0)
        found = consumer.offsets_for_times({tp: 1_004_500})
        assert (found[tp].offset, found[tp].timestamp) == (5, 1_005_000)
        assert consumer.offsets_for_times({tp: 2_000_000})[tp] is None
        assert consumer.end_offsets([tp]) == {tp: 10}
    finally:
        consumer.close()

    async def aio():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
        await c.start()
        try:
            tp = aiokafka.TopicPartition("times", 0)
            return (await c.offsets_for_times({tp: 1_000_000}))[tp].offset, \
                (await c.beginning_offsets([tp]))[tp]
        finally:
            await c.stop()
    assert asyncio.run(aio()) == (0, 0)
    result = subprocess.run([kcat, "-b", cluster.bootstrap_servers, "-Q", "-t",
                             "times:0:1007000"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "offset 7" in result.stdout, result.stdout


# ---- administration ----------------------------------------------------------------------

def test_kafka_python_admin_creates_describes_alters_and_deletes(cluster):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions
    from kafka.admin import NewTopic as KafkaTopic
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([KafkaTopic("kp-admin", 2, 2,
                                        topic_configs={"retention.ms": "3600000"})])
        assert len(cluster.metadata()["topics"]["kp-admin"]) == 2
        (described,) = admin.describe_topics(["kp-admin"])
        assert described["name"] == "kp-admin" and len(described["partitions"]) == 2
        resource = ConfigResource(ConfigResourceType.TOPIC, "kp-admin")
        configs = admin.describe_configs([resource], config_filter="all")["topic"]["kp-admin"]
        assert configs["retention.ms"]["value"] == "3600000"
        assert configs["cleanup.policy"]["value"] == "delete"
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin",
                                            configs={"retention.ms": "7200000"})])
        wait_until(lambda: cluster.admin().describe_configs(["kp-admin"])["kp-admin"][
            "retention.ms"] == 7_200_000, 30, "the altered retention.ms")
        admin.create_partitions({"kp-admin": NewPartitions(4)})
        wait_until(lambda: len(cluster.metadata()["topics"]["kp-admin"]) == 4, 30,
                   "four partitions")
        cluster_info = admin.describe_cluster()
        assert cluster_info["cluster_id"] == cluster.metadata()["cluster_id"]
        admin.delete_topics(["kp-admin"])
        wait_until(lambda: "kp-admin" not in cluster.metadata()["topics"], 30,
                   "the topic deleted")
    finally:
        admin.close()


def test_aiokafka_admin_creates_describes_and_deletes(cluster):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as KafkaTopic

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([KafkaTopic("aio-admin", 3, 2)])
            assert "aio-admin" in await admin.list_topics()
            (described,) = await admin.describe_topics(["aio-admin"])
            assert len(described["partitions"]) == 3
            await admin.delete_topics(["aio-admin"])
        finally:
            await admin.close()
    asyncio.run(run())
    wait_until(lambda: "aio-admin" not in cluster.metadata()["topics"], 30,
               "the topic deleted")


def test_kafka_python_and_aiokafka_list_describe_and_delete_groups(cluster):
    from aiokafka.admin import AIOKafkaAdminClient
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient
    cluster.admin().create_topics([rafka.NewTopic("grouped", 2, 2)])
    produce_numbered(cluster, "grouped", 0, 10)
    consumer = KafkaConsumer("grouped", bootstrap_servers=cluster.bootstrap_servers,
                             group_id="listed", auto_offset_reset="earliest",
                             enable_auto_commit=False)
    deadline = time.monotonic() + 60
    read = 0
    while read < 10:
        assert time.monotonic() < deadline
        read += sum(len(v) for v in consumer.poll(timeout_ms=200).values())
    consumer.commit()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        assert "listed" in {g["group_id"] for g in admin.list_groups()}
        group = admin.describe_groups(["listed"])["listed"]
        assert group["group_state"] == "Stable" and len(group["members"]) == 1

        async def aio_view():
            a = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
            await a.start()
            try:
                listed = await a.list_consumer_groups()
                offsets = await a.list_consumer_group_offsets("listed")
                return {g[0] for g in listed}, {tp.partition: o.offset
                                                for tp, o in offsets.items()}
            finally:
                await a.close()
        groups, offsets = asyncio.run(aio_view())
        assert "listed" in groups and sum(offsets.values()) == 10
        consumer.close()
        admin.delete_groups(["listed"])
        assert "listed" not in {g.group_id for g in cluster.admin().list_consumer_groups()}
    finally:
        admin.close()


# ---- one system, two doors -----------------------------------------------------------------

def test_spark_reads_what_kafka_python_wrote_and_aiokafka_reads_what_spark_wrote(
        cluster, spark_session):
    import aiokafka
    from kafka import KafkaProducer
    cluster.admin().create_topics([rafka.NewTopic("wire-in", 3, 2),
                                   rafka.NewTopic("spark-out", 3, 2)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for i in range(1000):
        producer.send("wire-in", key=b"k%d" % i, value=b"%d" % i)
    producer.flush(30)
    producer.close()
    frame = (spark_session.read.format("rafka").option("cluster", cluster.name)
             .option("subscribe", "wire-in").load())
    rows = frame.select("key", "value", "partition").collect()
    assert sorted(int(r.value) for r in rows) == list(range(1000))
    assert all(r.partition == partition_for_key(bytes(r.key), 3) for r in rows)
    (frame.selectExpr("key", "value").write.format("rafka").option("cluster", cluster.name)
     .option("topic", "spark-out").mode("append").save())

    async def read_back():
        c = aiokafka.AIOKafkaConsumer("spark-out", bootstrap_servers=cluster.bootstrap_servers,
                                      auto_offset_reset="earliest", group_id="from-spark")
        await c.start()
        got = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 1000 and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=500)
                got += [(m.key, m.value) for ms in batches.values() for m in ms]
        finally:
            await c.stop()
        return got
    assert sorted(asyncio.run(read_back())) == sorted(
        (b"k%d" % i, b"%d" % i) for i in range(1000))


def test_kafka_python_deletes_a_groups_offsets_but_not_those_it_reads(cluster):
    """OffsetDelete (KIP-496): offsets of a topic the live group reads stay
    (GROUP_SUBSCRIBED_TO_TOPIC); those of a topic it no longer reads go."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient
    cluster.admin().create_topics([rafka.NewTopic("od-read", 1, 2),
                                   rafka.NewTopic("od-old", 1, 2)])
    cluster.admin().alter_consumer_group_offsets("od", {("od-old", 0): 3, ("od-read", 0): 0})
    consumer = KafkaConsumer("od-read", bootstrap_servers=cluster.bootstrap_servers,
                             group_id="od", enable_auto_commit=False)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer never joined"
            consumer.poll(timeout_ms=200)
        answer = admin.delete_group_offsets("od", [TopicPartition("od-read", 0),
                                                   TopicPartition("od-old", 0)])
        assert {tp.topic: error.__name__ for tp, error in answer.items()} == {
            "od-read": "GroupSubscribedToTopicError", "od-old": "NoError"}
    finally:
        consumer.close()
        admin.close()
    assert {tp.topic for tp in cluster.admin().list_consumer_group_offsets("od")} == \
        {"od-read"}
    with pytest.raises(Exception, match="GROUP_ID_NOT_FOUND|does not exist"):
        cluster.admin().delete_consumer_group_offsets("no-such-group", [("od-read", 0)])


def test_kafka_python_describes_idempotent_producers(cluster):
    from kafka import KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient
    cluster.admin().create_topics([rafka.NewTopic("producers", 1, 2)])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             enable_idempotence=True, acks="all")
    for i in range(5):
        producer.send("producers", b"%d" % i).get(10)
    producer.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        tp = TopicPartition("producers", 0)
        (state,) = admin.describe_producers([tp])[tp].active_producers
        assert state.producer_id >= 0 and state.producer_epoch >= 0
        assert state.last_sequence == 4 and state.last_timestamp > 0
        assert (state.coordinator_epoch, state.current_transaction_start_offset) == (-1, -1)
    finally:
        admin.close()


def test_kafka_python_reassigns_a_partition_and_lists_it_while_it_moves(cluster):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    cluster.admin().create_topics([rafka.NewTopic("moving", 1, 1)])
    produce_numbered(cluster, "moving", 0, 200)
    (old,) = cluster.metadata()["topics"]["moving"][0]["replicas"]
    target = sorted({0, 1, 2} - {old})
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    tp = TopicPartition("moving", 0)
    try:
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        listed = admin.list_partition_reassignments()
        # The copy may already be done: either it is listed as moving, or it has moved.
        if tp in listed:
            assert listed[tp]["adding_replicas"] == target
            assert listed[tp]["removing_replicas"] == [old]
        wait_until(lambda: sorted(cluster.metadata()["topics"]["moving"][0]["replicas"])
                   == target, 60, "the partition on its new replicas")
        assert admin.list_partition_reassignments() == {}
        errors = admin.alter_partition_reassignments({tp: None,
                                                      TopicPartition("moving", 7): [0]})
        assert errors[tp].__name__ == "NoReassignmentInProgressError"
        assert errors[TopicPartition("moving", 7)].__name__ == "UnknownTopicOrPartitionError"
    finally:
        admin.close()
    got = read_all(cluster, "moving", 1, 200)
    assert sorted(r.value for r in got) == sorted(b"%d" % i for i in range(200))
