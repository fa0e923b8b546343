"""One episode, turn by turn: generate, parse, step the env, tokenise the observation.

:class:`EpisodeRunner` holds what every episode of a run shares (the renderer,
the generation queue, the env thread pool, the config and the stats).
:class:`Cursor` is one live episode's state; tree rollouts copy it at nodes.

Env calls (``reset``, ``step``, ``fork``, ``close``) run in the thread pool
under ``step_timeout_s``. Every failure is recorded on the trajectory, never
raised: a step past its limit ends the episode with ``error:tool_timeout`` (the
env is abandoned and closed once its thread returns), an exception from the env
ends it with ``error:env_error`` (or the :class:`~agentgym.types.ErrorKind` the
exception carries in a ``kind`` attribute, e.g. ``sandbox_lost``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from agentgym.backends.scripted import EnvBound
from agentgym.core import AgentEnv
from agentgym.rollout.batching import GenerationQueue
from agentgym.rollout.chat import ChatContext, ChatRenderer
from agentgym.rollout.config import RolloutConfig, RolloutTask
from agentgym.rollout.stats import RolloutStats, derive_seed
from agentgym.rollout.trajectory import Segment, Termination, Trajectory, Turn
from agentgym.types import ErrorKind, Message, ToolError

if TYPE_CHECKING:
    from agentgym.rollout.memory import EpisodeMemory, MemoryManager

__all__ = ["Cursor", "EnvFailure", "EpisodeRunner"]

_TERMINATION_OF = {
    ErrorKind.TOOL_TIMEOUT: Termination.TOOL_TIMEOUT,
    ErrorKind.SANDBOX_LOST: Termination.SANDBOX_LOST,
}


class EnvFailure(Exception):
    """An env call failed or timed out (recorded on the trajectory, never raised to the user)."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail

    @property
    def termination(self) -> Termination:
        """The trajectory's termination for this failure."""
        return _TERMINATION_OF.get(self.kind, Termination.ENV_ERROR)


@dataclass
class Cursor:
    """A live episode: the env, the template's view and the token context.

    Attributes:
        env: The env in the state after ``depth`` turns.
        context: The chat context (messages and rendered text).
        ids: The current segment's token ids.
        depth: Turns taken along the path from the root.
        reward: Reward accumulated along the path.
        actions: The actions applied along the path (for replay branching).
        abandoned: The env's thread timed out; it must not be used or closed here.
        memory: The episode's memory (ECHO-memory's context manager), or None.
    """

    env: AgentEnv
    context: ChatContext
    ids: list[int]
    depth: int = 0
    reward: float = 0.0
    actions: list[Message] = field(default_factory=list)
    abandoned: bool = False
    memory: EpisodeMemory | None = None


def _anchor_of(env: AgentEnv) -> str | None:
    """The env's anchor, or None when it has none or reading it fails."""
    try:
        return env.anchor()
    except Exception:
        return None


def _reset_env(env: AgentEnv, task: RolloutTask) -> tuple[list[Message], dict[str, Any], str | None]:
    """Reset and read the reset state's anchor (runs in a pool thread)."""
    observation, info = env.reset(seed=task.seed, options=dict(task.options))
    return observation, info, _anchor_of(env)


def _step_env(env: AgentEnv, action: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any], str | None]:
    """Step and read the anchor (runs in a pool thread)."""
    observation, reward, terminated, truncated, info = env.step(action)
    return observation, reward, terminated, truncated, info, _anchor_of(env)


def _turn_error(info: dict[str, Any]) -> tuple[ErrorKind, str] | None:
    """The first typed error an env reported in ``info`` (model or dict form)."""
    error = info.get("error")
    if isinstance(error, ToolError):
        return error.kind, error.detail
    if isinstance(error, dict) and "kind" in error:
        return ErrorKind(error["kind"]), str(error.get("detail", ""))
    return None


class EpisodeRunner:
    """Runs episodes for one rollout (see the module docstring).

    Args:
        renderer: Token-in/token-out chat rendering.
        queue: The shared generation queue.
        pool: Thread pool for env calls.
        config: The rollout config.
        stats: Run statistics to update.
        context_manager: ECHO-memory's context manager (None: the plain growing context).
    """

    def __init__(
        self,
        renderer: ChatRenderer,
        queue: GenerationQueue,
        pool: Executor,
        config: RolloutConfig,
        stats: RolloutStats,
        context_manager: MemoryManager | None = None,
    ) -> None:
        self.renderer = renderer
        self.queue = queue
        self.pool = pool
        self.config = config
        self.stats = stats
        self.context_manager = context_manager
        self.sampling = config.sampling(renderer.stop_token_ids)

    # ------------------------------------------------------------- accounting
    @contextmanager
    def active(self, *, reserved: bool = False) -> Iterator[None]:
        """Count an episode as active (it may still ask the model) for the ``with`` block.

        The generation queue flushes when every active episode waits, so the
        count must change without yielding to the event loop in between: enter
        this synchronously before the episode's first ``await``, and leave it
        after its last. ``reserved``: the caller already counted the episode
        (:meth:`reserve`), so only the decrement happens here.
        """
        if not reserved:
            self.queue.episode_started()
        try:
            yield
        finally:
            self.queue.episode_finished()

    def reserve(self, count: int) -> None:
        """Count ``count`` episodes as active before they are scheduled as tasks."""
        for _ in range(count):
            self.queue.episode_started()

    # --------------------------------------------------------------- env calls
    async def call_env(self, fn: Callable[..., Any], *args: Any, env: AgentEnv | None = None) -> Any:
        """Run ``fn(*args)`` in the pool under the step timeout.

        Raises:
            EnvFailure: On timeout (``tool_timeout``; ``env`` is closed once the
                thread returns) or on an exception (``env_error`` or its ``kind``).
        """
        start = time.perf_counter()
        future = self.pool.submit(fn, *args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.config.step_timeout_s)
        except TimeoutError:
            if env is not None:
                future.add_done_callback(lambda _: _quiet_close(env))
            raise EnvFailure(ErrorKind.TOOL_TIMEOUT, f"{getattr(fn, '__name__', 'env call')} timed out after "
                             f"{self.config.step_timeout_s:g} s") from None
        except Exception as exc:
            kind = getattr(exc, "kind", None)
            kind = kind if isinstance(kind, ErrorKind) else ErrorKind.ENV_ERROR
            raise EnvFailure(kind, f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.stats.add_time("env", time.perf_counter() - start)

    async def close_env(self, cursor: Cursor | None) -> None:
        """Close the cursor's env in the pool (errors ignored; abandoned envs skipped)."""
        if cursor is None or cursor.abandoned:
            return
        await asyncio.wrap_future(self.pool.submit(_quiet_close, cursor.env))

    async def open(self, env_factory: Callable[[], AgentEnv], task: RolloutTask, trajectory: Trajectory) -> Cursor:
        """Create and reset an env, render the prompt and record segment 0.

        Raises:
            EnvFailure: If creating or resetting the env failed.
        """
        env = await self.call_env(env_factory)
        try:
            observation, info, anchor = await self.call_env(lambda: _reset_env(env, task), env=env)
        except EnvFailure:
            await asyncio.wrap_future(self.pool.submit(_quiet_close, env))
            raise
        start = time.perf_counter()
        manager = self.context_manager
        context, ids = self.renderer.start(observation, env.tools if manager is None else manager.tools(env.tools))
        self.stats.add_time("tokenize", time.perf_counter() - start)
        task_info = info.get("task")
        trajectory.task_id = getattr(task_info, "id", None) or (task_info or {}).get("id")
        # Facts of the reset state that credit assignment needs (GiGPO's turn-0 anchor,
        # IGPO's ground truth), recorded once here so no trainer has to reset the task again.
        trajectory.metadata["initial_anchor"] = anchor
        trajectory.metadata["ground_truth"] = getattr(task_info, "ground_truth", None)
        trajectory.segments.append(Segment(start_turn=0, prompt_ids=list(ids)))
        memory = None if manager is None else manager.episode(observation, trajectory.metadata)
        return Cursor(env=env, context=context, ids=ids, memory=memory)

    # ------------------------------------------------------------------ turns
    async def play(
        self,
        cursor: Cursor,
        trajectory: Trajectory,
        seed_parts: tuple[int, ...],
        *,
        key: tuple[Any, ...],
        node_ids: Iterator[int] | None = None,
        after_turn: Callable[[Cursor, Turn], Awaitable[None]] | None = None,
    ) -> None:
        """Run turns until the episode ends; sets ``trajectory.termination``.

        Args:
            cursor: The episode's state (advanced in place).
            trajectory: Receives the turns (and any new segments).
            seed_parts: Identify the episode; each turn's sampling seed derives
                from them, the run seed and the turn's depth.
            key: Orders this episode's requests inside a generation batch.
            node_ids: Gives each turn a tree node id (tree rollouts).
            after_turn: Awaited after each turn that does not end the episode.
        """
        while trajectory.termination is None:
            if cursor.depth >= self.config.max_turns:
                trajectory.termination = Termination.MAX_TURNS
                break
            turn = await self._turn(cursor, trajectory, seed_parts, key)
            if node_ids is not None:
                turn.node_id = next(node_ids)
            if trajectory.termination is None and after_turn is not None:
                await after_turn(cursor, turn)
        trajectory.reward = cursor.reward

    async def _turn(
        self, cursor: Cursor, trajectory: Trajectory, seed_parts: tuple[int, ...], key: tuple[Any, ...]
    ) -> Turn:
        budget = self.config.max_context_tokens - len(cursor.ids)
        params = replace(
            self.sampling,
            max_tokens=max(min(self.sampling.max_tokens, budget), 0),
            seed=derive_seed(self.config.seed, *seed_parts, cursor.depth),
        )
        if isinstance(self.queue.backend, EnvBound):  # scripted policies look at the env
            self.queue.backend.bind(cursor.ids, cursor.env)
        start = time.perf_counter()
        generation = await self.queue.generate(cursor.ids, params, key)
        trajectory.timings["generate"] = trajectory.timings.get("generate", 0.0) + time.perf_counter() - start
        turn = Turn(
            action_ids=list(generation.token_ids),
            action_logprobs=[float(x) for x in generation.logprobs],
            finish_reason=generation.finish_reason,
            weight_version=generation.weight_version,
        )
        trajectory.turns.append(turn)
        cursor.ids.extend(turn.action_ids)
        cursor.depth += 1
        if generation.finish_reason == "length" and params.max_tokens < self.sampling.max_tokens:
            detail = f"the action filled the context ({len(cursor.ids)} tokens)"
            turn.error, turn.error_detail = ErrorKind.CONTEXT_OVERFLOW, detail
            trajectory.termination = Termination.CONTEXT_OVERFLOW
            trajectory.metadata["termination_detail"] = detail
            return turn
        await self._act(cursor, trajectory, turn)
        return turn

    async def _act(self, cursor: Cursor, trajectory: Trajectory, turn: Turn) -> None:
        start = time.perf_counter()
        parsed = self.renderer.parse_action(turn.action_ids)
        tokenize_s = time.perf_counter() - start
        turn.action_text = parsed.text
        turn.tool_calls = list(parsed.message.tool_calls or [])
        # With a malformed call the env gets the raw text, so it can tell the agent what is wrong.
        action = parsed.message if not parsed.errors else Message(role="assistant", content=parsed.text)
        step: Callable[..., Any] = _step_env
        if cursor.memory is not None and cursor.memory.handles(action):  # ECHO-memory: answered here, not by the env
            step = partial(cursor.memory.step, index=cursor.depth - 1)
        env_start = time.perf_counter()
        try:
            observation, reward, terminated, truncated, info, anchor = await self.call_env(
                step, cursor.env, action, env=cursor.env
            )
        except EnvFailure as failure:
            cursor.abandoned = cursor.abandoned or failure.kind == ErrorKind.TOOL_TIMEOUT
            turn.error, turn.error_detail = failure.kind, failure.detail
            trajectory.termination = failure.termination
            trajectory.metadata["termination_detail"] = failure.detail
            return
        finally:
            trajectory.timings["env"] = trajectory.timings.get("env", 0.0) + time.perf_counter() - env_start
        cursor.actions.append(action)
        cursor.reward += float(reward)
        turn.reward, turn.tool_results, turn.anchor = float(reward), list(observation), anchor
        error = (ErrorKind.PARSE_ERROR, parsed.errors[0].detail) if parsed.errors else _turn_error(info)
        if error is not None:
            turn.error, turn.error_detail = error
        done = terminated or truncated or cursor.depth >= self.config.max_turns
        start = time.perf_counter()
        overflow = self._observe(cursor, trajectory, turn, action, final=done)
        tokenize_s += time.perf_counter() - start
        trajectory.timings["tokenize"] = trajectory.timings.get("tokenize", 0.0) + tokenize_s
        self.stats.add_time("tokenize", tokenize_s)
        if terminated:
            trajectory.termination = Termination.TERMINATED
        elif truncated or cursor.depth >= self.config.max_turns:
            trajectory.termination = Termination.MAX_TURNS
        elif overflow:
            trajectory.termination = Termination.CONTEXT_OVERFLOW

    def _observe(self, cursor: Cursor, trajectory: Trajectory, turn: Turn, action: Message, *, final: bool) -> bool:
        """Tokenise the observation (or start a segment) and append it to the context.

        An observation that does not fit the context budget (leaving room for at
        least one more token unless the episode ends) is not appended; the turn
        keeps no observation ids.

        Returns:
            True when the context is full and the episode must end on overflow.
        """
        if cursor.memory is None:
            out = self.renderer.extend(cursor.context, action, turn.tool_results, turn.action_ids, final=final)
        else:
            out = cursor.memory.extend(self.renderer, cursor.context, action, turn, cursor.depth - 1, len(cursor.ids),
                                       final=final)
        size = len(out.ids) if out.new_segment else len(cursor.ids) + len(out.ids)
        limit = self.config.max_context_tokens
        if size > limit or (size == limit and not final):
            if not final:
                detail = f"the observation would make the context {size} tokens (limit {limit})"
                trajectory.metadata["termination_detail"] = detail
                if turn.error is None:  # one error per turn: an earlier failure of this turn stays
                    turn.error, turn.error_detail = ErrorKind.CONTEXT_OVERFLOW, detail
            return not final
        if out.new_segment:
            cursor.ids = list(out.ids)
            trajectory.segments.append(Segment(cursor.depth, list(out.ids), reason=out.reason or "prefix break"))
        else:
            turn.observation_ids, turn.harness_spans = list(out.ids), list(out.harness_spans)
            cursor.ids.extend(out.ids)
        return False


def _quiet_close(env: AgentEnv) -> None:
    try:
        env.close()
    except Exception:
        pass
