"""Role resource requests (``distributed.resources``) as Ray actor options.

Each role of the Ray backend asks Ray for what the config grants it::

    distributed:
      resources:
        rollout_worker: {num_cpus: 1, num_gpus: 0}   # the RolloutEngine and its env threads
        inference:      {num_cpus: 1, num_gpus: 0}   # the engine inside each rollout worker
        env_pool:       {num_cpus: 1, num_gpus: 0}   # one per node
        learner:        {num_cpus: 1, num_gpus: 0}

A rollout worker hosts its own inference engine (one vLLM engine per GPU), so
its actor requests the sum of ``rollout_worker`` and ``inference``. Values may
be fractional (``num_cpus: 0.5``), as Ray allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ROLES", "RoleResources", "import_ray", "ray_options"]

ROLES: tuple[str, ...] = ("rollout_worker", "inference", "env_pool", "learner")
_INSTALL_HINT = "the Ray backend needs Ray: pip install 'agentgym[distributed]' (or set distributed.backend: local)"


def import_ray() -> Any:
    """Import Ray, or raise an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - Ray is a dev dependency
        raise ImportError(_INSTALL_HINT) from exc
    return ray


@dataclass(frozen=True)
class RoleResources:
    """What one actor of a role asks Ray for.

    Attributes:
        num_cpus: Logical CPUs (may be fractional).
        num_gpus: GPUs (may be fractional; an inference engine wants a whole one).
        memory: Bytes of heap memory to reserve (None: no reservation).
    """

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int | None = None

    @classmethod
    def parse(cls, value: Any) -> RoleResources:
        """From a mapping (``{num_cpus: 1}``), a pydantic model or another RoleResources."""
        if isinstance(value, RoleResources):
            return value
        if value is None:
            return cls()
        data = value.model_dump() if hasattr(value, "model_dump") else dict(value)
        unknown = set(data) - {"num_cpus", "num_gpus", "memory"}
        if unknown:
            raise ValueError(f"unknown resource keys {sorted(unknown)}; use num_cpus, num_gpus, memory")
        return cls(**{k: v for k, v in data.items() if v is not None})

    def __add__(self, other: RoleResources) -> RoleResources:
        memory = None if self.memory is None and other.memory is None else (self.memory or 0) + (other.memory or 0)
        return RoleResources(self.num_cpus + other.num_cpus, self.num_gpus + other.num_gpus, memory)

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``ActorClass.options(...)``."""
        out: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory is not None:
            out["memory"] = self.memory
        return out


def ray_options(resources: Mapping[str, Any] | Any, role: str) -> dict[str, Any]:
    """The Ray actor options of ``role`` from a ``distributed.resources`` section.

    Args:
        resources: A mapping (or pydantic model) from role name to its request.
        role: One of :data:`ROLES`; ``"rollout_worker"`` includes the inference request.

    Raises:
        ValueError: For an unknown role.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
    table = resources.model_dump() if hasattr(resources, "model_dump") else dict(resources or {})
    request = RoleResources.parse(table.get(role))
    if role == "rollout_worker":
        request = request + RoleResources.parse(table.get("inference", {"num_cpus": 0}))
    return request.options()
