"""``rafka topics``: kafka-topics.sh for a rafka cluster (create, list, describe, alter,
delete), against a running cluster found by name on the Ray cluster."""
from __future__ import annotations

import argparse
import sys


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default="default",
                        help="the rafka cluster's name (default: default)")
    parser.add_argument("--address", default=None,
                        help="Ray address (default: RAY_ADDRESS, else the running local one)")


def connect_cluster(args: argparse.Namespace):
    """The cluster named by --cluster / --address. A tool's stdout is its output (records,
    tables), so the Ray workers' log lines are not forwarded to it."""
    import rafka
    from rafka.ray_support import ensure_ray
    ensure_ray(args.address or "auto", log_to_driver=False)
    return rafka.Cluster.connect(args.cluster, address=args.address)


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("create", "list", "describe", "alter", "delete"):
        action.add_argument(f"--{name}", action="store_true", help=f"{name} topics")
    parser.add_argument("--topic", help="the topic (for --describe: only this one)")
    parser.add_argument("--partitions", type=int, help="number of partitions")
    parser.add_argument("--replication-factor", type=int, help="replicas per partition")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config override (repeatable)")
    parser.add_argument("--replica-assignment", metavar="B:B,B:B",
                        help="explicit replicas: partitions separated by ',', brokers by ':'")


def parse_key_values(pairs: list[str], option: str) -> dict[str, str]:
    """Repeated KEY=VALUE options (``--config``, ``--producer-property``, ...) as a dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{option} wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def run(args: argparse.Namespace) -> int:
    import rafka
    from protocols.errors import KafkaError

    try:
        cluster = connect_cluster(args)
        admin = cluster.admin()
        if args.list:
            for name in admin.list_topics(internal=True):
                print(name)
            return 0
        if args.describe:
            for name in [args.topic] if args.topic else admin.list_topics(internal=True):
                d = admin.describe_topics([name])[name]
                rf = len(d.partitions[0].replicas) if d.partitions else 0
                configs = ",".join(f"{k}={v}" for k, v in sorted(d.config.items()))
                print(f"Topic: {name}\tPartitionCount: {len(d.partitions)}\t"
                      f"ReplicationFactor: {rf}\tConfigs: {configs}")
                for line in admin.describe_topic_lines(name):
                    print(line)
            return 0
        if not args.topic:
            print("--topic is required", file=sys.stderr)
            return 2
        if args.create:
            assignment = None
            if args.replica_assignment:
                assignment = {p: [int(b) for b in part.split(":")]
                              for p, part in enumerate(args.replica_assignment.split(","))}
            config = parse_key_values(args.config, "--config")
            admin.create_topics([rafka.NewTopic(args.topic, args.partitions,
                                                args.replication_factor, config, assignment)])
            print(f"Created topic {args.topic}.")
        elif args.alter:
            if args.partitions:
                admin.create_partitions({args.topic: args.partitions})
            if args.config:
                admin.alter_configs({args.topic: parse_key_values(args.config, "--config")})
        elif args.delete:
            admin.delete_topics([args.topic])
        return 0
    except KafkaError as e:
        print(f"Error while executing topic command : {e} ({e.name})", file=sys.stderr)
        return 1
