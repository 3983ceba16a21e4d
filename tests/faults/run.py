"""Fault runs on real hosts (issue 18): ``python -m tests.faults.run --runs N --seed S
[--nemesis NAME ...] [--seconds T]``.

Each run brings up a ``Hosts`` cluster (a Ray node per network namespace, one broker each),
starts the workload driver on the head (``tests.faults.workload``), injects faults while it
sends, heals them, and prints one line with what the checker found; a summary line ends.
Nemeses (chosen at random per the seed, one at a time, each held 2-6 s unless said):

- ``partition``: a worker host cut off from all others (its link down) for 2-20 s, shorter
  or longer than a broker session, then healed;
- ``split``: the hosts split in two halves at random, the head on either side (blackhole
  routes in each host for the other half's addresses), then healed;
- ``kill``: a broker's process SIGKILLed (Ray starts it again; it recovers from its files);
- ``pause``: a broker's process, or one time in three the controller's, SIGSTOPped for
  2-15 s, then SIGCONTinued (a zombie that wakes up, or that was fenced meanwhile);
- ``node``: a worker host's every process SIGKILLed (its raylet and all under it), then the
  host started again: a new Ray node at the same address, on the same disk, where Ray
  restarts its broker (the workload places brokers by node address) to recover from its
  files;
- ``slow``: a worker host's link slowed both ways to 256 kbit/s - 2 Mbit/s (a token bucket
  filter: ``tc``'s netem, for delay and loss, is not in this machine's kernel).
- ``disk``: a broker's log directory (each is a tmpfs of its own) filled to the last byte,
  then emptied of the filler: the broker's next write fails, its log directory goes offline
  and it halts, as Kafka's does; Ray starts it again and it serves once there is room.

- ``isolate``: a worker host cut off for 60-75 s, longer than Ray's node-failure detection
  (with Ray's defaults, 5 health checks that time out after 10 s, 3 s apart: ~50-65 s;
  a killed node, which refuses them at once, is declared dead in ~15 s). Ray declares the
  node dead and does not let it back in: its raylet exits when the link comes back, taking
  the node's processes with it. As an operator would, the harness
  then starts the host's Ray node again (on the same disk, at the same address), where Ray
  restarts its broker. The other nemeses stay shorter than that detection.

``--workload transactions`` runs a consume-transform-produce pipeline instead
(``tests.faults.txn_workload``: a read_committed consumer and a transactional producer
committing the group's offsets in each transaction), checked for each acknowledged input in
the output exactly once.

``--acks 1`` runs the workload with acks=1 and no idempotence: what a leader acknowledged
before a fault took it away may be lost, as Kafka documents; such runs report it rather
than fail on it.
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
from pathlib import Path

from tests.disks import FILLER, fill
from tests.faults.hosts import REPO, Hosts, _ip

NEMESES = ("partition", "split", "kill", "pause", "slow", "node", "disk", "isolate")
# Partitions and pauses last up to past the workload's broker session (6 s): a broker the
# controller fenced meanwhile, a controller the brokers fenced, wakes up or comes back.
PARTITION_HOLD_S = (2, 20)
PAUSE_HOLD_S = (2, 15)
# Each broker's log directory is a tmpfs of its own, of at most this size.
LOG_DIR_SIZE = "1g"


def _split(hosts: Hosts, sides: tuple[list, list], add: bool) -> None:
    for side, other in (sides, sides[::-1]):
        for host in side:
            for peer in other:
                hosts.exec(host, "ip", "route", "add" if add else "del", "blackhole",
                           f"{peer.address}/32", check=add)


def _slow(hosts: Hosts, host, kbit: int | None) -> None:
    """Both directions of the host's link through a token bucket of ``kbit`` (None: off)."""
    for run, dev in ((lambda *c, **k: subprocess.run(c, capture_output=True, text=True, **k),
                      host.veth),
                     (lambda *c, **k: hosts.exec(host, *c, **k), "eth0")):
        if kbit is None:
            run("tc", "qdisc", "del", "dev", dev, "root", check=False)
        else:
            run("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{kbit}kbit",
                "burst", "16kbit", "latency", "400ms", check=True)


def inject(hosts: Hosts, nemesis: str, rng: random.Random, log: list,
           log_dirs: list[Path] | None = None) -> None:
    hold = rng.uniform(2, 6)
    if nemesis == "disk":
        directory = rng.choice(log_dirs)
        size = fill(directory)
        log.append(f"disk {directory.name} full ({size >> 20} MiB filler) {hold:.1f}s")
        try:
            time.sleep(hold)
        finally:
            (directory / FILLER).unlink(missing_ok=True)
        return
    if nemesis == "split":
        shuffled = rng.sample(hosts.hosts, len(hosts.hosts))
        cut = rng.randint(1, len(shuffled) - 1)
        sides = (shuffled[:cut], shuffled[cut:])
        _split(hosts, sides, add=True)
        log.append(f"split {[h.address for h in sides[0]]} | {[h.address for h in sides[1]]}"
                   f" {hold:.1f}s")
        try:
            time.sleep(hold)
        finally:
            _split(hosts, sides, add=False)
        return
    if nemesis == "slow":
        host = rng.choice(hosts.hosts[1:])
        kbit = rng.choice((256, 512, 1024, 2048))
        _slow(hosts, host, kbit)
        log.append(f"slow {host.address} {kbit} kbit/s {hold:.1f}s")
        try:
            time.sleep(hold)
        finally:
            _slow(hosts, host, None)
        return
    if nemesis == "partition":
        host = rng.choice(hosts.hosts[1:])
        hold = rng.uniform(*PARTITION_HOLD_S)
        _ip("link", "set", host.veth, "down")
        log.append(f"partition {host.address} {hold:.1f}s")
        try:
            time.sleep(hold)
        finally:
            _ip("link", "set", host.veth, "up")
        return
    if nemesis == "isolate":
        host = rng.choice(hosts.hosts[1:])
        hold = rng.uniform(60, 75)
        _ip("link", "set", host.veth, "down")
        try:
            time.sleep(hold)
        finally:
            _ip("link", "set", host.veth, "up")
        restarted = hosts.start_node_if_declared_dead(host, wait_s=30)
        log.append(f"isolate {host.address} {hold:.1f}s"
                   + ("; Ray declared the node dead: started again" if restarted else ""))
        return
    if nemesis == "node":
        host = rng.choice(hosts.hosts[1:])
        killed = hosts.kill_node(host)
        log.append(f"node {host.address} down ({killed} processes killed) {hold:.1f}s")
        time.sleep(hold)
        hosts.start_node(host)
        return
    host = rng.choice(hosts.hosts)
    actor = "BrokerActor"
    if nemesis == "pause":
        hold = rng.uniform(*PAUSE_HOLD_S)
        if rng.random() < 1 / 3:  # the controller's process, wherever it is now
            actor = "ControllerActor"
            host = next((h for h in hosts.hosts if hosts.actor_pid(h, actor)), host)
    pid = hosts.actor_pid(host, actor)     # now: Ray restarts a killed broker with a new pid
    what = "broker" if actor == "BrokerActor" else "controller"
    if pid is None:
        log.append(f"{nemesis}: no {what} on {host.address} at the moment")
        return
    if nemesis == "kill":
        try:
            os.kill(pid, signal.SIGKILL)
            log.append(f"kill broker on {host.address} (pid {pid})")
        except ProcessLookupError:
            log.append(f"kill broker on {host.address}: pid {pid} already gone")
        time.sleep(hold)
        return
    try:
        os.kill(pid, signal.SIGSTOP)
        log.append(f"pause {what} on {host.address} (pid {pid}) {hold:.1f}s")
        time.sleep(hold)
    except ProcessLookupError:
        log.append(f"pause {what} on {host.address}: pid {pid} gone")
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def one_run(seed: int, nemeses: list[str], seconds: float, brokers: int,
            acks: str = "all", keep_logs: Path | None = None, workload: str = "plain") -> dict:
    """A run of the workload with nemeses drawn at random per the seed."""
    rng = random.Random(seed)

    def faults(hosts: Hosts, work: Path, log_dirs: list[Path], log: list) -> None:
        end = time.monotonic() + seconds
        time.sleep(min(3, seconds / 4))         # some records before the first fault
        while time.monotonic() < end - 2:
            inject(hosts, rng.choice(nemeses), rng, log, log_dirs)
            time.sleep(rng.uniform(0.5, 2))
    summary = run_workload(faults, seconds, brokers, acks,
                           keep_logs and keep_logs / f"seed-{seed}", workload)
    summary.update(seed=seed)
    return summary


WORKLOADS = {"plain": "tests.faults.workload", "transactions": "tests.faults.txn_workload"}


def run_workload(faults, seconds: float, brokers: int, acks: str = "all",
                 keep_logs: Path | None = None, workload: str = "plain") -> dict:
    """Bring up the hosts, start the workload on the head, call ``faults(hosts, work,
    log_dirs, log)`` once it sends (it injects and heals, noting each fault in ``log``),
    then tell the workload all is healed; its summary, with ``faults`` the log. With
    ``keep_logs``, each host's Ray logs are copied there before the hosts go."""
    disks = {f"work/data/broker-{b}": LOG_DIR_SIZE for b in range(brokers)}
    with Hosts(workers=brokers - 1, disks=disks) as hosts:
        work = hosts.root / "work"
        work.mkdir(parents=True, exist_ok=True)
        log_dirs = [hosts.root / path for path in disks]
        driver = subprocess.Popen(
            ["ip", "netns", "exec", hosts.head.name, sys.executable, "-m",
             WORKLOADS[workload], "--dir", str(work), "--seconds", str(seconds),
             "--brokers", str(brokers), "--acks", acks],
            env=dict(hosts.env, RAY_ADDRESS=hosts.ray_address), cwd=str(REPO),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            while not (work / "state.json").exists():
                if driver.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the workload never started: "
                                       + driver.stderr.read()[-3000:])
                time.sleep(0.2)
            # the workload has started its cluster: faults from now on
            log: list[str] = []
            faults(hosts, work, log_dirs, log)
            (work / "healed").write_text("healed")
            out, err = driver.communicate(timeout=900)
        except BaseException:
            driver.kill()
            raise
        finally:
            if keep_logs is not None:
                hosts.copy_logs(keep_logs)
        if driver.returncode != 0:
            raise RuntimeError(f"the workload failed ({driver.returncode}):\n{err[-4000:]}")
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"the workload printed no summary:\n{out[-3000:]}\n{err[-3000:]}")
        summary = json.loads(lines[-1])
        summary.update(faults=log)
        return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nemesis", action="append", choices=NEMESES, default=None)
    parser.add_argument("--seconds", type=float, default=30, help="workload per run")
    parser.add_argument("--brokers", type=int, default=4, help="hosts, one broker each")
    parser.add_argument("--acks", choices=("all", "1"), default="all",
                        help="acks=1 runs (no idempotence) report losses, not fail on them")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="plain",
                        help="plain: an idempotent producer and a group (the default); "
                             "transactions: a consume-transform-produce pipeline whose "
                             "output must hold each input once (tests.faults.txn_workload)")
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="copy each run's Ray logs (every host's) to DIR/seed-<seed>")
    args = parser.parse_args(argv)
    nemeses = args.nemesis or list(NEMESES)
    totals = {"runs": 0, "faults": 0, "acknowledged": 0, "lost": 0, "duplicated": 0,
              "diverged": 0, "phantom": 0, "commits_backwards": 0}
    recoveries, returns = [], []
    harness_errors = 0
    for n in range(args.runs):
        try:
            s = one_run(args.seed + n, nemeses, args.seconds, args.brokers, args.acks,
                        args.keep_logs, args.workload)
        except Exception as e:  # noqa: BLE001 - the run could not be checked: say why, go on
            harness_errors += 1
            print(f"run {n + 1}/{args.runs} seed {args.seed + n}: not checked: "
                  f"{type(e).__name__}: {str(e)[-3000:]}", flush=True)
            continue
        print(f"run {n + 1}/{args.runs} seed {s['seed']}: {len(s['faults'])} faults "
              f"({'; '.join(s['faults'])}); sent {s['sent']}, acknowledged "
              f"{s['acknowledged']}, lost {s['lost']}, duplicated {s['duplicated']}, "
              f"phantom {s['phantom']}, out of order {s['out_of_order']}, diverged "
              f"{s['diverged']}, commits backwards {s['commits_backwards']}, serving again "
              f"{s['recovery_s']} s after healing, every broker back {s['brokers_back_s']} s "
              f"after; brokers restarted {s['brokers_restarted']}; controller epoch "
              f"{s['controllers'][0]['epoch']} -> {s['controllers'][1]['epoch']}"
              + (f"; pipeline: {s['transactions']} transactions, {s['aborts']} aborted, "
                 f"{s['pipeline_restarts']} restarts, caught up {s['caught_up']}"
                 if s.get("workload") == "transactions" else "")
              + (f"; not back: {json.dumps(s['brokers_not_back'])}"
                 if s.get("brokers_not_back") else "")
              + (f"; read {s['read']}; lost (partition, offset, seq) {s['lost_examples']} "
                 f"where: {json.dumps(s['lost_where'])}" if s["lost"] else ""), flush=True)
        totals["runs"] += 1
        totals["faults"] += len(s["faults"])
        for key in ("acknowledged", "lost", "duplicated", "phantom", "commits_backwards"):
            totals[key] += s[key]
        totals["diverged"] += len(s["diverged"])
        recoveries.append(s["recovery_s"])
        returns.append(s["brokers_back_s"])
    if not recoveries:
        print(f"summary: no run could be checked ({harness_errors} not checked)", flush=True)
        return 1
    recoveries.sort()
    returns.sort()
    print(f"summary (acks={args.acks}): {totals['runs']} runs checked, {harness_errors} not "
          f"checked, {totals['faults']} faults, "
          f"{totals['acknowledged']} acknowledged, {totals['lost']} lost, "
          f"{totals['duplicated']} duplicated, {totals['phantom']} phantom, "
          f"{totals['diverged']} diverged partitions, {totals['commits_backwards']} commits "
          f"backwards; serving again after healing: p50 {recoveries[len(recoveries) // 2]} s,"
          f" max {recoveries[-1]} s; every broker back: p50 {returns[len(returns) // 2]} s, "
          f"max {returns[-1]} s", flush=True)
    # acks=1 without idempotence may lose what a leader acknowledged alone, and a retry may
    # write a record twice (Kafka's documented trade): reported above, not failures.
    bad = (totals["phantom"] + totals["diverged"] + totals["commits_backwards"]
           + harness_errors)
    if args.acks == "all":
        bad += totals["lost"] + totals["duplicated"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
