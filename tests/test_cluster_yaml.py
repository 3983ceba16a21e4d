"""cluster.yaml is a cluster-launcher config that Ray itself accepts (what `ray up` checks)."""
from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_cluster_yaml_passes_rays_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    prepared = prepare_config(config)
    validate_config(prepared)
    assert prepared["cluster_name"] == "rafka"
    assert any("pip install" in c for c in prepared["setup_commands"])
    # The head starts Ray with rafka's system config (produce and fetch payloads inline).
    from rafka.client.ray_runtime import RAY_SYSTEM_CONFIG_JSON
    head = " ".join(prepared["head_start_ray_commands"])
    assert f"--system-config='{RAY_SYSTEM_CONFIG_JSON}'" in head
    # ... and then starts the rafka cluster, in the background, on that Ray instance.
    server = prepared["head_start_ray_commands"][-1]
    assert "rafka server start" in server and "--address 127.0.0.1:6379" in server
    assert server.rstrip().endswith("&")
    from rafka.cli.main import build_parser
    argv = server.split("rafka server start", 1)[1].split(">")[0].split()
    args = build_parser().parse_args(["server", "start", *argv])
    # One broker per listed node, from the config ray up leaves on the head; no count to
    # edit by hand. Kafka clients reach each broker at its node's address.
    assert args.data_dir == "/var/lib/rafka"
    assert (args.num_brokers, args.wait_for_nodes) == (None, None)
    assert str(args.cluster_config) == "~/ray_bootstrap_config.yaml"
    assert "listeners=PLAINTEXT://:9092" in args.override
    # The local provider starts every listed worker: no max_workers to keep in step.
    assert "max_workers" not in config
    # Setting up needs no sudo where the user may write /var/lib (root, or a container).
    assert any("mkdir -p /var/lib/rafka 2>/dev/null ||" in c for c in prepared["setup_commands"])
