"""benchmarks.machine.CpuUse: which side of a benchmark spent the CPU (the client: this process
and the children it waited for; the rest: every other process), real processes burning
real CPU."""
from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.machine import CpuUse, process_cpu_seconds

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass"


def test_a_tool_run_to_its_end_counts_as_the_client():
    with CpuUse() as cpu:
        subprocess.run([sys.executable, "-c", BURN.format(seconds=0.4)], check=True)
    assert cpu.client >= 0.35
    assert cpu.wall >= 0.35


def test_a_process_it_did_not_wait_for_counts_as_the_rest():
    server = subprocess.Popen([sys.executable, "-c", BURN.format(seconds=60)])
    try:
        time.sleep(0.2)   # its start-up is before the block
        with CpuUse() as cpu:
            started = process_cpu_seconds()[server.pid][1]
            while process_cpu_seconds()[server.pid][1] - started < 0.4:
                time.sleep(0.05)
        assert cpu.others >= 0.35
        assert cpu.client < cpu.others
        assert "client" in cpu.per_run(2) and "servers" in cpu.per_run(2)
    finally:
        server.kill()
        server.wait()
