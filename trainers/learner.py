"""The learner: a ``transformers`` causal LM, its optimizer and one policy-gradient update.

One update, cleanrl-style, top to bottom (:meth:`Learner.update`)::

    for epoch in ppo_epochs:
        for mini-batch in shuffled rows split into mini_batches:
            for micro-batch of micro_batch_size rows:
                logits = model(ids)                       # bf16 autocast on GPU, fp32 on CPU
                logp   = log_softmax(logits / T)[next token]
                loss   = policy loss (PPO dual clip or GSPO) on action tokens
                       + beta * k3 KL to the frozen reference      (beta = 0: no reference at all)
                       + lambda * ECHO env cross-entropy on observation tokens (same forward)
                loss.backward()                           # denominators are mini-batch totals,
            clip_grad_norm; AdamW step                    # so accumulation equals one big batch

References: PPO (Schulman et al., 2017), GRPO (Shao et al., 2024, arXiv:2402.03300), GSPO
(Zheng et al., 2025), ECHO (Shrivastava et al., 2026, arXiv:2605.24517); the loss terms are in
:mod:`agentgym.trainers.losses`.

Deviations and choices:
    * ``old_logprobs`` default to the sampling log-probs recorded by the rollout backend (the
      backend and this learner use the same definition, ``log_softmax(logits / T)``), instead
      of a separate recompute pass as in verl; with one epoch and one mini-batch the ratio is 1
      up to numerics. SeeUPO recomputes them (its algorithm requires it).
    * With LoRA and ``kl_beta > 0`` the reference is the base model with adapters disabled
      (no second copy of the weights).
    * Weights pushed to a rollout backend under LoRA are the merged weights of a copy.
    * Multi-process (FSDP2) updates see below; every process must hold the same full batch.

Multi-GPU (FSDP): when a ``torch.distributed`` group of more than one process exists (torchrun,
see :mod:`agentgym.trainers.distributed`), the model (and the KL reference) is sharded with
``fully_shard``, one unit per decoder layer, bf16 parameters with fp32 gradient reduction on GPU
(``MixedPrecisionPolicy``), fp32 on CPU. Each mini-batch's rows are split into one contiguous
slice per process; every process runs the same number of micro-batches (a process with no row
left runs a fully masked one, since FSDP's collectives need every process in each forward);
the denominators (tokens, sequences, rows, observation tokens, width) are all-reduced, and
gradients are summed, not averaged, so the update equals the one-process update on the whole
batch, and clipping uses the global norm. :meth:`Learner.logprobs` shards rows the same way and
all-gathers the result. :meth:`Learner.backend_state_dict` / :meth:`Learner.state_dict` are
collective and return unsharded CPU tensors on rank 0 (empty dicts elsewhere); the optimizer
state is then keyed by parameter name (``torch.distributed.checkpoint`` format), so FSDP and
single-process checkpoints do not load into each other. Launch::

    torchrun --nproc_per_node 4 -m agentgym.cli.main train configs/<run>.yaml

which needs a loop where only rank 0 rolls out, logs, evaluates and writes checkpoints, the
step's trajectories are broadcast to the other ranks, and every rank calls the collective
methods above (``agentgym.trainers.loop`` must do this for ``train`` under torchrun).
"""

from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from agentgym.trainers import distributed, losses
from agentgym.trainers.batch import TrainBatch
from agentgym.trainers.config import AlgoConfig, ModelConfig, OptimConfig

__all__ = ["Learner", "resolve_device"]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass
class _Totals:
    """Mini-batch-wide denominators shared by every micro-batch."""

    tokens: float
    seqs: float
    rows: float
    obs_tokens: float
    width: float


def _totals(batch: TrainBatch, *, reduce: bool = False) -> _Totals:
    """Denominators of ``batch``; with ``reduce``, summed (width: max) over every process's rows."""
    lengths = batch.loss_mask.sum(-1)
    counts = torch.tensor([float(lengths.sum()), float((lengths > 0).sum()), float(batch.size),
                           float(batch.all_obs_mask.sum())], dtype=torch.float64)
    width = torch.tensor([batch.input_ids.shape[1] if batch.size else 0])
    if reduce:
        counts, width = distributed.all_reduce(counts), distributed.all_reduce(width, "max")
    tokens, seqs, rows, obs_tokens = counts.tolist()
    return _Totals(tokens=max(tokens, 1.0), seqs=max(seqs, 1.0), rows=rows, obs_tokens=obs_tokens,
                   width=float(width[0]))


def _masked_out(batch: TrainBatch) -> TrainBatch:
    """Row 0 of ``batch`` with every mask zeroed: a forward that adds nothing to loss or gradient."""
    row = batch.select([0])
    for mask in (row.loss_mask, row.obs_mask, row.all_obs_mask, row.advantages):
        mask.zero_()
    return row


class Learner:
    """Owns the trainable model, the optional reference and the AdamW optimizer.

    Args:
        model: A causal LM (``transformers``), already on ``device``.
        algo: The resolved algorithm config (loss, clip, KL, ECHO).
        optim: Optimizer and micro-batching settings.
        device: Where to train.
        temperature: Sampling temperature; log-probs use ``logits / temperature``.
        bf16: Autocast to bf16 (GPU only).
        lora: Whether ``model`` is a peft LoRA model.
        fsdp: Shard ``model`` over the process group with FSDP2 (see the module docstring);
            None: exactly when a group of more than one process is initialised.
    """

    def __init__(
        self,
        model: Any,
        algo: AlgoConfig,
        optim: OptimConfig,
        *,
        device: torch.device | str = "cpu",
        temperature: float = 1.0,
        bf16: bool = False,
        lora: bool = False,
        fsdp: bool | None = None,
    ) -> None:
        self.fsdp = distributed.is_distributed() if fsdp is None else fsdp
        if self.fsdp and not distributed.is_distributed():
            raise ValueError("fsdp=True needs an initialised torch.distributed group of more than one process")
        self.model = model
        self.algo = algo.resolved()
        self.optim_cfg = optim
        self.device = torch.device(device)
        self.temperature = temperature
        self.bf16 = bf16 and self.device.type == "cuda"
        self.lora = lora
        self.ref_model: Any = None
        if self.algo.kl_beta and not lora:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        if self.fsdp:
            distributed.fsdp_wrap(self.model, self.device, bf16=self.bf16)
            if self.ref_model is not None:
                distributed.fsdp_wrap(self.ref_model, self.device, bf16=self.bf16)
        self.optimizer = self._make_optimizer(optim.lr)

    @classmethod
    def from_pretrained(
        cls, path: str, model_cfg: ModelConfig, algo: AlgoConfig, optim: OptimConfig, *, temperature: float = 1.0
    ) -> Learner:
        """Load ``path`` with ``AutoModelForCausalLM`` (fp32 master weights), wrap with LoRA if asked.

        Under torchrun (``WORLD_SIZE`` > 1) this joins the process group first and, on GPU,
        trains on ``cuda:<LOCAL_RANK>``; the learner is then sharded with FSDP.
        """
        from transformers import AutoModelForCausalLM

        device = resolve_device(model_cfg.device)
        distributed.init_from_env("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda" and distributed.is_distributed():
            device = torch.device("cuda", distributed.local_rank())
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
        if model_cfg.lora:
            from peft import LoraConfig, get_peft_model

            lora_cfg = LoraConfig(r=model_cfg.lora_r, lora_alpha=model_cfg.lora_alpha,
                                  target_modules=model_cfg.lora_targets, task_type="CAUSAL_LM")
            model = get_peft_model(model, lora_cfg)
        model.train()
        return cls(model, algo, optim, device=device, temperature=temperature, bf16=model_cfg.bf16,
                   lora=model_cfg.lora)

    def _make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        params = [p for p in self.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=lr, betas=self.optim_cfg.betas, weight_decay=self.optim_cfg.weight_decay)

    # ------------------------------------------------------------- forward
    def _autocast(self) -> Any:
        return torch.autocast("cuda", dtype=torch.bfloat16) if self.bf16 else nullcontext()

    def _log_softmax(self, model: Any, batch: TrainBatch) -> Tensor:
        """``log_softmax(logits / T)`` predicting each next token, ``(B, T-1, V)`` in fp32."""
        with self._autocast():
            # 2D padding mask, or a packed tree row's 4D mask and position ids (TrainBatch.forward_kwargs)
            logits = model(input_ids=batch.input_ids, **batch.forward_kwargs()).logits
        return torch.log_softmax(logits[:, :-1].float() / self.temperature, dim=-1)

    @staticmethod
    def _gather(log_probs: Tensor, batch: TrainBatch) -> Tensor:
        """Per-token log-probs aligned with ``input_ids`` (position 0 gets 0)."""
        taken = log_probs.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
        return torch.nn.functional.pad(taken, (1, 0))

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch) -> Tensor:
        """Per-token log-probs of ``batch`` under the current policy, no gradient, ``(B, T)``.

        Under FSDP this is collective: each process scores its rows and the rows are all-gathered.
        """
        if batch.size == 0:
            return torch.zeros_like(batch.old_logprobs)
        self.model.eval()
        out = []
        for rows in self._micro_rows(batch.size):
            mb = (batch.select(rows) if len(rows) else _masked_out(batch)).to(self.device)
            lp = self._gather(self._log_softmax(self.model, mb), mb)
            if len(rows):
                out.append(torch.nn.functional.pad(lp, (0, batch.input_ids.shape[1] - lp.shape[1])).cpu())
        self.model.train()
        local = torch.cat(out) if out else batch.old_logprobs.new_zeros((0, batch.input_ids.shape[1]))
        if not self.fsdp:
            return local
        sizes = [len(part) for part in torch.tensor_split(torch.arange(batch.size), distributed.world_size())]
        return distributed.all_gather_rows(local, sizes)

    def _micro_rows(self, n: int) -> list[Tensor]:
        """This process's micro-batches of rows ``0 .. n-1``.

        One process: consecutive chunks of ``micro_batch_size``. FSDP: this process's slice, cut
        into as many chunks as the largest slice needs, so every process runs the same number of
        forwards (chunks may be empty).
        """
        size = self.optim_cfg.micro_batch_size
        if not self.fsdp:
            return list(torch.split(torch.arange(n), size))
        world = distributed.world_size()
        count = max(1, math.ceil(math.ceil(n / world) / size))
        return list(torch.tensor_split(distributed.shard_rows(torch.arange(n)), count))

    @torch.no_grad()
    def _ref_logprobs(self, mb: TrainBatch) -> Tensor | None:
        if not self.algo.kl_beta:
            return None
        if self.lora:
            with self.model.disable_adapter():
                return self._gather(self._log_softmax(self.model, mb), mb)
        return self._gather(self._log_softmax(self.ref_model, mb), mb)

    # -------------------------------------------------------------- losses
    def _micro_loss(self, mb: TrainBatch, totals: _Totals) -> tuple[Tensor, dict[str, float]]:
        """Loss of one micro-batch (scaled by mini-batch totals) and its diagnostics (sums)."""
        a = self.algo
        log_probs = self._log_softmax(self.model, mb)
        logp = self._gather(log_probs, mb)
        mask = mb.loss_mask
        agg = {"num_tokens": totals.tokens, "num_sequences": totals.seqs, "norm_length": totals.width}
        if a.loss == "gspo":
            per_token = losses.gspo_loss(logp, mb.old_logprobs, mb.advantages, mask,
                                         clip_low=a.clip_low, clip_high=a.clip_high)
            stats = losses.gspo_metrics(logp, mb.old_logprobs, mb.advantages, mask,
                                        clip_low=a.clip_low, clip_high=a.clip_high)
        else:
            per_token = losses.ppo_clip_loss(logp, mb.old_logprobs, mb.advantages,
                                             clip_low=a.clip_low, clip_high=a.clip_high, dual_clip=a.dual_clip)
            stats = losses.ppo_metrics(logp, mb.old_logprobs, mb.advantages, mask,
                                       clip_low=a.clip_low, clip_high=a.clip_high, dual_clip=a.dual_clip)
        if mb.is_weights is not None:  # truncated IS of stale samples (losses.truncated_is_weights)
            per_token = per_token * mb.is_weights
        pg = losses.aggregate(per_token, mask, a.agg_mode, **agg)
        total = pg
        out: dict[str, float] = {"pg_loss": pg.item()}
        ref = self._ref_logprobs(mb)
        if ref is not None:
            kl = a.kl_beta * losses.aggregate(losses.k3_kl(logp, ref), mask, a.agg_mode, **agg)
            total = total + kl
            out["kl_loss"] = kl.item()
        if a.echo_lambda:
            env = self._echo_loss(-logp, mb, totals)
            total = total + a.echo_lambda * env
            out["echo_env_loss"] = env.item()
        with torch.no_grad():
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            ntok = mask.sum().item()
            out["entropy_sum"] = float((torch.nn.functional.pad(entropy, (1, 0)) * mask).sum())
            out["clip_frac_sum"] = stats.clip_frac.item() * ntok
            out["approx_kl_sum"] = stats.approx_kl_k3.item() * ntok
        out["loss"] = total.item()
        return total, out

    def _echo_loss(self, token_nll: Tensor, mb: TrainBatch, totals: _Totals) -> Tensor:
        if self.algo.echo_reduction == "token_mean":
            return (token_nll * mb.obs_mask).sum() / (totals.obs_tokens + 1e-3)
        return losses.echo_env_loss(token_nll, mb.obs_mask, mb.all_obs_mask, reduction="sequence",
                                    num_sequences=totals.rows)

    # -------------------------------------------------------------- update
    def update(self, batch: TrainBatch, *, generator: torch.Generator | None = None) -> dict[str, float]:
        """PPO-style update on ``batch`` (epochs x mini-batches x micro-batches).

        Args:
            batch: Rows with advantages and old log-probs (CPU tensors).
            generator: Shuffles rows between epochs (None: no shuffle with one epoch).

        Returns:
            Mean diagnostics: loss, pg_loss, kl_loss, echo_env_loss, entropy, clip_frac,
            approx_kl, grad_norm, optimizer steps.
        """
        sums: dict[str, float] = {}
        steps = 0
        for epoch in range(self.algo.ppo_epochs):
            order = torch.arange(batch.size)
            if epoch > 0 and generator is not None:
                order = distributed.broadcast(torch.randperm(batch.size, generator=generator))  # rank 0's order
            for chunk in torch.tensor_split(order, min(self.algo.mini_batches, max(batch.size, 1))):
                if len(chunk) == 0:
                    continue
                self.set_lr(self.warmup_lr())
                stats = self._step(batch.select(chunk), self._policy_micro)
                steps += 1
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
        return self._summarise(sums, steps, float(batch.loss_mask.sum()) * self.algo.ppo_epochs)

    def _policy_micro(self, mb: TrainBatch, totals: _Totals) -> tuple[Tensor, dict[str, float]]:
        return self._micro_loss(mb, totals)

    def _step(self, batch: TrainBatch, micro_loss: Any) -> dict[str, float]:
        """One optimizer step over ``batch``, accumulating gradients over micro-batches."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        mine = distributed.shard_rows(torch.arange(batch.size)) if self.fsdp else torch.arange(batch.size)
        totals = _totals(batch.select(mine), reduce=self.fsdp)
        sums: dict[str, float] = {}
        for rows in self._micro_rows(batch.size):
            mb = (batch.select(rows) if len(rows) else _masked_out(batch)).to(self.device)
            loss, stats = micro_loss(mb, totals)
            loss.backward()  # under FSDP: gradients reduce-scattered as a sum over processes
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v
        if self.fsdp:  # every process reports the whole mini-batch
            keys = sorted(sums)
            total = distributed.all_reduce(torch.tensor([sums[k] for k in keys], dtype=torch.float64))
            sums = dict(zip(keys, total.tolist(), strict=True))
        params = [p for p in self.model.parameters() if p.requires_grad]
        max_norm = self.optim_cfg.max_grad_norm or float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)  # a DTensor of the global norm under FSDP
        sums["grad_norm"] = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        self.optimizer.step()
        return sums

    @staticmethod
    def _summarise(sums: dict[str, float], steps: int, tokens: float) -> dict[str, float]:
        out = {k: v / max(steps, 1) for k, v in sums.items() if not k.endswith("_sum")}
        for k in ("entropy", "clip_frac", "approx_kl"):
            if f"{k}_sum" in sums:
                out[k] = sums[f"{k}_sum"] / max(tokens, 1.0)
        out["optimizer_steps"] = float(steps)
        return out

    # ----------------------------------------------------------------- SFT
    def sft_step(self, batch: TrainBatch) -> dict[str, float]:
        """One supervised step: token-mean cross-entropy on the action tokens of ``batch``."""

        def micro(mb: TrainBatch, totals: _Totals) -> tuple[Tensor, dict[str, float]]:
            logp = self._gather(self._log_softmax(self.model, mb), mb)
            loss = -(logp * mb.loss_mask).sum() / totals.tokens
            return loss, {"loss": loss.item()}

        return self._step(batch, micro)

    def reset_optimizer(self) -> None:
        """A fresh AdamW (e.g. after the SFT warm start, so its moments do not leak into RL)."""
        self.optimizer = self._make_optimizer(self.optim_cfg.lr)

    def optimizer_steps(self) -> int:
        """Steps the current AdamW has taken: its own count, saved with its checkpoint, zero after a reset."""
        for state in self.optimizer.state.values():
            if "step" in state:
                return int(state["step"])
        return 0

    def warmup_lr(self) -> float:
        """The RL learning rate for the next optimizer step: ``lr`` after a linear warm-up."""
        warmup = self.optim_cfg.warmup_steps
        if warmup <= 0:
            return self.optim_cfg.lr
        return self.optim_cfg.lr * min(1.0, (self.optimizer_steps() + 1) / warmup)

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every parameter group."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ------------------------------------------------------------- weights
    @torch.no_grad()
    def backend_state_dict(self) -> dict[str, Tensor]:
        """Weights for a rollout backend holding the plain (non-LoRA) architecture.

        Under FSDP: collective; unsharded CPU tensors on rank 0, ``{}`` on the other ranks.
        """
        if self.fsdp:
            state = distributed.full_model_state(self.model)
            return distributed.merge_lora(state, self.model) if self.lora and state else state
        if self.lora:
            merged = copy.deepcopy(self.model).merge_and_unload()
            return {k: v.detach().clone() for k, v in merged.state_dict().items()}
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def state_dict(self) -> dict[str, Any]:
        """Model and optimizer state (for checkpoints); under FSDP collective, full on rank 0."""
        if self.fsdp:
            return distributed.full_state(self.model, self.optimizer)
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (under FSDP collective; only rank 0's ``state`` is read)."""
        if self.fsdp:
            distributed.load_full_state(self.model, self.optimizer, state)
            return
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
