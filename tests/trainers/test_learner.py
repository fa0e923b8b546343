"""The learner: micro-batching equals one big batch, KL/reference, ECHO term, GSPO, LoRA, SFT."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.models import TinyModelConfig, build_tiny_model
from agentgym.trainers.batch import TrainBatch
from agentgym.trainers.config import AlgoConfig, OptimConfig
from agentgym.trainers.learner import Learner


def _model():
    model, _ = build_tiny_model(TinyModelConfig(num_layers=1, hidden_size=64, intermediate_size=128, vocab_size=512))
    return model.train()


def _batch(rows: int = 6, width: int = 40, seed: int = 0) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 400, (rows, width), generator=g)
    lengths = torch.randint(width // 2, width + 1, (rows,), generator=g)
    attn = (torch.arange(width)[None] < lengths[:, None]).long()
    ids = ids * attn
    loss = ((torch.arange(width)[None] % 7 >= 4) & attn.bool()).float()
    loss[:, :5] = 0
    obs = ((1 - loss) * attn).float()
    obs[:, :5] = 0
    adv = torch.randn(rows, 1, generator=g).expand(rows, width) * loss
    old = -torch.rand(rows, width, generator=g) * 6 * loss
    tix = torch.zeros(rows, width, dtype=torch.long)
    return TrainBatch(ids, attn, loss, obs, obs.clone(), old, adv.contiguous(), tix, torch.arange(rows))


def _learner(model, micro: int, **algo) -> Learner:
    return Learner(model, AlgoConfig(**algo), OptimConfig(lr=1e-3, micro_batch_size=micro, max_grad_norm=1.0))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("method", ["grpo", "echo"])
def test_micro_batching_equals_one_batch(agg, method):
    base = _model()
    big = _learner(_copy(base), micro=6, agg_mode=agg, method=method)
    small = _learner(_copy(base), micro=2, agg_mode=agg, method=method)
    batch = _batch()
    s_big, s_small = big.update(batch), small.update(batch)
    assert s_big["loss"] == pytest.approx(s_small["loss"], rel=1e-4, abs=1e-6)
    assert s_big["grad_norm"] == pytest.approx(s_small["grad_norm"], rel=1e-4)
    for (name, a), b in zip(big.model.named_parameters(), small.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def _copy(model):
    import copy

    return copy.deepcopy(model)


def test_update_changes_parameters_and_reports_metrics():
    learner = _learner(_model(), micro=4)
    before = [p.detach().clone() for p in learner.model.parameters()]
    stats = learner.update(_batch())
    assert all(math.isfinite(v) for v in stats.values())
    for key in ("loss", "pg_loss", "entropy", "clip_frac", "approx_kl", "grad_norm"):
        assert key in stats
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.model.parameters(), strict=True))


def test_kl_beta_zero_has_no_reference_model():
    assert _learner(_model(), micro=4).ref_model is None
    learner = _learner(_model(), micro=4, kl_beta=0.01)
    assert learner.ref_model is not None
    assert not any(p.requires_grad for p in learner.ref_model.parameters())
    learner.update(_batch())
    stats = learner.update(_batch(seed=1))  # after one step the policy differs from the reference
    assert stats["kl_loss"] > 0


def test_echo_term_is_on_the_same_forward_and_zero_lambda_is_grpo():
    batch = _batch()
    batch.advantages.zero_()  # no policy gradient: only ECHO's term can move the weights
    echo = _learner(_model(), micro=3, method="echo")
    stats = echo.update(batch)
    assert stats["echo_env_loss"] > 0 and stats["grad_norm"] > 0
    plain = _learner(_model(), micro=3, method="echo", echo_lambda=0.0)
    assert plain.update(batch)["grad_norm"] == 0.0


def test_gspo_loss_path():
    learner = _learner(_model(), micro=4, method="seeupo")
    assert learner.algo.loss == "gspo"
    stats = learner.update(_batch())
    assert math.isfinite(stats["loss"]) and stats["grad_norm"] > 0


def test_logprobs_match_update_forward():
    learner = _learner(_model(), micro=4)
    batch = _batch()
    batch.old_logprobs = learner.logprobs(batch) * batch.loss_mask
    stats = learner.update(batch)
    assert stats["approx_kl"] == pytest.approx(0.0, abs=1e-6)  # ratio 1 before the step
    assert stats["clip_frac"] == 0.0


def test_sft_step_lowers_the_loss():
    learner = _learner(_model(), micro=4)
    batch = _batch()
    first = learner.sft_step(batch)["loss"]
    for _ in range(5):
        last = learner.sft_step(batch)["loss"]
    assert last < first


def test_lora_trains_adapters_and_pushes_merged_weights():

    from peft import LoraConfig, get_peft_model

    base = _model()
    plain_keys = set(base.state_dict())
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    learner = Learner(model, AlgoConfig(kl_beta=0.01), OptimConfig(lr=1e-2, micro_batch_size=4), lora=True)
    assert learner.ref_model is None  # the reference is the base with adapters disabled
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    learner.update(_batch())
    stats = learner.update(_batch(seed=1))
    assert stats["kl_loss"] > 0
    merged = learner.backend_state_dict()
    assert set(merged) == plain_keys


def test_warmup_ramps_the_rl_lr_per_optimizer_step_and_restarts_with_a_fresh_optimizer():
    def learner(model, **optim):
        return Learner(model, AlgoConfig(), OptimConfig(lr=1e-3, micro_batch_size=6, max_grad_norm=0.0, **optim))

    base = _model()
    warm, flat = learner(_copy(base), warmup_steps=4), learner(_copy(base))
    first = [p.detach().clone() for p in base.parameters()]
    seen = []
    for step in range(5):
        warm.update(_batch(seed=step))
        seen.append(warm.optimizer.param_groups[0]["lr"])
        if step == 0:  # Adam's first step moves each weight by ~lr: a quarter of it under the warm-up
            flat.update(_batch(seed=0))
            moved_warm = max((a - b).abs().max().item() for a, b in zip(warm.model.parameters(), first, strict=True))
            moved_flat = max((a - b).abs().max().item() for a, b in zip(flat.model.parameters(), first, strict=True))
            assert moved_warm == pytest.approx(moved_flat / 4, rel=0.05)
    assert seen == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])
    assert warm.optimizer_steps() == 5
    # the count lives in the optimizer state: a checkpointed optimizer resumes past the warm-up
    resumed = learner(_copy(warm.model), warmup_steps=4)
    resumed.optimizer.load_state_dict(warm.optimizer.state_dict())
    assert resumed.warmup_lr() == pytest.approx(1e-3)
    warm.reset_optimizer()
    assert warm.optimizer_steps() == 0 and warm.warmup_lr() == pytest.approx(2.5e-4)
    assert learner(_model()).warmup_lr() == pytest.approx(1e-3)  # 0: constant lr
