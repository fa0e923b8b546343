"""An env's own text as tokenizer training lines, so a tiny model reads its words as single tokens.

The built-in tiny tokenizer is trained on a generic chat/tool corpus, so an env's instructions
and its tool calls come out mostly as characters: a Sokoban prompt is ~740 tokens and
``"direction": "left"`` is eight. Training the tokenizer on the env's rendered episodes as well
turns the env's words into single tokens (the Sokoban prompt falls to ~430 tokens and a move
call to 20), which makes every forward pass cheaper and the tool-call format far easier for a
model with two layers to produce.

Lines without a letter (Sokoban grids, ASCII art, bare numbers) are left out, so the tokenizer
never merges grid characters and a grid keeps one token per cell, its rows aligned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import agentgym
from agentgym.errors import AgentGymError

__all__ = ["env_corpus"]

_LETTER = re.compile(r"[A-Za-z]")


def env_corpus(make_env: Callable[[], agentgym.AgentEnv] | Iterable[Callable[[], agentgym.AgentEnv]],
               episodes: int = 8, max_turns: int = 8) -> tuple[str, ...]:
    """Render a few episodes of each env with the tiny chat template and return their unique lines.

    Each episode resets the env with seeds ``0..episodes-1`` and plays the env's oracle when it has
    one (so tool calls, tool results and later observations are covered), else only the opening
    messages are rendered.

    Args:
        make_env: An env factory, or several (a multi-task run).
        episodes: Episodes per env.
        max_turns: Turn limit per episode.

    Returns:
        The sorted unique lines that contain a letter.
    """
    from agentgym.chat_templates import build_tiny_tokenizer

    renderer = build_tiny_tokenizer()
    factories = [make_env] if callable(make_env) else list(make_env)
    lines: set[str] = set()
    for factory in factories:
        env = factory()
        try:
            for seed in range(episodes):
                messages = _play(env, seed, max_turns)
                text = renderer.apply_chat_template([m.to_chat() for m in messages],
                                                    tools=[t.model_dump() for t in env.tools], tokenize=False)
                lines.update(line for line in str(text).split("\n") if _LETTER.search(line))
        finally:
            env.close()
    return tuple(sorted(lines))


def _play(env: agentgym.AgentEnv, seed: int, max_turns: int) -> list[agentgym.Message]:
    """One episode's messages: the oracle's, or only the opening ones when there is no oracle."""
    observation, _ = env.reset(seed=seed)
    messages = list(observation)
    for _ in range(max_turns):
        try:
            action = env.oracle_action()
        except (NotImplementedError, AgentGymError):
            break
        observation, _, terminated, truncated, _ = env.step(action)
        messages += [action, *observation]
        if terminated or truncated:
            break
    return messages
