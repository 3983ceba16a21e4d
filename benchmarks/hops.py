"""Where an end-to-end delay goes: each record followed hop by hop through rafka, from Kafka's
Java producer to Kafka's Java consumer (issue 42: "find where the p99 goes").

    .venv/bin/python benchmarks/hops.py --rate 10000 --seconds 10

One run: three rafka brokers, a topic of 6 partitions at RF=3 (min.insync.replicas=2), and
``benchmarks/java/EndToEnd.java`` (producer with acks=all and the client's other defaults,
consumer in the same JVM), first untraced, then with the brokers' and hosts' per-hop
timestamps on (``actors.hop_trace``: a benchmark mode, one ``write`` per mark). Every
measured record is followed by its partition and offset through the hops' marks:

    sent -> listener.received -> listener.produce -> append -> hw -> fetch -> listener.fetch
         -> written -> arrived

and each step's p50 / p99 / p99.9 printed, then the mean of each step over the slowest 1% of
records (the tail), which is where the p99 goes. Then the same client against Apache Kafka
4.3.1 in the same run (``--skip-peer``: not), for its end-to-end figures: Kafka has no hops
to show. Kafka-perf style lines; uniform key-less records of ``--size`` bytes, since the
record's value carries its send time.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.kafka_peer import (KAFKA_VERSION, JavaTools, KafkaCluster,  # noqa: E402
                                   create_topic)
from benchmarks.machine import describe  # noqa: E402
from benchmarks.peers import PeerUnavailable  # noqa: E402

PARTITIONS = 6
# The consumer path's hops, in order; each step is the time from one to the next.
PATH = ("sent", "listener.received", "listener.produce", "append", "hw", "fetch",
        "listener.fetch", "written", "arrived")
STEPS = {
    "listener.received": "producer -> listener (linger, in-flight limit, socket)",
    "listener.produce": "behind the connection's earlier requests for its partitions",
    "append": "listener -> leader host's append (channel)",
    "hw": "append -> high watermark (the append; followers fetch it, then past it)",
    "fetch": "high watermark -> host answers the consumer's fetch",
    "listener.fetch": "host's answer -> listener (channel)",
    "written": "listener -> its response's write begins",
    "arrived": "write -> consumer's poll() returns it",
}


def read_marks(directory: Path) -> dict[tuple[str, int], dict[str, dict[int, int]]]:
    """Every process's marks: {(topic, partition): {hop: {offset: earliest ns}}}. A ``hw``
    mark covers the offsets below it: it is kept as its value, looked up by ``hw_time``."""
    marks: dict = defaultdict(lambda: defaultdict(dict))
    for path in directory.glob("*.hops"):
        for line in path.read_text().splitlines():
            hop, topic, partition, first, last, ns = line.split()
            offsets = marks[(topic, int(partition))][hop]
            first, last, ns = int(first), int(last), int(ns)
            for offset in ((first,) if hop == "hw" else range(first, last + 1)):
                if offset not in offsets or ns < offsets[offset]:
                    offsets[offset] = ns
    return marks


def hw_time(high_watermarks: dict[int, int], offset: int, cache: dict) -> int | None:
    """When the high watermark first passed ``offset``: the earliest mark above it."""
    key = id(high_watermarks)
    if key not in cache:
        values = np.array(sorted(high_watermarks), dtype=np.int64)
        times = np.array([high_watermarks[v] for v in values], dtype=np.int64)
        # The earliest time at or after each value (a later mark of a smaller value, after
        # a leader change, must not hide an earlier pass).
        cache[key] = (values, np.minimum.accumulate(times[::-1])[::-1])
    values, earliest = cache[key]
    i = int(np.searchsorted(values, offset, side="right"))
    return None if i == len(values) else int(earliest[i])


def follow(records: list[tuple[int, int, int, int]], topic: str, marks: dict
           ) -> tuple[np.ndarray, int]:
    """Each client record ``(partition, offset, sent ns, arrived ns)`` followed through the
    marks: a row of ``PATH``'s times (ns) per record every hop saw, and how many records
    some hop missed."""
    rows, missed, cache = [], 0, {}
    for partition, offset, sent, arrived in records:
        hops = marks.get((topic, partition), {})
        row = [sent]
        for hop in PATH[1:-1]:
            ns = (hw_time(hops["hw"], offset, cache) if hop == "hw" and "hw" in hops
                  else hops.get(hop, {}).get(offset))
            if ns is None:
                break
            row.append(ns)
        else:
            rows.append(row + [arrived])
            continue
        missed += 1
    return np.array(rows, dtype=np.int64).reshape(-1, len(PATH)), missed


def report(times: np.ndarray) -> list[str]:
    """Each step's p50 / p99 / p99.9 (ms), then each step's mean over the slowest 1% of
    records by end-to-end delay: the tail's make-up."""
    steps = np.diff(times, axis=1) / 1e6
    total = (times[:, -1] - times[:, 0]) / 1e6
    lines = []
    slow = total >= np.quantile(total, 0.99)
    for i, hop in enumerate(PATH[1:]):
        q = np.quantile(steps[:, i], [0.5, 0.99, 0.999])
        lines.append(f"  {STEPS[hop]:<64} p50 {q[0]:7.2f} ms  p99 {q[1]:7.2f} ms  "
                     f"p99.9 {q[2]:7.2f} ms  slowest 1%: mean {steps[slow, i].mean():7.2f} ms")
    q = np.quantile(total, [0.5, 0.99, 0.999])
    lines.append(f"  {'end to end':<64} p50 {q[0]:7.2f} ms  p99 {q[1]:7.2f} ms  "
                 f"p99.9 {q[2]:7.2f} ms  slowest 1%: mean {total[slow].mean():7.2f} ms")
    return lines


def read_client_trace(path: Path) -> list[tuple[int, int, int, int]]:
    return [tuple(int(x) for x in line.split()) for line in path.read_text().splitlines()]


def e2e_line(who: str, figures: dict) -> str:
    return (f"{who}: {figures['records']:,} records, end to end p50 {figures['p50']:.2f} ms, "
            f"p99 {figures['p99']:.2f} ms, p99.9 {figures['p99.9']:.2f} ms")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000, help="records/s produced")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds measured, "
                        "after 2 s of warm-up")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--skip-peer", action="store_true", help="rafka only")
    args = parser.parse_args(argv)
    import rafka
    print(describe())
    print(f"parameters: Kafka's Java clients (EndToEnd.java: acks=all, the client's other "
          f"defaults), {args.rate:,} records/s of {args.size} B key-less values, "
          f"{args.seconds:g} s after 2 s of warm-up, {PARTITIONS} partitions, RF=3, "
          f"min.insync.replicas=2", flush=True)
    e2e = dict(rate=args.rate, seconds=args.seconds, warmup=2.0, size=args.size)
    with tempfile.TemporaryDirectory(prefix="rafka-hops-") as root:
        root = Path(root)
        tools = JavaTools(root)
        cluster = rafka.Cluster.start(3, root / "data", name=f"hops-{uuid.uuid4().hex[:6]}")
        try:
            servers = cluster.bootstrap_servers
            topic = f"hops-{uuid.uuid4().hex[:6]}"
            create_topic(servers, topic, PARTITIONS, 3)
            print(e2e_line("rafka, untraced", tools.end_to_end(servers, topic, **e2e)),
                  flush=True)
            traces = root / "hops"
            brokers = [cluster.broker(b) for b in sorted(cluster.broker_nodes)]
            import ray
            ray.get([b.hop_trace.remote(str(traces)) for b in brokers])
            try:
                figures = tools.end_to_end(servers, topic, **e2e, trace=root / "client")
            finally:
                ray.get([b.hop_trace.remote(None) for b in brokers])
            print(e2e_line("rafka, traced", figures), flush=True)
            times, missed = follow(read_client_trace(root / "client"), topic,
                                   read_marks(traces))
            print(f"rafka, hop by hop: {len(times):,} records followed through every hop"
                  f"{f' ({missed:,} missed one)' if missed else ''}")
            for line in report(times) if len(times) else ():
                print(line)
        finally:
            cluster.shutdown()
    if not args.skip_peer:
        try:
            with KafkaCluster() as kafka:
                topic = f"hops-{uuid.uuid4().hex[:6]}"
                create_topic(kafka.bootstrap_servers, topic, PARTITIONS, 3)
                kafka.tools.end_to_end(kafka.bootstrap_servers, topic, **e2e)   # JIT warm-up
                print(e2e_line(f"Apache Kafka {KAFKA_VERSION}, same client",
                               kafka.tools.end_to_end(kafka.bootstrap_servers, topic, **e2e)),
                      flush=True)
        except PeerUnavailable as e:
            print(f"Apache Kafka {KAFKA_VERSION}: not measured: {e}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
