"""The learner group: the trainer's :class:`~agentgym.trainers.learner.Learner` as Ray actors.

:class:`LearnerGroup` places ``num_ranks`` learner ranks with the ``learner``
resources of the config, in one placement group (``PACK``: on as few nodes as
possible), and exposes what a driver needs: one update from trajectories (with the trainer's
staleness correction and task normalisation), the SFT warm start, the
weights for the rollout side (returned through the object store, so a
:class:`~agentgym.distributed.producer.RayProducer` push costs no second copy
on the driver), and checkpoints in the trainer's format, so a lost learner
resumes from the newest one.

Ranks. With ``num_ranks > 1`` the ranks form one ``torch.distributed`` group
(NCCL on GPUs, gloo on the CPU; rank 0's node address and a free port found by
a task in its bundle) and the learner shards itself with FSDP2
(:mod:`agentgym.trainers.distributed`). Every call is collective: each rank gets
the same trajectories (one object in the store), weights and checkpoints come
back whole from rank 0.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentgym.distributed.resources import import_ray, ray_options

ray = import_ray()

__all__ = ["LearnerGroup"]


class _LearnerRank:
    """One learner rank: model, optimizer, shuffling generator (the actor body).

    Args:
        cfg: The training config (a ``TrainConfig``).
        model_path: The model folder.
    """

    def __init__(self, cfg: Any, model_path: str, rank: int = 0, world: int = 1,
                 master: tuple[str, int] | None = None) -> None:
        import os

        import torch
        from transformers import AutoTokenizer

        from agentgym.trainers.learner import Learner

        if world > 1 and master is not None:  # read by Learner.from_pretrained (init_from_env)
            # Ray gives each rank its own CUDA_VISIBLE_DEVICES, so the local device is always 0.
            os.environ.update(MASTER_ADDR=master[0], MASTER_PORT=str(master[1]), RANK=str(rank),
                              WORLD_SIZE=str(world), LOCAL_RANK="0")
        self.rank = rank

        self.cfg = cfg
        self.algo = cfg.algo.resolved()
        torch.manual_seed(cfg.run.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.learner = Learner.from_pretrained(model_path, cfg.model, cfg.algo, cfg.optim,
                                               temperature=cfg.rollout.temperature)
        self.generator = torch.Generator().manual_seed(cfg.run.seed)

    def node_id(self) -> str:
        """The Ray node of this rank."""
        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        """This rank's process id (it changes when Ray restarts the rank)."""
        import os

        return os.getpid()

    def update(self, trajectories: list[dict[str, Any]], version: int | None = None,
               success: list[bool] | None = None) -> dict[str, float]:
        """Credit and update on trajectory dicts, as the trainer's in-process step does.

        Trajectories without tokens are skipped. ``version`` is the learner version of the step:
        samples of older weights (``metadata["weight_version"]``) get the truncated-IS correction
        of :class:`~agentgym.trainers.pipeline.CorrectedLearner` (None: no staleness correction);
        ``algo.task_norm`` normalises per env. ``success`` holds the driver's success flag per
        given trajectory (ECHO-memory's bonus; None: ``reward > 0``).
        """
        from agentgym.rollout import Trajectory
        from agentgym.trainers.methods import StepData, run_update

        given = [Trajectory.from_dict(d) for d in trajectories]
        keep = [k for k, t in enumerate(given) if t.segments]
        trajs = [given[k] for k in keep]
        if not trajs:
            return {"loss": 0.0, "grad_norm": 0.0, "episodes": 0.0}
        data = StepData(trajs, self.algo, self._step_learner(trajs, version), self.tokenizer,
                        generator=self.generator, answers=[t.metadata.get("ground_truth") for t in trajs],
                        initial_anchors=[t.metadata.get("initial_anchor") for t in trajs],
                        success=[bool(success[k]) for k in keep] if success is not None else None)
        stats = run_update(data)
        stats.update(data.extra, episodes=float(len(trajs)))
        return stats

    def _step_learner(self, trajs: list[Any], version: int | None) -> Any:
        """The learner, wrapped for stale samples / task normalisation when the step needs it."""
        from agentgym.trainers.pipeline import CorrectedLearner

        stale = [version is not None and int(t.metadata.get("weight_version", version)) < version for t in trajs]
        tasks = [t.metadata.get("env") for t in trajs] if self.algo.task_norm else None
        if not any(stale) and tasks is None:
            return self.learner
        return CorrectedLearner(self.learner, stale, is_cap=self.cfg.distributed.is_cap, tasks=tasks)

    def sft(self, trajectories: list[dict[str, Any]], epochs: int, batch_size: int, lr: float,
            seed: int = 0) -> list[float]:
        """The SFT warm start (:func:`~agentgym.trainers.sft.sft_train`), then a fresh optimizer; the losses."""
        from agentgym.rollout import Trajectory
        from agentgym.trainers.sft import sft_train

        data = [Trajectory.from_dict(d) for d in trajectories]
        losses = sft_train(self.learner, data, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
        self.learner.reset_optimizer()
        return losses

    def weights(self) -> dict[str, Any]:
        """The weights for a rollout backend, on the CPU."""
        return {k: v.to("cpu") for k, v in self.learner.backend_state_dict().items()}

    def save(self, root: str, step: int, loop_state: dict[str, Any], keep: int = 2) -> str | None:
        """Write a checkpoint in the trainer's format (rank 0 writes); returns its folder."""
        from agentgym.trainers.checkpoint import save_checkpoint

        state = {**self.learner.state_dict(), "generator": self.generator.get_state()}  # collective
        if self.rank != 0:
            return None
        return str(save_checkpoint(Path(root), step, state, loop_state, keep=keep))

    def restore(self, root: str) -> dict[str, Any] | None:
        """Load the newest checkpoint under ``root``; returns its loop state (None: none found)."""
        from agentgym.trainers.checkpoint import latest_checkpoint, load_checkpoint

        ckpt = latest_checkpoint(Path(root))
        if ckpt is None:
            return None
        learner_state, state = load_checkpoint(ckpt, map_location=self.learner.device)
        self.generator.set_state(learner_state["generator"])
        self.learner.load_state_dict(learner_state)
        return state


_LearnerActor = ray.remote(_LearnerRank)


def _dicts(trajectories: list[Any]) -> list[dict[str, Any]]:
    """Trajectories (or their dicts) as dicts."""
    return [t if isinstance(t, dict) else t.to_dict() for t in trajectories]


@ray.remote(num_cpus=0)
def _master_address() -> tuple[str, int]:
    """This node's address and a free port on it (run in rank 0's bundle)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("", 0))
        port = int(sock.getsockname()[1])
    return ray.util.get_node_ip_address(), port


class LearnerGroup:
    """The learner as Ray actor(s) (one rank; see the module docstring).

    Args:
        cfg: The training config.
        model_path: A model folder the learner's node can read.
        resources: ``distributed.resources``; the ``learner`` entry is used.
        num_ranks: Learner ranks (FSDP over a process group when more than one).
        max_restarts: Restarts Ray grants one rank (only with ``num_ranks == 1``: a process
            group cannot take a restarted member back). A restarted rank starts from the
            model folder, so call :meth:`restore` after a loss.
        timeout_s: Seconds to wait for the ranks' resources.
    """

    def __init__(self, cfg: Any, model_path: str, *, resources: Any = None, num_ranks: int = 1,
                 max_restarts: int = 1, timeout_s: float = 600.0) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if num_ranks < 1:
            raise ValueError(f"num_ranks must be >= 1, got {num_ranks}")
        self.timeout_s = timeout_s
        options = ray_options(resources or {}, "learner")
        bundle = {k: v for k, v in (("CPU", options["num_cpus"]), ("GPU", options["num_gpus"])) if v}
        # Ray refuses empty bundles; a rank that asks for nothing still reserves a sliver of a CPU.
        self.placement = placement_group([bundle or {"CPU": 0.01}] * num_ranks, strategy="PACK")
        if not self.placement.wait(timeout_s):
            raise RuntimeError(f"no room for {num_ranks} learner rank(s) of {options} within {timeout_s}s")

        def place(index: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=index)

        master = None
        if num_ranks > 1:
            master = ray.get(_master_address.options(scheduling_strategy=place(0)).remote())
        restarts = max_restarts if num_ranks == 1 else 0
        self.ranks = [_LearnerActor.options(**options, max_restarts=restarts, scheduling_strategy=place(r))
                      .remote(cfg, model_path, r, num_ranks, master) for r in range(num_ranks)]

    def _all(self, method: str, *args: Any, retry: bool = False) -> list[Any]:
        """Call ``method`` on every rank (a collective) and return every rank's answer.

        With ``retry``, a call that meets a rank while Ray restarts it (``ActorUnavailableError``)
        is sent again until the rank answers (for calls that may safely run twice).
        """
        from ray.exceptions import ActorUnavailableError

        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return ray.get([getattr(rank, method).remote(*args) for rank in self.ranks])
            except ActorUnavailableError:
                if not retry or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    @property
    def rank0(self) -> Any:
        """The first rank's actor handle."""
        return self.ranks[0]

    def update(self, trajectories: list[Any], version: int | None = None,
               success: list[bool] | None = None) -> dict[str, float]:
        """One update from trajectories (``Trajectory`` objects or their dicts); see :meth:`_LearnerRank.update`."""
        dicts = ray.put(_dicts(trajectories))  # once for all ranks
        return self._all("update", dicts, version, success)[0]

    def sft(self, trajectories: list[Any], *, epochs: int, batch_size: int, lr: float, seed: int = 0) -> list[float]:
        """The SFT warm start on every rank, then a fresh optimizer; returns the per-step losses."""
        return self._all("sft", ray.put(_dicts(trajectories)), epochs, batch_size, lr, seed)[0]

    def weights_ref(self) -> Any:
        """An ObjectRef to the current rollout weights (rank 0's; stays in the object store)."""
        if len(self.ranks) == 1:
            self._all("node_id", retry=True)  # wait out a restart
            return self.rank0.weights.remote()
        refs = [rank.weights.remote() for rank in self.ranks]
        ray.get(refs[1:])  # the other ranks' halves of the collective (empty dicts)
        return refs[0]

    def save(self, root: str | Path, step: int, loop_state: dict[str, Any], keep: int = 2) -> Path:
        """Checkpoint (see :meth:`_LearnerRank.save`)."""
        return Path(self._all("save", str(root), step, loop_state, keep, retry=True)[0])

    def restore(self, root: str | Path) -> dict[str, Any] | None:
        """Resume from the newest checkpoint under ``root`` (its loop state, or None)."""
        return self._all("restore", str(root), retry=True)[0]

    def close(self) -> None:
        """Stop the ranks and release their placement group."""
        from ray.util.placement_group import remove_placement_group

        for rank in self.ranks:
            ray.kill(rank, no_restart=True)
        self.ranks = []
        remove_placement_group(self.placement)
