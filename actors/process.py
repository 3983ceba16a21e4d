"""What every rafka actor process does once it is set up."""
from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (Ray's and our modules, the log's indexes) out
    of the garbage collector's reach. A full collection in a replica otherwise walks those
    ~60-80k objects, 20-30 ms with the GIL held, and every produce and fetch waiting on that
    process waits with it (the end-to-end p99 in benchmarks/clients.py). Objects created
    later are collected as usual."""
    gc.collect()
    gc.freeze()
