"""The trajectory record: one episode's turns, token ids, log-probs, masks and outcome.

These are hot in-memory records, so they are plain dataclasses (the wire types of
:mod:`agentgym.types` appear only inside them, for tool calls and messages).

Token layout. A trajectory is one or more **segments**; each segment is a token
sequence the policy actually saw::

    segment.prompt_ids | turn.action_ids | turn.observation_ids | turn.action_ids | ...

``action_ids`` are the ids the backend sampled, exactly as sampled, with their
``action_logprobs``. ``observation_ids`` are the template's tokens that follow an
action: the rest of the end-of-turn marker, the rendered tool results / user
messages, and the next generation prompt. Normally a trajectory has one segment.
When the chat template breaks the prefix property (a later rendering rewrites
earlier text, e.g. templates that drop old ``<think>`` blocks), the engine starts
a new segment whose prompt is the template's fresh rendering of the whole
conversation; the turn before the break keeps no observation ids, and
:attr:`Segment.reason` says why the segment started. Nothing is re-tokenised
silently: every id in a segment is an id the model was conditioned on.

Masks (see :meth:`Trajectory.flatten`): the loss mask is 1 exactly on action
tokens; the observation mask (for ECHO's environment loss) is 1 on observation
tokens except those carrying harness-inserted text (``Message.harness``), which
each turn records as token spans.

Tree rollouts (Tree-GRPO) record shared prefixes once: each turn has a
``node_id`` unique in its tree, and a trajectory that branches from an existing
node names it in ``parent_node`` and holds only its own new turns (see
:mod:`agentgym.rollout.tree` for rebuilding full root-to-leaf paths).

JSONL: :meth:`Trajectory.to_json` / :meth:`Trajectory.from_json` round-trip
exactly (Python's ``json`` writes floats with ``repr``, which is lossless).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from agentgym.types import ErrorKind, Message, ToolCall

__all__ = ["FlatSegment", "Segment", "Termination", "Trajectory", "Turn"]


class Termination(StrEnum):
    """Why an episode ended.

    ``terminated`` is a natural end (the env said so). ``truncated:max_turns``
    and ``context_overflow`` are limits. The ``error:*`` kinds are failures of
    the env itself, or of the worker running it (the episode is kept and marked,
    never dropped).
    """

    TERMINATED = "terminated"
    MAX_TURNS = "truncated:max_turns"
    CONTEXT_OVERFLOW = "context_overflow"
    ENV_ERROR = "error:env_error"
    TOOL_TIMEOUT = "error:tool_timeout"
    SANDBOX_LOST = "error:sandbox_lost"
    WORKER_LOST = "error:worker_lost"  # the rollout worker (e.g. a Ray actor) died mid-episode

    @property
    def truncated(self) -> bool:
        """True for the limits (max turns, context length)."""
        return self in (Termination.MAX_TURNS, Termination.CONTEXT_OVERFLOW)

    @property
    def failed(self) -> bool:
        """True when the env failed (the trainer decides: mask, score 0 or retry)."""
        return self.value.startswith("error:")


@dataclass
class Turn:
    """One agent turn: the sampled action and the observation that followed.

    Attributes:
        action_ids: Sampled token ids, stop token included when one was hit.
        action_logprobs: Sampling log-prob of each action id (see the backend's
            docstring for the distribution).
        observation_ids: Template tokens after the action (see module docstring).
        harness_spans: ``[start, end)`` index ranges into ``observation_ids`` of
            tokens that carry harness-inserted text (excluded from ECHO's mask).
        action_text: The decoded action (for reading and parsing only; the ids are
            the record).
        tool_calls: The calls parsed from the action text.
        tool_results: The observation messages the env returned.
        reward: This turn's reward from the env.
        anchor: ``env.anchor()`` after the turn (GiGPO), when the env has one.
        error: The turn's typed error, if any (the first one when several).
        error_detail: Human-readable detail for ``error``.
        finish_reason: The backend's ``"stop"`` or ``"length"``.
        weight_version: Policy weight version that sampled the action.
        node_id: Node id within the tree (tree rollouts only).
    """

    action_ids: list[int]
    action_logprobs: list[float]
    observation_ids: list[int] = field(default_factory=list)
    harness_spans: list[tuple[int, int]] = field(default_factory=list)
    action_text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[Message] = field(default_factory=list)
    reward: float = 0.0
    anchor: str | None = None
    error: ErrorKind | None = None
    error_detail: str | None = None
    finish_reason: str = "stop"
    weight_version: int = 0
    node_id: int | None = None

    def observation_harness_mask(self) -> list[bool]:
        """Per observation token: True when it carries harness-inserted text."""
        flags = [False] * len(self.observation_ids)
        for start, end in self.harness_spans:
            flags[start:end] = [True] * (end - start)
        return flags

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (see :meth:`from_dict`)."""
        return {
            "action_ids": self.action_ids,
            "action_logprobs": self.action_logprobs,
            "observation_ids": self.observation_ids,
            "harness_spans": [list(span) for span in self.harness_spans],
            "action_text": self.action_text,
            "tool_calls": [c.model_dump() for c in self.tool_calls],
            "tool_results": [m.model_dump() for m in self.tool_results],
            "reward": self.reward,
            "anchor": self.anchor,
            "error": None if self.error is None else self.error.value,
            "error_detail": self.error_detail,
            "finish_reason": self.finish_reason,
            "weight_version": self.weight_version,
            "node_id": self.node_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        """Rebuild a turn from :meth:`to_dict` output."""
        data = dict(data)
        data["harness_spans"] = [(int(s), int(e)) for s, e in data.get("harness_spans", [])]
        data["tool_calls"] = [ToolCall.model_validate(c) for c in data.get("tool_calls", [])]
        data["tool_results"] = [Message.model_validate(m) for m in data.get("tool_results", [])]
        data["error"] = None if data.get("error") is None else ErrorKind(data["error"])
        return cls(**data)


@dataclass
class Segment:
    """A stretch of turns that share one growing token sequence.

    Attributes:
        start_turn: Index (in the root-to-leaf path) of the first turn in it.
        prompt_ids: The tokens before that turn's action.
        reason: Why it started: ``"prompt"`` for the first, else the prefix break.
    """

    start_turn: int
    prompt_ids: list[int]
    reason: str = "prompt"


@dataclass
class FlatSegment:
    """One segment flattened for training (all arrays have the same length).

    Attributes:
        input_ids: Token ids (int64).
        loss_mask: 1 on action tokens, else 0 (int8).
        obs_mask: 1 on observation tokens that are not harness text, else 0 (int8).
        old_logprobs: Sampling log-prob on action tokens, 0.0 elsewhere (float64).
        turn_index: Turn index of each token; -1 for the segment prompt (int32).
    """

    input_ids: np.ndarray
    loss_mask: np.ndarray
    obs_mask: np.ndarray
    old_logprobs: np.ndarray
    turn_index: np.ndarray


@dataclass
class Trajectory:
    """One episode (or, in a tree, one leaf's own turns).

    Attributes:
        episode_id: Unique id within the run.
        task_id: The env's task id (``info["task"].id``).
        group_id: Trajectories of the same task and seed share it (GRPO groups).
        segments: Token segments (see module docstring); a tree branch holds only
            the segments that start among its own turns.
        turns: The turns, in order.
        reward: Outcome reward: the sum of the turn rewards along the whole path.
        termination: Why the episode ended (None while running).
        seed: The env reset seed.
        tree_id: Tree id (tree rollouts only).
        parent_node: The node this trajectory continues from (tree branches);
            0 is the tree root (the state after reset).
        first_turn: Path index of ``turns[0]`` (0 unless a tree branch).
        timings: Seconds spent per phase (``generate``, ``env``, ``tokenize``, ``total``).
        metadata: Extra JSON-serialisable facts (``termination_detail``, ...).
    """

    episode_id: str
    task_id: str | None = None
    group_id: str | None = None
    segments: list[Segment] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    termination: Termination | None = None
    seed: int | None = None
    tree_id: str | None = None
    parent_node: int | None = None
    first_turn: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ views
    @property
    def weight_version(self) -> int:
        """The oldest policy version that sampled any of the turns (0 when none)."""
        return min((t.weight_version for t in self.turns), default=0)

    @property
    def num_generated_tokens(self) -> int:
        """Action tokens sampled for this record's own turns."""
        return sum(len(t.action_ids) for t in self.turns)

    @property
    def failed(self) -> bool:
        """True when the env failed during the episode."""
        return self.termination is not None and self.termination.failed

    @property
    def prefix_breaks(self) -> list[Segment]:
        """The segments that started because the template broke the prefix property."""
        return [s for s in self.segments if s.reason != "prompt"]

    def flatten(self) -> list[FlatSegment]:
        """Flatten into per-segment training arrays (see :class:`FlatSegment`).

        Only complete records flatten: a tree branch must first be joined with
        its ancestors (:func:`agentgym.rollout.tree.resolve_paths`).

        Raises:
            ValueError: If the record does not start with a prompt segment at turn 0.
        """
        if not self.segments or self.segments[0].start_turn != self.first_turn or self.first_turn != 0:
            raise ValueError(
                f"trajectory {self.episode_id} has no prompt segment at turn 0; "
                "resolve tree branches with agentgym.rollout.tree.resolve_paths() first"
            )
        bounds = [s.start_turn for s in self.segments[1:]] + [len(self.turns)]
        return [self._flatten_segment(seg, end) for seg, end in zip(self.segments, bounds, strict=True)]

    def _flatten_segment(self, segment: Segment, end: int) -> FlatSegment:
        ids: list[int] = list(segment.prompt_ids)
        loss: list[int] = [0] * len(ids)
        obs: list[int] = [0] * len(ids)
        logp: list[float] = [0.0] * len(ids)
        index: list[int] = [-1] * len(ids)
        for k in range(segment.start_turn, end):
            turn = self.turns[k]
            n_act, n_obs = len(turn.action_ids), len(turn.observation_ids)
            ids += turn.action_ids + turn.observation_ids
            loss += [1] * n_act + [0] * n_obs
            obs += [0] * n_act + [0 if h else 1 for h in turn.observation_harness_mask()]
            logp += list(turn.action_logprobs) + [0.0] * n_obs
            index += [k] * (n_act + n_obs)
        return FlatSegment(
            input_ids=np.asarray(ids, dtype=np.int64),
            loss_mask=np.asarray(loss, dtype=np.int8),
            obs_mask=np.asarray(obs, dtype=np.int8),
            old_logprobs=np.asarray(logp, dtype=np.float64),
            turn_index=np.asarray(index, dtype=np.int32),
        )

    # ------------------------------------------------------------- (de)serialise
    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (see :meth:`from_dict`)."""
        return {
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "segments": [
                {"start_turn": s.start_turn, "prompt_ids": s.prompt_ids, "reason": s.reason} for s in self.segments
            ],
            "turns": [t.to_dict() for t in self.turns],
            "reward": self.reward,
            "termination": None if self.termination is None else self.termination.value,
            "seed": self.seed,
            "tree_id": self.tree_id,
            "parent_node": self.parent_node,
            "first_turn": self.first_turn,
            "timings": self.timings,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """Rebuild a trajectory from :meth:`to_dict` output."""
        data = dict(data)
        data["segments"] = [Segment(**s) for s in data.get("segments", [])]
        data["turns"] = [Turn.from_dict(t) for t in data.get("turns", [])]
        term = data.get("termination")
        data["termination"] = None if term is None else Termination(term)
        return cls(**data)

    def to_json(self) -> str:
        """One JSON line (no newline)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Trajectory:
        """Parse one JSON line written by :meth:`to_json`."""
        return cls.from_dict(json.loads(line))
