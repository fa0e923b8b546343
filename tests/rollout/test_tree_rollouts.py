"""Tree-GRPO rollouts: leaf counts, shared prefixes recorded once, token savings, faithfulness."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests_rollout_helpers import assert_faithful

from agentgym.backends.hf import HFBackend
from agentgym.envs.calculator.env import CalculatorEnv
from agentgym.rollout import ChatRenderer, RolloutConfig, RolloutEngine, TreeConfig, resolve_paths, tree_token_counts

CONFIG = RolloutConfig(max_turns=3, max_tokens=8, max_wait_s=None, seed=3)


class _NoFork(CalculatorEnv):
    forkable = False


def _trees(backend: Any, renderer: ChatRenderer, factory: Callable[[], Any], tree: TreeConfig) -> list[Any]:
    return RolloutEngine(backend, renderer, factory, CONFIG).run_trees([0, 1], tree).trajectories


def test_trees_share_prefixes_and_generate_fewer_tokens_than_chains(
    hf_backend: HFBackend, renderer: ChatRenderer, calculator_factory: Callable[[], Any]
) -> None:
    tree = TreeConfig(trees=2, expansions=2, iterations=1)
    leaves = _trees(hf_backend, renderer, calculator_factory, tree)
    assert len(leaves) == 2 * 2 * (1 + 2)
    assert Counter(t.group_id for t in leaves) == {"group-0": 6, "group-1": 6}
    for tree_id in {t.tree_id for t in leaves}:
        members = [t for t in leaves if t.tree_id == tree_id]
        node_ids = [turn.node_id for t in members for turn in t.turns]
        assert len(node_ids) == len(set(node_ids))  # every node is recorded once
        assert sum(t.parent_node is None for t in members) == 1
    counts = tree_token_counts(leaves)
    assert counts["generated"] < counts["as_chains"]
    chains = RolloutEngine(hf_backend, renderer, calculator_factory, CONFIG.model_copy(update={"group_size": 6}))
    chain_tokens = chains.run([0, 1]).stats.generated_tokens
    assert counts["generated"] < chain_tokens  # M*(1+L*N) independent chains of the same tasks
    roots = {t.tree_id: t for t in leaves if t.parent_node is None}
    for full in resolve_paths(leaves):
        assert len(full.turns) == 3
        assert_faithful(hf_backend.model, full, 1.0)
        root = roots[full.tree_id].metadata  # reset-state facts reach every branch's full path
        assert full.metadata["initial_anchor"] == root["initial_anchor"] and "known values" in root["initial_anchor"]
        assert full.metadata["ground_truth"] == root["ground_truth"] is not None


def test_replay_branching_matches_fork_branching(tiny_dir: Path, renderer: ChatRenderer) -> None:
    tree = TreeConfig(trees=1, expansions=2, iterations=2)

    def run(factory: Callable[[], Any], branch_by: str) -> list[dict[str, Any]]:
        leaves = _trees(HFBackend.from_pretrained(tiny_dir), renderer, factory,
                        tree.model_copy(update={"branch_by": branch_by}))
        return [{**t.to_dict(), "timings": None} for t in sorted(leaves, key=lambda t: t.episode_id)]

    forked = run(lambda: CalculatorEnv(max_turns=10), "auto")
    assert forked == run(lambda: _NoFork(max_turns=10), "auto")  # not forkable: replayed
    assert forked == run(lambda: CalculatorEnv(max_turns=10), "replay")


def test_tree_config_is_validated() -> None:
    with pytest.raises(ValueError, match="branch_by"):
        TreeConfig(branch_by="clone")
    assert TreeConfig(trees=2, expansions=2, iterations=1).leaves_per_tree == 3


_JITTER = random.Random(0)


class _Jittery(CalculatorEnv):
    """Calculator whose steps take a random 0-15 ms: branches finish in a different order each run."""

    def step(self, action: Any) -> Any:
        time.sleep(_JITTER.uniform(0.0, 0.015))
        return super().step(action)


def _split_logprobs(leaves: list[Any]) -> tuple[list[dict[str, Any]], list[float]]:
    """The records without timings or log-probs, and the log-probs in record order."""
    records, logprobs = [], []
    for leaf in leaves:
        record = {**leaf.to_dict(), "timings": None}
        for turn in record["turns"]:
            logprobs += turn.pop("action_logprobs")
        records.append(record)
    return records, logprobs


def test_trees_and_their_order_do_not_depend_on_which_branch_finishes_first(
    hf_backend: HFBackend, renderer: ChatRenderer
) -> None:
    """Same tokens, same tree, same order; log-probs agree to float rounding (the batches differ)."""
    tree = TreeConfig(trees=2, expansions=2, iterations=2)  # iteration 2 draws from nodes that iteration 1 added
    config = CONFIG.model_copy(update={"temperature": 1.5})

    def run(jitter_seed: int) -> tuple[list[dict[str, Any]], list[float]]:
        _JITTER.seed(jitter_seed)
        engine = RolloutEngine(hf_backend, renderer, lambda: _Jittery(max_turns=10), config)
        return _split_logprobs(engine.run_trees([0, 1], tree).trajectories)

    first, first_logprobs = run(1)
    assert [(t["metadata"]["task_index"], t["metadata"]["tree"], t["metadata"]["branch"]) for t in first] == [
        (task, m, b) for task in (0, 1) for m in range(2) for b in range(5)
    ]
    for jitter_seed in (2, 3):
        again, logprobs = run(jitter_seed)
        assert again == first
        assert logprobs == pytest.approx(first_logprobs, abs=1e-5)
    for tree_id in {t["tree_id"] for t in first}:
        ids = [turn["node_id"] for t in first if t["tree_id"] == tree_id for turn in t["turns"]]
        assert len(ids) == len(set(ids)) and min(ids) >= 1
    assert any(t["parent_node"] not in (None, 0) for t in first)  # some branches grew from inner nodes
