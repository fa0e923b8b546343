"""``distributed.learner: ray``: the trainer's learner as a LearnerGroup actor on the three-node cluster."""

from __future__ import annotations

import itertools
import json
import os

import pytest
import ray
import torch

from agentgym.distributed.driver import RayLearner
from agentgym.trainers.checkpoint import load_checkpoint
from agentgym.trainers.config import ConfigError, load_config
from agentgym.trainers.loop import Trainer
from agentgym.trainers.testing import tiny_config

STEPS = 2
OVERRIDES = [
    "env.id=agentgym/Calculator-v0", "algo.method=gigpo", f"run.steps={STEPS}", "run.checkpoint_every=1",
    "run.keep_checkpoints=10", "run.sft_episodes=4", "run.sft_batch_size=2", "run.sft_epochs=2",
    "run.sft_lr=1e-2", "optim.lr=1e-2", "algo.kl_beta=0.1",  # the KL to the pre-SFT policy: non-zero gradients
    "env.eval_tasks=1", "rollout.max_turns=2", "rollout.max_tokens=16", "rollout.group_size=2",
    "model.device=cpu", "distributed.backend=ray", "distributed.learner=ray", "distributed.rollout_workers=1",
    "distributed.resources.rollout_worker.num_cpus=1", "distributed.resources.inference.num_cpus=0",
    "distributed.resources.env_pool.num_cpus=0", "distributed.resources.learner.num_cpus=1",
]


def _records(run_dir, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def _model(run_dir, step: int) -> dict[str, torch.Tensor]:
    learner_state, _ = load_checkpoint(run_dir / "checkpoints" / f"step-{step:06d}")
    return learner_state["model"]


@pytest.mark.parametrize(("overrides", "message"), [
    (["distributed.learner=ray"], "distributed.learner='ray' needs distributed.backend='ray' (got 'local')"),
    (["distributed.learner_ranks=2"], "distributed.learner_ranks=2 needs distributed.learner='ray' (got 'local'"),
    (["distributed.learner=ray", "distributed.backend=ray", "distributed.learner_ranks=0"],
     "distributed.learner_ranks: Input should be greater than or equal to 1 (got 0)"),
    (["distributed.learner=gpu"], "distributed.learner: Input should be 'local' or 'ray' (got 'gpu')"),
])
def test_bad_learner_settings_are_named(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value)


def test_learner_settings_default_to_the_local_learner():
    d = load_config().distributed
    assert (d.learner, d.learner_ranks) == ("local", 1)
    ray_learner = ["distributed.backend=ray", "distributed.learner=ray", "distributed.learner_ranks=2"]
    d = load_config(None, ray_learner).distributed
    assert (d.backend, d.learner, d.learner_ranks) == ("ray", "ray", 2)


@pytest.mark.slow  # a three-node cluster and model loads: tens of seconds
def test_gigpo_with_a_ray_learner_trains_checkpoints_and_resumes(cluster, tmp_path, tmp_path_factory):
    cfg = tiny_config(tmp_path, tmp_path_factory.mktemp("models"), OVERRIDES)
    trainer = Trainer(cfg, echo=None)
    assert trainer.learner is None and isinstance(trainer.remote, RayLearner)  # no optimizer in the driver
    info = trainer.remote.info()
    assert info["pid"] != os.getpid()  # the learner runs in an actor process
    assert info["node_id"] in {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    result = trainer.run()
    assert result["steps"] == STEPS and trainer.remote.group is None  # run() released the group
    sft = _records(cfg.run_dir, "sft")
    assert sft and sft[0]["steps"] > 0 and sft[0]["loss_last"] < sft[0]["loss_first"]  # SFT ran on the rank
    train = _records(cfg.run_dir, "train")
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert all(r["episodes"] > 0 and "loss" in r for r in train)
    assert any(r["grad_norm"] > 0 for r in train)
    # the checkpoints (written by the rank) hold the trained weights: every RL step moved them
    models = [_model(cfg.run_dir, step) for step in range(STEPS + 1)]
    for before, after in itertools.pairwise(models):
        assert any(not torch.equal(before[k], after[k]) for k in before)

    more = cfg.model_copy(update={"run": cfg.run.model_copy(update={"steps": STEPS + 1})})
    resumed = Trainer(more, resume=True, echo=None)
    try:
        assert resumed.resumed and resumed.step == STEPS and resumed.version == trainer.version
        weights = ray.get(resumed.remote.weights_ref())  # the new ranks loaded the last checkpoint
        last = models[-1]
        assert set(weights) == set(last) and all(torch.equal(weights[k], last[k]) for k in weights)
        assert resumed.run()["steps"] == STEPS + 1
    finally:
        resumed.close()
    assert [r["step"] for r in _records(cfg.run_dir, "train")] == list(range(1, STEPS + 2))
    assert any(not torch.equal(last[k], v) for k, v in _model(cfg.run_dir, STEPS + 1).items())


@pytest.mark.slow
def test_two_fsdp_learner_ranks_train_and_checkpoint(cluster, tmp_path, tmp_path_factory):
    two = [*OVERRIDES, "run.steps=1", "distributed.learner_ranks=2", "distributed.resources.learner.num_cpus=0"]
    cfg = tiny_config(tmp_path, tmp_path_factory.mktemp("models"), two)
    trainer = Trainer(cfg, echo=None)
    try:
        assert len(trainer.remote.group.ranks) == 2
        assert trainer.run()["steps"] == 1
    finally:
        trainer.close()
    (train,) = _records(cfg.run_dir, "train")
    assert train["grad_norm"] > 0
    initial, trained = _model(cfg.run_dir, 0), _model(cfg.run_dir, 1)  # whole weights, gathered from the shards
    assert set(initial) == set(trained) and any(not torch.equal(initial[k], trained[k]) for k in initial)


@pytest.mark.slow
def test_async_steps_train_stale_samples_with_the_correction_on_the_rank(cluster, tmp_path, tmp_path_factory):
    overrides = [*OVERRIDES, "run.steps=3", "run.sft_episodes=0", "run.checkpoint_every=0", "algo.method=echo",
                 "distributed.mode=async", "distributed.max_staleness=1"]
    cfg = tiny_config(tmp_path, tmp_path_factory.mktemp("models"), overrides)
    trainer = Trainer(cfg, echo=None)
    try:
        assert trainer.run()["steps"] == 3
    finally:
        trainer.close()
    train = _records(cfg.run_dir, "train")
    assert [r["step"] for r in train] == [1, 2, 3] and max(r["staleness_max"] for r in train) <= 1
    stale = [r for r in train if r["staleness_max"] > 0]
    assert stale, "no step trained on older weights"
    assert all(r["stale_row_frac"] > 0 and 0 < r["is_weight_mean"] <= cfg.distributed.is_cap for r in stale)
