"""What every rafka actor process does once it is set up."""
from __future__ import annotations

import gc
import os


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (Ray's and our modules, the log's indexes) out
    of the garbage collector's reach. A full collection in a replica otherwise walks those
    ~60-80k objects, 20-30 ms with the GIL held, and every produce and fetch waiting on that
    process waits with it (the end-to-end p99 in benchmarks/clients.py). Objects created
    later are collected as usual."""
    gc.collect()
    gc.freeze()


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(mmap_threshold: int = 64 << 20, trim_threshold: int = 256 << 20) -> bool:
    """Serve large blocks (a fetch's records, its response, Ray's copy of it: megabytes per
    request) from the heap and keep freed memory for reuse, instead of glibc's default of
    mapping each block above 128 KiB-32 MiB afresh and returning it on free. Otherwise every
    megabyte a fetch moves costs 256 page faults on each of several copies (measured: 1,767
    faults and 9 ms of CPU for one 1.8 MB fetch). The process then holds on to its peak
    heap, as a JVM holds its heap. False where there is no glibc."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
                    and libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold))
    except (OSError, AttributeError):
        return False


# What a root process raises its hard limit of open files to (at most the kernel's
# fs.nr_open): Kafka's documentation asks for at least 100,000 for a broker.
WANTED_OPEN_FILES = 1 << 20


def raise_open_files_limit(wanted: int = WANTED_OPEN_FILES) -> tuple[int, int]:
    """Raise this process's limit of open files as far as it may: the soft limit to the
    hard one, and, for root, both to ``wanted`` (within fs.nr_open). A replica host keeps
    a file open per segment of each replica (its ``.log``; the indexes' maps hold none,
    ``storage.mapped``) and a broker one per client connection: a host of 10,000 replicas
    needs more than half of a typical default of 20,000, and running out (EMFILE) takes a
    log directory offline. Returns the (soft, hard) limits now in force."""
    import os
    import resource
    from pathlib import Path
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if os.geteuid() == 0 and hard != resource.RLIM_INFINITY:
        try:
            nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            nr_open = hard
        target = max(hard, min(wanted, nr_open))
    for limits in ((target, target), (hard, hard)):
        try:
            if limits[0] > soft or limits[1] > hard:
                resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            continue   # not allowed to raise the hard limit: the soft one alone, then
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def niceness_warning(niceness: int) -> str | None:
    """What a broker says at start when it runs below normal priority, or None. Ray raises
    its worker processes' nice value by its ``worker_niceness`` (15 unless told otherwise)
    above the raylet's, so that they cannot starve the raylet; a broker and its replica
    hosts are workers, and at nice 15 every produce and fetch they serve waits behind any
    process at normal priority on the node, Kafka's clients included. Measured on this
    project's 2-core machine, Java ProducerPerformance at full speed (RF=1, acks=1):
    Produce requests answered in 121-145 ms on average with the brokers at nice 15, 7 ms
    at nice 0. rafka sets it to 0 on the Ray instances it starts
    (``rafka.client.ray_runtime``, ``cluster.yaml``); a Ray cluster started otherwise keeps
    Ray's default."""
    if niceness <= 0:
        return None
    return (f"this process runs at nice {niceness} (Ray raises its workers' nice value by "
            "its worker_niceness, 15 unless told otherwise): every produce and fetch it serves "
            "waits behind the processes at normal priority on its node, Kafka's clients "
            "included. Start Ray with --system-config='{\"worker_niceness\": 0}' "
            "(rafka's cluster.yaml does) or ray.init(_system_config={\"worker_niceness\": 0}).")


def process_niceness() -> int:
    """This process's nice value (0: normal priority)."""
    return os.getpriority(os.PRIO_PROCESS, 0)
