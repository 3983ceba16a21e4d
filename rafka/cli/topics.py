"""``rafka topics``: kafka-topics.sh for a rafka cluster (create, list, describe, alter,
delete), against a running cluster found by name on the Ray cluster."""
from __future__ import annotations

import argparse
import sys

from rafka.cli.args import add_cluster_options, admin_of, parse_key_values


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, command_config=True)
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


def run(args: argparse.Namespace) -> int:
    import rafka
    from protocols.errors import KafkaError

    try:
        admin = admin_of(args)
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
