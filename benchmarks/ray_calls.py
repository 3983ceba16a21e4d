"""What one Ray actor call costs on this machine: the floor under every produce, follower
fetch and consumer fetch in rafka (each is one call to a replica host).

    .venv/bin/python benchmarks/ray_calls.py

For a sync, a threaded and an async actor (rafka's replicas are async: a long-polled fetch
or an acks=all produce waits on the purgatory without holding a thread), it prints the wall
time and the CPU time of both processes per call, one call at a time (how calls arrive at a
moderate rate) and pipelined (how they arrive under load).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--payload", type=int, default=100, help="bytes per argument")
    args = parser.parse_args(argv)

    import ray
    from rafka.client.ray_runtime import ensure_ray

    @ray.remote(num_cpus=0)
    class Sync:
        def ping(self, b):
            return b

        def pid(self):
            return os.getpid()

    @ray.remote(num_cpus=0, max_concurrency=8)
    class Threaded:
        def ping(self, b):
            return b

        def pid(self):
            return os.getpid()

    @ray.remote(num_cpus=0, max_concurrency=1000)
    class Async:
        async def ping(self, b):
            return b

        async def pid(self):
            return os.getpid()

    print(describe())
    print(f"parameters: {args.calls} calls per line, {args.payload}-byte argument and answer, "
          "driver -> actor")
    ensure_ray()
    payload = b"x" * args.payload
    me = os.getpid()
    for name, cls in (("sync", Sync), ("threaded", Threaded), ("async", Async)):
        actor = cls.remote()
        pid = ray.get(actor.pid.remote())
        ray.get([actor.ping.remote(payload) for _ in range(200)])      # warm up
        for mode in ("one at a time", "pipelined"):
            callee, caller = cpu_seconds(pid), cpu_seconds(me)
            started = time.perf_counter()
            if mode == "one at a time":
                for _ in range(args.calls):
                    ray.get(actor.ping.remote(payload))
            else:
                ray.get([actor.ping.remote(payload) for _ in range(args.calls)])
            wall = time.perf_counter() - started
            per = 1e6 / args.calls
            print(f"{name} actor, {mode}: {wall * per:.0f} us/call wall, actor "
                  f"{(cpu_seconds(pid) - callee) * per:.0f} us CPU, driver "
                  f"{(cpu_seconds(me) - caller) * per:.0f} us CPU", flush=True)
        ray.kill(actor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
