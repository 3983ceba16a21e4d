"""What every actor process does at start: raising its limit of open files (a replica host
keeps a file open per segment of each replica, its ``.log``, and a broker one per client
connection: a host of 10,000 replicas needs more than half of a typical default of 20,000,
and running out, EMFILE, takes a log directory offline), and a broker telling that it runs
below normal priority (Ray runs its workers 15 nice levels below the raylet unless its
worker_niceness says otherwise)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _limits_after_start(soft: int) -> tuple[int, int]:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    out = subprocess.run(
        [sys.executable, "-c", "from actors.process import raise_open_files_limit; "
                               "print(*raise_open_files_limit())"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    got_soft, got_hard = map(int, out.stdout.split())
    return got_soft, got_hard


def test_the_soft_limit_is_raised_to_the_hard_one_at_least():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft, new_hard = _limits_after_start(256)
    assert soft == new_hard >= hard


def _may_raise_the_hard_limit() -> bool:
    """Whether a process here may raise its hard limit (root with CAP_SYS_RESOURCE: a
    container's root may not)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import resource as r; s, h = r.getrlimit(r.RLIMIT_NOFILE); "
                               "r.setrlimit(r.RLIMIT_NOFILE, (h + 1, h + 1))"],
        capture_output=True, timeout=60)
    return probe.returncode == 0


def test_the_hard_limit_is_raised_where_the_process_may_within_the_kernels_ceiling():
    before = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft, hard = _limits_after_start(256)
    if os.geteuid() == 0 and _may_raise_the_hard_limit():
        nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
        assert soft == hard == max(before, min(1 << 20, nr_open))
    else:
        assert soft == hard == before                    # not allowed: left as it was


def _started_at_nice(nice: int) -> str:
    """What a process that lowers its own priority to ``nice`` (if it is not already lower)
    reads of its priority and would warn of."""
    out = subprocess.run(
        [sys.executable, "-c", "import os; os.nice(max(0, %d - os.nice(0))); "
                               "from actors.process import niceness_warning, process_niceness; "
                               "n = process_niceness(); print(n); print(niceness_warning(n))"
         % nice],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    return out.stdout


def test_a_process_at_rays_default_worker_niceness_says_so_and_how_to_change_it():
    niceness, warning = _started_at_nice(15).splitlines()
    expected = max(15, os.nice(0))
    assert niceness == str(expected)
    assert warning.startswith(f"this process runs at nice {expected} (Ray raises its workers'")
    assert """--system-config='{"worker_niceness": 0}'""" in warning


def test_a_process_at_normal_priority_or_above_says_nothing():
    from actors.process import niceness_warning
    assert niceness_warning(0) is None and niceness_warning(-5) is None
    assert niceness_warning(1) is not None
