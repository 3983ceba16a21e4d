"""Storage engine throughput: Log appends and reads beside raw sequential writes.

    python benchmarks/storage.py [--total-mb 256] [--record-size 100] [--dir DIR]

For each batch size (1 KiB and 16 KiB of 100-byte records) it measures, on the same disk in
the same run:
  raw     os.write of the same bytes in the same chunk sizes to one file, then fsync
  append  Log.append_as_leader of the batches (CRC check, offset/epoch patch, index upkeep),
          then Log.flush (fsync)
  read    Log.read from offset 0 to the end in 1 MiB fetches (what a consumer fetch does)
and prints Kafka-perf-style lines with the machine and parameters.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.machine import describe  # noqa: E402
from protocols.records import Record, encode_batch  # noqa: E402
from storage import Log  # noqa: E402

MB = 1024 * 1024


def make_batch(batch_bytes: int, record_size: int) -> tuple[bytes, int]:
    """A batch of record_size-byte values whose encoded size is close to batch_bytes."""
    n = 1
    while True:
        records = [Record(None, b"x" * record_size, 1_700_000_000_000 + i) for i in range(n + 1)]
        if len(encode_batch(records)) > batch_bytes:
            break
        n += 1
    records = [Record(None, b"x" * record_size, 1_700_000_000_000 + i) for i in range(n)]
    return encode_batch(records), n


def raw_write(path: Path, chunk: bytes, count: int) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for _ in range(count):
        os.write(fd, chunk)
    os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def log_append(directory: Path, chunk: bytes, count: int) -> tuple[float, Log]:
    log = Log.open(directory, {})
    start = time.perf_counter()
    append = log.append_as_leader
    for _ in range(count):
        append(chunk, 0)
    log.flush()
    return time.perf_counter() - start, log


def log_read(log: Log, fetch_bytes: int = MB) -> tuple[float, int]:
    start = time.perf_counter()
    offset, end, total = 0, log.log_end_offset, 0
    read_info = log.read_info
    while offset < end:
        info = read_info(offset, fetch_bytes)
        total += len(info.records)
        offset = info.next_offset
    return time.perf_counter() - start, total


def line(kind: str, records: int, nbytes: int, seconds: float, extra: str = "") -> str:
    return (f"{kind:<7} {records} records, {records / seconds:.1f} records/sec "
            f"({nbytes / MB / seconds:.2f} MB/sec), {nbytes / MB:.1f} MB in {seconds:.3f} s"
            + (f", {extra}" if extra else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mb", type=int, default=256)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--batch-sizes", default="1024,16384")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs")
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)

    base = Path(tempfile.mkdtemp(prefix="rafka-bench-", dir=args.dir))
    print(describe(base))
    try:
        for batch_bytes in (int(s) for s in args.batch_sizes.split(",")):
            chunk, per_batch = make_batch(batch_bytes, args.record_size)
            count = max(1, args.total_mb * MB // len(chunk))
            nbytes, nrecords = count * len(chunk), count * per_batch
            print(f"parameters: batch.size={batch_bytes} (encoded {len(chunk)} bytes, "
                  f"{per_batch} records of {args.record_size} bytes), batches={count}, "
                  f"total={nbytes / MB:.0f} MB, segment.bytes=1073741824, best of {args.repeat}")
            raw_s = append_s = read_s = float("inf")
            for _ in range(args.repeat):
                raw_s = min(raw_s, raw_write(base / "raw.bin", chunk, count))
                (base / "raw.bin").unlink()
                elapsed, log = log_append(base / "bench-0", chunk, count)
                append_s = min(append_s, elapsed)
                elapsed, read_bytes = log_read(log)
                assert read_bytes == nbytes, (read_bytes, nbytes)
                read_s = min(read_s, elapsed)
                log.close()
                shutil.rmtree(base / "bench-0")
            print(line("raw", nrecords, nbytes, raw_s, "os.write + fsync"))
            print(line("append", nrecords, nbytes, append_s,
                       f"{100 * raw_s / append_s:.0f}% of raw sequential write"))
            print(line("read", nrecords, nbytes, read_s, "1 MiB fetches"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
