"""Async GiGPO training with ``distributed.backend: ray`` on a three-node cluster, one worker killed."""

from __future__ import annotations

import json
import threading
import time

import pytest
import ray

from agentgym.distributed import RayProducer
from agentgym.trainers.loop import Trainer
from agentgym.trainers.testing import tiny_config

pytestmark = pytest.mark.slow  # a three-node cluster and model loads: tens of seconds

STEPS = 6
OVERRIDES = [
    "env.id=agentgym/Calculator-v0", "algo.method=gigpo", f"run.steps={STEPS}", "run.log_trajectories=true",
    "env.eval_tasks=1", "rollout.max_turns=2", "rollout.max_tokens=16", "rollout.group_size=2",
    "distributed.backend=ray", "distributed.mode=async", "distributed.max_staleness=1",
    "distributed.rollout_workers=2", "distributed.resources.rollout_worker.num_cpus=1",
    "distributed.resources.inference.num_cpus=0", "distributed.resources.env_pool.num_cpus=0",
]


def _records(run_dir, kind: str) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == kind]


def _kill_mid_run(trainer: Trainer, done: threading.Event) -> tuple[str, int]:
    """After the first step, kill worker 0 while it holds episodes; returns its actor id and the learner version."""
    producer = trainer.producer
    assert isinstance(producer, RayProducer)
    deadline = time.time() + 300
    while not _records(trainer.run_dir, "train"):
        assert time.time() < deadline and not done.is_set(), "no training step finished"
        time.sleep(0.1)
    node, actor = producer.names[0].split(":")
    pool = producer.pools[(next(iter(trainer.envs)), node)]
    while ray.get(pool.stats.remote())["open"] == 0:
        assert time.time() < deadline and not done.is_set(), "worker 0 never held episodes"
        time.sleep(0.02)
    ray.kill(producer.workers[0], no_restart=False)
    return actor, trainer.version


def test_async_gigpo_on_a_ray_cluster_survives_a_killed_worker(cluster, tmp_path, tmp_path_factory):
    cfg = tiny_config(tmp_path, tmp_path_factory.mktemp("models"), OVERRIDES)
    trainer = Trainer(cfg, echo=None)
    done = threading.Event()
    outcome: dict = {}

    def train() -> None:
        try:
            outcome["result"] = trainer.run()
        except BaseException as exc:  # surfaced by the assertions below
            outcome["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=train)
    thread.start()
    try:
        victim, version_at_kill = _kill_mid_run(trainer, done)
    finally:
        thread.join(timeout=600)
    assert not thread.is_alive() and "error" not in outcome, outcome.get("error")
    assert outcome["result"]["steps"] == STEPS  # training went on to the end
    train = _records(cfg.run_dir, "train")
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert max(r["staleness_max"] for r in train) <= cfg.distributed.max_staleness
    assert any(r["staleness_max"] > 0 for r in train)  # async: some steps did train on older weights
    # The killed worker's in-flight episodes came back marked (not trained on) ...
    assert sum(r["reset_failures"] for r in train) > 0
    assert trainer.producer.lost_workers == 1
    # ... and trajectories came from both nodes, the restarted worker included.
    trajs = [json.loads(line) for line in (cfg.run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len({t["metadata"]["worker"].split(":")[0] for t in trajs}) >= 2
    restarted = [t for t in trajs if t["metadata"]["worker"].endswith(":" + victim)
                 and t["metadata"]["weight_version"] > version_at_kill]
    assert restarted, "the restarted worker produced nothing with newer weights"
