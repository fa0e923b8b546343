"""LearnerGroup on the Ray cluster: one rank with checkpoint/restore after a kill; two FSDP ranks."""

from __future__ import annotations

import time

import pytest
import ray
import torch
from transformers import AutoTokenizer

import agentgym
from agentgym.backends.hf import HFBackend
from agentgym.distributed import LearnerGroup
from agentgym.rollout import ChatRenderer, RolloutConfig, RolloutEngine, RolloutTask
from agentgym.trainers.loop import model_path
from agentgym.trainers.testing import tiny_config

pytestmark = pytest.mark.slow  # a three-node cluster and model loads: tens of seconds

# ECHO's auxiliary loss gives a gradient whatever the rewards, so one update moves the weights.
OVERRIDES = ["env.id=agentgym/Calculator-v0", "algo.method=echo", "model.device=cpu", "optim.lr=1e-2"]
ONE_CPU = {"learner": {"num_cpus": 1}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cfg = tiny_config(tmp_path_factory.mktemp("run"), tmp_path_factory.mktemp("models"), OVERRIDES)
    path = model_path(cfg)
    backend = HFBackend.from_pretrained(path, seed=0)
    engine = RolloutEngine(backend, ChatRenderer(AutoTokenizer.from_pretrained(path)),
                           lambda: agentgym.make("agentgym/Calculator-v0"),
                           RolloutConfig(group_size=2, max_turns=2, max_tokens=16, max_wait_s=None, seed=1))
    trajectories = engine.run([RolloutTask(seed=1), RolloutTask(seed=2)]).trajectories
    assert all(t.segments for t in trajectories)
    return cfg, path, trajectories


def _weights(group: LearnerGroup) -> dict[str, torch.Tensor]:
    return ray.get(group.weights_ref())


def _wait_for_restart(rank, pid: int) -> None:
    """``ray.kill`` returns before the process is gone: wait for the new one."""
    deadline = time.time() + 120
    while True:
        try:
            if ray.get(rank.pid.remote(), timeout=10) != pid:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        assert time.time() < deadline, "the learner rank was not restarted"
        time.sleep(0.2)


def test_one_rank_updates_checkpoints_and_restores_after_a_kill(cluster, setup, tmp_path):
    cfg, path, trajectories = setup
    group = LearnerGroup(cfg, path, resources=ONE_CPU)
    try:
        before = _weights(group)
        stats = group.update(trajectories)
        assert stats["episodes"] == len(trajectories) and stats["grad_norm"] > 0
        trained = _weights(group)
        assert any(not torch.equal(before[k], trained[k]) for k in before)
        ckpt = group.save(tmp_path / "checkpoints", 1, {"step": 1, "version": 1})
        assert ckpt.exists()
        pid = ray.get(group.rank0.pid.remote())
        ray.kill(group.rank0, no_restart=False)  # Ray restarts the rank from the model folder
        _wait_for_restart(group.rank0, pid)
        restarted = _weights(group)
        assert all(torch.equal(before[k], restarted[k]) for k in before)
        assert group.restore(tmp_path / "checkpoints") == {"step": 1, "version": 1}
        restored = _weights(group)
        assert all(torch.equal(trained[k], restored[k]) for k in trained)
    finally:
        group.close()


def test_two_fsdp_ranks_make_the_one_rank_update(cluster, setup):
    cfg, path, trajectories = setup
    single = LearnerGroup(cfg, path, resources=ONE_CPU)
    try:
        single.update(trajectories)
        expected = _weights(single)
    finally:
        single.close()
    pair = LearnerGroup(cfg, path, resources=ONE_CPU, num_ranks=2)
    try:
        assert len(pair.ranks) == 2
        pair.update(trajectories)
        got = _weights(pair)
    finally:
        pair.close()
    assert set(got) == set(expected)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-5)


def test_a_rank_corrects_stale_samples_and_runs_the_sft_warm_start(cluster, setup):
    cfg, path, trajectories = setup
    stale = [t.to_dict() for t in trajectories]
    for d in stale:
        d["metadata"]["weight_version"] = 0
    group = LearnerGroup(cfg, path, resources=ONE_CPU)
    try:
        fresh = group.update(stale, 0, [False] * len(stale))  # sampled with the learner's own version
        assert "stale_row_frac" not in fresh and "is_weight_mean" not in fresh
        corrected = group.update(stale, 2)  # two versions behind: truncated IS on every row
        assert corrected["stale_row_frac"] == 1.0 and 0.0 < corrected["is_weight_mean"] <= cfg.distributed.is_cap
        before = _weights(group)
        losses = group.sft(trajectories, epochs=2, batch_size=2, lr=1e-2, seed=0)
        assert len(losses) == 2 * ((len(trajectories) + 1) // 2) and all(loss > 0 for loss in losses)
        after = _weights(group)
        assert any(not torch.equal(before[k], after[k]) for k in before)
    finally:
        group.close()
