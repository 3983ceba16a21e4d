"""Small disks for tests of full log directories (root: CI runs as root): a tmpfs mounted at
a path, and a filler file that takes its last byte."""
from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

from tests.root import require_root

FILLER = "disk-filler"


@contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs of at most ``size`` at ``path`` for the block; unmounted (lazily) after."""
    require_root("mount a tmpfs as a small disk (full log directories)")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(directory: Path) -> int:
    """Write ``FILLER`` in ``directory`` until its filesystem refuses another page; the
    filler's size. Removing the file frees the room again."""
    fd = os.open(directory / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 20, 4096):   # megabytes, then the last pages
            try:
                while True:
                    os.write(fd, bytes(chunk))
            except OSError:
                pass
    finally:
        os.close(fd)
    return (directory / FILLER).stat().st_size
