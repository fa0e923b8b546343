"""The rollout worker actor: one inference engine plus a RolloutEngine.

A :class:`RolloutWorker` owns a policy backend (the ``transformers`` backend on
the CPU, vLLM when it is given a GPU: one engine per GPU) and runs
:class:`~agentgym.rollout.RolloutEngine` rollouts with it. Its envs are built in
the worker's own process or, when its node has an
:class:`~agentgym.distributed.env_pool.EnvPool`, held by that pool.

Weights. :meth:`RolloutWorker.load_weights` receives the learner's state dict
through the object store (Ray resolves the ``ObjectRef`` argument on the
worker's node) and makes it the *pending* version; it is applied at once when
no rollout is running, else before the next rollout starts, so no episode
ever mixes two weight versions. Loading and rollouts run in separate
concurrency groups of the actor, so a push never waits for a rollout to end.
A rollout call also names the newest version it expects (with its reference
wrapped in a list, so Ray does not fetch it eagerly); a worker that is behind,
such as one Ray has just restarted, loads it first.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from agentgym.distributed.resources import import_ray
from agentgym.rollout import RolloutConfig, RolloutTask, TreeConfig

ray = import_ray()

__all__ = ["RolloutWorker", "WorkerSpec", "pool_name"]


@dataclass(frozen=True)
class WorkerSpec:
    """How to build a rollout worker (the same for every worker of a producer).

    Attributes:
        model_path: A model folder every node can read (shared storage or a hub id).
        envs: Env name -> ``(env id, agentgym.make kwargs)``; the first is the default (a
            multi-task run names one per ``envs:`` entry).
        rollout: Rollout settings (``seed`` is replaced per call).
        backend: ``"hf"`` (transformers), ``"vllm"``, or ``"auto"`` (vLLM when the
            worker was given a GPU, else transformers).
        dtype: ``"float32"`` (CPU tests) or ``"bfloat16"``.
        seed: Seeds the backend's generator.
        vllm_kwargs: Extra ``vllm.LLM`` arguments (``gpu_memory_utilization``, ...).
    """

    model_path: str
    envs: dict[str, tuple[str, dict[str, Any]]]
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    backend: str = "auto"
    dtype: str = "float32"
    seed: int = 0
    vllm_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def single(cls, model_path: str, env_id: str, env_kwargs: dict[str, Any] | None = None,
               **kwargs: Any) -> WorkerSpec:
        """A spec with one env, named by its id."""
        return cls(model_path=model_path, envs={env_id: (env_id, dict(env_kwargs or {}))}, **kwargs)

    @property
    def default_env(self) -> str:
        """The name of the first env."""
        return next(iter(self.envs))

    def env_name(self, env: str | None) -> str:
        """``env`` checked against :attr:`envs` (None: the default)."""
        name = self.default_env if env is None else env
        if name not in self.envs:
            raise KeyError(f"unknown env {name!r}; this producer has {sorted(self.envs)}")
        return name


def pool_name(prefix: str, env: str, node_id: str) -> str:
    """The Ray actor name of the pool of env ``env`` on node ``node_id``."""
    return f"{prefix}{env}@{node_id}"


def _build_backend(spec: WorkerSpec, num_gpus: int) -> Any:
    """The worker's inference engine: vLLM on a GPU, else the ``transformers`` backend."""
    kind = spec.backend if spec.backend != "auto" else ("vllm" if num_gpus > 0 else "hf")
    if kind == "vllm":
        from agentgym.backends.vllm_backend import VLLMBackend

        return VLLMBackend(spec.model_path, dtype=spec.dtype, seed=spec.seed, **spec.vllm_kwargs)
    if kind != "hf":
        raise ValueError(f"unknown rollout backend {spec.backend!r}; use 'hf', 'vllm' or 'auto'")
    import torch

    from agentgym.backends.hf import HFBackend

    device = "cuda" if num_gpus > 0 and torch.cuda.is_available() else "cpu"
    return HFBackend.from_pretrained(spec.model_path, device=device, dtype=getattr(torch, spec.dtype),
                                     max_batch_size=spec.rollout.max_batch_size, seed=spec.seed)


class _RolloutWorker:
    """The body of the :data:`RolloutWorker` actor (see the module docstring).

    Args:
        spec: What to build.
        pool_prefix: Name prefix of the node-local env pools (named Ray actors, see
            :func:`pool_name`). The pools on this worker's node, if there are any, hold its envs
            (looked up again after a restart); otherwise they are built in this process.
    """

    def __init__(self, spec: WorkerSpec, pool_prefix: str | None = None) -> None:
        from transformers import AutoTokenizer

        from agentgym.rollout import ChatRenderer

        context = ray.get_runtime_context()
        self.node_id: str = context.get_node_id()
        self.name = f"{self.node_id}:{context.get_actor_id()}"
        # Owner of this incarnation's pool sessions (a restart gets a new one, so the producer
        # can close what the previous incarnation left open).
        self.session_owner = f"{self.name}#{uuid.uuid4().hex[:8]}"
        self.spec = spec
        self.backend = _build_backend(spec, len(context.get_accelerator_ids().get("GPU", [])))
        self.renderer = ChatRenderer(AutoTokenizer.from_pretrained(spec.model_path))
        self.pool_prefix = pool_prefix
        self.env_pools: dict[str, Any] = {}
        self.attach_pool()
        self._run_lock = threading.Lock()  # held while a rollout uses the backend
        self._pending_lock = threading.Lock()
        self._pending: tuple[dict[str, Any], int] | None = None
        self.received_version = 0

    # ------------------------------------------------------------------ identity
    @ray.method(concurrency_group="weights")
    def info(self) -> dict[str, Any]:
        """Node id, name, loaded and newest received weight version, env placement, session owner."""
        return {"node_id": self.node_id, "worker": self.name, "weight_version": self.backend.weight_version,
                "received_version": self.received_version, "env_pools": sorted(self.env_pools),
                "session_owner": self.session_owner}

    @ray.method(concurrency_group="weights")
    def attach_pool(self) -> list[str]:
        """Use this node's env pools where they exist; returns the envs that have one."""
        if self.pool_prefix is not None:
            for env in self.spec.envs:
                try:
                    self.env_pools[env] = ray.get_actor(pool_name(self.pool_prefix, env, self.node_id))
                except ValueError:  # no pool on this node: this env runs in this process
                    self.env_pools.pop(env, None)
        return sorted(self.env_pools)

    # ------------------------------------------------------------------- weights
    @ray.method(concurrency_group="weights")
    def load_weights(self, state_dict: dict[str, Any], version: int) -> int:
        """Take a new weight version (applied now if idle, else before the next rollout).

        Args:
            state_dict: The learner's weights (Ray fetched them from the object store).
            version: Their version.

        Returns:
            The version received.
        """
        with self._pending_lock:
            if version >= self.received_version:
                self._pending, self.received_version = (state_dict, int(version)), int(version)
        if self._run_lock.acquire(blocking=False):
            try:
                self._apply_pending()
            finally:
                self._run_lock.release()
        return self.received_version

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is not None and pending[1] >= self.backend.weight_version:
            self.backend.load_weights(*pending)

    # ------------------------------------------------------------------ rollouts
    def _env_factory(self, env: str) -> Any:
        pool = self.env_pools.get(env)
        if pool is not None:
            from agentgym.distributed.env_pool import PooledEnv

            owner = self.session_owner
            return lambda: PooledEnv(pool, owner=owner)
        import agentgym

        env_id, kwargs = self.spec.envs[env]
        return lambda: agentgym.make(env_id, **kwargs)

    @ray.method(concurrency_group="rollout")
    def rollout(self, tasks: list[RolloutTask], seed: int, tree: TreeConfig | None = None,
                latest: tuple[list[Any], int] | None = None, env: str | None = None) -> list[dict[str, Any]]:
        """Roll out ``tasks`` (groups, or Tree-GRPO trees resolved to full paths).

        Args:
            tasks: The tasks of this call.
            seed: The sampling seed of this call.
            tree: Tree-GRPO settings (None: ``group_size`` chains per task).
            latest: ``([weights_ref], version)`` of the newest weights; loaded first when
                this worker is behind (e.g. just restarted).
            env: The env name (None: the spec's first).

        Returns:
            Trajectory dicts (:meth:`Trajectory.to_dict`), each with ``metadata["weight_version"]``
            and ``metadata["worker"]`` (``"<node id>:<actor id>"``).
        """
        from agentgym.rollout import RolloutEngine
        from agentgym.rollout.tree import resolve_paths

        if latest is not None and latest[1] > self.received_version:
            self.load_weights(ray.get(latest[0][0]), latest[1])
        with self._run_lock:
            self._apply_pending()
            version = int(self.backend.weight_version)
            config = self.spec.rollout.model_copy(update={"seed": int(seed)})
            engine = RolloutEngine(self.backend, self.renderer, self._env_factory(self.spec.env_name(env)), config)
            if tree is None:
                trajectories = engine.run(list(tasks)).trajectories
            else:
                trajectories = resolve_paths(engine.run_trees(list(tasks), tree).trajectories)
        out = []
        for traj in trajectories:
            traj.metadata["weight_version"] = version
            traj.metadata["worker"] = self.name
            out.append(traj.to_dict())
        return out


RolloutWorker = ray.remote(concurrency_groups={"weights": 1, "rollout": 1})(_RolloutWorker)
"""The Ray actor class of :class:`_RolloutWorker` (configure with ``.options(...)``)."""
