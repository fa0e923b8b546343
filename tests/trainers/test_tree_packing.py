"""Tree-GRPO packing: shared prefixes forwarded and trained once, same loss and gradient as per-leaf rows."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from agentgym.models import TinyModelConfig, build_tiny_model
from agentgym.rollout import Segment, Trajectory, Turn
from agentgym.rollout.tree import resolve_paths
from agentgym.trainers import credit
from agentgym.trainers.batch import TrainBatch, build_batch, build_tree_batch
from agentgym.trainers.config import AlgoConfig, OptimConfig
from agentgym.trainers.learner import Learner
from agentgym.trainers.loop import Trainer
from agentgym.trainers.testing import mixed_rollout, tiny_config

AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


# ----------------------------------------------------------------- fixtures
def _model():
    model, _ = build_tiny_model(TinyModelConfig(num_layers=2, hidden_size=64, intermediate_size=128, vocab_size=512))
    return model.train()


def _turn(rng: np.random.Generator, node: int, n_act: int = 5, n_obs: int = 4) -> Turn:
    return Turn(action_ids=rng.integers(5, 400, n_act).tolist(), action_logprobs=[0.0] * n_act,
                observation_ids=rng.integers(5, 400, n_obs).tolist(), node_id=node)


def _leaf(tree: str, branch: int, turns: list[Turn], *, parent: int | None = None, first: int = 0,
          segments: list[Segment] | None = None) -> Trajectory:
    return Trajectory(episode_id=f"{tree}-b{branch}", group_id="g", tree_id=tree, parent_node=parent,
                      first_turn=first, turns=turns, segments=segments or [])


def hand_trees(seed: int = 0) -> list[Trajectory]:
    """Two trees as the rollout records them (leaves hold their own turns), resolved to full paths.

    Tree a: a 4-turn chain, a branch after turn 2, a branch from the root (shares the prompt
    only), a branch after turn 3 that failed at once (its path is a prefix of the chain), and a
    branch of a branch. Tree b: a chain whose template broke the prefix at turn 2 (a second
    segment) and a branch after turn 2 (it shares both segments' prefixes).
    """
    rng = np.random.default_rng(seed)
    prompt = rng.integers(5, 400, 12).tolist()
    chain = [_turn(rng, n) for n in (1, 2, 3, 4)]
    leaves = [
        _leaf("a", 0, chain, segments=[Segment(0, prompt)]),
        _leaf("a", 1, [_turn(rng, 5), _turn(rng, 6, n_act=7)], parent=2, first=2),
        _leaf("a", 2, [_turn(rng, 7), _turn(rng, 8)], parent=0),
        _leaf("a", 3, [], parent=3, first=3),
        _leaf("a", 4, [_turn(rng, 9)], parent=5, first=3),
    ]
    chain_b = [_turn(rng, n) for n in (1, 2, 3)]
    chain_b[1].observation_ids = []  # the turn before a prefix break keeps no observation ids
    broken = [Segment(0, rng.integers(5, 400, 10).tolist()), Segment(2, rng.integers(5, 400, 9).tolist(), "break")]
    leaves += [_leaf("b", 0, chain_b, segments=broken), _leaf("b", 1, [_turn(rng, 4, n_act=3)], parent=2, first=2)]
    return resolve_paths(leaves)


def random_tree(rng: np.random.Generator, tree: str = "r") -> list[Trajectory]:
    """A chain plus branches from random nodes (any depth, branches of branches, empty ones)."""
    depth = {0: 0}
    chain = [_turn(rng, n, n_act=int(rng.integers(1, 4)), n_obs=int(rng.integers(0, 3))) for n in (1, 2, 3, 4)]
    depth.update({n: n for n in (1, 2, 3, 4)})
    leaves = [_leaf(tree, 0, chain, segments=[Segment(0, rng.integers(5, 400, 4).tolist())])]
    for branch in range(1, int(rng.integers(2, 7))):
        parent = int(rng.choice(list(depth)))
        turns = []
        for _ in range(int(rng.integers(0, 3))):
            node = max(depth) + 1
            depth[node] = depth[parent] + len(turns) + 1
            turns.append(_turn(rng, node, n_act=int(rng.integers(1, 4)), n_obs=int(rng.integers(0, 3))))
        leaves.append(_leaf(tree, branch, turns, parent=parent, first=depth[parent]))
    return resolve_paths(leaves)


def _advantages(trajs: list[Trajectory], seed: int = 1) -> list[np.ndarray]:
    rewards = np.random.default_rng(seed).random(len(trajs))
    adv = credit.tree_grpo_advantages(rewards, [t.group_id for t in trajs], [t.tree_id for t in trajs])
    return credit.repeat_per_turn(adv, [len(t.turns) for t in trajs])


def _set_on_policy(learner: Learner, trajs: list[Trajectory]) -> None:
    """Record the learner's own log-probs as the sampling log-probs (ratio 1), per shared turn."""
    for traj in trajs:
        batch = build_batch([traj], [np.zeros(len(traj.turns))], drop_empty=False)
        logp = learner.logprobs(batch)
        for row in range(batch.size):
            for k, turn in enumerate(traj.turns):
                cols = ((batch.turn_index[row] == k) & (batch.loss_mask[row] > 0)).nonzero().squeeze(-1)
                if len(cols):
                    turn.action_logprobs = logp[row, cols].tolist()


def _grads_after_update(learner: Learner, batch: TrainBatch) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    learner.optimizer.step = lambda *args, **kwargs: None  # keep the weights: compare one gradient
    stats = learner.update(batch)
    return stats, {name: p.grad.detach().clone() for name, p in learner.model.named_parameters()}


def _learner(model, **algo) -> Learner:
    return Learner(model, AlgoConfig(method="tree_grpo", **algo),
                   OptimConfig(lr=1e-3, micro_batch_size=2, max_grad_norm=0.0))


def expected_packed_tokens(trajs: list[Trajectory]) -> int:
    """Trie nodes of each tree's rows, plus one parent copy for every extra branch below a node.

    A trie key is a token's (id, loss flag, old log-prob): tokens merge only when all three agree.
    """
    total = 0
    for tree in {t.tree_id for t in trajs}:
        rows = [tuple(zip(seg.input_ids.tolist(), seg.loss_mask.tolist(), seg.old_logprobs.tolist(), strict=True))
                for t in trajs if t.tree_id == tree for seg in t.flatten()]
        prefixes = {row[:n] for row in rows for n in range(1, len(row) + 1)}
        children: dict[tuple[int, ...], int] = {}
        for prefix in prefixes:
            if len(prefix) > 1:
                children[prefix[:-1]] = children.get(prefix[:-1], 0) + 1
        total += len(prefixes) + sum(c - 1 for c in children.values())
    return total


def _assert_same_update(paths: TrainBatch, packed: TrainBatch, model, **algo) -> dict[str, float]:
    s_paths, g_paths = _grads_after_update(_learner(copy.deepcopy(model), **algo), paths)
    s_packed, g_packed = _grads_after_update(_learner(copy.deepcopy(model), **algo), packed)
    for key in ("loss", "pg_loss", "grad_norm", "entropy", "approx_kl", "kl_loss"):
        if key in s_paths:
            assert s_packed[key] == pytest.approx(s_paths[key], rel=1e-4, abs=1e-6), key
    assert s_paths["grad_norm"] > 0
    for name, grad in g_paths.items():
        torch.testing.assert_close(g_packed[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    return s_packed


# -------------------------------------------------------------------- tests
def test_packed_rows_hold_every_shared_token_once():
    trajs = hand_trees()
    adv = _advantages(trajs)
    paths, packed = build_batch(trajs, adv), build_tree_batch(trajs, adv)
    assert paths.size == 9 and packed.size == 2  # tree a: 5 leaves; tree b: 2 leaves of 2 segments each
    assert int(packed.attention_mask.sum()) == expected_packed_tokens(trajs)
    assert int(packed.attention_mask.sum()) < 0.6 * int(paths.attention_mask.sum())
    # token-mean: loss weights are multiplicities, so the loss-token count is the per-leaf count
    assert float(packed.loss_mask.sum()) == pytest.approx(float(paths.loss_mask.sum()))
    assert float((packed.loss_mask * packed.advantages).sum()) == pytest.approx(
        float((paths.loss_mask * paths.advantages).sum()), rel=1e-5)


@pytest.mark.parametrize("seed", range(20))
def test_tree_mask_gives_every_token_exactly_its_path(seed):
    """Each packed token sees exactly the tokens of its root-to-leaf prefix (in order), every path
    prefix is some packed token's context, and every trained token directly follows its parent."""
    rng = np.random.default_rng(seed)
    trajs = random_tree(rng, "x") + random_tree(rng, "y")
    adv = _advantages(trajs, seed=seed)
    packed = build_tree_batch(trajs, adv)
    allowed = packed.forward_kwargs()["attention_mask"][:, 0] == 0
    assert int(packed.attention_mask.sum()) == expected_packed_tokens(trajs)
    for tree, row in (("x", 0), ("y", 1)):
        paths = {tuple(seg.input_ids.tolist()) for t in trajs if t.tree_id == tree for seg in t.flatten()}
        prefixes = {p[:n] for p in paths for n in range(1, len(p) + 1)}
        contexts = set()
        for i in range(int(packed.attention_mask[row].sum())):
            cols = allowed[row, i].nonzero().squeeze(-1)
            context = tuple(packed.input_ids[row, cols].tolist())
            assert context in prefixes and len(context) == int(packed.position_ids[row, i]) + 1
            contexts.add(context)
            if packed.loss_mask[row, i] > 0:  # its logits come from column i - 1: that must be its parent
                assert torch.equal(allowed[row, i - 1].nonzero().squeeze(-1), cols[:-1])
        assert contexts == prefixes


def test_packed_forward_gives_each_token_its_path_logits():
    """Every packed action token gets the log-prob it has in its own root-to-leaf row."""
    trajs = hand_trees(seed=3)
    adv = _advantages(trajs)
    learner = _learner(_model())
    paths, packed = build_batch(trajs, adv), build_tree_batch(trajs, adv)
    lp_paths, lp_packed = learner.logprobs(paths), learner.logprobs(packed)
    weighted_paths = float((lp_paths * paths.loss_mask).sum())
    weighted_packed = float((lp_packed * packed.loss_mask).sum())  # multiplicity-weighted
    assert weighted_packed == pytest.approx(weighted_paths, rel=1e-5)
    # and positions: packed position ids are the column each token has in its path row
    real = packed.attention_mask.bool()
    assert int(packed.position_ids[real].max()) == max(len(s.input_ids) for t in trajs for s in t.flatten()) - 1


@pytest.mark.parametrize("agg", AGG_MODES)
def test_packed_update_equals_per_leaf_update_on_policy(agg):
    model = _model()
    trajs = hand_trees(seed=5)
    _set_on_policy(_learner(model), trajs)
    adv = _advantages(trajs, seed=6)
    _assert_same_update(build_batch(trajs, adv), build_tree_batch(trajs, adv, agg_mode=agg), model, agg_mode=agg)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum"])
def test_kl_term_is_weighted_like_the_per_leaf_rows(agg):
    model = _model()
    learner = _learner(model, kl_beta=0.5, agg_mode=agg)  # the reference is this copy of the weights
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))  # the policy moves away from the reference
    trajs = hand_trees(seed=7)
    _set_on_policy(learner, trajs)
    adv = _advantages(trajs, seed=8)
    paths, packed = build_batch(trajs, adv), build_tree_batch(trajs, adv, agg_mode=agg)
    results = []
    for batch in (paths, packed):
        twin = copy.deepcopy(learner)
        results.append(_grads_after_update(twin, batch))
    (s_paths, g_paths), (s_packed, g_packed) = results
    assert s_paths["kl_loss"] > 1e-6
    assert s_packed["kl_loss"] == pytest.approx(s_paths["kl_loss"], rel=1e-4)
    for name, grad in g_paths.items():
        torch.testing.assert_close(g_packed[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_clipped_tokens_make_the_forms_differ():
    """The documented deviation: off-policy (ratios outside the clip range) the two updates differ."""
    model = _model()
    trajs = hand_trees(seed=9)
    _set_on_policy(_learner(model), trajs)
    for turn in {id(t): t for traj in trajs for t in traj.turns}.values():  # shared turns once
        turn.action_logprobs = [v - 0.5 for v in turn.action_logprobs]  # ratio 1.65: clipped for A > 0 only
    adv = _advantages(trajs, seed=10)
    s_paths, _ = _grads_after_update(_learner(copy.deepcopy(model)), build_batch(trajs, adv))
    s_packed, _ = _grads_after_update(_learner(copy.deepcopy(model)), build_tree_batch(trajs, adv))
    assert s_paths["clip_frac"] > 0
    assert s_packed["grad_norm"] != pytest.approx(s_paths["grad_norm"], rel=1e-3)


def test_attention_implementations_accept_the_tree_mask():
    trajs = hand_trees(seed=11)
    adv = _advantages(trajs)
    paths, packed = build_batch(trajs, adv), build_tree_batch(trajs, adv)
    sums = []
    for impl in ("eager", "sdpa"):
        model = _model()
        model.config._attn_implementation = impl  # from_pretrained picks sdpa; eager adds the mask
        assert model.model.layers[0].self_attn.config._attn_implementation == impl
        learner = _learner(model)
        sums.append((float((learner.logprobs(paths) * paths.loss_mask).sum()),
                     float((learner.logprobs(packed) * packed.loss_mask).sum())))
    for on_paths, on_packed in sums:
        assert on_packed == pytest.approx(on_paths, rel=1e-5)


# ------------------------------------------------------------ real rollouts
TREE = ["env.id=agentgym/SearchQA-v0", "env.kwargs={hops: 1}", "rollout.trees=2", "rollout.expansions=2",
        "algo.method=tree_grpo"]


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("models")


@pytest.mark.slow  # a tree rollout and four updates on ~10k tokens: about a minute on two cores
def test_real_tree_packed_equals_paths(tmp_path, model_cache):
    """Trees rolled out with the tiny model on SearchQA (2 tasks x 2 trees x 3 leaves), two aggregations."""
    small = ["rollout.max_turns=2", "model.tiny_layers=1", "model.tiny_hidden=64"]
    trainer = Trainer(tiny_config(tmp_path, model_cache, [*TREE, *small]), echo=None)
    trajs = [t for t in mixed_rollout(trainer, 0) if t.segments]
    assert len({t.tree_id for t in trajs}) == 4 and len(trajs) == 12
    adv = _advantages(trajs, seed=2)
    paths = build_batch(trajs, adv)
    for agg in ("token-mean", "seq-mean-token-mean"):
        packed = build_tree_batch(trajs, adv, agg_mode=agg)
        assert packed.size == 4
        assert int(packed.attention_mask.sum()) == expected_packed_tokens(trajs)
        assert int(packed.attention_mask.sum()) < int(paths.attention_mask.sum())
        _assert_same_update(paths, packed, trainer.learner.model, agg_mode=agg)


def test_trainer_step_with_tree_grpo_trains_packed_trees(tmp_path, model_cache, monkeypatch):
    trainer = Trainer(tiny_config(tmp_path, model_cache, TREE), echo=None)
    monkeypatch.setattr(trainer, "rollout", lambda step: mixed_rollout(trainer, step))
    before = {k: v.detach().clone() for k, v in trainer.learner.model.named_parameters()}
    stats = trainer.train_step()
    assert math.isfinite(stats["loss"]) and stats["grad_norm"] > 0
    assert sum(not torch.equal(before[k], v) for k, v in trainer.learner.model.named_parameters()) > 0
    assert 0 < stats["tokens_forwarded"] < stats["tree_tokens_paths"]
