"""What the peer harnesses share (``nats_peer``, ``kafka_peer``, the Redis peer in
``clients``): ports on loopback, servers started and stopped by pid, and one way to say that
a peer could not be measured."""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable


class PeerUnavailable(RuntimeError):
    """The peer could not be started or measured (the message says why)."""


def maven_jars(cache: Path, pom: str, who: str) -> Path:
    """The jars ``pom``'s dependencies name, with theirs, fetched once from Maven Central
    into ``cache/lib`` (``mvn dependency:copy-dependencies``); ``cache/complete`` marks a
    finished fetch."""
    import shutil
    lib = cache / "lib"
    done = cache / "complete"
    if done.exists():
        return lib
    if shutil.which("mvn") is None:
        raise PeerUnavailable(f"{who}: mvn is not on PATH (apt-get install maven)")
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "pom.xml").write_text(pom)
    print(f"fetching {who}'s jars from Maven Central into {lib} (once)", flush=True)
    result = subprocess.run(["mvn", "-q", "-B", "-f", str(cache / "pom.xml"),
                             "dependency:copy-dependencies", f"-DoutputDirectory={lib}"],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise PeerUnavailable(f"{who}: mvn could not fetch the jars: "
                              + (result.stdout + result.stderr)[-800:])
    done.write_text(pom)
    return lib


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    """A server process, its output to ``log``."""
    with open(log, "w") as out:   # the child keeps its own descriptor
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def wait_for_ports(who: str, procs: list[subprocess.Popen], ports: list[int],
                   logs: list[Path], deadline: float) -> None:
    """Until each process accepts connections on its port; PeerUnavailable (with the tail
    of its log) when one exits first or ``deadline`` (``time.monotonic()``) passes."""
    for proc, port, log in zip(procs, ports, logs):
        while True:
            if proc.poll() is not None:
                raise PeerUnavailable(f"{who}: a server exited: {log.read_text()[-600:]}")
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise PeerUnavailable(f"{who}: a server did not open port {port} in "
                                          "time") from None
                time.sleep(0.2)


def stop(procs: list[subprocess.Popen], timeout_s: float = 30) -> None:
    """Terminate each process started (by pid), killing those that do not exit."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    procs.clear()


def output(who: str, what: str, proc: subprocess.Popen, timeout_s: float) -> str:
    """A tool's standard output once it exits 0; PeerUnavailable (and the process killed)
    otherwise."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise PeerUnavailable(f"{who}: {what} took more than {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise PeerUnavailable(f"{who}: {what} failed: {(out or '')[-600:]}")
    return out


def guarded(who: str, run: Callable[[], dict]) -> dict:
    """``run()``, its client library's own errors reported as PeerUnavailable (what was
    measured before is dropped: a partial peer is no peer)."""
    try:
        return run()
    except PeerUnavailable:
        raise
    except Exception as e:
        raise PeerUnavailable(f"{who}: {type(e).__name__}: {e}") from e


def main(doc: str, measure: Callable[[int, bytes], dict], argv=None) -> int:
    """A peer harness run alone: ``--records`` of 100 bytes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    try:
        measure(args.records, b"x" * 100)
    except PeerUnavailable as e:
        print(f"peer: {e}", file=sys.stderr)
        return 1
    return 0
