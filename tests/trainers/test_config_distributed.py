"""The ``distributed`` section and the multi-task ``envs`` list: defaults and errors that name the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.trainers.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
TWO = "envs=[{id: agentgym/Calculator-v0}, {id: agentgym/Sokoban-v0, weight: 0.5}]"


def test_defaults_are_the_synchronous_local_loop():
    d = load_config().distributed
    assert (d.backend, d.mode, d.max_staleness, d.push_every, d.is_cap, d.rollout_workers) == ("local", "sync", 1, 1,
                                                                                                2.0, 2)
    assert d.ray_address is None and d.resources.rollout_worker.num_cpus == 1 and d.resources.learner.num_gpus == 0
    assert load_config().envs is None and load_config().algo.task_norm is False


def test_every_existing_config_still_loads():
    import yaml

    paths = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(paths) >= 9  # one per method x env, the quickstart and the multi-task example
    for path in paths:
        written = yaml.safe_load(path.read_text())
        cfg = load_config(path)  # raises ConfigError on any unknown or invalid key
        assert cfg.algo.method == written["algo"]["method"], path.name
        assert cfg.distributed.mode == "sync", path.name  # the synchronous loop stays the default


def test_overrides_reach_the_distributed_section():
    cfg = load_config(None, ["distributed.mode=async", "distributed.max_staleness=2", "distributed.push_every=3",
                             "distributed.backend=ray", "distributed.ray_address=auto",
                             "distributed.resources.inference.num_gpus=0.5"])
    d = cfg.distributed
    assert (d.mode, d.max_staleness, d.push_every, d.backend, d.ray_address) == ("async", 2, 3, "ray", "auto")
    assert d.resources.inference.num_gpus == 0.5


@pytest.mark.parametrize(("override", "message"), [
    ("distributed.mode=eager", "distributed.mode: Input should be 'sync' or 'async' (got 'eager')"),
    ("distributed.backend=mpi", "distributed.backend: Input should be 'local' or 'ray' (got 'mpi')"),
    ("distributed.max_staleness=-1", "distributed.max_staleness: Input should be greater than or equal to 0 (got -1)"),
    ("distributed.is_cap=0.5", "distributed.is_cap: Input should be greater than or equal to 1 (got 0.5)"),
    ("distributed.rollout_workers=0", "distributed.rollout_workers: Input should be greater than or equal to 1"),
    ("distributed.colour=blue", "distributed.colour: Extra inputs are not permitted (got 'blue')"),
    ("distributed.resources.learner.num_tpus=1", "distributed.resources.learner.num_tpus: Extra inputs"),
    ("distributed.push_every=2", "distributed.push_every=2 needs mode 'async'"),
])
def test_bad_distributed_values_are_named(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)


def test_push_interval_must_fit_the_staleness_bound():
    with pytest.raises(ConfigError, match="push_every=3 with max_staleness=1"):
        load_config(None, ["distributed.mode=async", "distributed.push_every=3"])
    assert load_config(None, ["distributed.mode=async", "distributed.push_every=2"]).distributed.push_every == 2


def test_multitask_envs_get_labels_and_weights():
    cfg = load_config(None, [TWO, "algo.task_norm=true"])
    assert [(e.label, e.weight) for e in cfg.task_envs()] == [("Calculator", 1.0), ("Sokoban", 0.5)]
    single = load_config(None, ["env.id=agentgym/Calculator-v0"]).task_envs()
    assert [(e.label, e.id, e.weight) for e in single] == [("Calculator", "agentgym/Calculator-v0", 1.0)]
    named = load_config(None, ["envs=[{id: agentgym/Sokoban-v0, name: easy}, {id: agentgym/Sokoban-v0, name: hard}]"])
    assert [e.label for e in named.task_envs()] == ["easy", "hard"]


@pytest.mark.parametrize(("overrides", "message"), [
    (["algo.task_norm=true"], "algo.task_norm=True needs a multi-task run"),
    (["envs=[]"], "envs: give at least one environment"),
    ([TWO, "env.id=agentgym/Sokoban-v0"], "give either 'env' (one environment) or 'envs'"),
    (["envs=[{id: agentgym/Sokoban-v0}, {id: agentgym/Sokoban-v0}]"], "names must be unique, ['Sokoban'] repeat"),
    (["envs=[{id: agentgym/Sokoban-v0, weight: 0}]"], "envs.0.weight: Input should be greater than 0 (got 0)"),
    (["envs=[{id: agentgym/Sokoban-v0, name: a/b}]"], "names ['a/b'] must be non-empty and contain no '/'"),
    (["envs=[{id: agentgym/Sokoban-v0, speed: 3}]"], "envs.0.speed: Extra inputs are not permitted (got 3)"),
])
def test_bad_multitask_configs_are_named(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value)
