"""Node-local env pools: an :class:`EnvPool` actor per node, used through :class:`PooledEnv`.

An :class:`EnvPool` holds the envs of one id on one node, one per session; the
rollout workers of that node reach them through :class:`PooledEnv`, an
:class:`~agentgym.core.AgentEnv` whose calls go to the pool (as
:class:`~agentgym.server.client.RemoteEnv` does over HTTP). Envs that run tools
in Docker sandboxes therefore start their containers on the pool's host, next
to the workers that step them; the pool is placed with Ray's node-affinity
scheduling by :class:`~agentgym.distributed.producer.RayProducer`.

The pool is a threaded actor (one blocking env call does not hold up the
others) and restartable (``max_restarts``): a restarted pool has no sessions,
so the calls of the episodes it held fail and those episodes end with an
``error:env_error`` termination, recorded on their trajectories, while new
episodes open sessions on the restarted pool.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Self

import gymnasium as gym

import agentgym
from agentgym.core import AgentEnv, coerce_action
from agentgym.distributed.resources import import_ray
from agentgym.types import Message, ToolSpec

ray = import_ray()

__all__ = ["EnvPool", "PooledEnv"]


class _EnvPool:
    """Holds live envs of one id, keyed by session (the body of the :data:`EnvPool` actor).

    Args:
        env_id: A registered env id.
        env_kwargs: Passed to ``agentgym.make`` for every session.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self._envs: dict[int, AgentEnv] = {}
        self._owners: dict[int, str | None] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.opened = 0

    def node_id(self) -> str:
        """The Ray node this pool runs on."""
        return ray.get_runtime_context().get_node_id()

    def open(self, owner: str | None = None) -> tuple[int, dict[str, Any]]:
        """Create an env for ``owner`` (a worker name); returns its session id and static facts."""
        env = agentgym.make(self.env_id, **self.env_kwargs)
        return self._add(env, owner), {"max_turns": env.max_turns, "reward_range": tuple(env.reward_range),
                                "forkable": bool(env.forkable)}

    def _add(self, env: AgentEnv, owner: str | None) -> int:
        with self._lock:
            sid = next(self._ids)
            self._envs[sid] = env
            self._owners[sid] = owner
            self.opened += 1
        return sid

    def _env(self, sid: int) -> AgentEnv:
        env = self._envs.get(sid)
        if env is None:
            raise KeyError(f"env pool session {sid} does not exist (closed, or the pool restarted)")
        return env

    def reset(self, sid: int, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, ...]:
        """``env.reset`` of a session, plus the episode's tools and return bounds."""
        env = self._env(sid)
        observation, info = env.reset(seed=seed, options=options)
        return observation, info, env.tools, env.return_bounds()

    def step(self, sid: int, action: Message) -> tuple[Any, ...]:
        """``env.step`` of a session."""
        return self._env(sid).step(action)

    def anchor(self, sid: int) -> str | None:
        """``env.anchor()`` of a session."""
        return self._env(sid).anchor()

    def fork(self, sid: int) -> int:
        """Fork a session's env into a new session; returns its id."""
        return self._add(self._env(sid).fork(), self._owners.get(sid))

    def close(self, sid: int) -> None:
        """Close and forget a session (unknown sessions are ignored)."""
        with self._lock:
            env = self._envs.pop(sid, None)
            self._owners.pop(sid, None)
        if env is not None:
            env.close()

    def close_owner(self, owner: str) -> int:
        """Close every session of a lost worker; returns how many there were."""
        with self._lock:
            sids = [sid for sid, who in self._owners.items() if who == owner]
        for sid in sids:
            self.close(sid)
        return len(sids)

    def stats(self) -> dict[str, int]:
        """Open sessions now and sessions opened since the (re)start."""
        return {"open": len(self._envs), "opened": self.opened}


EnvPool = ray.remote(_EnvPool)
"""The Ray actor class of :class:`_EnvPool` (configure with ``.options(...)``)."""


class PooledEnv(AgentEnv):
    """An env held by an :class:`EnvPool` actor, used as if it were local.

    Args:
        pool: The pool's actor handle (on this node).
        owner: Who holds the session (the worker's name), so the pool can close a lost
            worker's sessions.
        timeout: Seconds to wait for one pool call (None: no limit; the rollout
            engine's ``step_timeout_s`` also applies).
    """

    def __init__(self, pool: Any, *, owner: str | None = None, timeout: float | None = None) -> None:
        self._pool = pool
        self._timeout = timeout
        sid, facts = self._call(pool.open.remote(owner))
        self._attach(sid, facts)

    def _attach(self, sid: int, facts: dict[str, Any]) -> None:
        super().__init__(max_turns=facts["max_turns"])
        self._sid: int | None = sid
        self._facts = facts
        self.reward_range = facts["reward_range"]  # type: ignore[assignment]
        self.forkable = facts["forkable"]
        self._tools: list[ToolSpec] = []
        self._bounds: tuple[float, float] | None = None

    def _call(self, ref: Any) -> Any:
        return ray.get(ref, timeout=self._timeout)

    def _require_sid(self) -> int:
        if self._sid is None:
            raise RuntimeError("PooledEnv is closed; make a new one")
        return self._sid

    @property
    def tools(self) -> list[ToolSpec]:
        """The current episode's tools (as the pool's env reported them at reset)."""
        return [spec.model_copy(deep=True) for spec in self._tools]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Reset the pool's env (see :meth:`AgentEnv.reset`)."""
        gym.Env.reset(self, seed=seed)
        observation, info, tools, bounds = self._call(self._pool.reset.remote(self._require_sid(), seed, options))
        self._turn, self._done, self._started = 0, False, True
        self._task, self._tools, self._bounds = info.get("task"), tools, tuple(bounds)
        self._transcript = list(observation)
        return observation, info

    def step(self, action: Message | dict[str, Any] | str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Step the pool's env (see :meth:`AgentEnv.step`)."""
        msg = coerce_action(action)
        observation, reward, terminated, truncated, info = self._call(self._pool.step.remote(self._require_sid(), msg))
        self._turn = int(info.get("turn", self._turn + 1))
        self._done = bool(terminated or truncated)
        self._transcript.append(msg)
        self._transcript.extend(observation)
        return observation, reward, terminated, truncated, info

    def return_bounds(self) -> tuple[float, float]:
        """The current episode's return bounds (from the pool's env at reset)."""
        return self._bounds if self._bounds is not None else self.reward_range

    def anchor(self) -> str | None:
        """The pool env's anchor."""
        return self._call(self._pool.anchor.remote(self._require_sid()))

    def fork(self) -> Self:
        """A copy of this env in its current state, in a new pool session."""
        if not self.forkable:
            raise NotImplementedError("this pooled env cannot be forked; replay the action prefix instead")
        child = object.__new__(type(self))
        child._pool, child._timeout = self._pool, self._timeout
        child._attach(self._call(self._pool.fork.remote(self._require_sid())), self._facts)
        child._turn, child._done, child._started = self._turn, self._done, self._started
        child._task, child._tools, child._bounds = self._task, self._tools, self._bounds
        child._transcript = list(self._transcript)
        return child

    def _close(self) -> None:
        """Close the pool session (best effort: a lost pool has nothing left to close)."""
        sid, self._sid = self._sid, None
        if sid is not None:
            try:
                self._call(self._pool.close.remote(sid))
            except Exception:
                pass
