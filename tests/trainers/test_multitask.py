"""Multi-task training: envs mixed by weight, env tags, per-env metrics, task advantage normalisation."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from agentgym.trainers.batch import TrainBatch
from agentgym.trainers.config import load_config
from agentgym.trainers.loop import Trainer
from agentgym.trainers.pipeline import CorrectedLearner, task_normalize

ENVS = ("envs=[{id: agentgym/Calculator-v0, weight: 3.0, eval_tasks: 1}, "
        "{id: agentgym/Sokoban-v0, kwargs: {min_moves: 1, max_moves: 2}, weight: 1.0, eval_tasks: 1}]")


def _config(tmp_path, cache, *extra: str):
    base = [f"run.dir={tmp_path}", "run.name=mt", f"model.cache_dir={cache}", "run.steps=1", "run.eval_every=0",
            "run.checkpoint_every=0", "run.tensorboard=false", "rollout.tasks_per_step=4", "rollout.group_size=2",
            "rollout.max_turns=2", "rollout.max_tokens=16", "algo.method=echo", "optim.lr=1e-3", "model.tiny_layers=1",
            "model.tiny_hidden=64", ENVS]
    return load_config(None, [*base, *extra])


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    root = tmp_path_factory.mktemp("mt")
    return Trainer(_config(root, tmp_path_factory.mktemp("models")), echo=None)


# ------------------------------------------------------------------ sampling
def test_tasks_are_drawn_across_envs_by_weight(trainer):
    counts = Counter(e for step in range(200) for e in trainer.step_envs(step))
    assert set(counts) == {"Calculator", "Sokoban"}
    assert counts["Calculator"] / 800 == pytest.approx(0.75, abs=0.04)
    assert trainer.step_envs(7) == trainer.step_envs(7)  # a pure function of (seed, step)
    assert [trainer.step_envs(s) for s in range(20)] != [trainer.step_envs(s) for s in range(20, 40)]


def test_warm_start_episodes_are_split_by_weight_too(trainer):
    counts = Counter(trainer._sft_env(k) for k in range(800))
    assert counts[0] / 800 == pytest.approx(0.75, abs=0.04) and counts[0] + counts[1] == 800


def test_each_env_gets_its_own_tasks_with_the_single_env_seeds(trainer):
    envs = trainer.step_envs(3)
    calc, soko = trainer.train_tasks(3, "Calculator"), trainer.train_tasks(3, "Sokoban")
    assert len(calc) == envs.count("Calculator") and len(soko) == envs.count("Sokoban")
    assert len({t.seed for t in calc + soko}) == 4


def test_rollouts_are_tagged_with_their_env_and_groups_do_not_collide(trainer):
    step = next(s for s in range(50) if len(set(trainer.step_envs(s))) == 2)
    trajectories = trainer.rollout(step)
    assert len(trajectories) == 4 * 2
    by_env = Counter(t.metadata["env"] for t in trajectories)
    assert by_env == {e: 2 * n for e, n in Counter(trainer.step_envs(step)).items()}
    assert {t.metadata["env_id"] for t in trajectories} == {"agentgym/Calculator-v0", "agentgym/Sokoban-v0"}
    for t in trajectories:
        assert t.group_id.startswith(t.metadata["env"] + ":")
    assert len({t.group_id for t in trajectories}) == 4  # one group per task, none shared across envs


# ------------------------------------------------------------------- metrics
def test_one_step_logs_metrics_and_evaluates_per_env(tmp_path, tmp_path_factory):
    cfg = _config(tmp_path, tmp_path_factory.mktemp("models"), "algo.task_norm=true")
    Trainer(cfg, echo=None).run()
    records = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert len(evals) == 2
    for r in evals:
        assert {"success/Calculator", "success/Sokoban", "reward/Calculator", "reward/Sokoban"} <= set(r)
        assert r["episodes"] == 2  # one held-out task per env
    (train,) = [r for r in records if r["kind"] == "train"]
    present = {e for e in ("Calculator", "Sokoban") if f"reward/{e}" in train}
    assert present and all(f"success/{e}" in train for e in present)
    assert sum(train[f"episodes/{e}"] for e in present) == train["episodes"]


# ------------------------------------------------------------ task norm math
def test_task_normalize_z_scores_each_task_over_its_action_tokens():
    adv = torch.tensor([[1.0, 3.0, 9.0], [10.0, 30.0, 0.0], [5.0, 7.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    out = task_normalize(adv, mask, ["a", "b", "a"])
    a = np.array([1.0, 3.0, 5.0, 7.0])
    expected_a = (a - a.mean()) / (a.std(ddof=1) + 1e-6)
    b = np.array([10.0, 30.0])
    expected_b = (b - b.mean()) / (b.std(ddof=1) + 1e-6)
    assert out[0, :2].tolist() == pytest.approx(expected_a[:2].tolist(), rel=1e-6)
    assert out[2, :2].tolist() == pytest.approx(expected_a[2:].tolist(), rel=1e-6)
    assert out[1, :2].tolist() == pytest.approx(expected_b.tolist(), rel=1e-6)
    assert out[0, 2] == 0 and out[1, 2] == 0  # off the mask: zero
    with pytest.raises(ValueError, match="2 row tasks for 3 rows"):
        task_normalize(adv, mask, ["a", "b"])


def test_task_normalize_weights_packed_tokens_like_the_rows_they_stand_for():
    # A packed Tree-GRPO row: the first token is shared by two leaves (weight 2).
    packed = task_normalize(torch.tensor([[1.0, 3.0, 5.0]]), torch.tensor([[2.0, 1.0, 1.0]]), ["a"])
    # The same tokens unpacked: the shared token appears once per leaf.
    unpacked = task_normalize(torch.tensor([[1.0, 3.0], [1.0, 5.0]]), torch.ones(2, 2), ["a", "a"])
    assert packed[0, 0].item() == pytest.approx(unpacked[0, 0].item(), rel=1e-6)
    assert packed[0, 1:].tolist() == pytest.approx([unpacked[0, 1].item(), unpacked[1, 1].item()], rel=1e-6)
    single = task_normalize(torch.tensor([[4.0, 0.0]]), torch.tensor([[1.0, 0.0]]), ["a"])
    assert single[0].tolist() == pytest.approx([4.0 / (1 + 1e-6), 0.0])  # a singleton task keeps its raw value


def test_task_norm_equalises_scales_before_the_update():
    class Recorder:
        def update(self, batch, *, generator=None):
            self.batch = batch
            return {}

    g = torch.Generator().manual_seed(0)
    adv = torch.cat([torch.randn(3, 8, generator=g) * 0.01, torch.randn(3, 8, generator=g) * 50.0])
    mask = torch.ones(6, 8)
    ids = torch.ones(6, 8, dtype=torch.long)
    batch = TrainBatch(ids, ids, mask, mask * 0, mask * 0, torch.zeros(6, 8), adv, ids * 0, torch.arange(6))
    rec = Recorder()
    stats = CorrectedLearner(rec, [False] * 6, is_cap=2.0, tasks=["easy"] * 3 + ["hard"] * 3).update(batch)
    out = rec.batch.advantages
    for rows in (slice(0, 3), slice(3, 6)):
        assert out[rows].mean().item() == pytest.approx(0.0, abs=1e-5)
        assert out[rows].std().item() == pytest.approx(1.0, rel=1e-4)
    assert rec.batch.is_weights is None and stats["stale_row_frac"] == 0.0  # fresh: no IS at all
