"""A real Prometheus server (Debian's ``prometheus``, installed with apt-get when missing: the
tests run as root) scraping every Ray node's metrics endpoint with the relabelling of
``examples/prometheus.yml``, for tests that read rafka's metrics as an operator does.

The shipped config finds the nodes through the file Ray's dashboard writes; here the nodes
are listed from ``ray.nodes()`` instead (the test session's Ray runs without a dashboard),
as the config's comment tells users without one to do. Started by pid, ended by pid."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "prometheus.yml"
SCRAPE_INTERVAL = "1s"


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        result = None
        for cmd in (["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"],
                    ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"]):
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
            if cmd[1] == "install" and result.returncode == 0:
                break
        found = shutil.which("prometheus")
        assert found, "prometheus is not installed and apt-get could not install it: " + \
            (result.stdout + result.stderr)[-800:]
    return found


def node_targets() -> list[str]:
    import ray
    return sorted(f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for n in ray.nodes()
                  if n["Alive"] and n.get("MetricsExportPort", -1) > 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    def __init__(self, root: Path):
        self.root = root
        self.port = _free_port()
        self.process: subprocess.Popen | None = None

    def config(self) -> dict:
        """examples/prometheus.yml with the nodes listed and a 1 s scrape interval."""
        config = yaml.safe_load(EXAMPLE.read_text())
        config["global"] = {"scrape_interval": SCRAPE_INTERVAL,
                            "evaluation_interval": SCRAPE_INTERVAL}
        [job] = config["scrape_configs"]
        del job["file_sd_configs"]
        job["static_configs"] = [{"targets": node_targets()}]
        return config

    def __enter__(self) -> "PrometheusServer":
        path = self.root / "prometheus.yml"
        path.write_text(yaml.safe_dump(self.config()))
        self.process = subprocess.Popen(
            [prometheus_binary(), f"--config.file={path}",
             f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=open(self.root / "prometheus.log", "wb"))
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prometheus did not start: " +
                                   (self.root / "prometheus.log").read_text()[-2000:])
            time.sleep(0.5)
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> dict:
        """An HTTP API answer's ``data``; a query Prometheus refuses raises with its error."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus refused {params}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[tuple[dict, float]]:
        """An instant query's series: (labels, value)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def targets_up(self) -> int:
        return sum(1 for t in self.api("targets")["activeTargets"] if t["health"] == "up")
