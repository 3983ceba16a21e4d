"""How long a rafka cluster takes to start, what it costs, and how many partitions it serves.

    .venv/bin/python benchmarks/runtime.py                           # 3 brokers, one 6x3 topic
    .venv/bin/python benchmarks/runtime.py --sweep 100,300,1000     # grow, measuring each size
    .venv/bin/python benchmarks/runtime.py --sweep 1000,3334 --idle-seconds 60

Partition replicas live in replica hosts (``num.replica.hosts`` Ray actors per broker), so the
replica count grows memory, not processes. For each size of the sweep (total partitions,
one new topic per step) it prints the time to create the partitions with every leader
serving, the PSS (proportional set size: shared pages split fairly between processes) of
rafka's actor processes and of Ray's own, and the CPU the cluster burns while idle. It stops
itself, with a message, when the machine's available memory falls below ``--min-available-gib``
(3 GiB): this machine has no swap, and running out kills everything on it.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import (MemoryGuard, available_gib, describe,  # noqa: E402
                                process_cpu_seconds)

RAFKA_ACTORS = {"ray::BrokerActor", "ray::ReplicaHostActor", "ray::TimerActor",
                "ray::ControllerActor", "ray::GroupCoordinatorActor"}


def pss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cluster_processes() -> dict[str, list[int]]:
    """rafka's actor processes and Ray's own, by kind (this machine's, this user's)."""
    out: dict[str, list[int]] = {"rafka": [], "ray": []}
    for pid, (name, _) in process_cpu_seconds().items():
        if name in RAFKA_ACTORS:
            out["rafka"].append(pid)
        elif name in ("raylet", "gcs_server"):
            out["ray"].append(pid)
    return out


def idle_cpu(pids: dict[str, list[int]], seconds: float) -> dict[str, float]:
    """Percent of one core each kind of process used over ``seconds`` of doing nothing."""
    before = process_cpu_seconds()
    time.sleep(seconds)
    after = process_cpu_seconds()
    out = {}
    for kind, members in pids.items():
        spent = sum(after[p][1] - before[p][1] for p in members if p in before and p in after)
        out[kind] = 100 * spent / seconds
    return out


def follower_fetches(cluster, brokers: int) -> str:
    """What the idle followers send: fetch sessions (KIP-227) keep each fetcher's request
    the same size however many partitions it carries."""
    import ray

    from actors.names import replica_host_name
    fetchers = []
    for b in range(brokers):
        for i in range(ray.get(cluster.broker(b).describe.remote())["replica_hosts"]):
            host = ray.get_actor(replica_host_name(b, i), namespace=cluster.namespace)
            fetchers.extend(ray.get(host.describe_fetchers.remote()))
    if not fetchers:
        return "no follower fetchers"
    return (f"{len(fetchers)} follower fetchers carrying up to "
            f"{max(len(f['partitions']) for f in fetchers)} partitions each, in sessions: "
            f"{sum(f['session_id'] != 0 for f in fetchers)}; idle fetch request "
            f"{max(f['last_request_bytes'] for f in fetchers)} bytes at most")


def consumer_fetches(cluster, topics: list[str]) -> str:
    """What an idle consumer of every partition sends: one fetch per leader host, in a
    fetch session, so after the first (full) request its size does not grow either."""
    import rafka
    image = cluster.metadata()
    partitions = [(t, p) for t in topics for p in sorted(image["topics"][t])]
    consumer = rafka.Consumer(cluster, {"auto.offset.reset": "latest"})
    try:
        consumer.assign(partitions)
        for _ in range(6):   # the first fetch is full; the ones after it, incremental
            consumer.poll(600)
        sizes = consumer.fetch_request_sizes()
    finally:
        consumer.close()
    return (f"an idle consumer of all {len(partitions)} partitions: {len(sizes)} fetches in "
            f"flight (one per leader host), idle fetch request {max(sizes.values())} bytes "
            "at most")


def measure(total: int, replication_factor: int, elapsed: float, idle_s: float) -> str:
    pids = cluster_processes()
    pss = {kind: sum(pss_mb(p) for p in members) for kind, members in pids.items()}
    cpu = idle_cpu(pids, idle_s) if idle_s > 0 else {}
    idle = (f"; idle {cpu['rafka']:.1f}% of a core (rafka) + {cpu['ray']:.1f}% (raylet, GCS) "
            f"over {idle_s:.0f} s") if cpu else ""
    return (f"partitions: {total} ({total * replication_factor} replicas); created, leaders "
            f"serving: {elapsed:.1f} s; PSS {pss['rafka'] / 1024:.2f} GiB in "
            f"{len(pids['rafka'])} rafka processes + {pss['ray'] / 1024:.2f} GiB raylet/GCS"
            f"{idle}; available memory {available_gib():.1f} GiB")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--sweep", default="",
                        help="comma-separated total partition counts to grow to, one new "
                             "topic per step, stopping at the first failure")
    parser.add_argument("--idle-seconds", type=float, default=60,
                        help="how long to measure the idle cluster's CPU at each size")
    parser.add_argument("--min-available-gib", type=float, default=3.0)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds a topic's leaders may take to come up")
    args = parser.parse_args(argv)

    import ray

    import rafka
    from rafka.client.ray_runtime import ensure_ray

    root = Path(args.data_dir or tempfile.mkdtemp(prefix="rafka-bench-"))
    print(describe(root))
    print(f"brokers: {args.brokers}, replication factor {args.replication_factor}, first topic "
          f"{args.partitions} partitions, sweep {args.sweep or '-'}", flush=True)
    ensure_ray()
    started = time.perf_counter()
    cluster = rafka.Cluster.start(args.brokers, root / "data", name="bench")
    t_start = time.perf_counter() - started
    hosts = [ray.get(cluster.broker(b).describe.remote())["replica_hosts"]
             for b in range(args.brokers)]
    print(f"cluster start: {t_start:.2f} s for {args.brokers} brokers ({hosts} replica hosts)",
          flush=True)
    admin = rafka.Admin(cluster, timeout_s=args.timeout)
    status = 0
    try:
        started = time.perf_counter()
        admin.create_topics([rafka.NewTopic("bench-0", args.partitions,
                                            args.replication_factor)])
        print(measure(args.partitions, args.replication_factor, time.perf_counter() - started,
                      0 if args.sweep else args.idle_seconds), flush=True)
        topics = ["bench-0"]
        if not args.sweep:
            print(f"  {follower_fetches(cluster, args.brokers)}", flush=True)
            print(f"  {consumer_fetches(cluster, topics)}", flush=True)
        total = args.partitions
        for step, target in enumerate(int(x) for x in args.sweep.split(",") if x):
            add = target - total
            if add <= 0:
                continue
            if available_gib() < args.min_available_gib:
                print(f"sweep: stopped before {target} partitions: available memory "
                      f"{available_gib():.1f} GiB < {args.min_available_gib} GiB")
                status = 2
                break
            started = time.perf_counter()
            with MemoryGuard(args.min_available_gib) as guard:
                try:
                    admin.create_topics([rafka.NewTopic(f"bench-{step + 1}", add,
                                                        args.replication_factor)])
                except Exception as e:
                    print(f"sweep: {target} partitions FAILED after "
                          f"{time.perf_counter() - started:.1f} s: {type(e).__name__}: {e}")
                    status = 1
                    break
            if guard.tripped is not None:
                print(f"sweep: stopped at {target} partitions: available memory fell to "
                      f"{guard.tripped:.1f} GiB (< {args.min_available_gib} GiB)")
                status = 2
                break
            total = target
            topics.append(f"bench-{step + 1}")
            print(measure(total, args.replication_factor, time.perf_counter() - started,
                          args.idle_seconds), flush=True)
            print(f"  {follower_fetches(cluster, args.brokers)}", flush=True)
            print(f"  {consumer_fetches(cluster, topics)}", flush=True)
    finally:
        cluster.shutdown()
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
