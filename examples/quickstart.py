"""The main job: a clickstream pipeline on an embedded rafka cluster, Spark and a consumer
group.

    python examples/quickstart.py --data-dir ./data

1. A local Ray instance and a 3-broker rafka cluster, data under ``--data-dir``.
2. A producer writes click events, keyed by user, to ``clicks`` (6 partitions, RF=3,
   acks=all).
3. A Spark Structured Streaming query reads ``clicks`` with the ``rafka`` format, counts
   clicks per user and minute, and writes each count to ``clicks-per-user-minute``, a
   compacted topic keyed by user and minute (the latest count per key is what compaction
   keeps).
4. A consumer group (two members) reads the counts; the totals must match what was sent.
5. The topics are described and a short summary printed.

Its screen carries its own lines only: Spark's and Ray's (their log lines, Spark's stage bars,
what their worker processes print) go to ``--data-dir``'s ``quickstart.log`` unless
``--verbose`` is given.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path

import rafka

CLICKS, COUNTS = "clicks", "clicks-per-user-minute"


def produce_clicks(cluster, users: int, clicks: int, seed: int = 7) -> dict[str, int]:
    """Click events over the last few minutes; the number sent per user."""
    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    sent: dict[str, int] = {}
    with rafka.Producer(cluster, {"acks": "all", "linger.ms": 5}) as producer:
        for _ in range(clicks):
            user = f"user-{rng.randrange(users):03d}"
            event = {"user": user, "page": rng.choice(["/", "/cart", "/search", "/item"]),
                     "ts": now_ms - rng.randrange(5 * 60_000)}
            producer.send(CLICKS, json.dumps(event).encode(), key=user.encode())
            sent[user] = sent.get(user, 0) + 1
    return sent


def count_with_spark(spark, cluster, checkpoint: Path) -> tuple[int, int]:
    """Clicks per user and minute, streamed from one topic into the compacted one:
    (clicks read, micro-batches)."""
    from pyspark.sql import functions as F

    events = (spark.readStream.format("rafka").option("cluster", cluster.name)
              .option("subscribe", CLICKS).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "2000").load()
              .selectExpr("from_json(CAST(value AS STRING), "
                          "'user STRING, page STRING, ts LONG') AS e")
              .selectExpr("e.user AS user", "timestamp_millis(e.ts) AS at"))
    counts = (events.groupBy("user", F.window("at", "1 minute")).count()
              .selectExpr("CONCAT(user, '@', CAST(window.start AS STRING)) AS key",
                          "to_json(named_struct('user', user, 'minute', "
                          "CAST(window.start AS STRING), 'clicks', count)) AS value"))
    def publish(batch, _batch_id):
        # Each micro-batch's changed counts; Spark's Python sinks take appends only, so
        # update mode goes through foreachBatch and the batch writer.
        batch.write.format("rafka").option("cluster", cluster.name) \
            .option("topic", COUNTS).mode("append").save()

    query = (counts.writeStream.outputMode("update").foreachBatch(publish)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    if not query.awaitTermination(300):
        query.stop()
        raise RuntimeError("the Spark query did not finish in 5 minutes")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    return sum(p["numInputRows"] for p in batches), len(batches)


def read_counts(cluster, group: str, timeout_s: float = 120) -> dict:
    """The latest count per (user, minute) key, read to the end of the topic by a
    two-member consumer group."""
    admin = cluster.admin()
    ends = {tp: r.offset for tp, r in admin.list_offsets(
        {(COUNTS, p): "latest" for p in range(3)}).items()}
    config = {"group.id": group, "auto.offset.reset": "earliest",
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    members = [rafka.Consumer(cluster, config, client_id=f"dashboard-{i}") for i in range(2)]
    for m in members:
        m.subscribe([COUNTS])
    latest: dict[str, dict] = {}
    deadline = time.monotonic() + timeout_s

    def done() -> bool:
        owned = {tp: m for m in members for tp in m.assignment()}
        return set(owned) == set(ends) and all(m.position(tp) >= ends[tp]
                                               for tp, m in owned.items())
    try:
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the group read {len(latest)} counts, not the whole "
                                   f"topic, in {timeout_s} s")
            for m in members:
                for r in m.poll(100):
                    latest[r.key.decode()] = json.loads(r.value)   # the last one wins
        for m in members:
            m.commit()
        shares = [len(m.assignment()) for m in members]
    finally:
        for m in members:
            m.close()
    return {"counts": latest, "shares": shares}


def run_quickstart(data_dir: Path, users: int = 50, clicks: int = 5_000, spark=None,
                   name: str = "default", config: dict | None = None, out=print) -> dict:
    started = time.monotonic()
    data_dir = Path(data_dir)
    out(f"starting a 3-broker rafka cluster on a local Ray, data under {data_dir / 'rafka'} ...")
    cluster = rafka.Cluster.start(3, data_dir / "rafka", config, name=name)
    own_spark = spark is None
    try:
        admin = cluster.admin()
        existing = set(admin.list_topics())
        wanted = [rafka.NewTopic(CLICKS, 6, 3, {"min.insync.replicas": 2}),
                  rafka.NewTopic(COUNTS, 3, 3, {"cleanup.policy": "compact"})]
        admin.create_topics([t for t in wanted if t.name not in existing])
        out(f"rafka cluster '{name}' up: brokers {admin.describe_cluster().brokers}, "
            f"data in {data_dir / 'rafka'}")
        before = sum(r.offset for r in admin.list_offsets(
            {(CLICKS, p): "latest" for p in range(6)}).values())
        out(f"producing {clicks} clicks ...")
        sent = produce_clicks(cluster, users, clicks)
        out(f"produced {clicks} clicks from {len(sent)} users to '{CLICKS}' (acks=all)")
        out("counting clicks per user and minute with Spark Structured Streaming ...")
        if own_spark:
            from rafka.spark import local_session
            spark = local_session("rafka-quickstart")
            spark.sparkContext.setLogLevel("ERROR")
        # A fresh checkpoint: this run counts every click in the topic, earlier runs' too.
        run = int(time.time())
        read, batches = count_with_spark(spark, cluster, data_dir / f"checkpoints/{run}")
        out(f"Spark Structured Streaming read {read} clicks in {batches} micro-batches and "
            f"wrote counts per user and minute to '{COUNTS}' (compacted)")
        out("reading the counts with a consumer group ...")
        result = read_counts(cluster, f"dashboard-{run}")
        counts = result["counts"]
        total = sum(v["clicks"] for v in counts.values())
        out(f"consumer group 'dashboard-{run}' ({result['shares']} partitions per member) "
            f"read {len(counts)} counts totalling {total} clicks")
        for line in [*admin.describe_topic_lines(CLICKS), *admin.describe_topic_lines(COUNTS)]:
            out(line)
        expected = before + clicks
        ok = total == expected
        out(f"{'OK' if ok else 'MISMATCH'}: {total} clicks counted, {expected} produced "
            f"({time.monotonic() - started:.1f} s)")
        return {"sent": clicks + before, "counted": total, "keys": len(counts), "ok": ok}
    finally:
        if own_spark and spark is not None:
            spark.stop()
        cluster.shutdown()


def send_chatter_to(log_path: Path) -> int:
    """Spark's and Ray's output goes to ``log_path``: the JVM, Ray's processes and Spark's
    Python workers write it to file descriptor 2, which they inherit from this process, so
    that descriptor becomes the log file before any of them starts. Returns a descriptor of
    the terminal's stderr, for a failure's traceback."""
    sys.stderr.flush()
    terminal = os.dup(2)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)
    os.close(log)
    return terminal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="./data")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--clicks", type=int, default=5_000)
    parser.add_argument("--verbose", action="store_true",
                        help="show Spark's and Ray's own output here too (by default it goes "
                             "to DATA_DIR/quickstart.log)")
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    out = lambda line: print(line, flush=True)  # noqa: E731
    terminal = None
    if not args.verbose:
        log_path = data_dir / "quickstart.log"
        out(f"(Spark's and Ray's own output: {log_path}; --verbose shows it here)")
        terminal = send_chatter_to(log_path)
    try:
        summary = run_quickstart(data_dir, args.users, args.clicks, out=out)
    except Exception:
        if terminal is not None:
            os.write(terminal, traceback.format_exc().encode())
            os.write(terminal, f"(Spark's and Ray's output: {log_path})\n".encode())
            return 1
        raise
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
