"""Machines to ``ray up`` on, all on this one (issue 19): an SSH server per network
namespace, each node with a filesystem and a process table of its own.

    with SshNodes(workers=2) as nodes:        # rfl-h 10.78.0.10, rfl-w1 .11, rfl-w2 .12
        nodes.launcher("ray", "up", "-y", str(config))      # as from a laptop
        nodes.ssh(nodes.head, "ray status")

Each node is ``ip netns exec <ns> unshare --mount --uts --pid --fork --mount-proc`` around
an ``sshd -D`` (Debian's openssh-server), with:

- its own **process table**: ``ray stop`` kills every Ray process it can see, so a node's
  ``ray stop`` would otherwise end every other node's Ray, and any other Ray on the machine;
- its own **/root, /opt, /var/lib** (overlays on the machine's, written under
  ``root/<node>``) and **/tmp, /dev/shm**: what ``cluster.yaml`` installs and writes
  (``/opt/rafka``, ``/var/lib/rafka``, ``~/ray_bootstrap_*``, ``/tmp/ray``) is the node's,
  while pip's cache (``~/.cache``) stays the machine's, warm and shared;
- no ``~/.ray`` (the machine's Ray auth token would turn on token auth on the head) and no
  view of this checkout (a node has only what ``ray up`` copies to it).

Nodes reach the outside through the machine (NAT), as pip needs PyPI. Root only; needs
``openssh-server``, ``rsync`` and ``iptables`` from Debian. Everything is ended by pid and
namespace name in ``down``, also after a failed run.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.hosts import REPO, Host, cleanup, make_network, namespace_pids

PREFIX = "rfl"
SUBNET = "10.78.0"
NAT_COMMENT = "rafka-launcher-test"
SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "BatchMode=yes")

NODE_INIT = """set -e
node={node}
hostname "$(basename $node)"
mount --bind /root/.cache $node/cache
mount -t overlay overlay -o lowerdir=/root,upperdir=$node/root,workdir=$node/root.work /root
mount --move $node/cache /root/.cache
rm -rf /root/.ray
mount -t overlay overlay -o lowerdir=/opt,upperdir=$node/opt,workdir=$node/opt.work /opt
mount -t overlay overlay -o lowerdir=/var/lib,upperdir=$node/varlib,workdir=$node/varlib.work /var/lib
mount --bind $node/tmp /tmp
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
if [ -d {repo} ]; then mount -t tmpfs -o ro,size=1m tmpfs {repo}; fi
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e -f $node/sshd_config
"""

SSHD_CONFIG = """ListenAddress {address}
HostKey {node}/ssh_host_ed25519_key
PidFile {node}/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM yes
MaxSessions 50
MaxStartups 100:30:200
Subsystem sftp /usr/lib/openssh/sftp-server
"""


# What the nodes need from Debian: the program each package provides.
DEBIAN_PACKAGES = {"openssh-server": "/usr/sbin/sshd", "rsync": "rsync",
                   "iptables": "iptables"}


def install_debian_packages() -> None:
    """apt-get the packages not installed yet (once per machine; the test runs as root)."""
    missing = [p for p, tool in DEBIAN_PACKAGES.items() if shutil.which(tool) is None]
    if not missing:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
        result = _run(*cmd, env=env, timeout=900)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr[-2000:]}")


def _run(*cmd: str, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(cmd, **kwargs)


def private_tmp_script(tmp: Path, repo: Path, side: Path) -> str:
    """A shell script that mounts ``tmp`` on /tmp and runs its arguments in ``repo``. A
    checkout under /tmp would be hidden by the new /tmp (with the environment whose
    ``ray`` the command runs): it is bound to ``side`` first, then back to its own path
    inside the new /tmp."""
    if not repo.is_relative_to("/tmp"):
        return f"mount --bind {tmp} /tmp && cd {repo} && exec \"$@\""
    return (f"mkdir -p {side} && mount --bind {repo} {side} && mount --bind {tmp} /tmp && "
            f"mkdir -p {repo} && mount --bind {side} {repo} && cd {repo} && exec \"$@\"")


@dataclass
class SshNodes:
    workers: int = 2
    prefix: str = PREFIX
    # Not under /tmp: each node has a /tmp of its own, which would hide its files there.
    root: Path = field(default_factory=lambda: Path(f"/var/tmp/{PREFIX}"))
    hosts: list[Host] = field(default_factory=list)
    _sshds: list[subprocess.Popen] = field(default_factory=list)
    _ip_forward: str | None = None

    @property
    def head(self) -> Host:
        return self.hosts[0]

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    def node_dir(self, host: Host) -> Path:
        """Where the node's own files are: ``varlib/rafka`` is its /var/lib/rafka."""
        return self.root / host.name

    def up(self) -> "SshNodes":
        install_debian_packages()
        self.down()
        try:
            self.root.mkdir(parents=True)
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rafka-launcher-test",
                 "-f", str(self.key), check=True)
            self.hosts = make_network(self.prefix, SUBNET, self.workers)
            self._nat(on=True)
            for host in self.hosts:
                self._start_sshd(host)
            for host in self.hosts:
                self._wait_for_ssh(host)
        except BaseException:
            self.down()
            raise
        return self

    def _nat(self, on: bool) -> None:
        rule = ["POSTROUTING", "-s", f"{SUBNET}.0/24", "!", "-o", f"{self.prefix}br0",
                "-j", "MASQUERADE", "-m", "comment", "--comment", NAT_COMMENT]
        forward = Path("/proc/sys/net/ipv4/ip_forward")
        if on:
            self._ip_forward = forward.read_text().strip()
            forward.write_text("1")
            _run("iptables", "-t", "nat", "-A", *rule, check=True)
            return
        while _run("iptables", "-t", "nat", "-D", *rule).returncode == 0:
            pass
        if self._ip_forward is not None:
            forward.write_text(self._ip_forward)
            self._ip_forward = None

    def _start_sshd(self, host: Host) -> None:
        node = self.node_dir(host)
        for sub in ("root", "root.work", "opt", "opt.work", "varlib", "varlib.work", "tmp",
                    "cache"):
            (node / sub).mkdir(parents=True, exist_ok=True)
        (node / "tmp").chmod(0o1777)
        ssh = node / "root" / ".ssh"
        ssh.mkdir(mode=0o700)
        shutil.copy(self.key.with_suffix(".pub"), ssh / "authorized_keys")
        (ssh / "authorized_keys").chmod(0o600)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
             str(node / "ssh_host_ed25519_key"), check=True)
        (node / "sshd_config").write_text(SSHD_CONFIG.format(address=host.address, node=node))
        (node / "init.sh").write_text(NODE_INIT.format(node=node, repo=REPO))
        log = open(node / "sshd.log", "w")
        self._sshds.append(subprocess.Popen(
            ["ip", "netns", "exec", host.name, "unshare", "--mount", "--uts", "--pid",
             "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
             "sh", str(node / "init.sh")], stdout=log, stderr=subprocess.STDOUT))

    def _wait_for_ssh(self, host: Host, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while self.ssh(host, "true", timeout=10).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no ssh to {host.address}: "
                                   + (self.node_dir(host) / "sshd.log").read_text()[-2000:])
            time.sleep(0.5)

    def ssh(self, host: Host, command: str, timeout: float = 120, **kwargs
            ) -> subprocess.CompletedProcess:
        """``command`` in a login shell on the node, as ``ray exec`` runs one."""
        return _run("ssh", "-i", str(self.key), *SSH_OPTIONS, f"root@{host.address}",
                    f"bash --login -c -i {shlex.quote(command)}", timeout=timeout, **kwargs)

    def launcher(self, *command: str, timeout: float = 900, repo: Path = REPO
                 ) -> subprocess.CompletedProcess:
        """A ``ray`` CLI command as from the machine a user launches from: in the checkout
        ``repo``, with this environment's ``ray``, and a /tmp of its own (the on-premise
        provider keeps its node states in /tmp/cluster-<name>.state)."""
        tmp = self.root / "launcher-tmp"
        tmp.mkdir(exist_ok=True)
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        return _run("unshare", "--mount", "--propagation", "private", "sh", "-c",
                    private_tmp_script(tmp, repo, self.root / "launcher-repo"), "sh",
                    *command, timeout=timeout, env=dict(os.environ, PATH=path))

    def processes(self, host: Host) -> list[str]:
        """The command lines of the node's processes but its sshd's."""
        lines = []
        for pid in namespace_pids(host.name):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            text = cmdline.decode(errors="replace").strip()
            if text and "sshd" not in text and "unshare" not in text and \
                    not text.startswith(("ip netns", "sh /tmp/")):
                lines.append(text)
        return lines

    def down(self) -> None:
        cleanup(self.prefix)
        for proc in self._sshds:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._sshds.clear()
        self._nat(on=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "SshNodes":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

