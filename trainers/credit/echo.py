"""ECHO-memory: selective turn memory with source-indexed credit (the credit half).

Paper:
    Xie et al., 2026, selective turn memory with source-indexed credit for long-horizon search
    agents under a bounded context (BrowseComp-Plus: 43.4% held-out accuracy vs GRPO 28.9% vs
    rolling summary 36.1%). Only the abstract is public; no equations or code are available, so
    every detail below is our choice and is documented as such.

Not to be confused with ECHO (a), the Environment Cross-entropy Hybrid Objective of
Shrivastava et al., 2026 (arXiv:2605.24517): its credit is plain GRPO and its auxiliary loss is
:func:`agentgym.trainers.losses.echo_env_loss`.

Setting: every completed turn is compressed into a memory record that keeps its source index
(the turn it came from). The policy rebuilds its context by calling a ``select`` tool that names
records; that call is a *selection turn*, and the turns whose records it names are *evidence
turns*. The context manager (memory records, the tool, context rebuilds as new trajectory
segments) is :class:`agentgym.rollout.memory.MemoryManager`; it records the turns in
``Trajectory.metadata["selection_turns"/"evidence_turns"]``. This module only routes credit,
given which turns were selected.

Equations (our reading of "positive credit is routed to the turns whose records were selected as
evidence and to the selection actions themselves")::

    A_out_i   = GRPO outcome advantage of trajectory i (std-normalised, eps 1e-6)
    A_{i,t}   = A_out_i + beta * max(A_out_i, 0) * [success_i] * [t in E_i or t in S_i]

where ``E_i`` are the evidence turns and ``S_i`` the selection turns of trajectory ``i``.

Choices, all ours:
    * Base credit is GRPO's (every turn gets ``A_out``); :func:`memory_credit_bonus` returns the
      bonus alone so it can be added to another method's per-turn advantages.
    * The bonus uses the *positive part* of the outcome advantage, so it never pushes a turn
      down, and a successful trajectory in a group where every trajectory succeeded (A_out = 0)
      gets no bonus: credit is relative, as in GRPO.
    * "Successful" defaults to ``outcome_reward > 0`` (0/1 accuracy rewards); pass ``success``
      explicitly for graded rewards.
    * A turn that is both evidence and a selection turn, or is selected several times, gets the
      bonus once (set union): repeated selection is not rewarded more.
    * Evidence indices refer to turns of the same trajectory (source indices), 0-based; an index
      outside ``[0, num_turns)`` raises ``ValueError`` rather than being dropped silently.
    * ``beta = 0.5`` by default: untuned, chosen so a selected turn of a successful trajectory
      gets 1.5x the outcome advantage. ``beta = 0`` is plain GRPO.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from .common import EPS, Ragged, Scale, as_float_array
from .grpo import grpo_advantages


def memory_credit_bonus(
    outcome_advantages: ArrayLike,
    num_turns: Sequence[int],
    evidence_turns: Sequence[Sequence[int]],
    selection_turns: Sequence[Sequence[int]],
    success: Sequence[bool],
    *,
    beta: float = 0.5,
) -> Ragged:
    """The source-indexed bonus ``beta * max(A_out, 0)`` on selected turns of successful trajectories.

    Args:
        outcome_advantages: ``A_out`` per trajectory, shape ``(N,)``.
        num_turns: Turns per trajectory.
        evidence_turns: Per trajectory, the turn indices whose memory records were selected.
        selection_turns: Per trajectory, the turn indices of the ``select`` actions.
        success: Per trajectory, whether the outcome was successful.
        beta: Bonus weight.

    Returns:
        Ragged per-turn bonus (zeros where no bonus applies).
    """
    adv = as_float_array(outcome_advantages, "outcome_advantages")
    n = len(adv)
    for name, value in (("num_turns", num_turns), ("evidence_turns", evidence_turns),
                        ("selection_turns", selection_turns), ("success", success)):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} entries for {n} trajectories")
    out: Ragged = []
    for i in range(n):
        bonus = np.zeros(int(num_turns[i]))
        turns = {int(t) for t in evidence_turns[i]} | {int(t) for t in selection_turns[i]}
        bad = sorted(t for t in turns if not 0 <= t < num_turns[i])
        if bad:
            raise ValueError(f"trajectory {i} has {num_turns[i]} turns; selected turn indices {bad} are out of range")
        if success[i] and turns:
            bonus[sorted(turns)] = beta * max(adv[i], 0.0)
        out.append(bonus)
    return out


def echo_memory_advantages(
    outcome_rewards: ArrayLike,
    group_ids: Sequence[Hashable],
    num_turns: Sequence[int],
    evidence_turns: Sequence[Sequence[int]],
    selection_turns: Sequence[Sequence[int]],
    *,
    success: Sequence[bool] | None = None,
    beta: float = 0.5,
    scale: Scale = "std",
    eps: float = EPS,
) -> Ragged:
    """Per-turn ECHO-memory advantages: GRPO outcome advantage plus the selection bonus.

    Args:
        outcome_rewards: ``R_i`` per trajectory, shape ``(N,)``.
        group_ids: One hashable task/group id per trajectory.
        num_turns: Turns per trajectory.
        evidence_turns: Per trajectory, the turn indices whose records were selected as evidence.
        selection_turns: Per trajectory, the turn indices of the selection actions.
        success: Per trajectory success flags; None = ``outcome_rewards > 0``.
        beta: Bonus weight.
        scale: GRPO scale, ``"std"`` or ``"none"``.
        eps: Added to the std before dividing.

    Returns:
        Ragged per-turn advantages; broadcast them with ``broadcast_to_tokens``.
    """
    rewards = as_float_array(outcome_rewards, "outcome_rewards")
    adv = grpo_advantages(rewards, group_ids, scale=scale, eps=eps)
    ok = (rewards > 0).tolist() if success is None else [bool(s) for s in success]
    bonus = memory_credit_bonus(adv, num_turns, evidence_turns, selection_turns, ok, beta=beta)
    return [adv[i] + b for i, b in enumerate(bonus)]
