"""The trainer's side of ``distributed.learner: ray``: the learner as a :class:`LearnerGroup`.

With ``distributed.learner: ray`` (which needs ``backend: ray``) the ``agentgym train``
process builds no :class:`~agentgym.trainers.learner.Learner` and holds no optimizer: it
rolls out (through the :class:`~agentgym.distributed.producer.RayProducer`), evaluates and
logs, and :class:`RayLearner` sends each step's trajectories to the learner ranks, which do
credit and update with the same ``methods.run_update`` path as the in-process learner
(stale-sample correction and task normalisation included, see
:meth:`~agentgym.distributed.learner._LearnerRank.update`). Weights go to the rollout workers
as one object-store reference (no copy through the driver); the driver fetches them only for
its local evaluation backend. Checkpoints are written by rank 0 in the trainer's format, so
``--resume`` reads them the same way (their RNG states are the learner process's; the driver's
rollout and evaluation seeds derive from the run seed and the step); the run folder must be on
storage that the learner's node and the driver share (one machine, or a shared file system).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym.distributed.learner import LearnerGroup
from agentgym.distributed.resources import import_ray

ray = import_ray()

__all__ = ["RayLearner"]


class RayLearner:
    """The learner group of a trainer run, with the calls the training loop makes.

    Ray is initialised here when it is not yet (``distributed.ray_address``), before the
    producer, so that a resumed run can restore the group before the first rollout; Ray is
    then shut down again by :meth:`close`.

    Args:
        cfg: The training config (``distributed.learner == "ray"``).
        model_path: The model folder (readable from the learner's node).
    """

    def __init__(self, cfg: Any, model_path: str) -> None:
        from agentgym.trainers import distributed
        from agentgym.trainers.config import ConfigError

        if distributed.world_size() > 1:
            raise ConfigError("distributed.learner='ray' runs its ranks as Ray actors; start agentgym train "
                              "as one process, not under torchrun")
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=cfg.distributed.ray_address, log_to_driver=False)
        dist = cfg.distributed
        resources = dist.resources.model_dump() if hasattr(dist.resources, "model_dump") else dict(dist.resources)
        try:
            self.group: LearnerGroup | None = LearnerGroup(cfg, model_path, resources=resources,
                                                          num_ranks=dist.learner_ranks)
        except BaseException:
            self._shutdown()
            raise

    @property
    def live(self) -> LearnerGroup:
        """The group (raises once closed)."""
        if self.group is None:
            raise RuntimeError("the learner group is closed")
        return self.group

    def info(self) -> dict[str, Any]:
        """Rank 0's process id and Ray node id."""
        rank = self.live.rank0
        pid, node = ray.get([rank.pid.remote(), rank.node_id.remote()])
        return {"pid": int(pid), "node_id": str(node)}

    def update(self, trajectories: list[Any], *, version: int, success: list[bool]) -> dict[str, float]:
        """Credit and update(s) of one step on the ranks; returns the update's and the method's stats."""
        return self.live.update(trajectories, version, success)

    def sft(self, trajectories: list[Any], *, epochs: int, batch_size: int, lr: float, seed: int) -> list[float]:
        """The SFT warm start on the ranks (then a fresh optimizer); the per-step losses."""
        return self.live.sft(trajectories, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)

    def weights_ref(self) -> Any:
        """An ObjectRef to the rollout weights (for ``RayProducer.push_weights``)."""
        return self.live.weights_ref()

    @staticmethod
    def fetch(ref: Any) -> dict[str, Any]:
        """The weights behind ``ref`` as CPU tensors (for the driver's evaluation backend)."""
        return ray.get(ref)

    def save(self, root: Path, step: int, loop_state: dict[str, Any], *, keep: int) -> Path:
        """A checkpoint of the ranks' learner (rank 0 writes it under ``root``)."""
        return self.live.save(root, step, loop_state, keep=keep)

    def restore(self, root: Path) -> dict[str, Any]:
        """Load the newest checkpoint under ``root`` on the ranks; returns its loop state.

        Raises:
            FileNotFoundError: When the learner's node finds no checkpoint there (the driver
                found one: the run folder is not on storage both can read).
        """
        state = self.live.restore(root)
        if state is None:
            raise FileNotFoundError(f"the learner group found no checkpoint under {root}; with "
                                    "distributed.learner=ray the run folder must be on storage the learner's "
                                    "node and the driver share")
        return state

    def close(self) -> None:
        """Stop the ranks (and Ray, when this object started it). Safe to call twice."""
        if self.group is not None:
            self.group.close()
            self.group = None
        self._shutdown()

    def _shutdown(self) -> None:
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False
