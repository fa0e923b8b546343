"""Tiny Qwen2-architecture models built locally, for tests and the CPU quickstart.

Nothing is downloaded: the tokenizer is the byte-level BPE that
:func:`agentgym.chat_templates.build_tiny_tokenizer` trains on a built-in corpus
(with the Qwen-style chat template, tools included), and the model is a
``Qwen2ForCausalLM`` with freshly initialised weights. Both are deterministic
given the config (the seed included), and :func:`save_tiny_model` writes an
ordinary Hugging Face folder that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load.

The weights are random, so the model's text is noise; what matters for tests is
that it is a real causal LM with a KV cache, a real chat template and real
special tokens, small enough that a multi-turn rollout takes milliseconds.

``torch`` and ``transformers`` are imported inside the functions, so importing
this module is cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = ["TinyModelConfig", "build_tiny_model", "save_tiny_model", "tiny_model_dir"]

_MARKER = "agentgym_tiny.json"
_LOCK = threading.Lock()


@dataclass(frozen=True)
class TinyModelConfig:
    """The shape of a tiny model. Defaults: 2 layers, hidden 128, ~900-token vocabulary.

    Attributes:
        num_layers: Transformer blocks (2-4 keeps a CPU forward in milliseconds).
        hidden_size: Model width (128-256).
        num_heads: Attention heads; must divide ``hidden_size``.
        num_kv_heads: Key/value heads (grouped-query attention, as in Qwen2).
        intermediate_size: MLP width.
        vocab_size: Target BPE vocabulary (512-8192); the trained tokenizer may
            have slightly fewer tokens, and the model's embedding matches it.
        max_position_embeddings: Longest context the rotary embedding is set up for.
        seed: Seeds the weight initialisation.
        corpus: Extra tokenizer training lines (e.g. :func:`agentgym.models.env_corpus` of the
            env the model will play); empty means the built-in corpus alone.
    """

    num_layers: int = 2
    hidden_size: int = 128
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 256
    vocab_size: int = 1024
    max_position_embeddings: int = 8192
    seed: int = 0
    corpus: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.num_layers <= 8:
            raise ValueError(f"num_layers must be in [1, 8], got {self.num_layers}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must divide hidden_size ({self.hidden_size}) "
                f"and be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if not 512 <= self.vocab_size <= 8192:
            raise ValueError(f"vocab_size must be in [512, 8192], got {self.vocab_size}")

    def digest(self) -> str:
        """A short stable hash of the config (names cache folders)."""
        fields = asdict(self)
        if not fields["corpus"]:  # the built-in corpus keeps the digest it had before this field existed
            del fields["corpus"]
        text = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_tiny_model(
    config: TinyModelConfig | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Build a tiny ``Qwen2ForCausalLM`` and its tokenizer in memory.

    Args:
        config: The model shape and seed (defaults: :class:`TinyModelConfig`).

    Returns:
        ``(model, tokenizer)``: the model in fp32 eval mode on the CPU, and a fast
        tokenizer with the Qwen-style tool-calling chat template (eos
        ``<|im_end|>``, pad ``<|endoftext|>``).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentgym.chat_templates import build_tiny_tokenizer

    config = config or TinyModelConfig()
    tokenizer = build_tiny_tokenizer(config.vocab_size, config.corpus)
    hf_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = Qwen2ForCausalLM(hf_config)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.pad_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.float().eval(), tokenizer


def save_tiny_model(path: str | os.PathLike[str], config: TinyModelConfig | None = None) -> Path:
    """Build a tiny model and save it as an ordinary Hugging Face folder.

    Args:
        path: The folder to write (created if needed).
        config: The model shape and seed.

    Returns:
        The folder, loadable with ``AutoModelForCausalLM.from_pretrained`` and
        ``AutoTokenizer.from_pretrained``.
    """
    config = config or TinyModelConfig()
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    model, tokenizer = build_tiny_model(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / _MARKER).write_text(json.dumps(asdict(config), sort_keys=True))
    return folder


def tiny_model_dir(cache_dir: str | os.PathLike[str], config: TinyModelConfig | None = None, **overrides: Any) -> Path:
    """Return a saved tiny model under ``cache_dir``, building it on first use.

    The folder is named by the config's digest, so different configs never
    collide and a second call (in any process) reuses the saved files. Tests use
    this from a session fixture with a pytest temporary directory.

    Args:
        cache_dir: Where cached models live.
        config: The model shape and seed.
        **overrides: Field overrides applied to ``config`` (e.g. ``num_layers=3``).

    Returns:
        The model folder.
    """
    base = config or TinyModelConfig()
    if overrides:
        base = TinyModelConfig(**{**asdict(base), **overrides})
    folder = Path(cache_dir) / f"tiny-qwen2-{base.digest()}"
    with _LOCK:
        if not (folder / _MARKER).exists():
            tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
            save_tiny_model(tmp, base)
            try:
                tmp.rename(folder)
            except OSError:  # another process finished first; use its copy
                shutil.rmtree(tmp, ignore_errors=True)
    return folder
