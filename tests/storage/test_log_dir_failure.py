"""A log directory that runs out of space (a real, small tmpfs): Kafka's LogDirFailureChannel.
The first failed write takes the directory offline, nothing is appended after it, and every
record appended before it is there when the log opens again with room on the disk."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from protocols.errors import KafkaStorageError
from storage import Log
from storage.log_dir_failure import LogDirFailureChannel, probe
from tests.disks import tmpfs
from tests.storage.conftest import batch, values

CONFIG = {"segment.bytes": 64 * 1024, "index.interval.bytes": 512}


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs(tmp_path / "disk", "256k") as disk:
        yield disk


def read_all(log: Log) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < log.log_end_offset:
        out += values(log.read(len(out), 1 << 20))
    return out


def grow(disk, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)


def test_a_full_disk_takes_the_log_dir_offline_and_loses_nothing_appended(small_disk):
    told: list[tuple[str, str]] = []
    channel = LogDirFailureChannel(lambda d, m: told.append((d, m)))
    log = Log.open(small_disk / "t-0", CONFIG, failure_channel=channel)
    appended: list[bytes] = []
    with pytest.raises(KafkaStorageError, match="No space left on device"):
        for i in range(10_000):
            log.append_as_leader(batch(4, value_size=300, prefix=f"b{i}-"), 0)
            appended += values(batch(4, value_size=300, prefix=f"b{i}-"))
    assert appended, "the disk filled before anything was written"
    # The directory is offline: told once, naming it, and every later write is refused
    # before it touches a file.
    assert [d for d, _ in told] == [str(small_disk)]
    assert "appending records to t-0" in told[0][1]
    sizes = {p.name: p.stat().st_size for p in (small_disk / "t-0").iterdir()}
    with pytest.raises(KafkaStorageError, match="offline"):
        log.append_as_leader(batch(1), 0)
    with pytest.raises(KafkaStorageError, match="offline"):
        log.roll()
    assert {p.name: p.stat().st_size for p in (small_disk / "t-0").iterdir()} == sizes
    assert probe(small_disk) is not None            # still full: a broker would wait
    # Room again (the operator freed space): the log recovers as after a crash, with every
    # record appended before the failure, in order, and nothing torn.
    grow(small_disk, "4m")
    assert probe(small_disk) is None
    again = Log.open(small_disk / "t-0", CONFIG, failure_channel=LogDirFailureChannel())
    assert again.log_end_offset == len(appended)
    assert read_all(again) == appended
    again.append_as_leader(batch(1, prefix="after"), 0)
    assert again.log_end_offset == len(appended) + 1


def test_an_index_page_on_a_full_disk_is_an_error_not_a_sigbus(small_disk):
    """The index is a sparse, memory-mapped file: an entry stored into an unbacked page on
    a full tmpfs would kill the process with SIGBUS. Each page is allocated first, so the
    append fails as an OSError. Run in a child process: a SIGBUS would kill pytest."""
    code = f"""
from pathlib import Path
from storage.index import OffsetIndex
from tests.disks import fill
index = OffsetIndex({str(small_disk / 'x.index')!r}, 0, max_index_size=1 << 20)
fill(Path({str(small_disk)!r}))
try:
    for i in range(100_000):
        index.append(i, i)
except OSError as e:
    print('refused', e.errno == 28)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "refused True"

