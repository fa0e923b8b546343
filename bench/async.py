"""Benchmark: synchronous vs asynchronous training throughput with slow, variable tool latency.

Both runs train the tiny model with the same config on ``bench/SlowCalculator-v0``, the
Calculator env with a seeded random delay of ``--min-ms`` to ``--max-ms`` on every tool step
(a stand-in for slow tools, remote sandboxes or web calls). The synchronous loop alternates
rollout and update; the asynchronous one (``distributed.mode: async``) lets producer threads
roll out the next steps while the learner updates, with at most ``--max-staleness`` versions
of lag. Reported per mode (training steps only; evaluation excluded):

* trajectories/s: episodes trained on / wall time of the training steps;
* learner utilisation: fraction of that wall time the learner spends updating;
* mean / max staleness of the trained trajectories, and the weight-push time.

Asynchrony pays when rollouts spend time waiting (tools, sandboxes) rather than computing: the
local producers share the CPU with the learner, and on a loaded 2-core machine an update runs
about 2x slower while a generation runs beside it. With 100-1000 ms tool latency (the default)
async was 1.3-1.7x faster there; with 20-200 ms it was slower (0.2-0.7x), since nearly all of a
step was then CPU work. Processes or GPUs (``distributed.backend: ray``) remove that contention.

::

    .venv/bin/python bench/async.py [--steps 6] [--max-staleness 1] [--workers 2] [--out bench/results/async.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

import agentgym
from agentgym.envs.calculator import CalculatorEnv
from agentgym.trainers.config import load_config
from agentgym.trainers.loop import Trainer

ENV_ID = "bench/SlowCalculator-v0"


class SlowCalculatorEnv(CalculatorEnv):
    """Calculator whose every step sleeps a random delay drawn from ``(reset seed, turn)``.

    Args:
        min_ms: Shortest delay.
        max_ms: Longest delay.
        **kwargs: Passed to :class:`CalculatorEnv`.
    """

    def __init__(self, min_ms: float = 20.0, max_ms: float = 200.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_ms, self.max_ms = min_ms, max_ms
        self._delay_seed = 0
        self._delay_turn = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """Reset, remembering the seed the delays derive from."""
        self._delay_seed, self._delay_turn = int(seed or 0), 0
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        """Sleep the turn's delay, then step."""
        u = np.random.default_rng([self._delay_seed % 2**32, self._delay_turn]).random()
        self._delay_turn += 1
        time.sleep((self.min_ms + (self.max_ms - self.min_ms) * u) / 1000.0)
        return super().step(action)


def run_mode(mode: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Train ``args.steps`` steps in ``mode`` and summarise the training steps' metrics."""
    overrides = [
        f"run.dir={root}", f"run.name={mode}", f"model.cache_dir={root / 'models'}",
        f"model.tiny_layers={args.layers}", f"model.tiny_hidden={args.hidden}", "model.device=cpu",
        f"env.id={ENV_ID}", f"env.kwargs={{min_ms: {args.min_ms}, max_ms: {args.max_ms}}}", "env.eval_tasks=1",
        f"rollout.tasks_per_step={args.tasks}", f"rollout.group_size={args.group}", f"rollout.max_turns={args.turns}",
        "rollout.max_tokens=32", "algo.method=echo", "optim.lr=1e-4", "optim.micro_batch_size=16",
        f"run.steps={args.steps}", "run.eval_every=0", "run.checkpoint_every=0", "run.tensorboard=false",
        "run.progress=false", f"run.seed={args.seed}", f"distributed.mode={mode}",
        f"distributed.max_staleness={args.max_staleness}", f"distributed.rollout_workers={args.workers}",
    ]
    trainer = Trainer(load_config(None, overrides), echo=None)
    trainer.run()
    records = [json.loads(x) for x in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    wall = sum(r["time_step"] for r in train)
    update = sum(r["time_update"] for r in train)
    episodes = sum(r.get("episodes", 0.0) + r.get("reset_failures", 0.0) for r in train)
    return {
        "mode": mode, "steps": len(train), "episodes": episodes, "wall_s": wall,
        "trajectories_per_s": episodes / wall if wall else 0.0,
        "learner_utilisation": update / wall if wall else 0.0,
        "update_s_total": update,
        "rollout_s_total": sum(r["time_rollout"] for r in train),
        "learner_wait_s_total": sum(r.get("time_wait", r["time_rollout"]) for r in train),
        "staleness_mean": float(np.mean([r.get("staleness_mean", 0.0) for r in train])),
        "staleness_max": max((r.get("staleness_max", 0.0) for r in train), default=0.0),
        "time_sync_mean_s": float(np.mean([r["time_sync"] for r in train])),
    }


def main() -> None:
    """Run both modes, print a table and write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--min-ms", type=float, default=100.0)
    parser.add_argument("--max-ms", type=float, default=1000.0)
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "async.json")
    args = parser.parse_args()
    agentgym.register(ENV_ID, SlowCalculatorEnv, max_turns=6, override=True,
                      description="Calculator with a seeded random delay on every step (benchmark only).")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_mode(mode, args, Path(tmp)) for mode in ("sync", "async")]
    sync, asyn = rows
    report = {
        "benchmark": "async", "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "cpu_threads": torch.get_num_threads()},
        "results": rows,
        "speedup_trajectories_per_s": asyn["trajectories_per_s"] / sync["trajectories_per_s"]
        if sync["trajectories_per_s"] else None,
    }
    table = Table(title=f"sync vs async training, tool latency {args.min_ms:.0f}-{args.max_ms:.0f} ms")
    for col in ("mode", "steps", "episodes", "wall s", "traj/s", "learner util.", "staleness mean/max", "push s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["mode"], str(r["steps"]), f"{r['episodes']:.0f}", f"{r['wall_s']:.1f}",
                      f"{r['trajectories_per_s']:.2f}", f"{r['learner_utilisation']:.2f}",
                      f"{r['staleness_mean']:.2f} / {r['staleness_max']:.0f}", f"{r['time_sync_mean_s']:.4f}")
    Console().print(table)
    print(f"async / sync trajectories/s: {report['speedup_trajectories_per_s']:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
