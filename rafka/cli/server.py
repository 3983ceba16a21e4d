"""``rafka server start`` and ``rafka server stop`` (Kafka's ``kafka-server-start.sh`` and
``kafka-server-stop.sh``), also what ``cluster.yaml`` runs on a ``ray up`` cluster's head.

``start`` runs a rafka cluster from the foreground until Ctrl-C or SIGTERM, or until
``stop`` (from any process on the Ray cluster) has stopped it. On a cluster-launcher head,
``--cluster-config ~/ray_bootstrap_config.yaml`` places one broker per node the config
lists, once they have all joined. ``stop`` stops the rafka clusters with a controlled
shutdown (every broker's clean-shutdown marker written); with ``--ray-nodes`` it then stops
Ray on every other node, which ``ray down`` does not do for the on-premise provider.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rafka.cli.args import parse_key_values

# How often a running server checks that its cluster has not been stopped by ``stop``.
STOPPED_ELSEWHERE_CHECK_S = 2.0


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = sub.add_parser("start", help="run an embedded cluster in the foreground until "
                                         "Ctrl-C", description="Start a rafka cluster on Ray "
                                         "(a local Ray unless --address) and keep it running "
                                         "until Ctrl-C, then stop it cleanly.")
    start.add_argument("--data-dir", default="./data", help="log directories (default ./data)")
    start.add_argument("--num-brokers", type=int, default=None,
                       help="brokers (default 3, or one per node of --cluster-config)")
    start.add_argument("--name", default="default", help="cluster name (default: default)")
    start.add_argument("--address", default=None, help="an existing Ray cluster's address")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a broker config (repeatable), e.g. log.retention.hours=24")
    start.add_argument("--wait-for-nodes", type=int, default=None, metavar="N",
                       help="wait (up to 10 minutes) until the Ray cluster has N alive nodes "
                            "before placing brokers on them, round robin (default 1, or "
                            "every node of --cluster-config)")
    start.add_argument("--cluster-config", type=Path, default=None, metavar="YAML",
                       help="a Ray cluster-launcher config (on a `ray up` head: "
                            "~/ray_bootstrap_config.yaml): one broker per node it lists, "
                            "started once they have all joined")
    stop = sub.add_parser("stop", help="stop running rafka clusters cleanly",
                          description="Stop the rafka clusters running on a Ray cluster with "
                          "a controlled shutdown (like kafka-server-stop.sh); a `server "
                          "start` running one then exits.")
    stop.add_argument("--name", default=None,
                      help="only this cluster (default: every rafka cluster on the Ray cluster)")
    stop.add_argument("--address", default=None,
                      help="the Ray cluster's address (default: the one on this machine)")
    stop.add_argument("--ray-nodes", action="store_true",
                      help="then stop Ray on every other node of the Ray cluster (`ray down` "
                           "runs `ray stop` on the head only; cluster.yaml's head does this "
                           "first)")


def nodes_in_launch_config(path: Path) -> int:
    """How many nodes a Ray cluster-launcher config lists: the head and, with the
    on-premise (local) provider, each of ``provider.worker_ips``; with another provider,
    each node type's ``min_workers``."""
    import yaml
    config = yaml.safe_load(Path(path).expanduser().read_text()) or {}
    provider = config.get("provider") or {}
    if provider.get("type") == "local" and "worker_ips" in provider:
        return 1 + len(provider["worker_ips"] or [])
    types = config.get("available_node_types") or {}
    head = config.get("head_node_type")
    if types:
        return 1 + sum(int(t.get("min_workers", 0)) for name, t in types.items()
                       if name != head)
    return 1 + int(config.get("min_workers", 0))


def run(args: argparse.Namespace) -> int:
    if args.action == "stop":
        return _stop(args)
    return _start(args)


def _wait_for_nodes(wanted: int, address: str | None, stop: threading.Event) -> None:
    """Brokers go to the nodes alive when the cluster starts: on a fresh Ray cluster
    (``ray up``), wait for the workers to join first."""
    import ray

    from rafka.client.ray_runtime import ensure_ray
    ensure_ray(address)
    deadline = time.monotonic() + 600
    while not stop.is_set():
        alive = sum(1 for n in ray.nodes() if n["Alive"])
        if alive >= wanted:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"only {alive} of {wanted} Ray nodes came up within 10 minutes")
        print(f"waiting for Ray nodes: {alive}/{wanted} alive", flush=True)
        stop.wait(5)


def _start(args: argparse.Namespace) -> int:
    import ray

    import rafka
    from rafka.cluster import Cluster

    stop = threading.Event()

    def on_signal(*_) -> None:
        stop.set()
    # Installed explicitly (a process started in the background inherits SIGINT ignored)
    # and before the brokers start, so a Ctrl-C while they start stops them cleanly once
    # they are up; again after, in case ray.init installed its own.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    listed = nodes_in_launch_config(args.cluster_config) if args.cluster_config else None
    num_brokers = args.num_brokers or listed or 3
    wait_for = args.wait_for_nodes or listed or 1
    if wait_for > 1:
        _wait_for_nodes(wait_for, args.address, stop)
    overrides = parse_key_values(args.override, "--override")
    cluster = rafka.Cluster.start(num_brokers, args.data_dir, overrides, name=args.name,
                                  address=args.address)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    address = ray.get_runtime_context().gcs_address
    print(f"rafka cluster '{args.name}' started: {num_brokers} brokers, data in "
          f"{Path(args.data_dir).resolve()}")
    print(f"connect with: rafka topics --cluster {args.name} --address {address} --list")
    for listener, servers in cluster.listeners().items():
        named = "" if listener == "PLAINTEXT" else f" on {listener}"
        print(f"Kafka clients{named}: bootstrap.servers={servers}")
    print("(the same shell environment carries the Ray auth token; Ctrl-C stops the cluster)",
          flush=True)
    while not stop.wait(STOPPED_ELSEWHERE_CHECK_S):
        if args.name not in Cluster.running():
            print(f"rafka cluster '{args.name}' was stopped (rafka server stop)", flush=True)
            return 0
    print("stopping...", flush=True)
    cluster.shutdown()
    print("stopped")
    return 0


def _stop(args: argparse.Namespace) -> int:
    from rafka.cluster import Cluster
    from rafka.client.ray_runtime import ensure_ray

    try:
        ensure_ray(args.address or os.environ.get("RAY_ADDRESS") or "auto")
    except ConnectionError as e:
        print(f"No Ray cluster to connect to ({e}); give its address with --address",
              file=sys.stderr)
        return 1
    names = Cluster.running()
    if args.name is not None:
        if args.name not in names:
            print(f"No rafka cluster named '{args.name}' is running", file=sys.stderr)
            return 1
        names = [args.name]
    if not names:
        print("No rafka cluster to stop")
    for name in names:
        print(f"stopping rafka cluster '{name}' (controlled shutdown)...", flush=True)
        Cluster.connect(name).shutdown()
        print(f"stopped rafka cluster '{name}'", flush=True)
    if args.ray_nodes:
        stop_ray_on_other_nodes()
    return 0


def stop_ray_on_other_nodes(timeout_s: float = 60.0) -> None:
    """``ray stop`` on every alive node but this one, each from a task placed there that
    starts it detached (it ends the task's own worker), then wait until the GCS has seen
    them go. (On one machine running several Ray nodes, ``ray stop`` ends them all.)"""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    others = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()
              if n["Alive"] and n["NodeID"] != here}
    if not others:
        return
    print(f"stopping Ray on the other nodes: {', '.join(sorted(others.values()))}",
          flush=True)

    @ray.remote(num_cpus=0)
    def stop_ray_here() -> None:
        cli = Path(sys.executable).with_name("ray")
        subprocess.Popen(["sh", "-c", f"sleep 1; exec '{cli}' stop"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    ray.get([stop_ray_here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node, soft=False)).remote() for node in others], timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        left = {n["NodeManagerAddress"] for n in ray.nodes()
                if n["Alive"] and n["NodeID"] in others}
        if not left:
            print("Ray stopped on the other nodes", flush=True)
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"Ray still running after {timeout_s:.0f} s on: "
                             f"{', '.join(sorted(left))}")
        time.sleep(1)
