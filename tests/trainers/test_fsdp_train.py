"""`agentgym train` under torchrun: two gloo processes on the CPU train one run together.

Rank 0 alone rolls out, evaluates, logs and writes checkpoints; every rank trains its shard of
the batch (``trainers/distributed.py``). The update maths is checked in ``test_fsdp.py``; this
checks the loop around it: one metrics stream, checkpoints that move, and ``--resume``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# Two processes each import transformers and train: ~1-2 min on 2 cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _torchrun(tmp_path: Path, steps: int, *extra: str) -> subprocess.CompletedProcess[str]:
    overrides = [
        f"run.dir={tmp_path}",
        "run.name=fsdp",
        f"model.cache_dir={tmp_path / 'models'}",
        f"run.steps={steps}",
        "run.eval_every=1",
        "run.checkpoint_every=1",
        "run.tensorboard=false",
        "env.eval_tasks=2",
        "rollout.tasks_per_step=2",
        "rollout.group_size=2",
        "rollout.max_turns=3",
        "rollout.max_tokens=32",
        "optim.lr=1e-3",
        "run.sft_episodes=6",
        "run.sft_epochs=1",
    ]
    config = Path(__file__).resolve().parents[2] / "configs" / "grpo_calculator.yaml"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "agentgym.cli.main",
        "train",
        str(config),
        *extra,
    ]
    for item in overrides:
        cmd += ["--set", item]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)


def test_torchrun_train_logs_once_checkpoints_and_resumes(tmp_path: Path) -> None:
    first = _torchrun(tmp_path, 1)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("held-out success: untrained") == 1  # rank 0 alone talks to the user
    run = tmp_path / "fsdp"
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert steps == ["step-000000", "step-000001"]
    # The SFT warm start ran under FSDP before step 0's checkpoint: its weights left the initial model's.
    from safetensors.torch import load_file

    initial = load_file(next((tmp_path / "models").glob("tiny-qwen2-*[!0-9]/model.safetensors")))
    warm = torch.load(run / "checkpoints" / "step-000000" / "learner.pt", weights_only=False)["model"]
    assert set(initial) <= set(warm)  # full (gathered) tensors, not shards
    assert all(warm[k].shape == initial[k].shape for k in initial)
    assert any(not torch.equal(initial[k], warm[k]) for k in initial)

    second = _torchrun(tmp_path, 2, "--resume")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    kinds = [(r["kind"], r["step"]) for r in records if r["kind"] in ("train", "eval")]
    assert kinds.count(("train", 1)) == 1 and kinds.count(("train", 2)) == 1  # one stream, no duplicate ranks
    assert sorted(p.name for p in (run / "checkpoints").iterdir())[-1] == "step-000002"
