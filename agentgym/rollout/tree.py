"""Tree-GRPO rollouts: M trees per task, L rounds of N expansions, shared prefixes kept once.

Following Ji et al. (2025) and ALGORITHMS.md "Tree-GRPO": a node is one
complete agent turn (action + observation). Each tree starts with one full
chain from the root (the state after ``reset``) to a leaf. Then, for each of
``L`` iterations, ``N`` nodes are drawn uniformly *with replacement* from the
root and the tree's non-leaf nodes (those present when the iteration starts),
and from each a full continuation is rolled out to a new leaf. A tree has
``1 + L*N`` leaves, a task ``M*(1 + L*N)``.

Branching needs the env in the node's state. With ``env.fork()`` (where
``env.forkable``) the env is forked when the node is created and the fork is
forked again for every expansion. Otherwise the node keeps the actions along
its path, and an expansion resets a fresh env with the task's seed and replays
them (this needs a deterministic env). The token context and chat context at
the node are copied, so a continuation's ids extend exactly the ids its prefix
was sampled with.

Recording: each leaf is one :class:`~agentgym.rollout.trajectory.Trajectory`
holding only the turns it generated; ``parent_node`` names the node it grew
from (0: the root) and ``first_turn`` its depth. :func:`resolve_paths` joins
each leaf with its ancestors into a full root-to-leaf trajectory for training.
Node ids do not depend on which branch finishes first: the turn at depth ``d``
of branch ``b`` (0: the chain) is node ``1 + b * max_turns + d``, and an
iteration draws from its candidates in node-id order, so a fixed seed grows the
same tree however the branches interleave.
Departures from the paper: none in sampling; the leaf's ``reward`` is the sum of
turn rewards along its whole path.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.core import AgentEnv
from agentgym.rollout.config import RolloutTask, TreeConfig
from agentgym.rollout.episode import Cursor, EnvFailure, EpisodeRunner
from agentgym.rollout.stats import derive_seed
from agentgym.rollout.trajectory import Segment, Trajectory, Turn
from agentgym.types import Message

__all__ = ["TreeBuilder", "resolve_paths", "tree_token_counts"]


@dataclass
class _Node:
    """A branch point: the cursor state after ``depth`` turns (env forked, or None to replay)."""

    node_id: int
    snapshot: Cursor


def _replay(env_factory: Callable[[], AgentEnv], task: RolloutTask, actions: list[Message]) -> AgentEnv:
    """A fresh env reset with the task's seed and stepped through ``actions`` (pool thread)."""
    env = env_factory()
    env.reset(seed=task.seed, options=dict(task.options))
    for number, action in enumerate(actions, start=1):
        _, _, terminated, truncated, _ = env.step(action)
        if (terminated or truncated) and number < len(actions):
            env.close()
            raise RuntimeError(f"replay diverged: the env ended after {number} of {len(actions)} actions")
    return env


class TreeBuilder:
    """Grows Tree-GRPO trees with an :class:`EpisodeRunner` (see the module docstring).

    Args:
        runner: The run's episode runner.
        env_factory: Builds a fresh env.
        config: M, N, L and the branching mode.
        emit: Receives each finished leaf trajectory.
    """

    def __init__(
        self,
        runner: EpisodeRunner,
        env_factory: Callable[[], AgentEnv],
        config: TreeConfig,
        emit: Callable[[Trajectory], None],
    ) -> None:
        self.runner = runner
        self.env_factory = env_factory
        self.config = config
        self.emit = emit

    async def grow(self, index: int, tree: int, task: RolloutTask) -> None:
        """Roll out one tree for task ``index`` and emit its ``1 + L*N`` leaves."""
        tree_id = f"{index}-t{tree}"
        nodes: list[_Node] = []
        try:
            fork = await self._chain(index, tree, tree_id, task, nodes)
            n = self.config.expansions
            for iteration in range(self.config.iterations):
                rng = np.random.default_rng(derive_seed(self.runner.config.seed, index, tree, iteration))
                candidates = sorted(nodes, key=lambda node: node.node_id)  # root and non-leaf nodes present now
                drawn = rng.integers(0, len(candidates), size=n) if candidates else []
                picks = [candidates[int(i)] for i in drawn] if candidates else [None] * n
                self.runner.reserve(len(picks))  # counted before the branch tasks get scheduled
                await asyncio.gather(*(
                    self._branch(index, tree, tree_id, task, node, 1 + iteration * n + j, nodes, fork)
                    for j, node in enumerate(picks)
                ))
        finally:
            for node in nodes:
                await self.runner.close_env(node.snapshot)

    def _node_ids(self, branch: int, depth: int) -> Iterator[int]:
        """Ids for the turns of ``branch`` from ``depth`` on: unique in the tree, timing-free."""
        return itertools.count(1 + branch * self.runner.config.max_turns + depth)

    async def _chain(self, index: int, tree: int, tree_id: str, task: RolloutTask, nodes: list[_Node]) -> bool:
        """The tree's first full chain; returns whether branches fork (else replay)."""
        trajectory = self._trajectory(index, tree, tree_id, task, 0, None, 0)
        cursor = None
        fork = self.config.branch_by == "fork"
        with self.runner.active():
            try:
                cursor = await self.runner.open(self.env_factory, task, trajectory)
                if self.config.branch_by == "auto":
                    fork = bool(getattr(cursor.env, "forkable", False))
                nodes.append(_Node(0, await self._snapshot(cursor, fork=fork)))
                await self.runner.play(
                    cursor, trajectory, (index, tree, 0), key=(index, tree, 0), node_ids=self._node_ids(0, 0),
                    after_turn=self._recorder(nodes, fork=fork),
                )
            except EnvFailure as failure:
                trajectory.termination = failure.termination
                trajectory.metadata["termination_detail"] = failure.detail
            finally:
                await self.runner.close_env(cursor)
        self.emit(trajectory)
        return fork

    async def _branch(
        self, index: int, tree: int, tree_id: str, task: RolloutTask, node: _Node | None,
        branch: int, nodes: list[_Node], fork: bool,
    ) -> None:
        """One expansion from ``node`` (None: the root chain failed; start afresh)."""
        parent = node.node_id if node is not None else None
        depth = node.snapshot.depth if node is not None else 0
        trajectory = self._trajectory(index, tree, tree_id, task, branch, parent, depth)
        cursor = None
        with self.runner.active(reserved=True):
            try:
                if node is None:
                    cursor = await self.runner.open(self.env_factory, task, trajectory)
                else:
                    cursor = await self._restore(node.snapshot, task, fork=fork)
                await self.runner.play(
                    cursor, trajectory, (index, tree, branch), key=(index, tree, branch),
                    node_ids=self._node_ids(branch, depth),
                    after_turn=self._recorder(nodes, fork=fork),
                )
            except EnvFailure as failure:
                trajectory.termination = failure.termination
                trajectory.metadata["termination_detail"] = failure.detail
            finally:
                await self.runner.close_env(cursor)
        self.emit(trajectory)

    # ---------------------------------------------------------------- helpers
    def _trajectory(
        self, index: int, tree: int, tree_id: str, task: RolloutTask, branch: int, parent: int | None, depth: int
    ) -> Trajectory:
        return Trajectory(
            episode_id=f"{tree_id}-b{branch}", group_id=f"group-{index}", seed=task.seed, tree_id=tree_id,
            parent_node=parent, first_turn=depth, metadata={"task_index": index, "tree": tree, "branch": branch},
        )

    def _recorder(self, nodes: list[_Node], *, fork: bool) -> Callable[[Cursor, Turn], Any]:
        async def record(cursor: Cursor, turn: Turn) -> None:
            assert turn.node_id is not None
            nodes.append(_Node(turn.node_id, await self._snapshot(cursor, fork=fork)))

        return record

    async def _snapshot(self, cursor: Cursor, *, fork: bool) -> Cursor:
        """Copy the cursor; fork its env when branching by fork (else keep no env)."""
        env = await self.runner.call_env(cursor.env.fork) if fork else None
        return Cursor(
            env=env,  # type: ignore[arg-type]  # None: replay on restore
            context=cursor.context.copy(), ids=list(cursor.ids), depth=cursor.depth,
            reward=cursor.reward, actions=list(cursor.actions), abandoned=env is None,
        )

    async def _restore(self, snapshot: Cursor, task: RolloutTask, *, fork: bool) -> Cursor:
        """A live cursor in the snapshot's state (a fork of its env, or a replay)."""
        if fork and snapshot.env is not None:
            env = await self.runner.call_env(snapshot.env.fork)
        else:
            env = await self.runner.call_env(_replay, self.env_factory, task, list(snapshot.actions))
        return Cursor(
            env=env, context=snapshot.context.copy(), ids=list(snapshot.ids), depth=snapshot.depth,
            reward=snapshot.reward, actions=list(snapshot.actions),
        )


def resolve_paths(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """Join every tree leaf with its ancestors into a full root-to-leaf trajectory.

    Trajectories outside trees are returned unchanged. The joined records share
    the ancestors' :class:`Turn` objects (no copies of token lists) and can be
    flattened for training.

    Args:
        trajectories: All leaves of the trees involved (parents must be present).

    Returns:
        One full trajectory per input, in input order.

    Raises:
        KeyError: If a leaf's parent node is missing.
    """
    items = list(trajectories)
    owners: dict[tuple[str, int], tuple[Trajectory, int]] = {}
    roots: dict[str, Trajectory] = {}
    for traj in items:
        if traj.tree_id is None:
            continue
        if traj.parent_node is None:
            roots[traj.tree_id] = traj
        for k, turn in enumerate(traj.turns):
            if turn.node_id is not None:
                owners[(traj.tree_id, turn.node_id)] = (traj, k)

    def path(traj: Trajectory) -> tuple[list[Turn], list[Segment]]:
        if traj.tree_id is None or traj.parent_node is None:
            return list(traj.turns), list(traj.segments)
        if traj.parent_node == 0:
            base_turns, base_segments = [], [s for s in roots[traj.tree_id].segments if s.start_turn == 0]
        else:
            owner, k = owners[(traj.tree_id, traj.parent_node)]
            turns, segments = path(owner)
            cut = owner.first_turn + k + 1
            base_turns, base_segments = turns[:cut], [s for s in segments if s.start_turn <= cut]
        return base_turns + traj.turns, base_segments + traj.segments

    inherited = ("initial_anchor", "ground_truth")  # recorded at the root's reset
    resolved = []
    for traj in items:
        turns, segments = path(traj)
        metadata = dict(traj.metadata)
        root = roots.get(traj.tree_id or "")
        if root is not None:
            metadata.update({k: root.metadata[k] for k in inherited if k in root.metadata})
        resolved.append(Trajectory(
            episode_id=traj.episode_id, task_id=traj.task_id, group_id=traj.group_id, segments=segments,
            turns=turns, reward=traj.reward, termination=traj.termination, seed=traj.seed, tree_id=traj.tree_id,
            parent_node=traj.parent_node, first_turn=0, timings=dict(traj.timings), metadata=metadata,
        ))
    return resolved


def tree_token_counts(trajectories: Iterable[Trajectory]) -> dict[str, int]:
    """Tokens generated by tree rollouts vs. the same leaves as independent chains.

    Returns:
        ``generated`` (action tokens actually sampled, shared prefixes once),
        ``as_chains`` (the sum over leaves of their full paths' action tokens)
        and ``leaves``.
    """
    items = list(trajectories)
    generated = sum(t.num_generated_tokens for t in items)
    as_chains = sum(t.num_generated_tokens for t in resolve_paths(items))
    return {"generated": generated, "as_chains": as_chains, "leaves": len(items)}
