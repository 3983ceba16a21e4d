"""``rafka consumer-perf-test``: kafka-consumer-perf-test.sh, with the lines Kafka's
ConsumerPerformance prints."""
from __future__ import annotations

import argparse
import sys
import time

from rafka.cli.args import add_cluster_options, connect_cluster, parse_key_values


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--timeout", type=int, default=10_000,
                        help="ms without records before giving up")
    parser.add_argument("--consumer-props", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--show-detailed-stats", action="store_true")
    parser.add_argument("--reporting-interval", type=int, default=5000, help="ms")


def run(args: argparse.Namespace) -> int:
    import rafka

    cluster = connect_cluster(args)
    config = parse_key_values(args.consumer_props, "--consumer-props")
    config.setdefault("auto.offset.reset", "earliest")
    consumer = rafka.Consumer(cluster, config)
    consumer.assign([(args.topic, p) for p in consumer.metadata.partitions_for(args.topic)])
    start = time.time()
    count = size = 0
    last_record = last_report = time.monotonic()
    report_count, report_size = 0, 0
    print("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
          "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    while count < args.messages:
        records = consumer.poll(100)
        now = time.monotonic()
        if not records:
            if (now - last_record) * 1000 > args.timeout:
                print(f"WARNING: Exiting before consuming the expected number of messages: "
                      f"timeout ({args.timeout} ms) exceeded.", file=sys.stderr)
                break
            continue
        last_record = now
        for r in records:
            count += 1
            size += len(r.value or b"") + len(r.key or b"")
        if args.show_detailed_stats and (now - last_report) * 1000 >= args.reporting_interval:
            dt = now - last_report
            print(f"progress: {count} records, {(count - report_count) / dt:.1f} nMsg.sec, "
                  f"{(size - report_size) / dt / 2**20:.4f} MB.sec", flush=True)
            last_report, report_count, report_size = now, count, size
    end = time.time()
    elapsed = max(end - start, 1e-9)
    mb = size / 2**20
    fmt = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + \
        f":{int(t * 1000) % 1000:03d}"  # noqa: E731
    print(f"{fmt(start)}, {fmt(end)}, {mb:.4f}, {mb / elapsed:.4f}, {count}, "
          f"{count / elapsed:.4f}, 0, {int(elapsed * 1000)}, {mb / elapsed:.4f}, "
          f"{count / elapsed:.4f}")
    consumer.close()
    return 0
