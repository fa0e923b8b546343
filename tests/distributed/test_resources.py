"""Role resource requests -> Ray actor options (no cluster needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agentgym.distributed import ray_options
from agentgym.trainers.config import TrainConfig, load_config


def test_role_resources_sum_inference_into_the_worker():
    opts = ray_options({"rollout_worker": {"num_cpus": 1}, "inference": {"num_cpus": 0.5, "num_gpus": 1}},
                       "rollout_worker")
    assert opts == {"num_cpus": 1.5, "num_gpus": 1.0}
    assert ray_options({}, "env_pool") == {"num_cpus": 1.0, "num_gpus": 0.0}
    with pytest.raises(ValueError, match="unknown role"):
        ray_options({}, "critic")
    with pytest.raises(ValueError, match="unknown resource keys"):
        ray_options({"learner": {"cpus": 2}}, "learner")


def test_the_config_section_maps_onto_actor_options():
    cfg = load_config(None, ["distributed.resources.inference.num_gpus=1", "distributed.resources.env_pool.num_cpus=4"])
    resources = cfg.distributed.resources
    assert ray_options(resources, "rollout_worker") == {"num_cpus": 2.0, "num_gpus": 1.0}
    assert ray_options(resources, "env_pool") == {"num_cpus": 4.0, "num_gpus": 0.0}
    assert ray_options(resources, "learner") == {"num_cpus": 1.0, "num_gpus": 0.0}


def test_the_scaling_guide_config_is_valid():
    text = (Path(__file__).resolve().parents[2] / "docs" / "scaling.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    cfg = TrainConfig.model_validate(yaml.safe_load(block))
    assert cfg.distributed.backend == "ray"
    assert ray_options(cfg.distributed.resources, "rollout_worker")["num_gpus"] == 1.0  # one engine per GPU
