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
    finally:
        server.kill()
        server.wait()


def test_the_rest_is_every_other_process_that_ran_on(monkeypatch):
    """This process is the client, never the rest; a server's CPU counts from the block's
    start, a process started within it wholly, one gone by its end not at all, and a pid
    reused meanwhile (reading less than before) as nothing."""
    import os

    import benchmarks.machine as machine
    me = os.getpid()
    snapshots = iter([
        {me: ("python", 1.0), 100: ("java", 5.0), 101: ("gone", 3.0), 102: ("old", 10.0)},
        {me: ("python", 9.0), 100: ("java", 7.5), 103: ("new", 0.7), 102: ("reused", 2.0)},
    ])
    own = iter([4.0, 4.6])
    monkeypatch.setattr(machine, "process_cpu_seconds", lambda: next(snapshots))
    monkeypatch.setattr(machine, "_own_cpu_seconds", lambda: next(own))
    with CpuUse() as cpu:
        pass
    assert abs(cpu.others - 3.2) < 1e-9
    assert abs(cpu.client - 0.6) < 1e-9
    assert cpu.per_run(2).startswith("; CPU a run: client 0.30 s, servers and the rest 1.60 s")
