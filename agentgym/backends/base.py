"""The policy-backend contract: token ids in, token ids and their log-probs out.

Two kinds of backend exist:

* :class:`TokenBackend` generates from token-id prompts and returns the sampled
  ids with their sampling log-probs. Trainable policies (``transformers``, vLLM)
  and scripted policies implement it; the rollout engine builds trajectories from
  exactly these ids, so what is trained is what was sampled.
* :class:`ChatBackend` maps chat messages (plus tool specs) to an assistant
  message. API models (litellm, OpenAI-compatible servers) return no token ids,
  so they implement only this; they are used for evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agentgym.types import Message, ToolSpec

__all__ = [
    "ChatBackend",
    "ContinuousBackend",
    "Generation",
    "InflightRequest",
    "SamplingParams",
    "TokenBackend",
    "TrainableBackend",
    "expand_sampling",
]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion.

    Attributes:
        max_tokens: Upper bound on generated tokens.
        temperature: 0 means greedy.
        top_p: Nucleus sampling threshold (1.0: off).
        top_k: Keep the k most likely tokens (0 or negative: off).
        stop_token_ids: Generation stops after emitting any of these (end of turn).
        seed: Per-request seed for reproducible sampling (None: backend RNG).
    """

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None


@dataclass
class Generation:
    """One sampled completion.

    Attributes:
        token_ids: The sampled ids, including the stop token when one was hit.
        logprobs: The log-probability of each sampled id under the sampling
            distribution (after temperature; before top-p/top-k truncation is a
            backend choice that its docstring states).
        finish_reason: ``"stop"`` (a stop token) or ``"length"`` (max_tokens).
        weight_version: The policy weight version that produced it.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "stop"
    weight_version: int = 0
    extra: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class TokenBackend(Protocol):
    """Generates from token-id prompts; returns ids and sampling log-probs."""

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        """Sample one completion per prompt (a batch; order preserved)."""
        ...


@runtime_checkable
class TrainableBackend(TokenBackend, Protocol):
    """A token backend whose weights the learner updates in place."""

    weight_version: int

    def load_weights(self, state_dict: dict[str, object], version: int) -> None:
        """Replace the policy weights (a learner ``state_dict``) and set the version."""
        ...


InflightRequest = tuple[list[int], SamplingParams, Callable[[Generation], None]]
"""A request for continuous batching: prompt ids, sampling spec, and a callback that receives the generation."""


@runtime_checkable
class ContinuousBackend(TokenBackend, Protocol):
    """A token backend with continuous (in-flight) batching: rows join and leave between decode steps."""

    def serve(self, poll: Callable[[int, bool], list[InflightRequest]]) -> None:
        """Decode until idle and ``poll(room, idle)`` returns nothing; deliver each row as it finishes."""
        ...


@runtime_checkable
class ChatBackend(Protocol):
    """Maps a conversation to the next assistant message (API models)."""

    def chat(self, messages: list[Message], tools: list[ToolSpec], sampling: SamplingParams) -> Message:
        """Return the assistant's next message, with native tool calls where the API has them."""
        ...


def expand_sampling(sampling: SamplingParams | Sequence[SamplingParams], count: int) -> list[SamplingParams]:
    """Return one :class:`SamplingParams` per prompt (a single one is shared by all).

    Raises:
        ValueError: If a sequence of the wrong length is given.
    """
    if isinstance(sampling, SamplingParams):
        return [sampling] * count
    params = list(sampling)
    if len(params) != count:
        raise ValueError(f"got {len(params)} SamplingParams for {count} prompts")
    return params
