"""Tree-GRPO: tree-search rollouts with inter-tree plus intra-tree group-relative advantages.

Paper:
    Yuxiang Ji, Ziyu Ma, Yong Wang, Guanhua Chen, Xiangxiang Chu, Liaoni Wu, 2025, "Tree Search
    for LLM Agent Reinforcement Learning", arXiv:2509.21240. Reference code: AMAP-ML/Tree-GRPO
    (``verl/trainer/ppo/ray_trainer_ts.py``, ``adv_estimator=tree``).

Sampling (done by the rollout engine, not here): per task, M trees; each starts from one full
chain, then L times N nodes per tree are picked and expanded to a leaf. A node is one complete
agent turn; each leaf is one trajectory. Defaults M=2, N=2, L=1.

Equations, for the leaves ``i`` of one task (group ``g``) and tree ``k``::

    A_i = A_inter + A_intra
    A_inter = (R_i - mean_g R) / (std_g R + eps)     over all leaves of the task
    A_intra = (R_i - mean_k R) / (std_k R + eps)     over the leaves of the same tree

with the unbiased std and eps = 1e-6. A singleton population uses mean 0 and std 1, so it
contributes the raw reward ``R / (1 + eps)`` (ALGORITHMS.md: "singleton: raw R"; the reference
code computes exactly this, through its GRPO helper). The reference code's ``tree`` estimator
is this sum; its ``tree_2norm`` variant (normalise, then normalise again within the tree) is not
the paper's form and is not offered.

Shared prefixes: a node shared by several leaves lies on all their trajectories. The reference
code materialises every leaf as a full sequence, so a shared node is trained once per leaf below
it (:func:`per_leaf_paths`; the trainer's ``algo.tree_packing="paths"``).
:func:`shared_prefix_advantages` (ALGORITHMS.md's efficient default) instead returns, per node,
the sum of the advantages of the leaves below it, so the prefix is trained once. The plain sum
gives the per-leaf gradient only when the per-token loss is linear in the advantage (no token
clipped, e.g. the first on-policy step at ratio 1) and the aggregation weighs every token
alike. The trainer's packed form (:func:`agentgym.trainers.batch.build_tree_batch`, the
default) works on tokens rather than nodes and also carries each leaf's aggregation weight,
so it matches the per-leaf loss for every aggregation mode as long as no token is clipped;
with PPO clipping active the two forms differ (see :mod:`agentgym.trainers.methods`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from numpy.typing import ArrayLike

from .common import EPS, FloatArray, as_float_array, encode_ids, group_normalize


def tree_grpo_advantages(
    outcome_rewards: ArrayLike,
    group_ids: Sequence[Hashable],
    tree_ids: Sequence[Hashable],
    *,
    eps: float = EPS,
) -> FloatArray:
    """Per-leaf Tree-GRPO advantages ``A_inter + A_intra``.

    Args:
        outcome_rewards: Reward of each leaf trajectory, shape ``(N,)``.
        group_ids: Task id of each leaf (all trees of one task share it).
        tree_ids: Tree id of each leaf; combined with the group id, so tree ids only need to be
            unique within a task.
        eps: Added to the stds before dividing.

    Returns:
        Advantages, shape ``(N,)``.
    """
    r = as_float_array(outcome_rewards, "outcome_rewards")
    group_codes, _ = encode_ids(group_ids, len(r))
    tree_codes, _ = encode_ids(tree_ids, len(r), name="tree_ids")
    inter = group_normalize(r, group_codes.tolist(), eps=eps, singleton="raw")
    intra = group_normalize(r, list(zip(group_codes.tolist(), tree_codes.tolist(), strict=True)), eps=eps,
                            singleton="raw")
    return inter + intra


def _children(node_ids: Sequence[Hashable], parents: Sequence[Hashable | None]) -> dict[Hashable, list[Hashable]]:
    if len(node_ids) != len(parents):
        raise ValueError(f"{len(node_ids)} node ids but {len(parents)} parents")
    children: dict[Hashable, list[Hashable]] = {node: [] for node in node_ids}
    if len(children) != len(node_ids):
        raise ValueError("node ids must be unique")
    for node, parent in zip(node_ids, parents, strict=True):
        if parent is None:
            continue
        if parent not in children:
            raise ValueError(f"node {node!r} has unknown parent {parent!r}")
        children[parent].append(node)
    return children


def _preorder(node_ids: Sequence[Hashable], parents: Sequence[Hashable | None],
              children: Mapping[Hashable, list[Hashable]]) -> list[Hashable]:
    order: list[Hashable] = []
    stack = [node for node, parent in zip(node_ids, parents, strict=True) if parent is None][::-1]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node]))
    if len(order) != len(node_ids):
        raise ValueError("the parent links contain a cycle: some nodes are not reachable from a root")
    return order


def shared_prefix_advantages(
    node_ids: Sequence[Hashable],
    parents: Sequence[Hashable | None],
    leaf_advantages: Mapping[Hashable, float],
) -> dict[Hashable, float]:
    """Per-node advantage for training each shared node once: the sum over the leaves below it.

    Args:
        node_ids: Every node of the forest (one node = one agent turn).
        parents: The parent of each node, None for roots.
        leaf_advantages: Advantage of every leaf (a node without children), e.g. from
            :func:`tree_grpo_advantages`.

    Returns:
        ``{node: sum of leaf_advantages over the leaves in its subtree}``; a leaf maps to its own
        advantage.

    Raises:
        ValueError: on unknown parents, cycles, a leaf without an advantage, or an advantage given
            for a node that has children.
    """
    children = _children(node_ids, parents)
    leaves = {node for node, kids in children.items() if not kids}
    if set(leaf_advantages) != leaves:
        raise ValueError(f"leaf_advantages must cover exactly the leaves {sorted(map(repr, leaves))}, "
                         f"got {sorted(map(repr, leaf_advantages))}")
    totals = {node: float(leaf_advantages.get(node, 0.0)) for node in node_ids}
    for node in reversed(_preorder(node_ids, parents, children)):
        for kid in children[node]:
            totals[node] += totals[kid]
    return totals


def per_leaf_paths(node_ids: Sequence[Hashable], parents: Sequence[Hashable | None]) -> dict[Hashable, list[Hashable]]:
    """Root-to-leaf node lists, for training every shared node once per leaf (paper form).

    Args:
        node_ids: Every node of the forest.
        parents: The parent of each node, None for roots.

    Returns:
        ``{leaf: [root, ..., leaf]}``; train each listed node with that leaf's advantage.
    """
    children = _children(node_ids, parents)
    parent_of = dict(zip(node_ids, parents, strict=True))
    paths: dict[Hashable, list[Hashable]] = {}
    for node in _preorder(node_ids, parents, children):
        parent = parent_of[node]
        paths[node] = [*paths[parent], node] if parent is not None else [node]
    return {node: path for node, path in paths.items() if not children[node]}
