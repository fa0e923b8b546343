"""Benchmark: seconds to hand a learner's state dict to the rollout side, in process vs Ray.

Usage::

    python bench/weight_sync.py [--workers 1 2 4] [--synthetic-mb 256] [--repeats 3]
                                [--out bench/results/weight_sync.json]

For each state dict (the tiny Qwen2 test model's, and a synthetic one of ``--synthetic-mb`` MB
of fp32 matrices), it times

(a) in process: copying the tensors into a receiver's own tensors of the same shapes, which is
    what ``HFBackend.load_weights`` does (``load_state_dict`` is a per-tensor ``copy_``);
(b) through Ray's object store to k receiver actors: ``ray.put`` once, every actor fetches that
    object and copies it into its tensors, as ``RayProducer.push_weights`` does; the time runs
    until the last actor has answered.

Ray runs locally (one node), so (b) measures serialisation, the store and the copies, not a
network; across nodes add size / bandwidth per node. Figures are the median of ``--repeats``
runs after one warm-up, printed as a table and written to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM

from agentgym.models import tiny_model_dir


class Receiver:
    """Holds tensors shaped like a state dict and copies new values into them (like a backend)."""

    def __init__(self, shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> None:
        torch.set_num_threads(1)
        self.tensors = {name: torch.empty(shape, dtype=dtype) for name, (shape, dtype) in shapes.items()}

    def load(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Copy every tensor in; returns the bytes copied."""
        with torch.no_grad():
            for name, value in state_dict.items():
                self.tensors[name].copy_(value)
        return sum(t.numel() * t.element_size() for t in state_dict.values())


def tiny_state_dict() -> dict[str, torch.Tensor]:
    """The default tiny test model's weights."""
    folder = tiny_model_dir(Path(tempfile.gettempdir()) / "agentgym-bench-models")
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()


def synthetic_state_dict(megabytes: int) -> dict[str, torch.Tensor]:
    """fp32 matrices of 4 MB each adding up to ``megabytes`` MB."""
    count = max(1, megabytes // 4)
    return {f"layers.{i}.weight": torch.randn(1024, 1024) for i in range(count)}


def _median(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, state_dict: dict[str, torch.Tensor], workers: list[int], repeats: int) -> dict[str, Any]:
    """In-process and object-store push times of one state dict (Ray must be initialised)."""
    import ray

    remote_receiver = ray.remote(num_cpus=0)(Receiver)
    shapes = {k: (tuple(v.shape), v.dtype) for k, v in state_dict.items()}
    size = sum(v.numel() * v.element_size() for v in state_dict.values())
    local = Receiver(shapes)
    row: dict[str, Any] = {"state_dict": name, "megabytes": size / 2**20, "tensors": len(state_dict),
                           "in_process_s": _median(lambda: local.load(state_dict), repeats), "ray_s": {}}
    for k in workers:
        actors = [remote_receiver.remote(shapes) for _ in range(k)]
        ray.get([a.load.remote({}) for a in actors])  # started

        def push(actors: list[Any] = actors) -> None:
            ref = ray.put(state_dict)
            assert all(n == size for n in ray.get([a.load.remote(ref) for a in actors]))

        row["ray_s"][str(k)] = _median(push, repeats)
        for actor in actors:
            ray.kill(actor)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--synthetic-mb", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench/results/weight_sync.json")
    args = parser.parse_args()
    import ray  # the 'distributed' extra

    ray.init(num_cpus=max(args.workers) + 1, log_to_driver=False, include_dashboard=False)
    try:
        rows = [measure("tiny model", tiny_state_dict(), args.workers, args.repeats),
                measure(f"synthetic {args.synthetic_mb} MB", synthetic_state_dict(args.synthetic_mb), args.workers,
                        args.repeats)]
    finally:
        ray.shutdown()
    table = Table(title="weight sync: seconds per push (median)")
    for column in ["state dict", "MB", "in process", *[f"ray, {k} workers" for k in args.workers]]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(row["state_dict"], f"{row['megabytes']:.1f}", f"{row['in_process_s']:.4f}",
                      *[f"{row['ray_s'][str(k)]:.4f}" for k in args.workers])
    Console().print(table)
    result = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                          "ray": ray.__version__}, "repeats": args.repeats, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
