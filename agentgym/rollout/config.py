"""Rollout configuration: one flat pydantic model (unknown keys rejected)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentgym.backends.base import SamplingParams

__all__ = ["MemoryConfig", "RolloutConfig", "RolloutTask", "TreeConfig"]


class MemoryConfig(BaseModel):
    """ECHO-memory's context manager (:class:`agentgym.rollout.memory.MemoryManager`).

    Attributes:
        budget_tokens: Rebuild the context from the most recent records when it would exceed
            this many tokens (None: only the policy's ``select`` rebuilds it).
        result_chars: Most characters of a turn's results kept in its memory record.
        keep_last: Records kept in full by a budget rebuild.
    """

    model_config = ConfigDict(extra="forbid")

    budget_tokens: int | None = Field(None, ge=1)
    result_chars: int = Field(400, ge=0)
    keep_last: int = Field(2, ge=0)


class RolloutConfig(BaseModel):
    """How the engine runs episodes.

    Attributes:
        group_size: Rollouts per task (G), all reset with the task's seed.
        max_turns: Agent turns per episode before truncation (``truncated:max_turns``).
        max_context_tokens: Token budget of one segment; reaching it ends the
            episode with ``context_overflow``.
        max_tokens: Most tokens per action (further capped by the context budget).
        temperature: Sampling temperature (0: greedy).
        top_p: Nucleus threshold (1: off).
        top_k: Top-k (0: off).
        seed: Run seed; per-turn sampling seeds derive from it, the task index,
            the group member and the turn.
        step_timeout_s: Limit on one ``env.step``/``reset`` (None: none). A step
            past it ends the episode with ``error:tool_timeout``.
        max_concurrent_episodes: Episodes in flight at once.
        max_batch_size: Most prompts per backend call.
        max_wait_s: Flush a partial batch once no request has arrived for this
            long (None: only when every active episode waits, which makes runs
            reproducible bit for bit).
        continuous_batching: With a backend that supports it (``serve``, e.g.
            the HF backend) and ``max_wait_s`` set: rows join and leave the
            running decode batch between steps, so an episode steps its env
            while the others decode (see :mod:`agentgym.rollout.batching`).
            Off by default: on the CPU benchmark (``bench/rollout.py``) the
            extra prefills and cache merges of rows that join one by one cost
            more than the overlap gains.
        env_workers: Threads that run env reset/step/fork/close.
        tool_format: Tool-call format used to parse actions.
        template_kwargs: Extra chat-template variables.
        progress: Show a progress bar.
        memory: Give episodes ECHO-memory's records and ``select`` tool (None: the plain
            growing context; chain rollouts only).
    """

    model_config = ConfigDict(extra="forbid")

    group_size: int = Field(1, ge=1)
    max_turns: int = Field(10, ge=1)
    max_context_tokens: int = Field(8192, ge=1)
    max_tokens: int = Field(256, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    seed: int = 0
    step_timeout_s: float | None = Field(60.0, gt=0.0)
    max_concurrent_episodes: int = Field(64, ge=1)
    max_batch_size: int = Field(64, ge=1)
    max_wait_s: float | None = Field(0.02, ge=0.0)
    continuous_batching: bool = False
    env_workers: int = Field(32, ge=1)
    tool_format: str = "auto"
    template_kwargs: dict[str, Any] = Field(default_factory=dict)
    progress: bool = False
    memory: MemoryConfig | None = None

    def sampling(self, stop_token_ids: tuple[int, ...]) -> SamplingParams:
        """The base :class:`SamplingParams` (seed and budget are set per turn)."""
        return SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop_token_ids=stop_token_ids,
        )


class RolloutTask(BaseModel):
    """One task to roll out: how to reset the env.

    Attributes:
        seed: The reset seed (the same for every member of the group).
        options: ``reset`` options, e.g. ``{"task_id": "..."}``.
    """

    model_config = ConfigDict(extra="forbid")

    seed: int | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class TreeConfig(BaseModel):
    """Tree-GRPO sampling (Ji et al., 2025; ALGORITHMS.md "Tree-GRPO").

    Attributes:
        trees: M, trees per task.
        expansions: N, nodes expanded per tree per iteration.
        iterations: L, expansion rounds.
        branch_by: ``"auto"`` (fork where ``env.forkable``, else replay),
            ``"fork"`` or ``"replay"`` (reset a fresh env with the task's seed and
            re-apply the path's actions; needs a deterministic env).
    """

    model_config = ConfigDict(extra="forbid")

    trees: int = Field(2, ge=1)
    expansions: int = Field(2, ge=1)
    iterations: int = Field(1, ge=0)
    branch_by: str = "auto"

    @model_validator(mode="after")
    def _check(self) -> TreeConfig:
        if self.branch_by not in ("auto", "fork", "replay"):
            raise ValueError(f"branch_by must be 'auto', 'fork' or 'replay', got {self.branch_by!r}")
        return self

    @property
    def leaves_per_tree(self) -> int:
        """1 + L*N leaves (trajectories) per tree."""
        return 1 + self.iterations * self.expansions
