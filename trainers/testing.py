"""Test helpers for trainers: tiny configs and a mixed oracle/random behaviour policy.

Short training tests need groups whose rewards differ; an untrained tiny model gets the same
(zero) reward everywhere. :func:`mixed_rollout` plays a mix of the oracle and random calls and
records the *policy's own* log-probs of those actions as the old log-probs, so the learner sees
ordinary on-policy data (ratio 1) with informative advantages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agentgym.backends.scripted import EnvPolicyBackend, RandomActionBackend
from agentgym.core import AgentEnv
from agentgym.rollout import RolloutEngine, Trajectory, TreeConfig
from agentgym.rollout.stats import derive_seed
from agentgym.rollout.tree import resolve_paths
from agentgym.trainers.batch import build_batch
from agentgym.trainers.config import TrainConfig, load_config
from agentgym.types import Message


def tiny_config(tmp_path: Path, cache: Path, overrides: list[str]) -> TrainConfig:
    """A tiny, fast config writing under ``tmp_path``."""
    base = [
        f"run.dir={tmp_path}", "run.name=t", f"model.cache_dir={cache}", "run.steps=1", "run.eval_every=0",
        "run.checkpoint_every=0", "run.tensorboard=false", "env.eval_tasks=2", "rollout.tasks_per_step=2",
        "rollout.group_size=3", "rollout.max_turns=3", "rollout.max_tokens=64", "optim.lr=1e-3",
        "optim.micro_batch_size=4",
    ]
    return load_config(None, base + overrides)


class MixedOracle(EnvPolicyBackend):
    """The oracle with probability ``p``, else a random well-formed call (gives mixed rewards)."""

    def __init__(self, renderer: Any, p: float = 0.75) -> None:
        super().__init__(renderer)
        self.p = p
        self._random = RandomActionBackend(renderer, give_up=0.2)

    def choose(self, env: AgentEnv, rng: np.random.Generator) -> Message:
        """Oracle or random."""
        return env.oracle_action() if rng.random() < self.p else self._random.choose(env, rng)


def mixed_rollout(trainer: Any, step: int) -> list[Trajectory]:
    """Roll out with :class:`MixedOracle`, then record the policy's own log-probs as old log-probs.

    The learner then trains on these actions exactly as if the policy had sampled them (ratio 1),
    which lets short tests see non-zero advantages with an untrained tiny model.
    """
    engine = RolloutEngine(MixedOracle(trainer.renderer), trainer.renderer, trainer.env_factory(),
                           trainer._rollout_config(seed=derive_seed(0, step)))
    tasks = trainer.train_tasks(step)
    if trainer.algo.method == "tree_grpo":
        r = trainer.cfg.rollout
        trajs = resolve_paths(engine.run_trees(tasks, TreeConfig(trees=r.trees, expansions=r.expansions,
                                                                 iterations=r.iterations)).trajectories)
    else:
        trajs = engine.run(tasks).trajectories
    return use_policy_logprobs(trainer, trajs)


def use_policy_logprobs(trainer: Any, trajs: list[Trajectory]) -> list[Trajectory]:
    """Replace each action's recorded log-probs with the trainer's policy's (scripted rollouts).

    A scripted backend's ids come with its own log-probs; scoring them with the policy makes the
    behaviour log-probs the current policy's, as an on-policy rollout would have recorded them.
    """
    for traj in trajs:
        if not traj.segments:  # the env failed at reset: nothing to score
            continue
        batch = build_batch([traj], [np.zeros(len(traj.turns))], drop_empty=False)
        logp = trainer.learner.logprobs(batch)
        for row in range(batch.size):
            for k, turn in enumerate(traj.turns):
                cols = ((batch.turn_index[row] == k) & (batch.loss_mask[row] > 0)).nonzero().squeeze(-1)
                if len(cols):
                    turn.action_logprobs = logp[row, cols].tolist()
    return trajs
