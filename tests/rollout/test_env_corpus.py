"""The env-vocabulary tiny tokenizer: shorter prompts, grids kept one token per cell, default unchanged."""

from __future__ import annotations

import functools
from pathlib import Path

from transformers import AutoTokenizer

import agentgym
from agentgym.chat_templates import build_tiny_tokenizer
from agentgym.models import TinyModelConfig, env_corpus, tiny_model_dir
from agentgym.trainers.config import load_config
from agentgym.trainers.loop import model_path

SOKOBAN = functools.partial(agentgym.make, "agentgym/Sokoban-v0", min_moves=1, max_moves=3)
MOVE = '<tool_call>\n{"name": "move", "arguments": {"direction": "left"}}\n</tool_call><|im_end|>'


def _prompt(tokenizer: object, seed: int = 123) -> tuple[str, list[int]]:
    env = SOKOBAN()
    observation, _ = env.reset(seed=seed)
    text = tokenizer.apply_chat_template([m.to_chat() for m in observation],  # type: ignore[attr-defined]
                                         tools=[t.model_dump() for t in env.tools], tokenize=False,
                                         add_generation_prompt=True)
    return text, tokenizer(text)["input_ids"]  # type: ignore[operator]


def test_corpus_covers_the_episode_text_but_no_grid_lines() -> None:
    lines = env_corpus(SOKOBAN, episodes=3)
    assert lines == tuple(sorted(set(lines)))
    assert any('"direction"' in line for line in lines)  # the oracle's tool calls were rendered
    assert any(line.startswith("Push every box") for line in lines)  # the task text
    assert any("Boxes on targets" in line for line in lines)  # later observations
    assert all(any(c.isalpha() for c in line) for line in lines)
    assert not any(set(line) <= set("#_.$*@+") for line in lines)


def test_env_vocabulary_shortens_prompts_and_keeps_grids_per_cell() -> None:
    builtin = build_tiny_tokenizer()
    adapted = build_tiny_tokenizer(extra_corpus=env_corpus(SOKOBAN, episodes=3))
    text, short = _prompt(adapted)
    _, long = _prompt(builtin)
    assert len(short) < 0.7 * len(long)
    assert adapted.decode(short) == text  # still lossless
    assert len(adapted(MOVE)["input_ids"]) < len(builtin(MOVE)["input_ids"])
    assert "direction" in adapted.convert_ids_to_tokens(adapted(MOVE)["input_ids"])
    grid = [line for line in text.split("\n") if line and set(line) <= set("#_.$*@+")]
    assert len(grid) == 6
    for row in grid:
        assert len(adapted(row)["input_ids"]) == len(row)  # one token per cell: rows stay aligned


def test_config_switch_builds_a_separate_cached_model(tmp_path: Path) -> None:
    quickstart = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    builtin = model_path(load_config(quickstart, [f"model.cache_dir={tmp_path}"]))
    adapted = model_path(load_config(quickstart, [f"model.cache_dir={tmp_path}", "model.tiny_vocab=env"]))
    assert builtin != adapted
    assert Path(builtin).name == tiny_model_dir(tmp_path).name  # the default digest did not change
    _, short = _prompt(AutoTokenizer.from_pretrained(adapted))
    _, long = _prompt(AutoTokenizer.from_pretrained(builtin))
    assert len(short) < 0.7 * len(long)
    assert TinyModelConfig(corpus=("x",)).digest() != TinyModelConfig().digest()
