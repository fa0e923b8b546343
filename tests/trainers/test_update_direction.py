"""The update moves the policy the way the credit says, on real multi-turn rollouts.

"Parameters changed" (test_loop_methods) cannot catch a sign error, a mask shifted by one token
or advantages landing on the wrong turn. Here one small update on mixed-quality rollouts must
raise the objective to first order: sum(A * dlogp) > 0.

Measured while writing this test: with an episode advantage copied onto every turn (GRPO, GiGPO's
``per_trajectory`` statistics) and ``token-mean`` aggregation, the *mean* log-prob change of the
positive turns can be below that of the negative turns. Failed Sokoban episodes run to
``max_turns`` while successes stop early, so the tool-call tokens that every turn shares carry a
negative summed advantage and fall everywhere; for GRPO on the untrained model the turn-level
correlation between advantage and log-prob change was even negative (-0.22). GiGPO's ``per_step``
statistics (over turns, so a group's turn advantages sum to zero) remove that push, so there, and
on Calculator (episodes of similar length), a turn's advantage must also correlate with the change
of its log-prob and the positive turns must gain on the negative ones.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentgym.trainers.batch import build_batch
from agentgym.trainers.loop import Trainer
from agentgym.trainers.methods import CREDIT
from agentgym.trainers.testing import mixed_rollout, tiny_config

SOKOBAN = ["env.id=agentgym/Sokoban-v0", "env.kwargs={min_moves: 1, max_moves: 3}", "rollout.group_size=6",
           "rollout.tasks_per_step=3", "rollout.max_turns=4"]
CASES = {
    "grpo": SOKOBAN,
    "gigpo": SOKOBAN,
    "gigpo-per_step": [*SOKOBAN, "algo.method=gigpo", "algo.episode_stats=per_step"],
    "grpo-calculator": ["env.id=agentgym/Calculator-v0", "rollout.group_size=6", "rollout.tasks_per_step=3"],
}
BALANCED = {"gigpo-per_step", "grpo-calculator"}  # turn advantages not biased by episode length


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("models")


def _turn_changes(batch, delta: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(mean advantage, summed log-prob change) of every action turn of every row."""
    adv, change = [], []
    for r in range(batch.size):
        on = batch.loss_mask[r] > 0
        for t in sorted(set(batch.turn_index[r][on].tolist())):
            m = on & (batch.turn_index[r] == t)
            adv.append(float(batch.advantages[r][m].mean()))
            change.append(float(delta[r][m].sum()))
    return np.array(adv), np.array(change)


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_update_follows_the_advantages(case, tmp_path, model_cache):
    method = case.split("-")[0]
    cfg = tiny_config(tmp_path, model_cache, [f"algo.method={method}", "optim.lr=1e-5", *CASES[case]])
    trainer = Trainer(cfg, echo=None)
    try:
        trajs = [t for t in mixed_rollout(trainer, 0) if t.segments]
        batch = build_batch(trajs, CREDIT[trainer.algo.method](trainer.step_data(trajs)))
        before = trainer.learner.logprobs(batch)
        torch.testing.assert_close(before * batch.loss_mask, batch.old_logprobs * batch.loss_mask,
                                   atol=1e-4, rtol=0)  # on-policy: the update starts at ratio 1
        trainer.learner.update(batch, generator=trainer.generator)
        delta = (trainer.learner.logprobs(batch) - before) * batch.loss_mask
    finally:
        trainer.close()
    adv, change = _turn_changes(batch, delta)
    assert (adv > 0).any() and (adv < 0).any(), "the mixed rollout must give both signs of advantage"
    assert float((batch.advantages * delta).sum()) > 0
    if case in BALANCED:
        assert np.corrcoef(adv, change)[0, 1] > 0.1
        assert change[adv > 0].mean() > change[adv < 0].mean()
