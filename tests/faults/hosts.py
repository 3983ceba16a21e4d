"""Real hosts on one machine for fault tests (issue 18): network namespaces on a bridge, each
with its own address, each running a Ray node of one multi-node Ray cluster.

    with Hosts(workers=3) as hosts:          # rfk-h (head) 10.77.0.10, rfk-w1.. .11, ...
        hosts.run_driver("tests.faults.smoke", "--brokers", "4")   # inside the head's ns

Each host is a namespace ``<prefix>-h`` / ``<prefix>-wN`` joined to the bridge
``<prefix>br0`` (10.77.0.1 on the machine's side) by a veth pair; a Ray node runs in it with
its own address (``--node-ip-address``), its own temp dir, one CPU and the resource
``rafka_broker`` (one broker per node). A Ray driver must run on a node of its cluster, so
drivers run inside the head's namespace. Every Ray process is started here and ended by pid
(the namespace's pids), then the namespaces and the bridge are deleted by name, also after a
failed run; ``cleanup(prefix)`` removes what a killed run left.

Root only (CI runs as root): ``ip`` from Debian's iproute2.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUBNET = "10.77.0"
RAY_PORT = 6379


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def namespaces(prefix: str) -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.split() and line.split()[0].startswith(prefix + "-")]


def namespace_pids(name: str) -> list[int]:
    out = _ip("netns", "pids", name, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting to be reaped has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def cleanup(prefix: str) -> None:
    """End every process in the prefix's namespaces (SIGKILL, by pid), delete the
    namespaces and the bridge, by name."""
    killed = []
    for name in namespaces(prefix):
        for pid in namespace_pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.1)
    for name in namespaces(prefix):
        _ip("netns", "del", name, check=False)
    _ip("link", "del", f"{prefix}br0", check=False)
    # A namespace the kernel has not finished tearing down keeps its veth pairs alive: the
    # machine's ends go by name too.
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        link = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if link.startswith(f"{prefix}v") and link[len(prefix) + 1:].isdigit():
            _ip("link", "del", link, check=False)


def make_network(prefix: str, subnet: str, workers: int) -> list["Host"]:
    """A bridge ``<prefix>br0`` at ``<subnet>.1`` and a namespace per host on it (the head
    ``<prefix>-h`` at ``.10``, workers ``<prefix>-wN`` at ``.11``...), each reaching the
    machine's side of the bridge as its default route."""
    bridge = f"{prefix}br0"
    _ip("link", "add", bridge, "type", "bridge")
    _ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
    _ip("link", "set", bridge, "up")
    names = [f"{prefix}-h"] + [f"{prefix}-w{i}" for i in range(1, workers + 1)]
    hosts = []
    for i, name in enumerate(names):
        host = Host(name, f"{subnet}.{10 + i}", f"{prefix}v{i}", head=i == 0)
        _ip("netns", "add", name)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("link", "set", host.veth, "master", bridge, "up")
        for args in (("addr", "add", f"{host.address}/24", "dev", "eth0"),
                     ("link", "set", "eth0", "up"), ("link", "set", "lo", "up"),
                     ("route", "add", "default", "via", f"{subnet}.1")):
            _ip("-n", name, *args)
        hosts.append(host)
    return hosts


@dataclass
class Host:
    name: str        # the namespace
    address: str
    veth: str        # the machine's end of its link
    head: bool = False


@dataclass
class Hosts:
    workers: int = 3
    prefix: str = "rfk"
    root: Path = field(default_factory=lambda: Path("/tmp/rfk"))
    hosts: list[Host] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    # Filesystems of their own under ``root`` (relative path: tmpfs size), mounted before
    # any Ray node starts: ``ip netns exec`` gives each host a copy of the machine's mounts
    # as they are then, so a mount made later would not be seen there.
    disks: dict[str, str] = field(default_factory=dict)
    mounts: list[Path] = field(default_factory=list)

    @property
    def head(self) -> Host:
        return self.hosts[0]

    @property
    def ray_address(self) -> str:
        return f"{self.head.address}:{RAY_PORT}"

    # ---- network ---------------------------------------------------------------------------
    def _make_network(self) -> None:
        self.hosts = make_network(self.prefix, SUBNET, self.workers)

    def exec(self, host: Host, *cmd: str, **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("check", True)
        return subprocess.run(["ip", "netns", "exec", host.name, *cmd], **kwargs)

    # ---- Ray -------------------------------------------------------------------------------
    def _ray_env(self) -> dict:
        env = dict(os.environ)
        for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
            env.pop(key, None)
        # Token auth on, as Ray 2.60 defaults; one throw-away token for the whole cluster.
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                   RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
        return env

    def _start_ray(self, host: Host) -> None:
        ray = str(Path(sys.executable).with_name("ray"))
        temp = self.root / host.name
        temp.mkdir(parents=True, exist_ok=True)
        common = ["--node-ip-address", host.address, "--temp-dir", str(temp),
                  "--num-cpus", "1", "--resources", json.dumps({"rafka_broker": 1}),
                  "--disable-usage-stats"]
        if host.head:
            cmd = [ray, "start", "--head", "--port", str(RAY_PORT), "--include-dashboard",
                   "false", *common]
        else:
            cmd = [ray, "start", "--address", self.ray_address, *common]
        result = self.exec(host, *cmd, env=self.env, check=False, timeout=180)
        if result.returncode != 0:
            raise RuntimeError(f"ray start on {host.name} failed:\n{result.stdout[-2000:]}\n"
                               f"{result.stderr[-2000:]}")

    # ---- disks -----------------------------------------------------------------------------
    def mount_tmpfs(self, path: Path, size: str) -> Path:
        """A filesystem of its own at ``path`` (a tmpfs of at most ``size``): a disk that
        can be filled up without filling the machine's. Before ``up`` only (``disks``)."""
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       check=True, capture_output=True)
        self.mounts.append(path)
        return path

    def _unmount(self) -> None:
        """Every mount under ``root``, this run's or a killed run's (lazily: a process
        still holding a file there does not keep it)."""
        with open("/proc/mounts") as f:
            points = [line.split()[1] for line in f]
        for point in sorted((p for p in points if p.startswith(str(self.root) + "/")),
                            reverse=True):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)
        self.mounts.clear()

    def up(self) -> "Hosts":
        cleanup(self.prefix)             # what a killed earlier run left
        self._unmount()
        shutil.rmtree(self.root, ignore_errors=True)
        self.env = self._ray_env()
        try:
            for path, size in self.disks.items():
                self.mount_tmpfs(self.root / path, size)
            self._make_network()
            for host in self.hosts:
                self._start_ray(host)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        cleanup(self.prefix)
        self._unmount()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Hosts":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    # ---- processes on a host ---------------------------------------------------------------
    def broker_pid(self, host: Host) -> int | None:
        """The pid of the rafka broker running on the host now, or None while there is
        none."""
        return self.actor_pid(host, "BrokerActor")

    def actor_pid(self, host: Host, actor_class: str) -> int | None:
        """The pid of an actor of that class running on the host now (Ray titles an
        actor's process ``ray::<class>...``), or None while there is none."""
        title = f"ray::{actor_class}".encode()
        for pid in namespace_pids(host.name):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().startswith(title):
                        return pid
            except (FileNotFoundError, ProcessLookupError):
                continue
        return None

    def copy_logs(self, to: Path) -> None:
        """Each host's Ray logs (rotated ones too) to ``to/<host name>``."""
        for host in self.hosts:
            for session in sorted((self.root / host.name).glob("session_2*")):
                if (session / "logs").is_dir():
                    shutil.copytree(session / "logs", to / host.name / session.name,
                                    ignore=shutil.ignore_patterns("*.sock", "events",
                                                                  "export_events"),
                                    dirs_exist_ok=True)

    def kill_node(self, host: Host) -> int:
        """SIGKILL everything on the host (its raylet, object store, workers): the machine
        lost its power. Returns how many processes were killed."""
        pids = namespace_pids(host.name)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(pids)

    def start_node(self, host: Host) -> None:
        """The host boots again: a Ray node joins at the same address, on the same disk."""
        self._start_ray(host)

    def raylet_pid(self, host: Host) -> int | None:
        for pid in namespace_pids(host.name):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"/raylet" in f.read().split(b"\0")[0] and alive(pid):
                        return pid
            except (FileNotFoundError, ProcessLookupError):
                continue
        return None

    def start_node_if_declared_dead(self, host: Host, wait_s: float = 20.0) -> bool:
        """After a partition: a node Ray declared dead meanwhile is refused by the cluster
        when it reconnects, and its raylet exits. Wait up to ``wait_s`` for that; if it
        happened, end what is left on the host and start its Ray node again."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.raylet_pid(host) is None:
                self.kill_node(host)
                self.start_node(host)
                return True
            time.sleep(0.5)
        return False

    # ---- drivers -----------------------------------------------------------------------
    def run_driver(self, module: str, *args: str, timeout: float = 600
                   ) -> subprocess.CompletedProcess:
        """``python -m module args`` as a Ray driver on the head's node (in its namespace),
        with RAY_ADDRESS set to the cluster."""
        env = dict(self.env, RAY_ADDRESS=self.ray_address)
        return self.exec(self.head, sys.executable, "-m", module, *args, env=env, check=False,
                         timeout=timeout, cwd=str(REPO))
