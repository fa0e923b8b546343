"""Benchmark: the learner's update step against a minimal hand-written torch loop.

Same model, same batch, same loss (PPO clip, token-mean, AdamW, grad clipping, fp32 on CPU):
the minimal loop is what one would write by hand in ~20 lines. Target: learner <= 1.15x.
Also: Tree-GRPO trees trained as per-leaf paths vs packed (shared prefixes once): tokens
forwarded and update time of each (``"tree"`` in the output).

    .venv/bin/python bench/trainer.py [--rows 8] [--width 1024] [--layers 2] [--hidden 128] [--repeats 10]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from agentgym.models import TinyModelConfig, build_tiny_model
from agentgym.rollout import Segment, Trajectory, Turn
from agentgym.trainers import credit
from agentgym.trainers.batch import TrainBatch, build_batch, build_tree_batch
from agentgym.trainers.config import AlgoConfig, OptimConfig
from agentgym.trainers.learner import Learner


def make_batch(rows: int, width: int, vocab: int) -> TrainBatch:
    """A synthetic batch: every third token is an action token, random advantages."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab - 5, (rows, width), generator=g)
    attn = torch.ones_like(ids)
    loss = (torch.arange(width)[None].expand(rows, width) % 3 == 0).float()
    adv = torch.randn(rows, 1, generator=g).expand(rows, width) * loss
    old = -torch.rand(rows, width, generator=g) * loss
    zeros = torch.zeros(rows, width)
    return TrainBatch(ids, attn, loss, zeros, zeros, old, adv.contiguous(), torch.zeros_like(ids), torch.arange(rows))


def minimal_step(model: torch.nn.Module, opt: torch.optim.Optimizer, b: TrainBatch) -> None:
    """The hand-written reference: forward, PPO clip loss, backward, clip, AdamW."""
    opt.zero_grad(set_to_none=True)
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, b.input_ids[:, 1:, None]).squeeze(-1)
    ratio = torch.exp(logp - b.old_logprobs[:, 1:])
    adv, mask = b.advantages[:, 1:], b.loss_mask[:, 1:]
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    loss = (loss * mask).sum() / mask.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def once(fn) -> float:
    """Wall time of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def make_trees(trees: int, vocab: int, *, prompt: int = 256, turns: int = 4, action: int = 32,
               obs: int = 64) -> list[Trajectory]:
    """Resolved leaves of Tree-GRPO-shaped trees: a chain, plus branches after turns 1 and 2."""
    rng = np.random.default_rng(0)

    def turn() -> Turn:
        return Turn(action_ids=rng.integers(5, vocab - 5, action).tolist(),
                    action_logprobs=(-rng.random(action)).tolist(),
                    observation_ids=rng.integers(5, vocab - 5, obs).tolist())

    leaves = []
    for k in range(trees):
        segments = [Segment(0, rng.integers(5, vocab - 5, prompt).tolist())]
        chain = [turn() for _ in range(turns)]
        for b, cut in enumerate((turns, 1, 2)):
            path = chain[:cut] + [turn() for _ in range(turns - cut)]
            leaves.append(Trajectory(episode_id=f"t{k}-b{b}", group_id="g", tree_id=f"t{k}", segments=segments,
                                     turns=path, reward=float(rng.random())))
    return leaves


def tree_packing(model: torch.nn.Module, trees: int, repeats: int) -> dict[str, float]:
    """Tokens forwarded and median update seconds: per-leaf paths vs packed trees."""
    leaves = make_trees(trees, model.config.vocab_size)
    adv = credit.tree_grpo_advantages([t.reward for t in leaves], [t.group_id for t in leaves],
                                      [t.tree_id for t in leaves])
    turn_adv = credit.repeat_per_turn(adv, [len(t.turns) for t in leaves])
    out: dict[str, float] = {"trees": trees, "leaves": len(leaves)}
    for name, batch in (("paths", build_batch(leaves, turn_adv)), ("packed", build_tree_batch(leaves, turn_adv))):
        learner = Learner(copy.deepcopy(model), AlgoConfig(method="tree_grpo"),
                          OptimConfig(lr=1e-5, micro_batch_size=batch.size, max_grad_norm=1.0))
        learner.update(batch)  # warm-up
        out[f"{name}_tokens"] = float(batch.attention_mask.sum())
        out[f"{name}_update_s"] = statistics.median(once(lambda b=batch, lr=learner: lr.update(b))
                                                    for _ in range(repeats))
    return out


def main() -> None:
    """Run the benchmark and print / write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("bench/results/trainer.json"))
    args = parser.parse_args()
    model, _ = build_tiny_model(TinyModelConfig(num_layers=args.layers, hidden_size=args.hidden,
                                                intermediate_size=2 * args.hidden))
    model.train()
    batch = make_batch(args.rows, args.width, model.config.vocab_size)
    ref_model = copy.deepcopy(model)
    ref_opt = torch.optim.AdamW(ref_model.parameters(), lr=1e-5)
    learner = Learner(model, AlgoConfig(method="grpo", dual_clip=None),
                      OptimConfig(lr=1e-5, micro_batch_size=args.rows, max_grad_norm=1.0))
    ref_step, our_step = (lambda: minimal_step(ref_model, ref_opt, batch)), (lambda: learner.update(batch))
    ref_step(), our_step()  # warm-up
    # interleaved, so background load affects both alike
    minimal, ours = [], []
    for _ in range(args.repeats):
        minimal.append(once(ref_step))
        ours.append(once(our_step))
    result = {
        "rows": args.rows, "width": args.width, "layers": args.layers, "hidden": args.hidden,
        "threads": torch.get_num_threads(), "minimal_s": statistics.median(minimal),
        "learner_s": statistics.median(ours),
    }
    result["ratio"] = result["learner_s"] / result["minimal_s"]
    result["tree"] = tree_packing(model, trees=4, repeats=max(1, args.repeats // 3))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
