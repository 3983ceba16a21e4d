"""Write a partition log, read it by offset and by time, and dump its files.

    python examples/storage_quickstart.py [DIR]

The same files a Kafka broker writes: 20-digit segment names, .log/.index/.timeindex and a
leader-epoch-checkpoint, readable with `rafka dump-log` (or Kafka's kafka-dump-log.sh).
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from protocols.records import Record, encode_batch, iter_batches
from storage import Log
from storage.dump import LogDumper, DumpOptions


def main(directory: Path) -> None:
    config = {"segment.bytes": 64 * 1024, "index.interval.bytes": 1024}
    now = int(time.time() * 1000)
    with Log.open(directory / "quickstart-0", config) as log:
        for i in range(100):
            records = [Record(f"user-{j % 7}".encode(), f"click {i}.{j}".encode(), now + i * 10)
                       for j in range(20)]
            log.append_as_leader(encode_batch(records, compression="gzip"), leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)
        print(log)
        batch = next(iter_batches(log.read(1234, 4096, max_offset=log.high_watermark)))
        print("offset 1234 ->", next(r.value for r in batch.records() if r.offset == 1234))
        print("first offset written at now+500ms:", log.offset_for_timestamp(now + 500))
        first_segment = log.segments[0].log.path
    for line in LogDumper(DumpOptions(max_bytes=400)).dump([str(first_segment)]):
        print(line.text)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
