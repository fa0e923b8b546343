"""FSDP learner: two gloo processes on the CPU make the one-process update on the same batch.

One module-scoped fixture spawns the two processes once; they run every scenario below and
rank 0 saves the gathered parameters, optimizer moments, statistics and log-probs. Each test
then repeats its scenario in this process without a process group and compares.

The optimizer moments are compared as well as the weights: after one AdamW step the weights
hardly depend on the gradient's scale (Adam normalises it), while ``exp_avg = (1 - beta1) g``
is the clipped gradient itself, so a wrong denominator, an averaged instead of summed gradient
or a per-process clipping norm all show up there.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from agentgym.trainers import distributed
from agentgym.trainers.batch import TrainBatch
from agentgym.trainers.config import AlgoConfig, OptimConfig
from agentgym.trainers.learner import Learner

# rows not divisible by 2: one process gets a row more; micro 2 so the micro-batch counts differ
SCENARIOS: dict[str, dict[str, Any]] = {
    "ppo_token_mean": {"algo": {"method": "grpo"}, "rows": 5},
    "seq_mean_token_sum_norm": {"algo": {"method": "grpo", "agg_mode": "seq-mean-token-sum-norm"}, "rows": 7},
    # GSPO's clip_frac / approx_kl are sequence means per micro-batch: they depend on the grouping
    "seq_mean_token_mean_gspo": {"algo": {"method": "seeupo"}, "rows": 6, "grouped_metrics": True},
    "echo_kl_epochs": {"algo": {"method": "echo", "kl_beta": 0.05, "ppo_epochs": 2, "mini_batches": 2}, "rows": 5},
    "one_row": {"algo": {"method": "grpo"}, "rows": 1},  # the second process holds no row at all
    "lora_kl": {"algo": {"method": "grpo", "kl_beta": 0.05}, "rows": 5, "lora": True},
    "resume": {"algo": {"method": "grpo"}, "rows": 5, "resume": True},
}


def _model() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen2ForCausalLM(cfg).float().train()


def _batch(rows: int, width: int = 24, seed: int = 0) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(width // 2, width + 1, (rows,), generator=g)
    lengths[0] = width  # some rows are shorter than the batch: widths differ between processes
    attn = (torch.arange(width)[None] < lengths[:, None]).long()
    ids = torch.randint(3, 250, (rows, width), generator=g) * attn
    loss = ((torch.arange(width)[None] % 5 >= 3) & attn.bool()).float()
    loss[:, :4] = 0
    obs = (1 - loss) * attn
    obs[:, :4] = 0
    adv = (torch.randn(rows, 1, generator=g) * loss).contiguous()
    old = -torch.rand(rows, width, generator=g) * 5 * loss
    return TrainBatch(ids, attn, loss, obs, obs.clone(), old, adv, torch.zeros_like(ids), torch.arange(rows))


def _learner(spec: dict[str, Any]) -> Learner:
    model = _model()
    if spec.get("lora"):
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(1)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():  # non-zero B so the merge is visible from the first step
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.02)
    optim = OptimConfig(lr=1e-2, micro_batch_size=2, max_grad_norm=0.5)
    return Learner(model, AlgoConfig(**spec["algo"]), optim, lora=bool(spec.get("lora")))


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    """The scenario, identical code with or without a process group."""
    learner = _learner(spec)
    batch = _batch(spec["rows"])
    stats = learner.update(batch, generator=torch.Generator().manual_seed(3))
    if spec.get("resume"):  # checkpoint, restore into a fresh learner, keep training
        state = learner.state_dict()
        learner = _learner(spec)
        learner.load_state_dict(state if distributed.is_main() else {})
        stats = learner.update(_batch(spec["rows"], seed=1))
    out = {"stats": stats, "logprobs": learner.logprobs(batch), "weights": learner.backend_state_dict(),
           "state": learner.state_dict()}
    return out if distributed.is_main() else {}


def _worker(out_dir: str) -> None:
    received = distributed.broadcast_object({"rank": distributed.rank(), "rows": [1, 2]})
    if distributed.rank() == 1:
        torch.save({"received": received, "world": distributed.world_size()}, Path(out_dir) / "objects.pt")
    for name, spec in SCENARIOS.items():
        result = _run(spec)
        if result:
            torch.save(result, Path(out_dir) / f"{name}.pt")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fsdp")
    distributed.spawn(_worker, 2, str(out), timeout_s=240)
    return out


def _moments(state: dict[str, Any], names: list[str]) -> dict[str, torch.Tensor]:
    """``{name.exp_avg: ...}`` from a plain (index-keyed) or a name-keyed optimizer state."""
    out = {}
    for key, value in state["optimizer"]["state"].items():
        name = names[key] if isinstance(key, int) else key
        for moment in ("exp_avg", "exp_avg_sq"):
            out[f"{name}.{moment}"] = value[moment]
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_two_process_update_equals_one_process_update(sharded: Path, name: str) -> None:
    spec = SCENARIOS[name]
    got = torch.load(sharded / f"{name}.pt", weights_only=False)
    learner_names = [n for n, p in _learner(spec).model.named_parameters() if p.requires_grad]
    want = _run(spec)
    keys = ["loss", "pg_loss", "grad_norm", "entropy", "kl_loss", "echo_env_loss"]
    keys += [] if spec.get("grouped_metrics") else ["clip_frac", "approx_kl"]
    for key in keys:
        if key in want["stats"]:
            assert got["stats"][key] == pytest.approx(want["stats"][key], rel=1e-4, abs=1e-6), key
    assert got["stats"]["optimizer_steps"] == want["stats"]["optimizer_steps"]
    assert set(got["weights"]) == set(want["weights"])
    for key, value in want["weights"].items():
        torch.testing.assert_close(got["weights"][key], value, rtol=1e-4, atol=1e-5, msg=key)
    moments_got, moments_want = _moments(got["state"], learner_names), _moments(want["state"], learner_names)
    assert set(moments_got) == set(moments_want)
    for key, value in moments_want.items():
        torch.testing.assert_close(moments_got[key], value, rtol=1e-4, atol=1e-8, msg=key)
    real = _batch(spec["rows"]).attention_mask.bool()  # padding positions depend on the micro-batch width
    torch.testing.assert_close(got["logprobs"][real], want["logprobs"][real], rtol=1e-4, atol=1e-5)


def test_processes_share_rank_zeros_objects(sharded: Path) -> None:
    got = torch.load(sharded / "objects.pt", weights_only=False)
    assert got == {"received": {"rank": 0, "rows": [1, 2]}, "world": 2}


def test_merge_lora_equals_peft_merge_and_unload() -> None:
    learner = _learner({"algo": {"method": "grpo"}, "lora": True})
    merged = distributed.merge_lora(learner.model.state_dict(), learner.model)
    want = copy.deepcopy(learner.model).merge_and_unload().state_dict()
    assert set(merged) == set(want)
    for key, value in want.items():
        torch.testing.assert_close(merged[key], value, msg=key)
    assert not torch.equal(want["model.layers.0.self_attn.q_proj.weight"],
                           _model().state_dict()["model.layers.0.self_attn.q_proj.weight"])


def test_single_process_helpers_are_identities() -> None:
    assert not distributed.is_distributed() and distributed.is_main() and distributed.world_size() == 1
    x = torch.arange(5.0)
    torch.testing.assert_close(distributed.all_reduce(x), x)
    torch.testing.assert_close(distributed.broadcast(x), x)
    assert [len(distributed.shard_rows(torch.arange(5), 2, r)) for r in (0, 1)] == [3, 2]
    with pytest.raises(ValueError, match="fsdp=True"):
        Learner(_model(), AlgoConfig(method="grpo"), OptimConfig(), fsdp=True)
