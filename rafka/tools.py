"""The command-line tools Kafka users know, for a rafka cluster: ``console-producer``,
``console-consumer``, ``producer-perf-test``, ``consumer-perf-test`` (``server`` is in
``rafka.server_cli``). Options and output lines follow Kafka's tools."""
from __future__ import annotations

import argparse
import sys
import threading
import time

from rafka.cli_args import add_cluster_options, parse_key_values
from rafka.throttle import ThroughputThrottler


def _connect(args):
    from rafka.cli_args import connect_cluster
    return connect_cluster(args)


# ---- console producer and consumer ---------------------------------------------------------

def configure_console_producer(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="parse.key=true, key.separator=<sep> (default a tab)")
    parser.add_argument("--producer-property", action="append", default=[],
                        metavar="KEY=VALUE", help="a producer config (repeatable)")


def run_console_producer(args: argparse.Namespace) -> int:
    import rafka

    props = parse_key_values(args.property, "--property")
    parse_key = props.get("parse.key", "false").lower() == "true"
    separator = props.get("key.separator", "\t")
    cluster = _connect(args)
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


def configure_console_consumer(parser: argparse.ArgumentParser) -> None:
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


def run_console_consumer(args: argparse.Namespace) -> int:
    import rafka

    props = parse_key_values(args.property, "--property")
    flag = lambda k: props.get(k, "false").lower() == "true"  # noqa: E731
    separator = props.get("key.separator", "\t")
    cluster = _connect(args)
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


# ---- perf tests ------------------------------------------------------------------------------

def configure_producer_perf(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--num-records", type=int, required=True)
    parser.add_argument("--record-size", type=int, required=True)
    parser.add_argument("--throughput", type=int, default=-1,
                        help="records/sec to aim for, -1 for as fast as possible")
    parser.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--reporting-interval", type=int, default=5000, help="ms")


class _Stats:
    """Kafka's ProducerPerformance Stats: windows printed every reporting interval."""

    def __init__(self, total: int, interval_ms: int):
        self.latencies: list[int] = []
        self.lock = threading.Lock()
        self.start = self.window_start = time.monotonic()
        self.count = self.bytes = self.max_latency = self.total_latency = 0
        self.window_count = self.window_bytes = self.window_max = self.window_total = 0
        self.interval = interval_ms / 1000

    def record(self, latency_ms: int, size: int) -> None:
        with self.lock:
            self.count += 1
            self.bytes += size
            self.total_latency += latency_ms
            self.max_latency = max(self.max_latency, latency_ms)
            self.latencies.append(latency_ms)
            self.window_count += 1
            self.window_bytes += size
            self.window_total += latency_ms
            self.window_max = max(self.window_max, latency_ms)
            now = time.monotonic()
            if now - self.window_start >= self.interval:
                self._print_window(now)

    def _print_window(self, now: float) -> None:
        elapsed = now - self.window_start
        print(f"{self.window_count} records sent, {self.window_count / elapsed:.1f} records/sec"
              f" ({self.window_bytes / elapsed / 2**20:.2f} MB/sec), "
              f"{self.window_total / max(1, self.window_count):.1f} ms avg latency, "
              f"{self.window_max:.1f} ms max latency.", flush=True)
        self.window_start = now
        self.window_count = self.window_bytes = self.window_max = self.window_total = 0

    def final(self) -> str:
        elapsed = time.monotonic() - self.start
        lat = sorted(self.latencies) or [0]
        pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
        return (f"{self.count} records sent, {self.count / elapsed:.1f} records/sec "
                f"({self.bytes / elapsed / 2**20:.2f} MB/sec), "
                f"{self.total_latency / max(1, self.count):.2f} ms avg latency, "
                f"{self.max_latency:.2f} ms max latency, {pct(0.5)} ms 50th, {pct(0.95)} ms "
                f"95th, {pct(0.99)} ms 99th, {pct(0.999)} ms 99.9th.")


def run_producer_perf(args: argparse.Namespace) -> int:
    import rafka

    cluster = _connect(args)
    payload = b"x" * args.record_size
    stats = _Stats(args.num_records, args.reporting_interval)
    config = parse_key_values(args.producer_props, "--producer-props")
    with rafka.Producer(cluster, config) as producer:
        throttler = ThroughputThrottler(args.throughput) if args.throughput > 0 else None
        for i in range(args.num_records):
            sent_at = time.monotonic()
            future = producer.send(args.topic, payload)
            future.add_done_callback(
                lambda f, t=sent_at: f.exception() is None and
                stats.record(int((time.monotonic() - t) * 1000), args.record_size))
            if throttler is not None:
                throttler.throttle(i + 1)
        producer.flush()
    print(stats.final(), flush=True)
    return 0


def configure_consumer_perf(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--timeout", type=int, default=10_000,
                        help="ms without records before giving up")
    parser.add_argument("--consumer-props", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--show-detailed-stats", action="store_true")
    parser.add_argument("--reporting-interval", type=int, default=5000, help="ms")


def run_consumer_perf(args: argparse.Namespace) -> int:
    import rafka

    cluster = _connect(args)
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
