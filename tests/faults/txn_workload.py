"""The fault harness's transactional workload (``python -m tests.faults.run --workload
transactions``): a consume-transform-produce pipeline under the nemeses, checked for
exactly-once output.

On the head host of a ``Hosts`` cluster it starts a rafka cluster (one broker per node) and
writes ``state.json`` for the nemeses. An idempotent producer (acks=all) sends numbered
records to ``ctp-in`` for ``--seconds``, while a pipeline copies them to ``ctp-out`` as
Kafka's exactly-once applications do: a read_committed consumer in group ``ctp``, and a
transactional producer that writes each polled batch's results and commits the consumer's
positions in the same transaction (``send_offsets_to_transaction``). On an error the
pipeline aborts and goes back to the group's committed offsets; when its producer is fenced
or its consumer lost, it starts them again (the new producer's ``init_transactions`` fences
the old one). Once the faults are healed (``healed`` appears) it waits until the pipeline
has copied every acknowledged input, then reads ``ctp-out`` at read_committed and prints one
JSON line (the keys ``tests.faults.run`` reports):

- lost: acknowledged inputs whose output is missing;
- duplicated: outputs read more than once (an input copied twice);
- phantom: outputs of no input that was sent;
- diverged: output partitions whose in-sync replicas differ below the high watermark.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from tests.faults.workload import CONFIG as PLAIN_CONFIG
from tests.faults.workload import Probes, await_heal, write_state

PARTITIONS = 3
CATCH_UP_S = 300
# Inputs per second: within what the pipeline copies on a loaded 2-core machine (a
# transaction per poll of up to 2,000 records), so that it catches up once healed.
INPUT_RATE = 500
CONFIG = {**PLAIN_CONFIG, "transaction.state.log.num.partitions": 3,
          "transaction.state.log.replication.factor": 3,
          "transaction.state.log.min.isr": 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, help="where state.json and healed are")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--acks", choices=("all",), default="all")
    args = parser.parse_args(argv)
    work = Path(args.dir)

    import ray

    import rafka
    ray.init(address="auto", log_to_driver=False)
    cluster = rafka.Cluster.start(args.brokers, str(work / "data"), CONFIG, name="faults",
                                  timeout_s=180)
    try:
        summary = run(cluster, work, args.seconds)
    finally:
        cluster.shutdown()
    print(json.dumps(summary), flush=True)
    return 0


class Pipeline(threading.Thread):
    """The consume-transform-produce loop, restarting its clients after fatal errors."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop = threading.Event()
        self.copied = 0            # records of committed transactions
        self.commits = 0
        self.aborts = 0
        self.restarts = 0
        self.errors: list[str] = []

    def _clients(self):
        import rafka
        consumer = rafka.Consumer(self.cluster, {
            "group.id": "ctp", "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "isolation.level": "read_committed", "max.poll.records": 2000})
        consumer.subscribe(["ctp-in"])
        producer = rafka.Producer(self.cluster, {"transactional.id": "ctp-app",
                                                 "transaction.timeout.ms": 20_000,
                                                 "delivery.timeout.ms": 20_000,
                                                 "request.timeout.ms": 10_000})
        producer.init_transactions(60)
        return consumer, producer

    def run(self) -> None:
        consumer = producer = None
        while not self.stop.is_set():
            try:
                if producer is None:
                    consumer, producer = self._clients()
                records = consumer.poll(500)
                if not records:
                    continue
                producer.begin_transaction()
                for r in records:
                    producer.send("ctp-out", b"out-" + r.value, key=r.value)
                positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
                producer.send_offsets_to_transaction(positions, consumer.group_metadata(), 30)
                producer.commit_transaction(60)
                self.commits += 1
                self.copied += len(records)
            except Exception as e:         # noqa: BLE001 - faults: abort, rewind, go on
                self.errors.append(repr(e)[:200])
                consumer, producer = self._recover(consumer, producer)
        _close(producer, consumer)

    def _recover(self, consumer, producer):
        """Abort the transaction and rewind to the committed offsets; if that cannot be
        done, close both clients (the next ones fence what is left of these)."""
        try:
            producer.abort_transaction(30)
            self.aborts += 1
            for tp in consumer.assignment():
                committed = consumer.committed(tp)
                consumer.seek(tp, 0 if committed is None else committed.offset)
            return consumer, producer
        except Exception as e:             # noqa: BLE001
            self.errors.append("restart: " + repr(e)[:200])
            self.restarts += 1
            _close(producer, consumer)
            time.sleep(0.5)
            return None, None


def _close(*clients) -> None:
    for client in clients:
        try:
            if client is not None:
                client.close()
        except Exception:                  # noqa: BLE001 - closing what faults broke
            pass


def run(cluster, work: Path, seconds: float) -> dict:
    import rafka
    cluster.admin().create_topics([
        rafka.NewTopic("ctp-in", PARTITIONS, 3, config={"min.insync.replicas": 2}),
        rafka.NewTopic("ctp-out", PARTITIONS, 3, config={"min.insync.replicas": 2}),
        rafka.NewTopic("jepsen-probe", 1, 3)])
    state = write_state(cluster, work)

    pipeline = Pipeline(cluster)
    pipeline.start()
    producer = rafka.Producer(cluster, {"acks": "all", "delivery.timeout.ms": 60_000,
                                        "linger.ms": 5})
    sent: dict[int, object] = {}
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        sent[i] = producer.send("ctp-in", b"%d" % i, partition=i % PARTITIONS)
        i += 1
        if i % 50 == 0:
            time.sleep(50 / INPUT_RATE)
    probes = Probes(cluster, await_heal(work))
    producer.flush(120)
    acked, failed = set(), 0
    for seq, future in sent.items():
        try:
            future.result(0)
            acked.add(seq)
        except Exception:                  # noqa: BLE001 - an outcome, recorded
            failed += 1
    producer.close()
    # The pipeline copies what is in ctp-in (acknowledged or not) until its group's
    # committed offsets reach the ends.
    caught_up = wait_caught_up(cluster, time.monotonic() + CATCH_UP_S)
    pipeline.stop.set()
    pipeline.join(90)
    return {"workload": "transactions", "acks": "all", "sent": len(sent),
            "acknowledged": len(acked), "failed": failed, "caught_up": caught_up,
            "transactions": pipeline.commits, "aborts": pipeline.aborts,
            "pipeline_restarts": pipeline.restarts, "pipeline_errors": pipeline.errors[:3],
            **probes.results(state),
            **check(cluster, sent, acked), "commits_backwards": 0, "out_of_order": 0,
            "lost_where": {}}


def wait_caught_up(cluster, deadline: float) -> bool:
    """Whether the group's committed offsets reached the ends of ctp-in in time."""
    admin = cluster.admin()
    tps = [("ctp-in", p) for p in range(PARTITIONS)]
    while time.monotonic() < deadline:
        try:
            ends = admin.list_offsets({tp: "latest" for tp in tps})
            committed = admin.list_consumer_group_offsets("ctp", tps, require_stable=True)
            if all(committed.get(tp) is not None and committed[tp].offset >= ends[tp].offset
                   for tp in ends):
                return True
        except Exception:                  # noqa: BLE001 - faults healing
            pass
        time.sleep(1)
    return False


def check(cluster, sent: dict, acked: set) -> dict:
    import ray

    import rafka
    from protocols.topics import TopicPartition
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest",
                                        "isolation.level": "read_committed"})
    tps = [TopicPartition("ctp-out", p) for p in range(PARTITIONS)]
    ends = consumer.end_offsets(tps)
    consumer.assign(tps)
    outputs: list[int] = []
    deadline = time.monotonic() + 300
    while any(consumer.position(tp) < end for tp, end in ends.items()) \
            and time.monotonic() < deadline:
        outputs += [int(r.value[len(b"out-"):]) for r in consumer.poll(1000)]
    consumer.close()
    seen = set(outputs)
    lost = sorted(acked - seen)
    diverged = []
    image = cluster.metadata()["topics"]["ctp-out"]
    hws = rafka.Consumer(cluster, {}).end_offsets(tps)
    for p in range(PARTITIONS):
        hw = hws[TopicPartition("ctp-out", p)]
        copies = {ray.get(cluster.replica("ctp-out", p, broker).read_local.remote(
            0, 1 << 30, hw)) for broker in image[p]["isr"]}
        if len(copies) > 1:
            diverged.append(p)
    return {"read": len(outputs), "lost": len(lost), "duplicated": len(outputs) - len(seen),
            "phantom": len([s for s in seen if s not in sent]), "diverged": diverged,
            "lost_examples": lost[:5]}


if __name__ == "__main__":
    sys.exit(main())
