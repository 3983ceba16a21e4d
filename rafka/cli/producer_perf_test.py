"""``rafka producer-perf-test``: kafka-producer-perf-test.sh, with the lines Kafka's
ProducerPerformance prints."""
from __future__ import annotations

import argparse
import threading
import time

from rafka.cli.args import add_cluster_options, connect_cluster, parse_key_values
from rafka.cli.throttle import ThroughputThrottler


def configure(parser: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
    import rafka

    cluster = connect_cluster(args)
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
