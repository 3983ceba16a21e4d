"""How long a rafka cluster takes to start, what its actors cost, and how many partitions fit.

    .venv/bin/python benchmarks/runtime.py                      # 3 brokers, one 6x3 topic
    .venv/bin/python benchmarks/runtime.py --sweep 30,60,120    # then add topics until it fails

Partition replicas live in replica hosts (``num.replica.hosts`` Ray actors per broker), so the
replica count grows memory, not processes. PSS (proportional set size) shares libraries fairly
between processes, so the sum is what the actors really take.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402


def pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def host_pids(cluster, topics: dict[str, int], brokers: int) -> list[int]:
    """The processes serving the topics' replicas (their replica hosts), each once."""
    import ray
    refs = [cluster.replica(t, p, b).pid.remote()
            for t, n in topics.items() for p in range(n) for b in range(brokers)]
    return sorted(set(ray.get(refs)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--sweep", default="",
                        help="comma-separated total partition counts to grow to, one new "
                             "topic per step, stopping at the first failure")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds a topic's leaders may take to come up")
    args = parser.parse_args(argv)

    import ray

    import rafka
    from rafka.ray_support import ensure_ray

    root = Path(args.data_dir or tempfile.mkdtemp(prefix="rafka-bench-"))
    print(describe(root))
    print(f"brokers: {args.brokers}, topic: {args.partitions} partitions, "
          f"replication factor {args.replication_factor}")
    ensure_ray()
    started = time.perf_counter()
    cluster = rafka.Cluster.start(args.brokers, root / "data", name="bench")
    t_start = time.perf_counter() - started
    admin = rafka.Admin(cluster, timeout_s=args.timeout)
    started = time.perf_counter()
    admin.create_topics([rafka.NewTopic("bench-0", args.partitions, args.replication_factor)])
    t_topic = time.perf_counter() - started
    replicas = args.partitions * args.replication_factor
    print(f"cluster start: {t_start:.2f} s for {args.brokers} brokers (broker, timer, replica "
          "host and controller actors)")
    print(f"topic create: {t_topic:.2f} s for {args.partitions} partitions x "
          f"{args.replication_factor} replicas = {replicas} replicas "
          f"({t_topic / replicas * 1000:.0f} ms per replica, leaders serving)")
    topics = {"bench-0": args.partitions}
    pids = host_pids(cluster, topics, args.brokers)
    sizes = [pss_mb(p) for p in pids]
    broker_sizes = [pss_mb(ray.get(cluster.broker(b).pid.remote()))
                    for b in range(args.brokers)]
    print(f"memory: replica host PSS avg {sum(sizes) / len(sizes):.1f} MB "
          f"(min {min(sizes):.1f}, max {max(sizes):.1f}, n={len(sizes)}); broker actor PSS "
          f"avg {sum(broker_sizes) / len(broker_sizes):.1f} MB")

    total = args.partitions
    for step, target in enumerate(int(x) for x in args.sweep.split(",") if x):
        add = target - total
        if add <= 0:
            continue
        name = f"bench-{step + 1}"
        started = time.perf_counter()
        try:
            admin.create_topics([rafka.NewTopic(name, add, args.replication_factor)])
        except Exception as e:
            print(f"sweep: {target} partitions FAILED after {time.perf_counter() - started:.1f}"
                  f" s: {type(e).__name__}: {e}")
            break
        elapsed = time.perf_counter() - started
        total = target
        topics[name] = add
        pids = host_pids(cluster, topics, args.brokers)
        pss = sum(pss_mb(p) for p in pids)
        print(f"sweep: {target} partitions ({target * args.replication_factor} replicas)"
              f" started; +{add} partitions in {elapsed:.1f} s; replica hosts PSS total "
              f"{pss / 1024:.2f} GiB", flush=True)
    cluster.shutdown()
    if args.data_dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
