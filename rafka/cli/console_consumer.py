"""``rafka console-consumer``: kafka-console-consumer.sh (records printed one a line, with
the ``--property print.*`` fields Kafka's tool prints)."""
from __future__ import annotations

import argparse
import sys
import time

from rafka.cli.args import add_cluster_options, connect_cluster, parse_key_values


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, help="only this partition")
    parser.add_argument("--offset", default=None,
                        help="earliest, latest or an offset (needs --partition)")
    parser.add_argument("--from-beginning", action="store_true")
    parser.add_argument("--max-messages", type=int, default=None)
    parser.add_argument("--timeout-ms", type=int, default=None,
                        help="exit when no record arrives for this long")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="print.key, print.offset, print.partition, print.timestamp "
                             "(true/false), key.separator")
    parser.add_argument("--consumer-property", action="append", default=[],
                        metavar="KEY=VALUE")
    parser.add_argument("--group", help="consume as a member of this consumer group "
                                        "(subscribe; offsets are committed)")


def run(args: argparse.Namespace) -> int:
    import rafka

    props = parse_key_values(args.property, "--property")
    flag = lambda k: props.get(k, "false").lower() == "true"  # noqa: E731
    separator = props.get("key.separator", "\t")
    cluster = connect_cluster(args)
    config = parse_key_values(args.consumer_property, "--consumer-property")
    config.setdefault("auto.offset.reset", "earliest" if args.from_beginning else "latest")
    if args.group:
        config["group.id"] = args.group
    consumer = rafka.Consumer(cluster, config)
    if args.group and args.partition is None:
        consumer.subscribe([args.topic])
    else:
        partitions = ([args.partition] if args.partition is not None
                      else consumer.metadata.partitions_for(args.topic))
        consumer.assign([(args.topic, p) for p in partitions])
    if args.offset is not None:
        if args.offset == "earliest":
            consumer.seek_to_beginning()
        elif args.offset == "latest":
            consumer.seek_to_end()
        else:
            for tp in consumer.assignment():
                consumer.seek(tp, int(args.offset))
    seen, last = 0, time.monotonic()
    try:
        while args.max_messages is None or seen < args.max_messages:
            records = consumer.poll(200)
            if not records:
                if args.timeout_ms is not None and \
                        (time.monotonic() - last) * 1000 > args.timeout_ms:
                    break
                continue
            last = time.monotonic()
            for r in records:
                parts = []
                if flag("print.timestamp"):
                    parts.append(f"CreateTime:{r.timestamp}" if r.timestamp_type == 0
                                 else f"LogAppendTime:{r.timestamp}")
                if flag("print.partition"):
                    parts.append(f"Partition:{r.partition}")
                if flag("print.offset"):
                    parts.append(f"Offset:{r.offset}")
                if flag("print.key"):
                    parts.append("null" if r.key is None else r.key.decode(errors="replace"))
                parts.append("null" if r.value is None else r.value.decode(errors="replace"))
                print(separator.join(parts), flush=True)
                seen += 1
                if args.max_messages is not None and seen >= args.max_messages:
                    break
    except KeyboardInterrupt:
        pass
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    consumer.close()
    return 0
