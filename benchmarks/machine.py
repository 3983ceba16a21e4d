"""One line describing the machine, printed by every benchmark before its results."""
from __future__ import annotations

import os
import platform
import resource
import shutil
import threading
import time
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


def process_cpu_seconds() -> dict[int, tuple[str, float]]:
    """pid -> (process name, user+system CPU seconds) for every process this user can read
    (Linux /proc); Ray's workers are named ``ray::<Actor>`` by their process title."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name = argv[0].decode(errors="replace") if argv and argv[0] else "?"
        name = name.split()[0].split(".")[0] if name.startswith("ray::") else Path(name).name
        out[int(entry.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def cpu_spent_since(before: dict[int, tuple[str, float]]) -> dict[int, tuple[str, float]]:
    """pid -> (name, CPU seconds since ``before``) of every process running now: all of a
    process started since; none of one that ended (unless it was a child this process
    waited for: see ``CpuUse``); none of a pid reused meanwhile that reads as less."""
    return {pid: (name, max(0.0, cpu - before.get(pid, (name, 0.0))[1]))
            for pid, (name, cpu) in process_cpu_seconds().items()}


def cpu_profile(before: dict[int, tuple[str, float]], wall_s: float) -> str:
    """CPU seconds spent since ``before``, per process name, and the share of the machine."""
    spent: dict[str, float] = {}
    for name, used in cpu_spent_since(before).values():
        if used > 0.005:
            spent[name] = spent.get(name, 0.0) + used
    total = sum(spent.values())
    top = ", ".join(f"{n} {s:.2f} s" for n, s in sorted(spent.items(), key=lambda kv: -kv[1])[:6])
    return (f"  cpu: {total:.2f} CPU-s in {wall_s:.2f} s wall "
            f"({100 * total / (wall_s * (os.cpu_count() or 1)):.0f}% of {os.cpu_count()} cores): "
            f"{top}")


def _own_cpu_seconds() -> float:
    """User and system CPU of this process's threads and of the children it has waited for."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuUse:
    """Where the CPU went while a block ran: ``client``, the seconds of this process and of
    the children it waited for (a benchmark's clients: confluent-kafka in this process, a
    Java tool it ran to the end), ``others``, those of every other process (the servers,
    and whatever else ran), and ``wall``. On two cores it tells which side was the bound."""

    def __enter__(self) -> "CpuUse":
        self._own, self._others = _own_cpu_seconds(), process_cpu_seconds()
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self._started
        self.client = _own_cpu_seconds() - self._own
        me = os.getpid()
        self.others = sum(used for pid, (_, used) in cpu_spent_since(self._others).items()
                          if pid != me)

    def per_run(self, runs: int) -> str:
        return (f"; CPU a run: client {self.client / runs:.2f} s, servers and the rest "
                f"{self.others / runs:.2f} s, in {self.wall / runs:.2f} s")


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("inf")


class MemoryGuard:
    """Watches available memory from a thread while a step runs."""

    def __init__(self, floor_gib: float):
        self.floor_gib = floor_gib
        self.tripped: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            left = available_gib()
            if left < self.floor_gib:
                self.tripped = left
                return

    def __enter__(self) -> "MemoryGuard":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
