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
    from rafka.ray_support import RAY_SYSTEM_CONFIG_JSON
    head = " ".join(prepared["head_start_ray_commands"])
    assert f"--system-config='{RAY_SYSTEM_CONFIG_JSON}'" in head
