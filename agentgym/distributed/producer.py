"""``RayProducer``: the rollout producer of the Ray backend.

It implements the trainer's ``RolloutProducer`` protocol
(``produce`` / ``push_weights`` / ``close``, see ``agentgym.trainers.pipeline``)
with Ray's own machinery:

* **Placement.** ``distributed.rollout_workers`` :class:`RolloutWorker` actors are
  placed with Ray's ``SPREAD`` strategy, each with the ``rollout_worker`` +
  ``inference`` resources of the config. Then, per env, one :class:`EnvPool` per
  node that got a worker is pinned to that node (``NodeAffinitySchedulingStrategy``,
  hard), as a named actor, so each worker finds its node's pools by name, also
  after a restart.
* **Work.** :meth:`RayProducer.produce` cuts the tasks into one contiguous chunk
  per worker (rotating which worker gets the first chunk from call to call) and
  gathers the results; group ids, episode ids and task indices are renumbered
  to the call's task order.
* **Weights.** :meth:`RayProducer.push_weights` puts the state dict into the
  object store once (``ray.put``) and every worker loads that one object;
  the seconds taken are returned and kept in :attr:`RayProducer.push_seconds`.
* **Faults.** Workers and pools are started with ``max_restarts``. When a worker
  dies during a call (``RayActorError``), the episodes it held come back as
  trajectories with no turns, ``metadata["error"] = "worker_lost"`` and the
  termination ``error:worker_lost``, instead of being dropped; Ray restarts the actor, the
  next call to it first waits until it answers, closes the env sessions its
  previous life left open and hands it the newest weights, and production goes
  on. A dead env pool is restarted by Ray too; its episodes end with
  ``error:env_error`` (see :mod:`agentgym.distributed.env_pool`).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from agentgym.distributed.env_pool import EnvPool
from agentgym.distributed.resources import import_ray, ray_options
from agentgym.distributed.worker import RolloutWorker, WorkerSpec, pool_name
from agentgym.rollout import RolloutTask, Termination, Trajectory, TreeConfig
from agentgym.rollout.stats import derive_seed

ray = import_ray()
from ray.exceptions import GetTimeoutError, RayActorError  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

__all__ = ["WORKER_LOST", "RayProducer", "make_ray_producer", "worker_lost_trajectory"]

WORKER_LOST = "worker_lost"
"""``metadata["error"]`` of an episode whose rollout worker died."""
# The trajectory record has no termination kind for a lost worker yet; use it once it exists.
_LOST_TERMINATION = Termination.WORKER_LOST


def worker_lost_trajectory(task: RolloutTask, index: int, member: int, *, worker: str, version: int,
                           detail: str) -> Trajectory:
    """The marked record of one episode lost with its worker (no turns, failure termination)."""
    return Trajectory(
        episode_id=f"{index}-{member}-lost", group_id=f"group-{index}", seed=task.seed, termination=_LOST_TERMINATION,
        metadata={"task_index": index, "member": member, "error": WORKER_LOST, "termination_detail": detail[:500],
                  "weight_version": version, "worker": worker},
    )


def _renumber(data: dict[str, Any], offset: int, call: int) -> Trajectory:
    """A worker's trajectory dict with ids moved to the call's task numbering."""
    traj = Trajectory.from_dict(data)
    local = int(str(traj.group_id).rsplit("-", 1)[-1])
    traj.group_id = f"group-{offset + local}"
    traj.episode_id = f"c{call}-{offset + local}-{traj.episode_id}"
    if traj.tree_id is not None:
        traj.tree_id = f"c{call}-{offset}-{traj.tree_id}"
    traj.metadata["task_index"] = offset + local
    return traj


class RayProducer:
    """Rollouts on Ray actors over the cluster's nodes (see the module docstring).

    Args:
        spec: How every worker builds its engine, renderer and envs.
        num_workers: Rollout worker actors.
        resources: ``distributed.resources`` (role name -> ``{num_cpus, num_gpus, memory}``).
        env_pools: Hold envs in one node-local :class:`EnvPool` per node (else in each worker).
        max_restarts: Restarts Ray grants each actor (-1: unlimited).
        ray_address: ``None`` starts (or reuses) a local Ray; ``"auto"`` / ``"host:port"`` joins
            a cluster. Ignored when Ray is already initialised in this process.
        start_timeout_s: Seconds to wait for the actors to start.
    """

    def __init__(self, spec: WorkerSpec, *, num_workers: int = 2, resources: Mapping[str, Any] | Any = None,
                 env_pools: bool = True, max_restarts: int = -1, ray_address: str | None = None,
                 start_timeout_s: float = 600.0) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=ray_address, log_to_driver=False)
        self.spec = spec
        self.resources = resources or {}
        self.max_restarts = max_restarts
        self.pool_prefix = f"agentgym-envpool-{uuid.uuid4().hex[:8]}-" if env_pools else None
        self.workers = [
            RolloutWorker.options(**ray_options(self.resources, "rollout_worker"), max_restarts=max_restarts,
                                  scheduling_strategy="SPREAD").remote(spec, self.pool_prefix)
            for _ in range(num_workers)
        ]
        self.pools: dict[tuple[str, str], Any] = {}  # (env name, node id) -> EnvPool
        self.push_seconds: list[float] = []
        self.lost_workers = 0
        self._latest: tuple[Any, int] | None = None
        self._recovering: set[int] = set()  # workers lost and not yet seen answering again
        self.restart_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._calls = itertools.count()
        try:
            try:
                infos = ray.get([w.info.remote() for w in self.workers], timeout=start_timeout_s)
            except GetTimeoutError:
                raise RuntimeError(
                    f"{num_workers} rollout workers did not start within {start_timeout_s}s: the cluster needs room "
                    f"for {num_workers} actors of {ray_options(self.resources, 'rollout_worker')} (rollout_worker + "
                    "inference resources; `ray status` shows what it has)") from None
            if env_pools:
                self._start_pools({info["node_id"] for info in infos}, start_timeout_s)
        except BaseException:
            self.close()
            raise
        self.names = [info["worker"] for info in infos]
        self._owners = [info["session_owner"] for info in infos]

    def _start_pools(self, nodes: set[str], timeout: float) -> None:
        """Per env, one named pool pinned to each node that has workers; workers then attach to theirs."""
        assert self.pool_prefix is not None
        for node in sorted(nodes):
            for env, (env_id, env_kwargs) in self.spec.envs.items():
                self.pools[(env, node)] = EnvPool.options(
                    **ray_options(self.resources, "env_pool"), name=pool_name(self.pool_prefix, env, node),
                    max_restarts=self.max_restarts, max_concurrency=64,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
                ).remote(env_id, env_kwargs)
        try:
            ray.get([pool.node_id.remote() for pool in self.pools.values()], timeout=timeout)
        except GetTimeoutError:
            raise RuntimeError(f"the env pools did not start within {timeout}s: each node with a rollout worker "
                               f"needs room for one more actor of {ray_options(self.resources, 'env_pool')} "
                               "(lower distributed.resources.env_pool)") from None
        ray.get([w.attach_pool.remote() for w in self.workers], timeout=timeout)

    # ----------------------------------------------------------------- weights
    def push_weights(self, state_dict: Mapping[str, Any], version: int) -> float:
        """Put the weights in the object store once and have every worker load them.

        Args:
            state_dict: The learner's weights (any device; moved to host memory here), or an
                ObjectRef to them (e.g. :meth:`LearnerGroup.weights_ref`).
            version: Their version.

        Returns:
            Seconds from the call until every live worker has received them.
        """
        start = time.perf_counter()
        if isinstance(state_dict, ray.ObjectRef):  # already in the object store (LearnerGroup.weights_ref)
            ref = state_dict
        else:
            ref = ray.put({name: tensor.detach().to("cpu") for name, tensor in state_dict.items()})
        with self._lock:
            self._latest = (ref, int(version))
        # A restarting worker is skipped: it loads the newest weights once it answers again.
        acks = {k: w.load_weights.remote(ref, int(version)) for k, w in enumerate(self.workers)
                if k not in self._recovering}
        for k, ack in acks.items():
            try:
                ray.get(ack)
            except RayActorError:
                self._lost(k)
        seconds = time.perf_counter() - start
        self.push_seconds.append(seconds)
        return seconds

    @property
    def version(self) -> int:
        """The newest version pushed (0 before any push)."""
        return self._latest[1] if self._latest is not None else 0

    def worker_infos(self, timeout: float = 120.0) -> list[dict[str, Any]]:
        """Each worker's :meth:`RolloutWorker.info` (node, loaded and received versions)."""
        return ray.get([w.info.remote() for w in self.workers], timeout=timeout)

    # ---------------------------------------------------------------- rollouts
    def produce(self, tasks: list[RolloutTask], *, seed: int, tree: TreeConfig | None = None,
                env: str | None = None) -> list[Trajectory]:
        """Roll out ``tasks`` over the workers (blocking; safe to call from several threads).

        Args:
            tasks: The tasks (each a group of ``group_size`` episodes, or ``trees`` trees).
            seed: The sampling seed of this call (each chunk derives its own from it).
            tree: Tree-GRPO settings (None: plain groups).
            env: The env name (multi-task runs; None: the spec's first).

        Returns:
            One trajectory per episode (tree leaves resolved to full paths), in task order,
            each with ``metadata["weight_version"]`` and ``metadata["worker"]``; episodes of a
            worker lost during the call are marked (``metadata["error"] == "worker_lost"``).
        """
        env = self.spec.env_name(env)
        call = next(self._calls)
        with self._lock:
            latest = None if self._latest is None else ([self._latest[0]], self._latest[1])
        n = len(self.workers)
        bounds = [round(k * len(tasks) / min(n, len(tasks) or 1)) for k in range(min(n, len(tasks)) + 1)]
        jobs = []
        for k in range(len(bounds) - 1):
            lo, hi = bounds[k], bounds[k + 1]
            worker = (call + k) % n
            if worker in self._recovering:
                self._await_ready(worker)
            ref = self.workers[worker].rollout.remote(tasks[lo:hi], derive_seed(seed, lo), tree, latest, env)
            jobs.append((worker, lo, hi, ref))
        out: list[Trajectory] = []
        for worker, lo, hi, ref in jobs:
            try:
                out.extend(_renumber(d, lo, call) for d in ray.get(ref))
            except RayActorError as exc:
                self._lost(worker)
                out.extend(self._lost_episodes(tasks[lo:hi], lo, tree, worker, str(exc)))
        out.sort(key=lambda t: t.metadata["task_index"])  # stable: completion order within a task
        return out

    def _lost_episodes(self, tasks: list[RolloutTask], offset: int, tree: TreeConfig | None, worker: int,
                       detail: str) -> list[Trajectory]:
        per_task = self.spec.rollout.group_size if tree is None else tree.trees * tree.leaves_per_tree
        name = self.names[worker]
        return [worker_lost_trajectory(task, offset + i, m, worker=name, version=self.version,
                                       detail=f"rollout worker lost: {detail}")
                for i, task in enumerate(tasks) for m in range(per_task)]

    def _lost(self, worker: int) -> None:
        """Count a lost worker (once per loss); Ray restarts it (``max_restarts``)."""
        with self._lock:
            if worker not in self._recovering:
                self.lost_workers += 1
                self._recovering.add(worker)

    def _await_ready(self, worker: int) -> None:
        """Wait until a restarted worker answers, then hand it the newest weights.

        Calls sent to an actor while Ray restarts it fail with ``ActorUnavailableError``,
        so the next chunk waits here (up to ``restart_timeout_s``; after that it is sent
        anyway and, if it fails, comes back marked).
        """
        handle, deadline = self.workers[worker], time.monotonic() + self.restart_timeout_s
        while time.monotonic() < deadline:
            try:
                info = ray.get(handle.info.remote(), timeout=10)
                if info["session_owner"] != self._owners[worker]:  # free the sessions its previous life held
                    for pool in self.pools.values():
                        pool.close_owner.remote(self._owners[worker])
                    self._owners[worker] = info["session_owner"]
                self.names[worker] = info["worker"]  # its node may have changed
                with self._lock:
                    latest = self._latest
                if latest is not None:
                    ray.get(handle.load_weights.remote(latest[0], latest[1]), timeout=self.restart_timeout_s)
                self._recovering.discard(worker)
                return
            except (RayActorError, GetTimeoutError):
                time.sleep(0.2)

    def close(self) -> None:
        """Stop the workers and pools (and Ray itself when this producer started it)."""
        for actor in [*getattr(self, "workers", []), *getattr(self, "pools", {}).values()]:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self.workers, self.pools = [], {}
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()


def make_ray_producer(trainer: Any) -> RayProducer:
    """The trainer's producer for ``distributed.backend: ray``.

    Reads ``trainer.cfg.distributed`` (``rollout_workers``, ``resources``, ``ray_address``)
    and builds workers that sample like the trainer's own rollouts (same rollout config,
    model folder and envs, by the trainer's env names).
    """
    from agentgym.trainers.model_source import model_path

    cfg = trainer.cfg
    dist = cfg.distributed
    resources = dist.resources.model_dump() if hasattr(dist.resources, "model_dump") else dict(dist.resources)
    gpus = float(ray_options(resources, "rollout_worker")["num_gpus"])
    spec = WorkerSpec(
        model_path=model_path(cfg), envs={name: (e.id, dict(e.kwargs)) for name, e in trainer.envs.items()},
        rollout=trainer._rollout_config(seed=cfg.run.seed), backend="auto",
        dtype="bfloat16" if gpus > 0 and cfg.model.bf16 else "float32", seed=cfg.run.seed,
    )
    return RayProducer(spec, num_workers=dist.rollout_workers, resources=resources, ray_address=dist.ray_address)
