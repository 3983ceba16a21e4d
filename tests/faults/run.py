"""Fault runs on real hosts (issue 18): ``python -m tests.faults.run --runs N --seed S
[--nemesis NAME ...] [--seconds T]``.

Each run brings up a ``Hosts`` cluster (a Ray node per network namespace, one broker each),
starts the workload driver on the head (``tests.faults.workload``), injects faults while it
sends, heals them, and prints one line with what the checker found; a summary line ends.
Nemeses (chosen at random per the seed, one at a time, each held 2-6 s):

- ``partition``: a worker host cut off from all others (its link down), then healed;
- ``kill``: a broker's process SIGKILLed (Ray starts it again; it recovers from its files);
- ``pause``: a broker's process SIGSTOPped, then SIGCONTinued (a zombie that wakes up).

Partitions stay shorter than Ray's own node-failure detection (~15 s): a node Ray declares
dead is not let back in, which is Ray's fault model rather than rafka's.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

from tests.faults.hosts import REPO, Hosts, _ip

NEMESES = ("partition", "kill", "pause")


def inject(hosts: Hosts, nemesis: str, state: dict, rng: random.Random, log: list) -> None:
    hold = rng.uniform(2, 6)
    if nemesis == "partition":
        host = rng.choice(hosts.hosts[1:])
        _ip("link", "set", host.veth, "down")
        log.append(f"partition {host.address} {hold:.1f}s")
        try:
            time.sleep(hold)
        finally:
            _ip("link", "set", host.veth, "up")
        return
    broker, info = rng.choice(sorted(state["brokers"].items()))
    pid = info["pid"]
    if nemesis == "kill":
        try:
            os.kill(pid, signal.SIGKILL)
            log.append(f"kill broker {broker} (pid {pid})")
        except ProcessLookupError:
            log.append(f"kill broker {broker}: pid {pid} already gone")
        time.sleep(hold)
        return
    try:
        os.kill(pid, signal.SIGSTOP)
        log.append(f"pause broker {broker} (pid {pid}) {hold:.1f}s")
        time.sleep(hold)
    except ProcessLookupError:
        log.append(f"pause broker {broker}: pid {pid} gone")
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def one_run(seed: int, nemeses: list[str], seconds: float, brokers: int) -> dict:
    rng = random.Random(seed)
    with Hosts(workers=brokers - 1) as hosts:
        work = hosts.root / "work"
        work.mkdir(parents=True, exist_ok=True)
        driver = subprocess.Popen(
            ["ip", "netns", "exec", hosts.head.name, sys.executable, "-m",
             "tests.faults.workload", "--dir", str(work), "--seconds", str(seconds),
             "--brokers", str(brokers)],
            env=dict(hosts.env, RAY_ADDRESS=hosts.ray_address), cwd=str(REPO),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            while not (work / "state.json").exists():
                if driver.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the workload never started: "
                                       + driver.stderr.read()[-3000:])
                time.sleep(0.2)
            state = json.loads((work / "state.json").read_text())
            log: list[str] = []
            end = time.monotonic() + seconds
            time.sleep(min(3, seconds / 4))         # some records before the first fault
            while time.monotonic() < end - 2:
                inject(hosts, rng.choice(nemeses), state, rng, log)
                time.sleep(rng.uniform(0.5, 2))
            (work / "healed").write_text("healed")
            out, err = driver.communicate(timeout=900)
        except BaseException:
            driver.kill()
            raise
        if driver.returncode != 0:
            raise RuntimeError(f"the workload failed ({driver.returncode}):\n{err[-4000:]}")
        summary = json.loads(out.strip().splitlines()[-1])
        summary.update(seed=seed, faults=log)
        return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nemesis", action="append", choices=NEMESES, default=None)
    parser.add_argument("--seconds", type=float, default=30, help="workload per run")
    parser.add_argument("--brokers", type=int, default=4, help="hosts, one broker each")
    args = parser.parse_args(argv)
    nemeses = args.nemesis or list(NEMESES)
    totals = {"runs": 0, "faults": 0, "acknowledged": 0, "lost": 0, "duplicated": 0,
              "diverged": 0, "phantom": 0, "commits_backwards": 0}
    recoveries = []
    for n in range(args.runs):
        s = one_run(args.seed + n, nemeses, args.seconds, args.brokers)
        print(f"run {n + 1}/{args.runs} seed {s['seed']}: {len(s['faults'])} faults "
              f"({'; '.join(s['faults'])}); sent {s['sent']}, acknowledged "
              f"{s['acknowledged']}, lost {s['lost']}, duplicated {s['duplicated']}, "
              f"phantom {s['phantom']}, out of order {s['out_of_order']}, diverged "
              f"{s['diverged']}, commits backwards {s['commits_backwards']}, serving again "
              f"{s['recovery_s']} s after healing", flush=True)
        totals["runs"] += 1
        totals["faults"] += len(s["faults"])
        for key in ("acknowledged", "lost", "duplicated", "phantom", "commits_backwards"):
            totals[key] += s[key]
        totals["diverged"] += len(s["diverged"])
        recoveries.append(s["recovery_s"])
    recoveries.sort()
    print(f"summary: {totals['runs']} runs, {totals['faults']} faults, "
          f"{totals['acknowledged']} acknowledged, {totals['lost']} lost, "
          f"{totals['duplicated']} duplicated, {totals['phantom']} phantom, "
          f"{totals['diverged']} diverged partitions, {totals['commits_backwards']} commits "
          f"backwards; serving again after healing: p50 {recoveries[len(recoveries) // 2]} s,"
          f" max {recoveries[-1]} s", flush=True)
    bad = totals["lost"] + totals["duplicated"] + totals["phantom"] + totals["diverged"] \
        + totals["commits_backwards"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
