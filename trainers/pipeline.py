"""Rollout producers and the asynchronous training pipeline with bounded staleness.

A :class:`RolloutProducer` rolls out a step's tasks with the newest weights it holds and takes
weight pushes; :class:`LocalProducer` does it in this process (the rollout engine on the
trainer's backend), ``agentgym.distributed`` supplies the Ray one (``distributed.backend:
ray``, chosen by :func:`make_producer`).

``distributed.mode: sync`` (default) is the on-policy loop of :mod:`.loop`: roll out step
``k`` with weights ``k``, update, push. ``mode: async`` (:class:`AsyncRollouts`) runs
``distributed.rollout_workers`` producer threads that roll out later steps while the learner
updates::

    producer thread j:  claim the next step k; wait until the pushed weights are at least
                        version(k) - max_staleness; roll out step k; hand it in
    learner:            take step k (in order); update; version += 1; push every push_every

``version(k)`` is the learner's version when it consumes step ``k``. The gate is on the
weights a producer *starts* with, and versions only grow, so no trajectory is ever more than
``max_staleness`` versions old when trained on; slow episodes are waited for, never dropped
(dropping them would bias training toward easy tasks). ``max_staleness = 0`` makes step ``k``
wait for weights ``k``: the same rollouts and updates as the synchronous loop.

Stale samples (``metadata["weight_version"] < learner version``) are trained with the
decoupled PPO objective (Hilton et al., 2022, arXiv:2110.00641; AReaL, Fu et al., 2025,
arXiv:2505.24298): the ratio is taken against the proximal policy (the learner's weights
before the update, recomputed) and each token's loss is weighted by the truncated importance
weight ``min(pi_prox / pi_behaviour, is_cap)`` (:func:`agentgym.trainers.losses.truncated_is_weights`).
Fresh samples get no correction at all.

Multi-task runs (``envs:``) may normalise advantages per env (AgentRL, Zhang et al., 2025,
arXiv:2510.04206, "task advantage normalisation"): :func:`task_normalize`.

Deviations and choices:
    * Local producer threads share one inference model behind a lock (:class:`SerialBackend`):
      generation calls are serialised, env steps and the learner's update overlap with them.
      A push lands between two generation calls, so a long episode may finish with newer
      weights than it started with; its recorded ``weight_version`` is the oldest one (the
      staleness bound holds for it) and the importance weights use every token's own
      recorded log-prob.
    * Staleness and importance weights are per trajectory: a trajectory whose oldest turn is
      stale gets the correction on all its tokens.
    * SeeUPO recomputes its old log-probs itself, so its per-turn batches get no importance
      weights (their ratio is already against the current policy).
    * Task normalisation is token-level z-scoring of the advantages over each env's action
      tokens in the step's batch (unbiased std, +1e-6); AgentRL does not publish more detail
      than "normalise per task".
    * With ``max_staleness > 0`` a resumed run re-rolls the steps that were in flight at the
      kill with the checkpoint's weights, so it is not bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from agentgym.rollout import ChatRenderer, RolloutConfig, RolloutEngine, RolloutTask, Trajectory, TreeConfig
from agentgym.rollout.tree import resolve_paths
from agentgym.trainers import losses
from agentgym.trainers.batch import TrainBatch

if TYPE_CHECKING:
    from agentgym.core import AgentEnv
    from agentgym.trainers.loop import Trainer

__all__ = [
    "AsyncRollouts",
    "CorrectedLearner",
    "LocalProducer",
    "RolloutProducer",
    "SerialBackend",
    "accepts_env",
    "make_producer",
    "resolved_paths",
    "staleness_stats",
    "tag_env",
    "task_normalize",
]


@runtime_checkable
class RolloutProducer(Protocol):
    """Where a trainer's rollouts come from (local threads or Ray actors)."""

    def produce(self, tasks: list[RolloutTask], *, seed: int, tree: TreeConfig | None = None,
                **kwargs: Any) -> list[Trajectory]:
        """Roll out ``tasks`` (groups of ``rollout.group_size``, or trees) with the newest weights held.

        Blocking, and may be called from several threads at once. Every returned trajectory has
        ``metadata["weight_version"]`` (int) and ``metadata["worker"]`` (str); failed episodes
        are returned marked (termination / error set), never dropped. Multi-task trainers pass
        ``env=<name>`` (the ``envs:`` entry's name) to say which env the tasks belong to.
        """
        ...

    def push_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Make ``version`` the weights used for new generations; returns seconds taken."""
        ...

    def close(self) -> None:
        """Release workers and threads."""
        ...


class SerialBackend:
    """A token backend behind a lock: generation calls and weight loads never overlap.

    Attribute reads other than :meth:`generate` / :meth:`load_weights` go to the wrapped
    backend unchanged.

    Args:
        backend: The wrapped backend (e.g. :class:`~agentgym.backends.hf.HFBackend`).
    """

    def __init__(self, backend: Any) -> None:
        self.inner = backend
        self.lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        """The wrapped ``generate``, under the lock."""
        with self.lock:
            return self.inner.generate(prompts, sampling)

    def load_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """The wrapped ``load_weights``, under the lock (waits for a running generation call)."""
        with self.lock:
            self.inner.load_weights(state_dict, version)


class LocalProducer:
    """Rolls out in this process with the rollout engine on a shared backend.

    Args:
        backend: The inference backend (wrapped in :class:`SerialBackend` if it is not already).
        renderer: Chat rendering for the policy's tokenizer.
        env_factories: Env name -> factory; the first one is the default env.
        config: Rollout settings; ``seed`` is replaced by each call's ``seed``.
    """

    def __init__(self, backend: Any, renderer: ChatRenderer, env_factories: Mapping[str, Callable[[], AgentEnv]],
                 config: RolloutConfig) -> None:
        if not env_factories:
            raise ValueError("LocalProducer needs at least one env factory")
        self.backend = backend if isinstance(backend, SerialBackend) else SerialBackend(backend)
        self.renderer = renderer
        self.env_factories = dict(env_factories)
        self.config = config

    @classmethod
    def from_trainer(cls, trainer: Trainer) -> LocalProducer:
        """The producer of a trainer: its backend, renderer, envs and rollout settings."""
        factories = {e.label: trainer.env_factory(env=e.label) for e in trainer.cfg.task_envs()}
        return cls(trainer.backend, trainer.renderer, factories, trainer._rollout_config(seed=trainer.cfg.run.seed))

    def produce(self, tasks: list[RolloutTask], *, seed: int, tree: TreeConfig | None = None,
                env: str | None = None) -> list[Trajectory]:
        """See :meth:`RolloutProducer.produce`; ``env`` names the env (default: the first)."""
        name = env if env is not None else next(iter(self.env_factories))
        if name not in self.env_factories:
            raise KeyError(f"unknown env {name!r}; this producer has {sorted(self.env_factories)}")
        engine = RolloutEngine(self.backend, self.renderer, self.env_factories[name],
                               self.config.model_copy(update={"seed": seed}))
        version = int(self.backend.weight_version)
        if tree is not None:
            trajectories = resolve_paths(engine.run_trees(tasks, tree).trajectories)
        else:
            trajectories = engine.run(tasks).trajectories
        worker = f"local:{threading.current_thread().name}"
        for traj in trajectories:
            traj.metadata["weight_version"] = traj.weight_version if traj.turns else version
            traj.metadata["worker"] = worker
        return trajectories

    def push_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Load the weights into the shared backend (after any running generation call)."""
        start = time.perf_counter()
        self.backend.load_weights(state_dict, version)
        return time.perf_counter() - start

    def close(self) -> None:
        """Nothing to release (the backend belongs to the trainer)."""


def make_producer(trainer: Trainer) -> RolloutProducer:
    """The producer for ``distributed.backend``: local threads, or Ray (imported only then).

    Raises:
        ImportError: For ``ray`` without Ray installed (the message says how to install it).
    """
    if trainer.cfg.distributed.backend == "ray":
        from agentgym.distributed import make_ray_producer

        return make_ray_producer(trainer)
    return LocalProducer.from_trainer(trainer)


def accepts_env(producer: RolloutProducer) -> bool:
    """Whether ``producer.produce`` takes the ``env=`` keyword (needed by multi-task runs)."""
    params = inspect.signature(producer.produce).parameters.values()
    return any(p.name == "env" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


# --------------------------------------------------------------- corrections
def task_normalize(advantages: torch.Tensor, mask: torch.Tensor, row_tasks: Sequence[Hashable],
                   eps: float = 1e-6) -> torch.Tensor:
    """Per-task z-scoring of token advantages (AgentRL's task advantage normalisation).

    The mask values weight each token in its task's mean and (unbiased, frequency-weighted) std:
    on ordinary rows they are 1; on packed Tree-GRPO rows a shared token stands for every leaf
    below it, so the statistics equal those of the per-leaf rows. A task with a total weight of
    one keeps its raw advantages (the GRPO singleton convention).

    Args:
        advantages: ``(B, T)`` per-token advantages.
        mask: ``(B, T)`` action-token mask (or weights); only these tokens enter the statistics and change.
        row_tasks: The task (env) of each row.
        eps: Added to each task's std.

    Returns:
        ``(B, T)``: on masked tokens ``(A - mean_task) / (std_task + eps)``, elsewhere 0.
    """
    if len(row_tasks) != advantages.shape[0]:
        raise ValueError(f"{len(row_tasks)} row tasks for {advantages.shape[0]} rows")
    out = torch.zeros_like(advantages)
    weights = mask.double().clamp_min(0.0)
    values = advantages.double()
    for task in dict.fromkeys(row_tasks):
        rows = torch.tensor([r for r, t in enumerate(row_tasks) if t == task], dtype=torch.long)
        w, x = weights[rows], values[rows]
        total = float(w.sum())
        if total <= 0.0:
            continue
        mean, std = 0.0, 1.0
        if total > 1.0:
            mean = float((w * x).sum()) / total
            std = (float((w * (x - mean) ** 2).sum()) / (total - 1.0)) ** 0.5
        normed = (x - mean) / (std + eps)
        out[rows] = torch.where(w > 0, normed, torch.zeros_like(normed)).to(advantages.dtype)
    return out


class CorrectedLearner:
    """A learner proxy that corrects each update for stale samples and, optionally, per-task scale.

    Every attribute except :meth:`update` is the wrapped learner's.

    Args:
        learner: The :class:`~agentgym.trainers.learner.Learner`.
        stale: Per trajectory of the step: sampled with older weights than the learner's.
        is_cap: Truncation of the importance weights.
        tasks: Per trajectory: its env (task normalisation), or None for no normalisation.
    """

    def __init__(self, learner: Any, stale: Sequence[bool], *, is_cap: float,
                 tasks: Sequence[Hashable] | None = None) -> None:
        self.learner = learner
        self.stale = torch.as_tensor(list(stale), dtype=torch.bool)
        self.is_cap = is_cap
        self.tasks = list(tasks) if tasks is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.learner, name)

    def correct(self, batch: TrainBatch) -> dict[str, float]:
        """Apply task normalisation and truncated IS to ``batch`` in place; returns diagnostics."""
        stats: dict[str, float] = {}
        rows = batch.row_traj.long()
        if self.tasks is not None:
            batch.advantages = task_normalize(batch.advantages, batch.loss_mask, [self.tasks[i] for i in rows.tolist()])
        stale_rows = self.stale[rows] if len(rows) else torch.zeros(0, dtype=torch.bool)
        if bool(stale_rows.any()):
            proximal = self.learner.logprobs(batch)
            weights = losses.truncated_is_weights(proximal, batch.old_logprobs, cap=self.is_cap)
            tokens = stale_rows[:, None] & (batch.loss_mask > 0)
            batch.old_logprobs = torch.where(stale_rows[:, None], proximal, batch.old_logprobs)
            batch.is_weights = torch.where(stale_rows[:, None], weights, torch.ones_like(weights))
            count = max(int(tokens.sum()), 1)
            stats["is_weight_mean"] = float(weights[tokens].sum()) / count
            stats["is_truncated_frac"] = float((weights[tokens] >= self.is_cap).sum()) / count
        stats["stale_row_frac"] = float(stale_rows.float().mean()) if len(rows) else 0.0
        return stats

    def update(self, batch: TrainBatch, *, generator: torch.Generator | None = None) -> dict[str, float]:
        """Correct ``batch`` (:meth:`correct`), then the wrapped learner's update."""
        extra = self.correct(batch)
        stats = self.learner.update(batch, generator=generator)
        stats.update(extra)
        return stats


# ------------------------------------------------------------------ pipeline
class AsyncRollouts:
    """Producer threads that roll out steps ``first .. last-1`` ahead of the learner.

    Args:
        rollout: ``rollout(step) -> trajectories`` (the trainer's :meth:`Trainer.rollout`).
        first: The first step to roll out.
        last: One past the last step.
        version_offset: Learner version minus step (the learner consumes step ``k`` at version
            ``k + version_offset``).
        pushed: The version the producer holds now.
        max_staleness: Most versions a trajectory may lag the learner when consumed.
        workers: Producer threads.
        start: Start the threads now (else call :meth:`start`).
    """

    def __init__(self, rollout: Callable[[int], list[Trajectory]], *, first: int, last: int, version_offset: int,
                 pushed: int, max_staleness: int, workers: int, start: bool = True) -> None:
        self._rollout = rollout
        self._cond = threading.Condition()
        self._next = first
        self._last = last
        self._offset = version_offset
        self._pushed = pushed
        self._max_staleness = max_staleness
        self._done: dict[int, tuple[list[Trajectory], float, BaseException | None]] = {}
        self._stop = False
        self.gate_waits: dict[int, float] = {}
        self._threads = [threading.Thread(target=self._work, name=f"producer-{j}", daemon=True)
                         for j in range(workers)]
        if start:
            self.start()

    def start(self) -> None:
        """Start the producer threads."""
        for thread in self._threads:
            thread.start()

    @property
    def pushed_version(self) -> int:
        """The newest weight version the producers hold."""
        return self._pushed

    def min_version(self, step: int) -> int:
        """The oldest weights step ``step`` may be rolled out with."""
        return step + self._offset - self._max_staleness

    def _claim(self) -> int | None:
        with self._cond:
            if self._stop or self._next >= self._last:
                return None
            step = self._next
            self._next += 1
            start = time.perf_counter()
            while not self._stop and self._pushed < self.min_version(step):
                self._cond.wait()
            self.gate_waits[step] = time.perf_counter() - start
            return None if self._stop else step

    def _work(self) -> None:
        while (step := self._claim()) is not None:
            start = time.perf_counter()
            try:
                result: tuple[list[Trajectory], float, BaseException | None] = (
                    self._rollout(step), time.perf_counter() - start, None)
            except BaseException as exc:  # handed to the learner, which re-raises it
                result = ([], time.perf_counter() - start, exc)
            with self._cond:
                self._done[step] = result
                self._cond.notify_all()
            if result[2] is not None:
                return

    def pushed(self, version: int) -> None:
        """Tell the producers that weights ``version`` are live."""
        with self._cond:
            self._pushed = version
            self._cond.notify_all()

    def take(self, step: int) -> tuple[list[Trajectory], float]:
        """Block until step ``step`` is rolled out; returns its trajectories and rollout seconds.

        Raises:
            RuntimeError: If the producer failed on that step (the cause is chained).
        """
        with self._cond:
            while step not in self._done:
                if self._stop:
                    raise RuntimeError("the rollout pipeline is closed")
                self._cond.wait(timeout=1.0)
            trajectories, seconds, error = self._done.pop(step)
        if error is not None:
            raise RuntimeError(f"rollout of step {step} failed: {error}") from error
        return trajectories, seconds

    def close(self) -> None:
        """Stop the producers (a running rollout finishes first) and join them."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()


def staleness_stats(trajectories: Sequence[Trajectory], version: int) -> dict[str, float]:
    """Mean / max of ``version - metadata["weight_version"]`` over the trajectories."""
    lags = [version - int(t.metadata.get("weight_version", version)) for t in trajectories]
    if not lags:
        return {}
    return {"staleness_mean": float(np.mean(lags)), "staleness_max": float(max(lags))}


def resolved_paths(trajectories: list[Trajectory]) -> list[Trajectory]:
    """Tree branches joined with their ancestors (a no-op for chains and resolved paths)."""
    if any(t.first_turn != 0 for t in trajectories):
        return resolve_paths(trajectories)
    return trajectories


def tag_env(trajectories: list[Trajectory], name: str, env_id: str, *, rename: bool = True) -> list[Trajectory]:
    """Record the env on every trajectory; ``rename`` makes group / episode / tree ids unique across envs."""
    for t in trajectories:
        t.metadata["env_id"], t.metadata["env"] = env_id, name
        if rename:
            t.episode_id = f"{name}:{t.episode_id}"
            t.group_id = f"{name}:{t.group_id}" if t.group_id is not None else None
            t.tree_id = f"{name}:{t.tree_id}" if t.tree_id is not None else None
    return trajectories
