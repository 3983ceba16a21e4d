"""What ``import rafka`` does to the process: names imported on first use, and pyarrow's
allocator kept on small pages (rafka/__init__.py says why)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "MIMALLOC_ARENA_EAGER_COMMIT"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**environ, **env},
                          capture_output=True, text=True, check=True, timeout=120).stdout


def test_import_rafka_loads_no_client_nor_pyarrow():
    out = run("import sys, rafka; print(sorted(m for m in sys.modules if m.split('.')[0] "
              "in ('pyarrow', 'numpy', 'ray') or m.startswith('rafka.')))")
    assert out.strip() == "[]"
    out = run("import sys, rafka; rafka.Producer; print('pyarrow' in sys.modules, "
              "'rafka.producer.producer' in sys.modules)")
    assert out.split() == ["True", "True"]


def test_pyarrow_commits_its_arenas_on_demand_after_import_rafka():
    assert run("import os, rafka; print(os.environ['MIMALLOC_ARENA_EAGER_COMMIT'])"
               ).strip() == "0"
    # The process's children inherit it: Ray's workers, Spark's JVM and Python workers.
    assert run("import rafka, subprocess; print(subprocess.run(['sh', '-c', "
               "'echo $MIMALLOC_ARENA_EAGER_COMMIT'], capture_output=True, text=True)"
               ".stdout)").strip() == "0"


def test_a_value_the_user_set_is_kept():
    assert run("import os, rafka; print(os.environ['MIMALLOC_ARENA_EAGER_COMMIT'])",
               MIMALLOC_ARENA_EAGER_COMMIT="1").strip() == "1"


def test_large_arrow_buffers_are_not_on_huge_pages_where_thp_is_madvise():
    # Where THP is "always" every anonymous mapping may get huge pages, whatever the
    # allocator asks; where it is "never", none does. "madvise" is Linux's default and the
    # case that matters: there only mimalloc's request puts Arrow's buffers on huge pages.
    code = ("import rafka, pyarrow as pa, numpy as np\n"
            "a = pa.array(np.arange(32_000_000, dtype=np.int64)).take(np.arange(32_000_000))\n"
            "print(sum(int(l.split()[1]) for l in open('/proc/self/smaps_rollup') "
            "if l.startswith('AnonHugePages')))")
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not (mode.exists() and "[madvise]" in mode.read_text()):
        pytest.skip("transparent huge pages are not in madvise mode here")
    assert int(run(code).strip()) == 0
    # Without rafka's default the same buffers are on huge pages: the check can fail.
    assert int(run(code, MIMALLOC_ARENA_EAGER_COMMIT="1").strip()) > 100_000
