"""What one Ray actor call costs in CPU, the unit every rafka request pays (a produce, a
follower's or consumer's fetch): async and sync actors, 64 KiB argument, 5 calls in flight.

    .venv/bin/python benchmarks/ray_calls.py --calls 2000
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe, process_cpu_seconds  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--size", type=int, default=64 * 1024, help="argument bytes")
    args = parser.parse_args(argv)

    import ray
    from rafka.ray_support import ensure_ray

    print(describe())
    print(f"parameters: {args.calls} calls, {args.size}-byte argument, 5 in flight")
    ensure_ray()

    @ray.remote(num_cpus=0)
    class AsyncEcho:
        async def call(self, data: bytes) -> bytes:
            return b"ok"

        def pid(self) -> int:
            return os.getpid()

    @ray.remote(num_cpus=0)
    class SyncEcho:
        def call(self, data: bytes) -> bytes:
            return b"ok"

        def pid(self) -> int:
            return os.getpid()

    data = b"y" * args.size
    me = os.getpid()
    for name, cls in (("async actor", AsyncEcho), ("sync actor", SyncEcho)):
        actor = cls.remote()
        pid = ray.get(actor.pid.remote())
        before = process_cpu_seconds()
        started = time.perf_counter()
        refs = []
        for _ in range(args.calls):
            refs.append(actor.call.remote(data))
            if len(refs) >= 5:
                ray.get(refs.pop(0))
        ray.get(refs)
        elapsed = time.perf_counter() - started
        after = process_cpu_seconds()
        callee = after[pid][1] - before[pid][1]
        caller = after[me][1] - before[me][1]
        print(f"{name}: {args.calls / elapsed:,.0f} calls/sec, "
              f"{1000 * callee / args.calls:.2f} ms CPU per call in the actor, "
              f"{1000 * caller / args.calls:.2f} ms in the caller", flush=True)
        ray.kill(actor)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
