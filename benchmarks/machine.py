"""One line describing the machine, printed by every benchmark before its results."""
from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(directory: Path | None = None) -> str:
    parts = [f"cpu: {cpu_model()}", f"cores: {os.cpu_count()}",
             f"python: {platform.python_version()}", f"os: {platform.system()} {platform.release()}"]
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        parts.append(f"memory: {mem / 2**30:.1f} GiB")
    except (ValueError, OSError):
        pass
    if directory is not None:
        usage = shutil.disk_usage(directory)
        parts.append(f"disk: {directory} ({usage.free / 2**30:.0f} GiB free)")
    return "machine: " + ", ".join(parts)
