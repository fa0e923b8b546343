"""ECHO-memory end to end: select-driven rollouts, source-indexed credit, a training step."""

from __future__ import annotations

import json
import math
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import agentgym
from agentgym.backends.scripted import EnvPolicyBackend
from agentgym.core import AgentEnv
from agentgym.rollout import ChatRenderer, RolloutConfig, RolloutEngine, RolloutTask, Trajectory
from agentgym.rollout.memory import MemoryManager
from agentgym.rollout.stats import derive_seed
from agentgym.trainers.batch import build_batch
from agentgym.trainers.config import AlgoConfig
from agentgym.trainers.loop import Trainer, model_path
from agentgym.trainers.methods import CREDIT, StepData
from agentgym.trainers.testing import tiny_config, use_policy_logprobs
from agentgym.types import Message, ToolCall

SQA = "agentgym/SearchQA-v0"


class SelectingOracle(EnvPolicyBackend):
    """The oracle with ``select(ids)`` at given turn numbers; answers wrongly with probability ``p_wrong``."""

    def __init__(self, renderer: Any, select_at: dict[int, list[int]], p_wrong: float = 0.0) -> None:
        super().__init__(renderer)
        self.select_at = select_at
        self.p_wrong = p_wrong
        self._turns: weakref.WeakKeyDictionary[AgentEnv, int] = weakref.WeakKeyDictionary()

    def choose(self, env: AgentEnv, rng: np.random.Generator) -> Message:
        """Select at the scheduled turns, else the oracle (its answer possibly replaced)."""
        k = self._turns.get(env, 0)
        self._turns[env] = k + 1
        if k in self.select_at:
            call = ToolCall(id="call_0", name="select", arguments={"ids": self.select_at[k]})
        else:
            call = env.oracle_action().tool_calls[0]
            if call.name == "answer" and rng.random() < self.p_wrong:
                call = ToolCall(id="call_0", name="answer", arguments={"text": "certainly not this"})
        return Message(role="assistant", tool_calls=[call])


def _memory_episode(renderer: Any, p_wrong: float) -> Trajectory:
    engine = RolloutEngine(SelectingOracle(renderer, {2: [1], 4: [0, 3]}, p_wrong=p_wrong), renderer,
                           lambda: agentgym.make(SQA), RolloutConfig(max_turns=12, max_tokens=96, max_wait_s=None),
                           context_manager=MemoryManager())
    (traj,) = engine.run([RolloutTask(seed=3)]).trajectories
    return traj


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    from agentgym.models import tiny_model_dir
    from agentgym.rollout import ChatRenderer

    return ChatRenderer(AutoTokenizer.from_pretrained(tiny_model_dir(tmp_path_factory.mktemp("models"))))


def test_credit_goes_to_selected_and_selecting_turns_of_successes_only(renderer: Any) -> None:
    good, bad = _memory_episode(renderer, p_wrong=0.0), _memory_episode(renderer, p_wrong=1.0)
    assert (good.reward, bad.reward) == (1.0, 0.0)
    for traj in (good, bad):  # search, open, select, search, select, open, search, open, answer
        assert traj.metadata["selection_turns"] == [2, 4] and traj.metadata["evidence_turns"] == [0, 1, 3]
        assert [s.start_turn for s in traj.segments] == [0, 3, 5]
    algo = AlgoConfig(method="echo_memory", memory_beta=0.5).resolved()
    step = StepData([good, bad], algo, learner=None)
    adv = CREDIT["echo_memory"](step)
    a_good, a_bad = adv[0][-1], adv[1][-1]
    assert a_good > 0 > a_bad
    bonus_turns = {0, 1, 2, 3, 4}
    for k, value in enumerate(adv[0]):
        assert value == pytest.approx(a_good * (1.5 if k in bonus_turns else 1.0)), k
    np.testing.assert_allclose(adv[1], np.full(len(bad.turns), a_bad))  # a failure gets no bonus
    assert step.extra["memory_selections"] == 2.0
    # The loop's success test overrides ``reward > 0``: a "successful" flag False removes the bonus.
    flat = CREDIT["echo_memory"](StepData([good, bad], algo, learner=None, success=[False, False]))
    np.testing.assert_allclose(flat[0], np.full(len(good.turns), a_good))
    # In a group where both succeed the outcome advantage is 0 and so is the bonus.
    same = CREDIT["echo_memory"](StepData([good, good], algo, learner=None))
    assert all(np.all(a == 0) for a in same)
    # The per-token advantages of a multi-segment trajectory follow its turns.
    batch = build_batch([good], [adv[0]])
    assert batch.size == 3  # one row per segment
    for row in range(batch.size):
        turns = batch.turn_index[row][batch.loss_mask[row] > 0].unique().tolist()
        for k in turns:
            cols = (batch.turn_index[row] == k) & (batch.loss_mask[row] > 0)
            assert torch.allclose(batch.advantages[row][cols], torch.tensor(adv[0][k], dtype=batch.advantages.dtype))


def _memory_rollout(trainer: Trainer, step: int, budget: int) -> list[Trajectory]:
    """What the patched loop does for ``echo_memory`` (engine with a manager), with a selecting
    oracle that answers wrongly half the time; the policy's own log-probs become the old ones."""
    engine = RolloutEngine(SelectingOracle(trainer.renderer, {2: [0, 1]}, p_wrong=0.5), trainer.renderer,
                           trainer.env_factory(), trainer._rollout_config(seed=derive_seed(0, step)),
                           context_manager=MemoryManager(budget_tokens=budget))
    return use_policy_logprobs(trainer, engine.run(trainer.train_tasks(step)).trajectories)


@pytest.mark.slow  # a Trainer step on SearchQA: ~30-60 s on 2 busy cores
def test_a_training_step_with_memory_rollouts_updates_the_policy(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, tmp_path / "models", [
        "algo.method=echo_memory", f"env.id={SQA}", "env.kwargs={hops: 1}", "rollout.group_size=4",
        "rollout.max_turns=5", "rollout.max_tokens=96", "run.log_trajectories=true"])
    trainer = Trainer(cfg, echo=None)
    trainer.rollout = lambda step: _memory_rollout(trainer, step, budget=cfg.rollout.max_context_tokens)
    before = {k: v.detach().clone() for k, v in trainer.learner.model.named_parameters()}
    stats = trainer.train_step()
    assert math.isfinite(stats["loss"]) and stats["grad_norm"] > 0
    assert stats["memory_selections"] == 1.0 and 0.0 < stats["success"] < 1.0
    after = dict(trainer.learner.model.named_parameters())
    assert any(not torch.equal(before[k], after[k]) for k in before)
    logged = [json.loads(line) for line in (cfg.run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert all(t["metadata"]["selection_turns"] == [2] and len(t["segments"]) == 2 for t in logged)


@pytest.mark.slow  # a Trainer step on SearchQA: ~30-60 s on 2 busy cores
def test_the_policy_rolls_out_through_the_loop_under_a_memory_budget(tmp_path: Path) -> None:
    models = tmp_path / "models"
    probe = tiny_config(tmp_path / "probe", models, [f"env.id={SQA}"])
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(model_path(probe)))
    env = agentgym.make(SQA)
    observation, _ = env.reset(seed=0)
    budget = len(renderer.start(observation, MemoryManager().tools(env.tools))[1]) + 100
    cfg = tiny_config(tmp_path, models, [
        "algo.method=echo_memory", f"env.id={SQA}", "rollout.group_size=2", "rollout.max_turns=4",
        "rollout.max_tokens=24", "run.log_trajectories=true", f"rollout.memory_budget_tokens={budget}"])
    trainer = Trainer(cfg, echo=None)  # the loop turns rollout.memory_budget_tokens into the engine's memory
    stats = trainer.train_step()  # the trainer's own rollout path (producer, engine) and its HF policy
    assert math.isfinite(stats["loss"]) and stats["episodes"] == 4
    logged = [json.loads(line) for line in (cfg.run_dir / "trajectories.jsonl").read_text().splitlines()]
    rebuilds = [r for t in logged for r in t["metadata"]["memory_rebuilds"]]
    assert rebuilds and all(r["reason"] == "budget" for r in rebuilds)
    assert all(t["termination"] != "context_overflow" for t in logged)
    assert all(len(t["segments"]) == 1 + len(t["metadata"]["memory_rebuilds"]) for t in logged)
