"""The fault harness's workload and checker: a driver on the head host of a ``Hosts``
cluster (``python -m tests.faults.run`` starts it there and injects the faults around it).

It starts a rafka cluster (one broker per node), writes ``state.json`` (the brokers' pids,
for the nemeses), then for ``--seconds`` sends numbered records to a topic with RF=3 and
min.insync.replicas=2 through an idempotent producer with acks=all, recording each send's
outcome, while a consumer in a group reads and commits. Once the run's faults are healed
(the file ``healed`` appears) it measures how long until the cluster serves again, then
checks, and prints one JSON line:

- every acknowledged record is read back exactly once, in the order sent, per partition;
- no record that was never sent appears, and none twice;
- the replicas of each partition hold identical bytes up to the high watermark;
- the group's committed offsets never went backwards.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

PARTITIONS = 3
READ_TIMEOUT_S = 300   # the checker's reading of every partition to its end
CONFIG = {"listeners": "PLAINTEXT://:0", "offsets.topic.num.partitions": 3,
          "offsets.topic.replication.factor": 3, "group.initial.rebalance.delay.ms": 500,
          "broker.session.timeout.ms": 6000, "broker.heartbeat.interval.ms": 500,
          "replica.lag.time.max.ms": 3000, "controlled.shutdown.retry.backoff.ms": 200}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, help="where state.json and healed are")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--acks", choices=("all", "1"), default="all")
    args = parser.parse_args(argv)
    work = Path(args.dir)

    import ray

    import rafka
    ray.init(address="auto", log_to_driver=False)
    cluster = rafka.Cluster.start(args.brokers, str(work / "data"), CONFIG, name="faults",
                                  timeout_s=180)
    try:
        summary = run(cluster, work, args.seconds, args.acks)
    finally:
        cluster.shutdown()
    print(json.dumps(summary), flush=True)
    return 0


def run(cluster, work: Path, seconds: float, acks: str = "all") -> dict:
    import rafka
    cluster.admin().create_topics([rafka.NewTopic("jepsen", PARTITIONS, 3, config={
        "min.insync.replicas": 2}), rafka.NewTopic("jepsen-probe", 1, 3)])
    state = write_state(cluster, work)

    sent: dict[int, object] = {}            # sequence -> future
    commits: list[dict[int, int]] = []
    stop = threading.Event()
    errors: list[str] = []
    reader = threading.Thread(target=consume, args=(cluster, stop, commits, errors),
                              daemon=True)
    reader.start()
    producer = rafka.Producer(cluster, {"acks": acks, "enable.idempotence": acks == "all",
                                        "delivery.timeout.ms": 60_000, "linger.ms": 5})
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        sent[i] = producer.send("jepsen", b"%d" % i, partition=i % PARTITIONS)
        i += 1
        if i % 200 == 0:
            time.sleep(0.02)                # ~10k records/s at most: a steady stream
    probes = Probes(cluster, await_heal(work))
    producer.flush(120)
    acked: dict[int, tuple[int, int]] = {}
    failed = 0
    for seq, future in sent.items():
        try:
            meta = future.result(0)
            acked[seq] = (meta.partition, meta.offset)
        except Exception:                  # noqa: BLE001 - an outcome, recorded
            failed += 1
    producer.close()
    recovered = probes.results(state)
    stop.set()
    reader.join(60)
    return {"acks": acks, "sent": len(sent), "acknowledged": len(acked), "failed": failed,
            **recovered, **check(cluster, sent, acked, commits),
            "consumer_errors": errors[:3]}


def write_state(cluster, work: Path) -> dict:
    """``state.json`` for the nemeses: each broker's pid and node, and the controller."""
    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in __import__("ray").nodes()}
    state = {"brokers": {b: {"pid": cluster.broker_pid(b), "node": nodes.get(n)}
                         for b, n in cluster.broker_nodes.items()},
             "controller": controller(cluster)}
    (work / "state.tmp").write_text(json.dumps(state))
    os.replace(work / "state.tmp", work / "state.json")
    return state


def await_heal(work: Path) -> float:
    """When the harness said every fault is healed (the file ``healed``)."""
    deadline = time.monotonic() + 300
    while not (work / "healed").exists():
        assert time.monotonic() < deadline, "the faults were never healed"
        time.sleep(0.1)
    return time.monotonic()


class Probes:
    """The recovery probes, started at the heal beside the flush: records sent to a
    partition that was offline wait up to delivery.timeout.ms, and probing only after the
    flush counted that wait as time to serve again."""

    def __init__(self, cluster, healed_at: float):
        self.cluster = cluster
        self.found: dict = {}
        self.threads = [threading.Thread(target=self._probe, args=(key, how, healed_at),
                                         daemon=True)
                        for key, how in (("recovery_s", serves_again),
                                         ("back", all_brokers_back))]
        for t in self.threads:
            t.start()

    def _probe(self, key: str, how, healed_at: float) -> None:
        self.found[key] = how(self.cluster, healed_at)

    def results(self, state: dict) -> dict:
        """The summary's recovery keys, once the probes are done."""
        for t in self.threads:
            t.join()
        recovery_s, (brokers_back_s, not_back) = self.found["recovery_s"], self.found["back"]
        # Brokers running in another process than at the start: killed, or halted (a full
        # log directory), and started again by Ray.
        restarted = sorted(b for b, info in state["brokers"].items()
                           if self.cluster.broker_pid(b) != info["pid"])
        return {"recovery_s": round(recovery_s, 2), "brokers_back_s": round(brokers_back_s, 2),
                "brokers_restarted": restarted, "brokers_not_back": not_back,
                "controllers": [state["controller"], controller(self.cluster)]}


def controller(cluster) -> dict:
    """The controller now: its epoch, the broker it lives beside and that broker's node."""
    import ray
    epoch, broker_id = ray.get(cluster.controller(60).ping.remote())
    return {"epoch": epoch, "broker": broker_id,
            "node": cluster.broker_addresses.get(broker_id)}


def consume(cluster, stop: threading.Event, commits: list, errors: list) -> None:
    """A group member reading and committing throughout; the committed offsets sampled."""
    import rafka
    try:
        consumer = rafka.Consumer(cluster, {"group.id": "jepsen-readers",
                                            "auto.offset.reset": "earliest",
                                            "enable.auto.commit": False})
        consumer.subscribe(["jepsen"])
        while not stop.is_set():
            try:
                if consumer.poll(200):
                    consumer.commit()
                committed = consumer.committed([("jepsen", p) for p in range(PARTITIONS)])
                commits.append({tp[1]: o.offset for tp, o in committed.items()
                                if o is not None})
            except Exception as e:         # noqa: BLE001 - faults: retried
                errors.append(repr(e))
                time.sleep(0.2)
        consumer.close()
    except Exception as e:                 # noqa: BLE001
        errors.append(repr(e))


def serves_again(cluster, since: float) -> float:
    """Seconds from ``since`` until a record is produced with acks=all and read back."""
    import rafka
    while True:
        try:
            with rafka.Producer(cluster, {"acks": "all", "delivery.timeout.ms": 5000}) as p:
                meta = p.send("jepsen-probe", b"probe").result(10)
            consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
            consumer.assign([("jepsen-probe", meta.partition)])
            consumer.seek(("jepsen-probe", meta.partition), meta.offset)
            got = consumer.poll(5000)
            consumer.close()
            if got:
                return time.monotonic() - since
        except Exception:                  # noqa: BLE001 - not serving yet
            time.sleep(0.2)
        if time.monotonic() - since > 240:
            return float("inf")


def all_brokers_back(cluster, since: float) -> tuple[float, dict]:
    """Seconds from ``since`` until every broker is registered with the controller again
    (a killed node's broker comes back once Ray has declared the old node dead), and {};
    or inf and what the brokers not back and the controller say (``why_not_back``)."""
    wanted = set(cluster.broker_nodes)
    registered: set = set()
    while time.monotonic() - since < 240:
        try:
            registered = set(cluster.metadata()["brokers"])
            if wanted <= registered:
                return time.monotonic() - since, {}
        except Exception:                  # noqa: BLE001 - no controller at the moment
            pass
        time.sleep(0.2)
    return float("inf"), why_not_back(cluster, wanted - registered)


def why_not_back(cluster, missing: set) -> dict:
    """Each missing broker's ``describe()`` (where its start is, what it last heard from the
    controller, its GCS calls) and the controller's ``status()``, or why they did not answer."""
    import ray
    out: dict = {}
    for b in sorted(missing):
        try:
            d = ray.get(cluster.broker(b).describe.remote(), timeout=10)
            out[f"broker {b}"] = {k: d.get(k) for k in (
                "pid", "boot_step", "controller_epoch", "controller_channel", "gcs_calls")}
        except Exception as e:             # noqa: BLE001 - what there is to say
            out[f"broker {b}"] = repr(e)[:300]
    try:
        out["controller"] = ray.get(cluster.controller(10).status.remote(), timeout=10)
    except Exception as e:                 # noqa: BLE001
        out["controller"] = repr(e)[:300]
    return out


def check(cluster, sent: dict, acked: dict, commits: list) -> dict:
    import ray

    import rafka
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "earliest"})
    tps = [("jepsen", p) for p in range(PARTITIONS)]
    ends = consumer.end_offsets(tps)
    consumer.assign(tps)
    read: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}

    def behind() -> dict[int, tuple[int, int]]:
        return {tp[1]: (consumer.position(tp), end) for tp, end in ends.items()
                if consumer.position(tp) < end}
    # Each partition up to its own end, not one count for all: a partition can hold more
    # than its end by the time the total is reached (a send that failed at the producer
    # can still be written and committed later), and the others' last records would then
    # go unread and be reported lost.
    deadline = time.monotonic() + READ_TIMEOUT_S
    while behind() and time.monotonic() < deadline:
        for r in consumer.poll(1000):
            read[r.partition].append((int(r.value), r.offset))
    unread = behind()
    consumer.close()
    if unread:
        raise RuntimeError(f"the checker did not read every partition to its end within "
                           f"{READ_TIMEOUT_S} s: (position, end) {unread}")
    seen = [seq for p in read for seq, _ in read[p]]
    seen_once = set(seen)
    lost = [s for s in acked if s not in seen_once]
    duplicated = len(seen) - len(seen_once)
    phantom = [s for s in seen_once if s not in sent]
    out_of_order = sum(1 for p in read for a, b in zip(read[p], read[p][1:]) if a[0] > b[0])
    diverged = []
    image = cluster.metadata()["topics"]["jepsen"]
    for p in range(PARTITIONS):
        hw = ends[("jepsen", p)]
        # Followers append the leader's batches byte for byte: below the HW, the same bytes.
        copies = {ray.get(cluster.replica("jepsen", p, broker).read_local.remote(
            0, 1 << 30, hw)) for broker in image[p]["isr"]}
        if len(copies) > 1:
            diverged.append(p)
    backwards = sum(1 for a, b in zip(commits, commits[1:])
                    for p, o in b.items() if o < a.get(p, -1))
    lost_at = sorted((acked[s][0], acked[s][1], s) for s in lost)   # (partition, offset, seq)
    return {"read": len(seen), "lost": len(lost), "duplicated": duplicated,
            "phantom": len(phantom), "out_of_order": out_of_order, "diverged": diverged,
            "commits_backwards": backwards, "lost_examples": lost_at[:5],
            "lost_where": where_lost(cluster, lost_at, ends, read) if lost else {}}


def where_lost(cluster, lost_at: list, ends: dict, read: dict) -> dict:
    """For each partition that lost acknowledged records, what the checker and every replica
    saw: whether the reading reached the end it was given, the partition's image, and each
    replica's offsets, leader epochs and what it holds at the first lost offset (a record
    of another sequence number there: the offset was written again after a truncation)."""
    import ray

    from protocols.records import iter_batches
    image = cluster.metadata()["topics"]["jepsen"]
    out: dict = {}
    for p in sorted({p for p, _, _ in lost_at}):
        mine = [(o, s) for q, o, s in lost_at if q == p]
        first = mine[0][0]
        entry: dict = {"lost": len(mine), "first_offset": first, "last_offset": mine[-1][0],
                       "end": ends[("jepsen", p)], "read": len(read[p]),
                       "last_read": read[p][-1][1] if read[p] else None,
                       "image": {k: image[p].get(k) for k in ("leader", "leader_epoch", "isr",
                                                                "replicas")}}
        for broker in image[p]["replicas"]:
            try:
                replica = cluster.replica("jepsen", p, broker)
                d = ray.get(replica.describe.remote(), timeout=10)
                held = []
                for batch in iter_batches(ray.get(replica.read_local.remote(first, 4096),
                                                  timeout=10)):
                    offsets, _, _, values, _ = batch.record_columns()
                    held += [(o, int(v)) for o, v in zip(offsets, values)
                             if first <= o <= first + 3]
                entry[f"broker {broker}"] = {
                    k: d.get(k) for k in ("role", "log_start_offset", "log_end_offset",
                                          "high_watermark")} | {
                    "epochs": d.get("epochs", [])[-4:], "at_first_lost": held[:4]}
            except Exception as e:         # noqa: BLE001 - what there is to say
                entry[f"broker {broker}"] = repr(e)[:200]
        entry["lost_seqs"] = [s for _, s in mine[:4]]
        out[f"partition {p}"] = entry
    return out


if __name__ == "__main__":
    sys.exit(main())
