"""Tests that need root say so: one clear line per test and one in the run's summary, for a
user who is not root (run here as ``nobody``: a test of the message, so it needs root to
become someone else)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.faults.hosts import REPO
from tests.root import require_root


@pytest.mark.timeout(120)
def test_a_test_needing_root_fails_for_another_user_naming_what_it_needs():
    require_root("run a test as another user (nobody)")
    # Not pytest's tmp_path: its parent is root's alone.
    tmp_path = Path(tempfile.mkdtemp(prefix="rafka-not-root-"))
    try:
        _check_the_message(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _check_the_message(tmp_path: Path) -> None:
    (tmp_path / "test_disk.py").write_text(textwrap.dedent("""
        from tests.disks import tmpfs

        def test_full_disk(tmp_path):
            with tmpfs(tmp_path / "disk", "1m"):
                pass
    """))
    tmp_path.chmod(0o777)
    run = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
         "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "--confcutdir", str(tmp_path), "-p", "tests.conftest", str(tmp_path / "test_disk.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=100,
        env=dict(os.environ, PYTHONPATH=str(REPO), HOME=str(tmp_path)))
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "needs root: mount a tmpfs as a small disk (full log directories). Run the suite " \
           "as root" in out, out
    assert "1 test(s) failed for want of root (uid 65534): they mount a tmpfs" in out, out
    assert "AssertionError" not in out and "Traceback" not in out, out
