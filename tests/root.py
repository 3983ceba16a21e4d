"""Tests that need root: network namespaces (the fault harness's hosts, the launcher's SSH
machines), tmpfs mounts (full log directories) and private mounts. CI runs as root; for
anyone else such a test fails with one clear line instead of a bare assertion, and the run's
summary says once what they need and why."""
from __future__ import annotations

import os

import pytest

NEEDS_ROOT = "needs root"
WANTED: list[str] = []   # what each test that found no root needed, for the summary


def require_root(what: str) -> None:
    """Fail the calling test at once, naming ``what`` it does that needs root."""
    if os.geteuid() != 0:
        WANTED.append(what)
        pytest.fail(f"{NEEDS_ROOT}: {what}. Run the suite as root (CI does; in a container, "
                    f"as its root user) to run it.", pytrace=False)


def summary_lines() -> list[str]:
    if not WANTED:
        return []
    return [f"{len(WANTED)} test(s) failed for want of root (uid {os.geteuid()}): they "
            f"{'; '.join(sorted(set(WANTED)))}. Run the suite as root to run them."]
