"""``rafka console-producer``: kafka-console-producer.sh (lines from stdin become records;
``--property parse.key=true`` splits a key off each line)."""
from __future__ import annotations

import argparse
import sys

from rafka.cli.args import add_cluster_options, connect_cluster, parse_key_values


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="parse.key=true, key.separator=<sep> (default a tab)")
    parser.add_argument("--producer-property", action="append", default=[],
                        metavar="KEY=VALUE", help="a producer config (repeatable)")


def run(args: argparse.Namespace) -> int:
    import rafka

    props = parse_key_values(args.property, "--property")
    parse_key = props.get("parse.key", "false").lower() == "true"
    separator = props.get("key.separator", "\t")
    cluster = connect_cluster(args)
    config = parse_key_values(args.producer_property, "--producer-property")
    with rafka.Producer(cluster, config) as p:
        futures = []
        for line in sys.stdin:
            line = line.rstrip("\n")
            key = None
            if parse_key:
                key, sep, line = line.partition(separator)
                if not sep:
                    print(f"No key separator found on line: {key}", file=sys.stderr)
                    return 1
            futures.append(p.send(args.topic, line.encode(), key=None if key is None
                                  else key.encode()))
        p.flush()
        for f in futures:
            f.result()
    return 0
