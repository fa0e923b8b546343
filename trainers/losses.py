"""Policy losses, KL to a reference, loss aggregation and ECHO's environment cross-entropy.

Shapes: ``B`` sequences (rows) padded to ``T`` tokens. Every per-token tensor is ``(B, T)``;
``mask`` is ``(B, T)`` (bool or 0/1) and selects the tokens a term applies to (action tokens for
the policy and KL terms, observation tokens for ECHO). Per-token functions return ``(B, T)``
and are reduced with :func:`aggregate`; masked-out positions may hold anything finite.

References:
    PPO clip: Schulman et al., 2017, arXiv:1707.06347; asymmetric clip ("clip-higher"): Yu et
    al., 2025 (DAPO), arXiv:2503.14476; dual clip: Ye et al., 2020, arXiv:1912.09729.
    GSPO: Zheng et al., 2025, "Group Sequence Policy Optimization", arXiv:2507.18071.
    k3 KL estimator: Schulman, 2020, "Approximating KL divergence" (blog); GRPO uses it.
    Aggregation modes: the names used by verl; Dr.GRPO: Liu et al., 2025, arXiv:2503.20783.
    ECHO: Shrivastava, Kauffmann, Awadallah, Papailiopoulos, 2026, "ECHO: Terminal Agents
    Learn World Models for Free", arXiv:2605.24517.
    Truncated importance sampling of stale samples: the decoupled PPO objective (Hilton,
    Cobbe, Schulman, 2022, "Batch size-invariance for policy optimization", arXiv:2110.00641),
    as used for asynchronous RL by AReaL (Fu et al., 2025, arXiv:2505.24298); truncation of
    the behaviour ratio as in IMPALA's V-trace (Espeholt et al., 2018, arXiv:1802.01561).

Deviations and choices:
    * ``seq-mean-token-sum-norm`` follows Dr.GRPO's objective ``(1/G) sum_i sum_t l_{i,t} / L``
      with ``L`` a constant (default: the padded length ``T``). Older verl (and the ALGORITHMS.md
      check value 2.0) omit the ``1/G``: pass ``num_sequences=1`` for that form.
    * Sequences with no masked token are left out of the sequence count of the ``seq-mean-*``
      modes (they are padding rows). ``num_tokens`` / ``num_sequences`` override the
      denominators so micro-batches can be normalised by global counts.
    * k3 clamps both the log ratio ``d`` to ``[-10, 10]`` (keeps ``exp(d)`` finite) and the KL
      value to ``[-10, 10]`` (ALGORITHMS.md; verl clamps ``d`` to ``[-20, 20]`` and the KL to
      ``[-10, 10]``; the two only differ when ``d < -10``, where ours is 9.00005 instead of up
      to 10, both with zero gradient).
    * The importance ratio is computed as ``exp(clamp(logp - logp_old, -20, 20))`` (as verl) so
      a stale token cannot overflow.
    * GSPO is implemented in its GSPO-token form (``s_{i,t} = sg[s_i] * pi_t / sg[pi_t]``):
      every token's value equals the sequence ratio ``s_i``, and with per-sequence advantages
      and ``seq-mean-token-mean`` aggregation the gradient equals sequence-level GSPO. Default
      clip range 3e-4 / 4e-4 as in the GSPO paper.
    * Stale samples (asynchronous training): the PPO ratio is taken against the proximal
      policy (the learner's weights before the update, recomputed), and each token's loss is
      multiplied by ``min(pi_prox / pi_behaviour, is_cap)`` (:func:`truncated_is_weights`).
      Unlike AReaL the weight is truncated from above only (no lower bound), and the KL and
      ECHO terms are not weighted.
    * ECHO's ``token_mean`` reduction divides the summed CE by the total number of observation
      tokens ``sum_i |O_i|`` (+1e-3), consistent with the per-sequence form where excluded
      tokens count in ``|O_i|`` but carry no loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
EchoReduction = Literal["sequence", "token_mean"]

_MAX_LOG_RATIO = 20.0


def _per_token(advantages: Tensor, like: Tensor) -> Tensor:
    """Accepts advantages of shape ``(B, T)`` or ``(B,)`` and returns ``(B, T)``-broadcastable."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    if advantages.dim() != 2 or advantages.shape[0] != like.shape[0]:
        raise ValueError(f"advantages must be (B,) or (B, T) with B={like.shape[0]}, got {tuple(advantages.shape)}")
    return advantages


def aggregate(
    loss: Tensor,
    mask: Tensor,
    mode: AggMode = "token-mean",
    *,
    norm_length: float | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> Tensor:
    """Reduces a ``(B, T)`` per-token loss to a scalar.

    Args:
        loss: Per-token loss, ``(B, T)``.
        mask: Which tokens count, ``(B, T)``.
        mode: ``"token-mean"``: sum over masked tokens / their count.
            ``"seq-mean-token-mean"``: mean over sequences of each sequence's token mean.
            ``"seq-mean-token-sum"``: mean over sequences of each sequence's token sum.
            ``"seq-mean-token-sum-norm"``: mean over sequences of token sum / ``norm_length``
            (Dr.GRPO).
        norm_length: The constant of ``seq-mean-token-sum-norm``; default ``T``.
        num_tokens: Denominator of ``token-mean`` (global count under micro-batching).
        num_sequences: Sequence count of the ``seq-mean-*`` modes; default the rows with at
            least one masked token.

    Returns:
        A scalar tensor.
    """
    if loss.shape != mask.shape or loss.dim() != 2:
        raise ValueError(f"loss and mask must both be (B, T), got {tuple(loss.shape)} and {tuple(mask.shape)}")
    m = mask.to(loss.dtype)
    masked = loss * m
    if mode == "token-mean":
        denom = m.sum() if num_tokens is None else loss.new_tensor(num_tokens)
        return masked.sum() / denom.clamp(min=1.0)
    if mode not in AGG_MODES:
        raise ValueError(f"mode must be one of {AGG_MODES}, got {mode!r}")
    lengths = m.sum(-1)
    seq = masked.sum(-1)
    if mode == "seq-mean-token-mean":
        seq = seq / lengths.clamp(min=1.0)
    elif mode == "seq-mean-token-sum-norm":
        seq = seq / float(loss.shape[-1] if norm_length is None else norm_length)
    count = (lengths > 0).sum().to(loss.dtype) if num_sequences is None else loss.new_tensor(num_sequences)
    return seq.sum() / count.clamp(min=1.0)


def _ratio(logp: Tensor, logp_old: Tensor) -> Tensor:
    return torch.exp(torch.clamp(logp - logp_old, -_MAX_LOG_RATIO, _MAX_LOG_RATIO))


def ppo_clip_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
) -> Tensor:
    """Per-token PPO clipped policy loss with asymmetric clip range and dual clip.

    ``L = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``, and for ``A < 0`` also
    ``L = min(L, -A c)`` with ``c = dual_clip``.

    Args:
        logp: Log-probs of the taken tokens under the current policy, ``(B, T)``.
        logp_old: Log-probs under the behaviour (old) policy, ``(B, T)``, no grad needed.
        advantages: ``(B, T)`` or ``(B,)``.
        clip_low: Lower clip epsilon.
        clip_high: Upper clip epsilon.
        dual_clip: The constant ``c > 1`` of the dual clip, None to disable it.

    Returns:
        Per-token loss ``(B, T)``; reduce with :func:`aggregate`.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
    adv = _per_token(advantages, logp)
    ratio = _ratio(logp, logp_old)
    clipped = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high))
    if dual_clip is None:
        return clipped
    return torch.where(adv < 0, torch.minimum(clipped, -adv * dual_clip), clipped)


def gspo_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> Tensor:
    """Per-token GSPO loss with the sequence ratio ``s_i = exp(mean_tokens log(pi/pi_old))``.

    Args:
        logp: Current log-probs, ``(B, T)``.
        logp_old: Old log-probs, ``(B, T)``.
        advantages: ``(B,)`` per sequence (or ``(B, T)`` for the GSPO-token variant).
        mask: Tokens of each sequence that enter the mean, ``(B, T)``.
        clip_low: Lower clip epsilon on ``s``.
        clip_high: Upper clip epsilon on ``s``.

    Returns:
        Per-token loss ``(B, T)``; every masked token of sequence ``i`` holds
        ``max(-A s_i, -A clip(s_i))``. Aggregate with ``"seq-mean-token-mean"``.
    """
    m = mask.to(logp.dtype)
    log_s = ((logp - logp_old) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    log_s = torch.clamp(log_s, -_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    # GSPO-token: value s_i at every token, gradient through each token's own log-prob.
    s = torch.exp(logp - logp.detach() + log_s.detach())
    adv = _per_token(advantages, logp)
    return torch.maximum(-adv * s, -adv * torch.clamp(s, 1.0 - clip_low, 1.0 + clip_high))


def truncated_is_weights(logp_proximal: Tensor, logp_behaviour: Tensor, *, cap: float = 2.0) -> Tensor:
    """Per-token truncated importance weights ``min(exp(logp_proximal - logp_behaviour), cap)``.

    The behaviour policy sampled the tokens (the rollout's recorded log-probs, possibly several
    weight versions old); the proximal policy is the learner's policy before the update. The
    weights carry no gradient. The log ratio is clamped like the PPO ratio, so the exponential
    stays finite before the cap applies.

    Args:
        logp_proximal: Log-probs under the proximal (current, pre-update) policy, ``(B, T)``.
        logp_behaviour: Log-probs recorded at sampling time, ``(B, T)``.
        cap: Upper truncation (``>= 1``).

    Returns:
        ``(B, T)`` weights in ``(0, cap]``.
    """
    if cap < 1.0:
        raise ValueError(f"the importance-sampling cap must be >= 1, got {cap}")
    with torch.no_grad():
        return torch.clamp(_ratio(logp_proximal, logp_behaviour), max=cap)


def k3_kl(logp: Tensor, logp_ref: Tensor, *, log_ratio_clip: float = 10.0, kl_clip: float = 10.0) -> Tensor:
    """Per-token k3 ("low-variance") KL estimate to the reference: ``exp(d) - d - 1``, ``d = logp_ref - logp``.

    Args:
        logp: Current log-probs, ``(B, T)``.
        logp_ref: Reference-policy log-probs, ``(B, T)``.
        log_ratio_clip: ``d`` is clamped to ``[-log_ratio_clip, log_ratio_clip]``.
        kl_clip: The estimate is clamped to ``[-kl_clip, kl_clip]``.

    Returns:
        ``(B, T)``, non-negative.
    """
    d = torch.clamp(logp_ref - logp, -log_ratio_clip, log_ratio_clip)
    return torch.clamp(torch.exp(d) - d - 1.0, -kl_clip, kl_clip)


def kl_loss(
    logp: Tensor,
    logp_ref: Tensor | None,
    mask: Tensor,
    *,
    beta: float,
    mode: AggMode = "token-mean",
) -> Tensor:
    """``beta * aggregate(k3_kl(logp, logp_ref))``; with ``beta == 0`` no reference is needed.

    Args:
        logp: Current log-probs, ``(B, T)``.
        logp_ref: Reference log-probs ``(B, T)``, or None when ``beta == 0`` (no reference model).
        mask: Action-token mask, ``(B, T)``.
        beta: KL coefficient (0.001-0.01 typical; 0 skips the term).
        mode: Aggregation mode.

    Returns:
        A scalar tensor (exactly 0, without touching ``logp_ref``, when ``beta == 0``).
    """
    if beta == 0:
        return logp.new_zeros(())
    if logp_ref is None:
        raise ValueError(f"kl_loss with beta={beta} needs reference log-probs; pass beta=0 to run without a reference")
    return beta * aggregate(k3_kl(logp, logp_ref), mask, mode)


def token_log_probs(logits: Tensor, tokens: Tensor) -> Tensor:
    """Log-probability of each given token: ``log_softmax(logits)[b, t, tokens[b, t]]``.

    Args:
        logits: ``(B, T, V)``, already aligned so position ``t`` predicts ``tokens[:, t]``.
        tokens: ``(B, T)`` token ids.

    Returns:
        ``(B, T)`` log-probs, computed in float32.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def echo_env_loss(
    token_nll: Tensor,
    env_mask: Tensor,
    obs_mask: Tensor | None = None,
    *,
    reduction: EchoReduction = "sequence",
    num_sequences: float | None = None,
    length_eps: float = 1e-3,
) -> Tensor:
    """ECHO environment cross-entropy ``L_env``.

    ``reduction="sequence"`` (paper)::

        L_env = (1/B) sum_i [ sum_{t in O'_i} CE_t ] / (|O_i| + 1e-3)

    ``reduction="token_mean"``: ``sum_i sum_{t in O'_i} CE_t / (sum_i |O_i| + 1e-3)``.

    Args:
        token_nll: ``-log pi(o_t | prefix)`` at every position, ``(B, T)``.
        env_mask: ``O'``: observation tokens that are targets (harness-inserted text such as
            format warnings and truncation notices excluded), ``(B, T)``.
        obs_mask: ``O``: all observation tokens, ``(B, T)``; None = same as ``env_mask``.
        reduction: ``"sequence"`` or ``"token_mean"``.
        num_sequences: ``B`` in the sequence form; default the number of rows.
        length_eps: Added to the observation-token counts.

    Returns:
        A scalar tensor.
    """
    env = env_mask.to(token_nll.dtype)
    obs = env if obs_mask is None else obs_mask.to(token_nll.dtype)
    if token_nll.shape != env.shape or obs.shape != env.shape:
        raise ValueError(f"token_nll, env_mask and obs_mask must share a (B, T) shape, got {tuple(token_nll.shape)}, "
                         f"{tuple(env.shape)}, {tuple(obs.shape)}")
    ce = (token_nll * env).sum(-1)
    if reduction == "token_mean":
        return ce.sum() / (obs.sum() + length_eps)
    if reduction != "sequence":
        raise ValueError(f"reduction must be 'sequence' or 'token_mean', got {reduction!r}")
    per_seq = ce / (obs.sum(-1) + length_eps)
    return per_seq.sum() / (token_nll.shape[0] if num_sequences is None else num_sequences)


def echo_objective(policy_loss: Tensor, env_loss: Tensor | None, *, lam: float = 0.05) -> Tensor:
    """``L = L_policy + lam * L_env``; ``lam = 0`` is plain GRPO (``env_loss`` may then be None)."""
    if lam == 0:
        return policy_loss
    if env_loss is None:
        raise ValueError(f"echo_objective with lam={lam} needs env_loss")
    return policy_loss + lam * env_loss


@dataclass(frozen=True)
class PolicyMetrics:
    """Diagnostics of one policy-loss evaluation (detached scalar tensors).

    Attributes:
        clip_frac: Fraction of masked tokens (PPO) or sequences (GSPO) where the clipped term
            is the active one.
        clip_frac_lower: Fraction where the dual clip is active (``A < 0`` and ``-A r > -A c``).
        approx_kl: ``mean(logp_old - logp)`` (k1 estimate of KL(old || new)).
        approx_kl_k3: ``mean((r - 1) - log r)`` (k3 estimate, always >= 0; cleanrl's approx_kl).
    """

    clip_frac: Tensor
    clip_frac_lower: Tensor
    approx_kl: Tensor
    approx_kl_k3: Tensor


@torch.no_grad()
def ppo_metrics(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
) -> PolicyMetrics:
    """Clip fractions and approximate KL for :func:`ppo_clip_loss`, token-mean over ``mask``."""
    adv = _per_token(advantages, logp).expand_as(logp)
    log_ratio = torch.clamp(logp - logp_old, -_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = torch.maximum(unclipped, -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high))
    lower = torch.zeros_like(clipped, dtype=torch.bool)
    if dual_clip is not None:
        lower = (adv < 0) & (clipped > -adv * dual_clip)
    m = mask.to(logp.dtype)

    def mean(x: Tensor) -> Tensor:
        return (x.to(logp.dtype) * m).sum() / m.sum().clamp(min=1.0)

    return PolicyMetrics(
        clip_frac=mean(clipped > unclipped),
        clip_frac_lower=mean(lower),
        approx_kl=mean(-log_ratio),
        approx_kl_k3=mean(ratio - 1.0 - log_ratio),
    )


@torch.no_grad()
def gspo_metrics(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> PolicyMetrics:
    """Sequence-level clip fraction and approximate KL for :func:`gspo_loss`, mean over sequences."""
    m = mask.to(logp.dtype)
    lengths = m.sum(-1)
    log_s = ((logp - logp_old) * m).sum(-1) / lengths.clamp(min=1.0)
    log_s = torch.clamp(log_s, -_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    s = torch.exp(log_s)
    adv = advantages if advantages.dim() == 1 else (advantages * m).sum(-1) / lengths.clamp(min=1.0)
    active = (lengths > 0).to(logp.dtype)

    def mean(x: Tensor) -> Tensor:
        return (x.to(logp.dtype) * active).sum() / active.sum().clamp(min=1.0)

    clipped = -adv * torch.clamp(s, 1.0 - clip_low, 1.0 + clip_high) > -adv * s
    return PolicyMetrics(
        clip_frac=mean(clipped),
        clip_frac_lower=logp.new_zeros(()),
        approx_kl=mean(-log_s),
        approx_kl_k3=mean(s - 1.0 - log_s),
    )
