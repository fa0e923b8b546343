"""Where the policy model comes from: ``model.path``, or the tiny local model built on demand.

The trainer, its producers and (under torchrun) every rank ask for the same folder, so the tiny
model's env vocabulary (``model.tiny_vocab: env``) is computed once per process.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import agentgym
from agentgym.trainers.config import TrainConfig

__all__ = ["model_path"]


def model_path(cfg: TrainConfig) -> str:
    """The model folder: ``model.path`` or the cached tiny model."""
    if cfg.model.path is not None:
        return cfg.model.path
    from agentgym.models import tiny_model_dir

    corpus: tuple[str, ...] = ()
    if cfg.model.tiny_vocab == "env":
        specs = json.dumps([[e.id, e.kwargs] for e in cfg.task_envs()], sort_keys=True)
        corpus = _env_corpus(specs, cfg.rollout.max_turns)
    cache = Path(cfg.model.cache_dir).expanduser()
    folder = tiny_model_dir(cache, num_layers=cfg.model.tiny_layers, hidden_size=cfg.model.tiny_hidden,
                            intermediate_size=2 * cfg.model.tiny_hidden, corpus=corpus)
    return str(folder)


@functools.lru_cache(maxsize=8)
def _env_corpus(specs: str, max_turns: int) -> tuple[str, ...]:
    """:func:`agentgym.models.env_corpus` of the ``[id, kwargs]`` envs in ``specs`` (JSON), once per process.

    The trainer and its producers each ask for the model folder; the corpus plays oracle episodes
    (possibly in sandboxes), so it is computed once.
    """
    from agentgym.models import env_corpus

    return env_corpus([functools.partial(agentgym.make, i, **kw) for i, kw in json.loads(specs)], max_turns=max_turns)
