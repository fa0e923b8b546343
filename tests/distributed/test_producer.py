"""RayProducer on a three-node cluster: spread over nodes, weight push, a killed worker."""

from __future__ import annotations

import threading
import time

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM

from agentgym.distributed import RayProducer, WorkerSpec
from agentgym.distributed.producer import WORKER_LOST
from agentgym.rollout import RolloutConfig, RolloutTask, TreeConfig

pytestmark = pytest.mark.slow  # a three-node cluster and model loads: tens of seconds

RESOURCES = {"rollout_worker": {"num_cpus": 1}, "inference": {"num_cpus": 0}, "env_pool": {"num_cpus": 0}}


CALC, SOKOBAN = "agentgym/Calculator-v0", "agentgym/Sokoban-v0"


def _spec(model: str, group_size: int = 2) -> WorkerSpec:
    rollout = RolloutConfig(group_size=group_size, max_turns=2, max_tokens=16, max_context_tokens=1024,
                            max_wait_s=None, step_timeout_s=None)
    # Two envs, as a multi-task run has: the first is the default.
    return WorkerSpec(model_path=model, envs={CALC: (CALC, {}), SOKOBAN: (SOKOBAN, {})}, rollout=rollout,
                      backend="hf")


@pytest.fixture(scope="module")
def producer(cluster, tiny_model):
    prod = RayProducer(_spec(tiny_model), num_workers=2, resources=RESOURCES, start_timeout_s=300)
    yield prod
    prod.close()


def _perturbed(model: str, scale: float) -> dict[str, torch.Tensor]:
    sd = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
    return {k: v + scale for k, v in sd.items()}


def test_workers_and_env_pools_are_spread_over_nodes(producer):
    infos = producer.worker_infos()
    assert len({i["node_id"] for i in infos}) == 2  # one CPU per node: two workers need two nodes
    assert all(i["env_pools"] == [CALC, SOKOBAN] for i in infos)
    assert set(producer.pools) == {(env, i["node_id"]) for env in (CALC, SOKOBAN) for i in infos}
    pool_nodes = ray.get([p.node_id.remote() for p in producer.pools.values()])
    assert pool_nodes == [node for _, node in producer.pools]  # each pool sits on the node it serves

    tasks = [RolloutTask(seed=s) for s in (11, 12, 13, 14)]
    trajs = producer.produce(tasks, seed=5)
    assert len(trajs) == 8
    assert len({t.metadata["worker"].split(":")[0] for t in trajs}) == 2
    assert sorted(t.metadata["task_index"] for t in trajs) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [t.seed for t in trajs] == [11, 11, 12, 12, 13, 13, 14, 14]
    assert len({t.episode_id for t in trajs}) == 8 and len({t.group_id for t in trajs}) == 4
    assert all(t.segments and t.turns and t.termination is not None for t in trajs)
    assert all(t.task_id.startswith("calc-") for t in trajs)  # the default env
    opened = ray.get([p.stats.remote() for p in producer.pools.values()])
    assert sum(s["opened"] for s in opened) == 8 and all(s["open"] == 0 for s in opened)


def test_a_named_env_runs_in_its_own_pools(producer):
    trajs = producer.produce([RolloutTask(seed=1), RolloutTask(seed=2)], seed=1, env=SOKOBAN)
    assert len(trajs) == 4 and all(t.task_id.startswith("sokoban-") for t in trajs)
    opened = {key: ray.get(pool.stats.remote())["opened"] for key, pool in producer.pools.items()}
    assert sum(n for (env, _), n in opened.items() if env == SOKOBAN) == 4
    with pytest.raises(KeyError, match="unknown env"):
        producer.produce([RolloutTask(seed=1)], seed=1, env="agentgym/Nope-v0")


def test_tree_rollouts_fork_pooled_envs(producer):
    tree = TreeConfig(trees=1, expansions=1, iterations=1, branch_by="fork")
    trajs = producer.produce([RolloutTask(seed=3), RolloutTask(seed=4)], seed=1, tree=tree)
    assert len(trajs) == 2 * tree.leaves_per_tree
    assert all(t.flatten() for t in trajs)  # resolved root-to-leaf paths
    assert len({t.tree_id for t in trajs}) == 2


def test_weight_push_reaches_every_worker_and_tags_versions(producer, tiny_model):
    seconds = producer.push_weights(_perturbed(tiny_model, 0.0), version=3)
    assert seconds > 0 and producer.push_seconds[-1] == seconds
    assert [i["weight_version"] for i in producer.worker_infos()] == [3, 3]
    before = producer.produce([RolloutTask(seed=7), RolloutTask(seed=8)], seed=9)
    assert {t.metadata["weight_version"] for t in before} == {3}
    # Different weights change the samples: the push really replaced the model.
    producer.push_weights(_perturbed(tiny_model, 0.05), version=4)
    after = producer.produce([RolloutTask(seed=7), RolloutTask(seed=8)], seed=9)
    assert {t.metadata["weight_version"] for t in after} == {4}
    assert [t.turns[0].action_ids for t in before] != [t.turns[0].action_ids for t in after]
    # Weights already in the object store (LearnerGroup.weights_ref) are pushed without a copy.
    producer.push_weights(ray.put(_perturbed(tiny_model, 0.0)), version=5)
    assert [i["weight_version"] for i in producer.worker_infos()] == [5, 5]


def _wait_for_open_sessions(pool, thread: threading.Thread) -> None:
    deadline = time.time() + 120
    while ray.get(pool.stats.remote())["open"] == 0:  # episodes are in flight on that node
        assert time.time() < deadline and thread.is_alive(), "no episodes started on that node"
        time.sleep(0.05)


def test_killed_env_pool_marks_its_episodes_and_restarts(producer):
    node = producer.worker_infos()[1]["node_id"]
    pool = producer.pools[(CALC, node)]
    results: list = []
    thread = threading.Thread(target=lambda: results.extend(producer.produce(
        [RolloutTask(seed=s) for s in range(50, 62)], seed=4)))
    thread.start()
    _wait_for_open_sessions(pool, thread)
    ray.kill(pool, no_restart=False)
    thread.join(timeout=300)
    assert not thread.is_alive() and len(results) == 24
    failed = [t for t in results if t.termination is not None and t.termination.value == "error:env_error"]
    assert failed and all(t.metadata["worker"].startswith(node) for t in failed)
    assert producer.lost_workers == 0  # the workers themselves were fine
    deadline = time.time() + 60
    while True:  # Ray restarts the pool on its node, under the same name (a fresh pool has opened nothing)
        try:
            if ray.get(pool.stats.remote(), timeout=10)["opened"] == 0:
                break
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        assert time.time() < deadline, "the env pool was not restarted"
        time.sleep(0.2)
    assert ray.get(pool.node_id.remote()) == node
    again = producer.produce([RolloutTask(seed=s) for s in range(62, 66)], seed=5)
    assert not [t for t in again if t.failed]


def test_killed_worker_marks_its_episodes_restarts_and_catches_up(producer):
    producer.push_weights(_weights_of(producer), version=7)
    lost_before = producer.lost_workers
    victim = producer.workers[0]
    victim_pool = producer.pools[(CALC, producer.worker_infos()[0]["node_id"])]
    tasks = [RolloutTask(seed=s) for s in range(20, 32)]
    results: list = []
    thread = threading.Thread(target=lambda: results.extend(producer.produce(tasks, seed=2)))
    thread.start()
    _wait_for_open_sessions(victim_pool, thread)
    ray.kill(victim, no_restart=False)
    thread.join(timeout=300)
    assert not thread.is_alive()
    assert len(results) == 24  # nothing dropped
    lost = [t for t in results if t.metadata.get("error") == WORKER_LOST]
    assert lost and all(t.failed and not t.turns for t in lost)
    assert {t.metadata["worker"] for t in lost} == {producer.names[0]}
    assert producer.lost_workers == lost_before + 1
    # Ray restarted the actor; it loads the newest weights and keeps producing on both nodes.
    trajs = producer.produce([RolloutTask(seed=s) for s in range(40, 44)], seed=3)
    assert not [t.metadata["termination_detail"] for t in trajs if t.metadata.get("error") == WORKER_LOST]
    assert {t.metadata["weight_version"] for t in trajs} == {7}
    assert len({t.metadata["worker"].split(":")[0] for t in trajs}) == 2
    assert all(i["weight_version"] == 7 for i in producer.worker_infos())
    # The sessions the lost incarnation left in its pool were closed.
    assert ray.get(victim_pool.stats.remote())["open"] == 0


def _weights_of(producer) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(producer.spec.model_path, dtype=torch.float32).state_dict()
