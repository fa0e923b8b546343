"""ECHO-memory's context manager: memory records, a ``select`` tool and context rebuilds.

ECHO-memory (Xie et al., 2026; ALGORITHMS.md "ECHO (b)") trains long-horizon search agents
under a bounded context. Only the paper's abstract is public; everything below is our reading
of it, and each choice is listed at the end.

How an episode runs with a manager (``RolloutEngine(..., context_manager=MemoryManager())``):

1. The policy sees the env's tools plus ``select(ids)`` (its spec is built from a typed,
   documented function by :class:`agentgym.tools.Tool`, like every env tool).
2. Every completed turn that reached the env becomes a :class:`MemoryRecord`: its source turn
   index (which is also the record id the policy names) and a compressed text, the tool calls
   and their results cut to ``result_chars`` characters.
3. When the policy calls ``select(ids=[...])`` the call is answered here, never sent to the env,
   and the context is rebuilt as the env's opening messages (system prompt and task) followed
   by one memory message: the index of every record (id and call) and the full text of the
   selected ones. When the context would grow past ``budget_tokens`` the same rebuild happens
   with the ``keep_last`` most recent records.
4. A rebuild breaks the chat prefix property, so the rollout starts a new trajectory segment
   whose prompt is the template's rendering of the rebuilt conversation, tokenised once: those
   ids are exactly what the policy is conditioned on next (token-faithful, nothing is
   re-tokenised silently). The selection turn keeps its sampled action ids (trained in the
   segment they were sampled in) and no observation ids.
5. ``Trajectory.metadata`` gets ``selection_turns`` (turn indices of valid ``select`` actions),
   ``evidence_turns`` (source turns whose records they selected) and ``memory_rebuilds`` (one
   ``{"turn", "reason", "records"}`` entry per rebuild); the credit function
   :func:`agentgym.trainers.credit.echo_memory_advantages` reads the first two.

Choices (ours; the abstract does not say):
    * Record id = source turn index (0-based, as in the trajectory), so evidence needs no lookup.
    * Only turns that reached the env become records (errors included: the policy may want to
      recall that a search found nothing); ``select`` turns do not.
    * A valid ``select`` names at least one existing record and is the only call of its action.
      Unknown ids next to known ones are ignored and reported in the result; no known id, an
      empty list, badly typed arguments or other calls in the same action make the call
      invalid (``invalid_arguments``): nothing is rebuilt and it is not a selection turn.
    * The budget rebuild is the harness's, not the policy's: it is neither a selection turn nor
      evidence. It keeps the ``keep_last`` most recent records (default 2) and triggers when
      the next context would exceed ``budget_tokens`` (None: only ``select`` rebuilds).
    * A ``select`` on the episode's last turn (turn limit) is recorded but rebuilds nothing.
    * The memory message is a ``user`` message marked ``harness`` (the harness wrote it).
    * ``result_chars = 400`` keeps a whole SearchQA article (about 300-450 characters) and the
      first hits of a search.
    * Tree rollouts are not supported (a branch would need a copy of the records).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentgym.parsing import tool_result_message
from agentgym.rollout.chat import ChatContext, ChatRenderer, ObservationTokens
from agentgym.rollout.trajectory import Turn
from agentgym.tools import Tool, ToolArgumentError
from agentgym.types import ErrorKind, Message, ToolCall, ToolError, ToolSpec

__all__ = ["SELECT_TOOL", "EpisodeMemory", "MemoryManager", "MemoryRecord"]

StepResult = tuple[list[Message], float, bool, bool, dict[str, Any], str | None]


def select(ids: list[int]) -> str:
    """Rebuild your context from memory: keep the task and the records with these ids, drop the rest.

    Args:
        ids: Ids of the memory records to keep (the turn numbers shown in the record index).
    """
    return ""  # answered by the context manager; the schema is what matters


SELECT_TOOL = Tool.from_function(select)
"""The ``select`` tool (its schema is built from :func:`select`'s signature and docstring)."""


@dataclass(frozen=True)
class MemoryRecord:
    """One completed turn, compressed.

    Attributes:
        source_turn: The turn index it came from (also the id the policy names).
        call: The turn's tool calls, e.g. ``search({"query": "x"})``.
        result: The turn's results (or error), cut to the manager's ``result_chars``.
    """

    source_turn: int
    call: str
    result: str

    def index_line(self) -> str:
        """One line of the record index."""
        return f"{self.source_turn}: {self.call}"

    def full_text(self) -> str:
        """The record as shown when selected."""
        return f"[{self.source_turn}] {self.call}\n{self.result}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


def compress_turn(index: int, turn: Turn, result_chars: int) -> MemoryRecord:
    """The memory record of a completed turn (its calls and truncated results).

    Args:
        index: The turn's index in the trajectory.
        turn: The completed turn.
        result_chars: Most characters of result text kept.
    """
    calls = "; ".join(f"{c.name}({_cut(json.dumps(c.arguments, ensure_ascii=False), 120)})" for c in turn.tool_calls)
    result = "\n".join(m.content for m in turn.tool_results if m.content)
    if not calls:
        calls = "(no tool call)"
    return MemoryRecord(index, calls, _cut(result, result_chars))


class MemoryManager:
    """Run-wide settings of ECHO-memory's context manager; one :class:`EpisodeMemory` per episode.

    Args:
        budget_tokens: Rebuild the context (most recent records) when it would exceed this many
            tokens; None rebuilds only on ``select``. Keep it below ``max_context_tokens``.
        result_chars: Most characters of a turn's results kept in its record.
        keep_last: Records kept in full by a budget rebuild.
    """

    def __init__(self, *, budget_tokens: int | None = None, result_chars: int = 400, keep_last: int = 2) -> None:
        if budget_tokens is not None and budget_tokens < 1:
            raise ValueError(f"budget_tokens must be positive or None, got {budget_tokens}")
        if result_chars < 0 or keep_last < 0:
            raise ValueError(f"result_chars and keep_last must be >= 0, got {result_chars}, {keep_last}")
        self.budget_tokens = budget_tokens
        self.result_chars = result_chars
        self.keep_last = keep_last

    def tools(self, env_tools: list[ToolSpec] | None) -> list[ToolSpec]:
        """The env's tools plus ``select``.

        Raises:
            ValueError: If the env already has a tool named ``select``.
        """
        tools = list(env_tools or [])
        if any(t.function.name == SELECT_TOOL.name for t in tools):
            raise ValueError(f"the env already has a tool named {SELECT_TOOL.name!r}; the memory manager needs it")
        return [*tools, SELECT_TOOL.spec]

    def episode(self, opening: list[Message], metadata: dict[str, Any]) -> EpisodeMemory:
        """Start one episode's memory.

        Args:
            opening: The env's opening messages (kept in every rebuilt context).
            metadata: The trajectory's metadata; receives ``selection_turns``,
                ``evidence_turns`` and ``memory_rebuilds``.
        """
        return EpisodeMemory(self, opening, metadata)


class EpisodeMemory:
    """One episode's records and pending rebuild (made by :meth:`MemoryManager.episode`).

    Args:
        manager: The run-wide settings.
        opening: The env's opening messages.
        metadata: The trajectory's metadata dict (updated in place).
    """

    def __init__(self, manager: MemoryManager, opening: list[Message], metadata: dict[str, Any]) -> None:
        self.manager = manager
        self.opening = list(opening)
        self.records: dict[int, MemoryRecord] = {}
        self.metadata = metadata
        metadata.setdefault("selection_turns", [])
        metadata.setdefault("evidence_turns", [])
        metadata.setdefault("memory_rebuilds", [])
        self._selected: list[int] | None = None  # set by a valid select, used by the next extend

    # ----------------------------------------------------------------- select
    @staticmethod
    def handles(action: Message) -> bool:
        """True when the action calls ``select`` (the manager answers it, not the env)."""
        return any(c.name == SELECT_TOOL.name for c in action.tool_calls or [])

    def step(self, env: Any, action: Message, index: int) -> StepResult:
        """Answer a ``select`` action in place of ``env.step`` (same return shape as the engine's).

        Args:
            env: The episode's env (only its anchor is read; its state does not change).
            action: The parsed action (it calls ``select``).
            index: The turn's index in the trajectory.

        Returns:
            ``(observation, reward 0, terminated False, truncated False, info, anchor)``.
        """
        calls = list(action.tool_calls or [])
        call = next(c for c in calls if c.name == SELECT_TOOL.name)
        try:
            ids, ignored = self._validate(calls, call)
        except ToolArgumentError as exc:
            detail = f"invalid arguments for select: {exc}"
            error = ToolError(kind=ErrorKind.INVALID_ARGUMENTS, detail=detail, tool=call.name, call_id=call.id)
            return [tool_result_message(call, f"Error: {detail}")], 0.0, False, False, {"error": error}, _anchor(env)
        self._selected = ids
        self.metadata["selection_turns"].append(index)
        self.metadata["evidence_turns"] = sorted(set(self.metadata["evidence_turns"]) | set(ids))
        note = f" Unknown ids ignored: {ignored}." if ignored else ""
        text = f"Context rebuilt from memory records {ids}.{note}"
        return [tool_result_message(call, text)], 0.0, False, False, {}, _anchor(env)

    def _validate(self, calls: list[ToolCall], call: ToolCall) -> tuple[list[int], list[int]]:
        """The known and unknown record ids a ``select`` call names.

        Raises:
            ToolArgumentError: For other calls in the action, bad arguments or no known id.
        """
        if len(calls) > 1:
            others = [c.name for c in calls if c is not call]
            raise ToolArgumentError(f"select must be the only call of its turn (also called: {others}); nothing ran")
        ids = list(dict.fromkeys(SELECT_TOOL.validate(call.arguments)["ids"]))
        known = sorted(i for i in ids if i in self.records)
        if not known:
            available = sorted(self.records) or "none yet"
            raise ToolArgumentError(f"no known record id in {ids[:20]}; available record ids: {available}")
        return known, [i for i in ids if i not in self.records]

    # ---------------------------------------------------------------- context
    def extend(
        self,
        renderer: ChatRenderer,
        context: ChatContext,
        action: Message,
        turn: Turn,
        index: int,
        used_tokens: int,
        *,
        final: bool = False,
    ) -> ObservationTokens:
        """:meth:`ChatRenderer.extend` with memory: record the turn, rebuild when asked or over budget.

        Args:
            renderer: The run's renderer.
            context: The conversation before the turn; updated in place.
            action: The parsed action.
            turn: The completed turn (its tool calls and results).
            index: The turn's index in the trajectory.
            used_tokens: Tokens of the current segment, the action included.
            final: The episode ended (no rebuild: there is no next turn).

        Returns:
            The observation tokens, or a new segment (``reason`` starting with ``memory``).
        """
        selected, self._selected = self._selected, None
        if not self.handles(action):
            self.records[index] = compress_turn(index, turn, self.manager.result_chars)
        elif selected is not None and not final:
            return self.rebuild(renderer, context, selected, index, "select")
        out = renderer.extend(context, action, turn.tool_results, turn.action_ids, final=final)
        budget = self.manager.budget_tokens
        size = len(out.ids) if out.new_segment else used_tokens + len(out.ids)
        if final or budget is None or size <= budget:
            return out
        keep = sorted(self.records)[-self.manager.keep_last :] if self.manager.keep_last else []
        return self.rebuild(renderer, context, keep, index, "budget")

    def rebuild(
        self, renderer: ChatRenderer, context: ChatContext, keep: list[int], index: int, reason: str
    ) -> ObservationTokens:
        """Replace the context with the opening messages and the memory message; a new segment.

        Args:
            renderer: The run's renderer.
            context: Updated in place to the rebuilt conversation.
            keep: Record ids shown in full.
            index: The turn after which the rebuild happens.
            reason: ``"select"`` or ``"budget"``.
        """
        messages = [*self.opening, Message(role="user", content=self.memory_text(keep, reason), harness=True)]
        context.messages = messages
        context.rendered = renderer.render(messages, context.tools, generation_prompt=True)
        self.metadata["memory_rebuilds"].append({"turn": index + 1, "reason": reason, "records": list(keep)})
        ids = renderer.encode(context.rendered)
        return ObservationTokens(ids, new_segment=True, reason=f"memory rebuild: {reason}")

    def memory_text(self, keep: list[int], reason: str) -> str:
        """The memory message: why, the record index and the kept records in full."""
        why = "you called select" if reason == "select" else "it reached its token budget"
        lines = [f"Your context was rebuilt from memory because {why}. Call select(ids) with record ids from "
                 "this index to rebuild it from other records.", "Record index:"]
        lines += [r.index_line() for _, r in sorted(self.records.items())]
        lines.append("Kept records:" if keep else "Kept records: none.")
        lines += [self.records[i].full_text() for i in keep]
        return "\n".join(lines)


def _anchor(env: Any) -> str | None:
    """The env's anchor (unchanged by ``select``), or None."""
    try:
        return env.anchor()
    except Exception:
        return None
