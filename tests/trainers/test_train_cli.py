"""``agentgym train`` / ``agentgym sft`` from the command line."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from agentgym.cli.main import app
from agentgym.cli.train import QUICKSTART, quickstart_overrides
from agentgym.trainers.config import load_config
from agentgym.trainers.testing import tiny_config

runner = CliRunner()


def test_train_and_sft_are_mounted():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "train" in result.output and "sft" in result.output


def test_quickstart_config_matches_shipped_yaml():
    from pathlib import Path

    shipped = load_config(Path(__file__).parents[2] / "configs" / "quickstart.yaml")
    built = load_config(None, quickstart_overrides())
    assert shipped.model_dump() == built.model_dump()
    assert QUICKSTART["algo"]["method"] == "gigpo"


def test_bad_override_is_one_clear_error(tmp_path):
    result = runner.invoke(app, ["train", "--set", "algo.gamma=7"])
    assert result.exit_code == 1
    assert "algo.gamma" in result.output and "7" in result.output


def test_train_runs_a_config_with_overrides(tmp_path, tmp_path_factory):
    cfg = tiny_config(tmp_path, tmp_path_factory.mktemp("models"), ["env.id=agentgym/Calculator-v0",
                                                                    "algo.method=grpo"])
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    result = runner.invoke(app, ["train", str(path), "--set", "run.steps=1", "--set", "run.name=cli"])
    assert result.exit_code == 0, result.output
    assert "held-out success" in result.output and "train step    1/1" in result.output
    records = [json.loads(x) for x in (tmp_path / "cli" / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "train" for r in records)


def test_sft_saves_a_model(tmp_path, tmp_path_factory):
    cfg = tiny_config(tmp_path, tmp_path_factory.mktemp("models"), ["env.id=agentgym/Calculator-v0",
                                                                    "run.sft_episodes=4"])
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    result = runner.invoke(app, ["sft", str(path), "--set", "run.name=sft"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sft" / "model" / "config.json").exists()
    assert "held-out success after SFT" in result.output


def test_sft_refuses_a_ray_learner_with_a_clear_error():
    result = runner.invoke(app, ["sft", "--set", "distributed.backend=ray", "--set", "distributed.learner=ray"])
    assert result.exit_code == 2
    assert "distributed.learner=local" in result.output
