"""The ``distributed`` section of the training config: where rollouts and the learner run.

Split from :mod:`agentgym.trainers.config` (which re-exports these classes): the local/Ray
backend, synchronous or asynchronous scheduling with bounded staleness, and the Ray resource
request of each role.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["DistributedConfig", "ResourceSpec", "RoleResources"]

_STRICT = ConfigDict(extra="forbid")


class ResourceSpec(BaseModel):
    """Ray resources requested by one actor of a role.

    Attributes:
        num_cpus: CPUs per actor.
        num_gpus: GPUs per actor (fractions allowed).
    """

    model_config = _STRICT
    num_cpus: float = Field(1, ge=0.0)
    num_gpus: float = Field(0, ge=0.0)


class RoleResources(BaseModel):
    """Per-role Ray resource requests."""

    model_config = _STRICT
    rollout_worker: ResourceSpec = Field(default_factory=ResourceSpec)
    env_pool: ResourceSpec = Field(default_factory=ResourceSpec)
    inference: ResourceSpec = Field(default_factory=ResourceSpec)
    learner: ResourceSpec = Field(default_factory=ResourceSpec)


class DistributedConfig(BaseModel):
    """Where rollouts run and how they are scheduled relative to the learner.

    Attributes:
        backend: ``local`` (threads in this process) or ``ray`` (actors, ``agentgym.distributed``).
        mode: ``sync`` (on-policy: roll out, update, push; the default) or ``async`` (rollouts
            of later steps run while the learner updates; bounded staleness).
        max_staleness: Async: a trajectory may be at most this many weight versions older than
            the learner when it is trained on (0: on-policy, same updates as ``sync``).
        push_every: Push weights to the rollout side every N learner steps.
        is_cap: Truncated importance-sampling cap for stale samples.
        rollout_workers: Producer threads (local) or rollout worker actors (ray).
        ray_address: None starts/attaches a local Ray; ``"auto"`` or ``"host:port"`` joins a cluster.
        resources: Per-role Ray resource requests.
        learner: Where the learner runs: ``local`` (in the ``agentgym train`` process) or ``ray``
            (a ``LearnerGroup`` of Ray actors with the ``learner`` resources; needs ``backend: ray``).
        learner_ranks: Learner ranks of ``learner: ray`` (FSDP over them when more than one).
    """

    model_config = _STRICT
    backend: Literal["local", "ray"] = "local"
    mode: Literal["sync", "async"] = "sync"
    max_staleness: int = Field(1, ge=0)
    push_every: int = Field(1, ge=1)
    is_cap: float = Field(2.0, ge=1.0)
    rollout_workers: int = Field(2, ge=1)
    ray_address: str | None = None
    resources: RoleResources = Field(default_factory=RoleResources)
    learner: Literal["local", "ray"] = "local"
    learner_ranks: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> DistributedConfig:
        if self.learner == "ray" and self.backend != "ray":
            raise ValueError(f"distributed.learner='ray' needs distributed.backend='ray' (got {self.backend!r})")
        if self.learner_ranks > 1 and self.learner != "ray":
            raise ValueError(f"distributed.learner_ranks={self.learner_ranks} needs distributed.learner='ray' "
                             f"(got {self.learner!r}; use torchrun for a multi-process local learner)")
        if self.mode == "sync" and self.push_every != 1:
            raise ValueError(f"distributed.push_every={self.push_every} needs mode 'async' (the synchronous loop "
                             "is on-policy and pushes after every step)")
        if self.mode == "async" and self.push_every > self.max_staleness + 1:
            raise ValueError(f"distributed.push_every={self.push_every} with max_staleness={self.max_staleness}: "
                             "weights pushed every N steps are up to N-1 versions old, so push_every must be "
                             "at most max_staleness + 1")
        return self
