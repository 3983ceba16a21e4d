"""`rafka demo`: the main job on embedded defaults.

Today it exercises the storage engine end to end under ``--data-dir``: a broker log directory
with a three-partition topic, records appended as Kafka v2 batches, read back by offset and
by timestamp, a retention pass, a clean shutdown with Kafka's checkpoint files, and a restart
that recovers every partition. Later stages put the same data path behind Ray actors and Spark.
"""
from __future__ import annotations

import time
from pathlib import Path

from protocols.records import Record, encode_batch, iter_batches
from protocols.topics import TopicPartition
from storage import LogManager

TOPIC = "demo-events"
PARTITIONS = 3


def run_demo(data_dir: Path, records_per_partition: int = 10_000, batch_records: int = 100,
             out=print) -> dict[TopicPartition, int]:
    log_dir = Path(data_dir) / "broker-0"
    manager = LogManager(log_dir, {"log.segment.bytes": 256 * 1024})
    manager.load_logs()
    out(f"log dir {log_dir} (clean shutdown last time: {manager.had_clean_shutdown})")
    start = time.perf_counter()
    t0 = int(time.time() * 1000)
    appended = 0
    for p in range(PARTITIONS):
        log = manager.get_or_create_log(TopicPartition(TOPIC, p))
        first = log.log_end_offset
        for b in range(0, records_per_partition, batch_records):
            records = [Record(f"key-{i % 97}".encode(), f"event {first + b + i}".encode(),
                              t0 + b + i) for i in range(batch_records)]
            log.append_as_leader(encode_batch(records, compression="lz4"), leader_epoch=0)
            appended += batch_records
        log.update_high_watermark(log.log_end_offset)
    elapsed = time.perf_counter() - start
    out(f"appended {appended} records to {PARTITIONS} partitions of '{TOPIC}' in "
        f"{elapsed:.2f} s ({appended / elapsed:,.0f} records/sec)")

    for tp, log in sorted(manager.logs.items()):
        middle = (log.log_start_offset + log.log_end_offset) // 2
        batch = next(iter_batches(log.read(middle, 64 * 1024, max_offset=log.high_watermark)))
        record = next(r for r in batch.records() if r.offset >= middle)
        by_time = log.offset_for_timestamp(t0 + 5_000)
        out(f"{tp}: segments={log.num_segments} log_start_offset={log.log_start_offset} "
            f"log_end_offset={log.log_end_offset} high_watermark={log.high_watermark} | "
            f"offset {middle} -> {record.value.decode()!r} | first offset at t0+5s: {by_time}")
    deleted = manager.cleanup_logs()
    out(f"retention pass: {deleted} segment(s) deleted (retention.ms=7 days)")
    ends = {tp: lg.log_end_offset for tp, lg in manager.logs.items()}
    manager.shutdown()

    again = LogManager(log_dir, {"log.segment.bytes": 256 * 1024})
    again.load_logs()
    recovered = {tp: lg.log_end_offset for tp, lg in again.logs.items()}
    out(f"restart after clean shutdown: recovered {len(recovered)} partitions, "
        f"log end offsets {'match' if recovered == ends else 'DIFFER'}: "
        + ", ".join(f"{tp}={o}" for tp, o in sorted(recovered.items())))
    again.shutdown()
    if recovered != ends:
        raise RuntimeError(f"log end offsets changed across restart: {ends} -> {recovered}")
    return recovered
