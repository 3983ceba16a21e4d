"""The launcher's machine (``SshNodes.launcher``): a /tmp of its own, and the checkout it runs
``ray up`` in wherever that checkout is, /tmp included (a checkout under /tmp was hidden by
the private /tmp: ``sh: 1: cd: can't cd to /tmp/...``)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.faults.hosts import REPO
from tests.launcher.ssh_nodes import SshNodes
from tests.root import require_root

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("under_tmp", [True, False], ids=["checkout-under-tmp", "this-checkout"])
def test_the_launcher_runs_in_its_checkout_with_a_tmp_of_its_own(tmp_path, under_tmp):
    require_root("make a private mount namespace")
    repo = tmp_path / "checkout" if under_tmp else REPO
    if under_tmp:
        repo.mkdir()
        (repo / "cluster.yaml").write_text("cluster_name: t\n")
    (tmp_path / "on-the-machines-tmp").write_text("")
    root = Path(tempfile.mkdtemp(prefix="rafka-launcher-", dir="/var/tmp"))
    try:
        run = SshNodes(root=root).launcher(
            "sh", "-c", f"pwd; test -f cluster.yaml && echo cluster.yaml; "
                        f"ls -A {tmp_path} 2>/dev/null || echo not-there", repo=repo, timeout=30)
        assert run.returncode == 0, run.stderr
        cwd, found, *beside = run.stdout.splitlines()
        assert (cwd, found) == (str(repo), "cluster.yaml")
        # The machine's /tmp is not the launcher's: what is beside the checkout there is not.
        assert beside == (["checkout"] if under_tmp else ["not-there"]), beside
    finally:
        shutil.rmtree(root, ignore_errors=True)
