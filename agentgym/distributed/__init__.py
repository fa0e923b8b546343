"""The Ray backend: rollout workers, env pools and the learner group as Ray actors.

With ``distributed.backend: ray`` the trainer's rollouts go through a
:class:`RayProducer`, which drives :class:`RolloutWorker` actors spread over the
cluster's nodes; each node also holds one :class:`EnvPool` actor, so that an
env's Docker sandboxes stay on the host whose workers step them. See
``docs/scaling.md`` for the cluster layout and sizing.

Ray is an optional extra (``pip install 'agentgym[distributed]'``); this package
is the only place that imports it, and only when it is imported itself::

    from agentgym.distributed import RayProducer, WorkerSpec
"""

from __future__ import annotations

from agentgym.distributed.env_pool import EnvPool, PooledEnv
from agentgym.distributed.learner import LearnerGroup
from agentgym.distributed.producer import RayProducer, make_ray_producer, worker_lost_trajectory
from agentgym.distributed.resources import RoleResources, ray_options
from agentgym.distributed.worker import RolloutWorker, WorkerSpec

__all__ = [
    "EnvPool",
    "LearnerGroup",
    "PooledEnv",
    "RayProducer",
    "RoleResources",
    "RolloutWorker",
    "WorkerSpec",
    "make_ray_producer",
    "ray_options",
    "worker_lost_trajectory",
]
