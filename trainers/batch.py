"""From trajectories and per-turn advantages to padded training tensors.

A trajectory flattens into one or more segments (:meth:`Trajectory.flatten`); each segment is
one row. Per-turn advantages are broadcast onto the action tokens of their turn through the
segment's ``turn_index``. Rows are right-padded; padding has every mask at 0.

Tree packing (:func:`build_tree_batch`, Tree-GRPO): the rows of one tree share prefixes. They
are merged into one packed row in which every shared token appears once, laid out in depth-first
order; each token attends only to its ancestors (a 4D mask built from ``subtree_end``) and has
the position id of its place along its root-to-leaf path. A token that starts a new branch is
preceded by a copy of its parent (no loss), so that every trained token's predecessor column is
its parent and the learner's next-token gather stays unchanged. Each packed token's loss weight
and advantage are set so that the policy loss and its gradient equal the per-row form whenever
the loss is linear in the advantage (no clipped token, e.g. on-policy with ratio 1); see
:func:`build_tree_batch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor

from agentgym.rollout import FlatSegment, Trajectory

__all__ = ["TrainBatch", "build_batch", "build_tree_batch", "trajectory_rows"]


@dataclass
class TrainBatch:
    """Padded rows, all ``(B, T)``.

    Attributes:
        input_ids: Token ids (pad 0).
        attention_mask: 1 on real tokens.
        loss_mask: 1 on action tokens that carry policy loss (packed tree rows: a per-token
            weight, the token's multiplicity for ``token-mean``; see :func:`build_tree_batch`).
        obs_mask: 1 on observation tokens ECHO trains on (harness text excluded).
        all_obs_mask: 1 on every observation token (ECHO's ``|O_i|``).
        old_logprobs: Behaviour-policy log-probs on action tokens.
        advantages: Per-token advantages (0 off the loss mask).
        turn_index: Turn of each token (-1 for the prompt and padding).
        row_traj: Trajectory index of each row, ``(B,)`` (a packed tree row: one of its leaves).
        is_weights: Optional per-token truncated importance weights of stale samples
            (asynchronous training, :mod:`agentgym.trainers.pipeline`); None: no correction.
        position_ids: Packed tree rows only: each token's position along its root-to-leaf path.
        subtree_end: Packed tree rows only: one past the last column of each token's subtree
            (rows are in depth-first order); token ``i`` attends to ``j`` iff
            ``j <= i < subtree_end[j]``. Padding has ``subtree_end = column + 1``.
    """

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    obs_mask: Tensor
    all_obs_mask: Tensor
    old_logprobs: Tensor
    advantages: Tensor
    turn_index: Tensor
    row_traj: Tensor
    is_weights: Tensor | None = None
    position_ids: Tensor | None = None
    subtree_end: Tensor | None = None

    @property
    def size(self) -> int:
        """Number of rows."""
        return int(self.input_ids.shape[0])

    def forward_kwargs(self) -> dict[str, Tensor]:
        """Model inputs besides ``input_ids``: the 2D padding mask, or for packed tree rows an
        additive float32 ``(B, 1, T, T)`` mask (0 where attending, the dtype's min elsewhere;
        ``B * T * T * 4`` bytes) and ``position_ids``. Works with the ``eager`` and ``sdpa``
        attention implementations, which take a custom 4D mask as given."""
        if self.subtree_end is None:
            return {"attention_mask": self.attention_mask}
        col = torch.arange(self.input_ids.shape[1], device=self.input_ids.device)
        allowed = (col[None, None, :] <= col[None, :, None]) & (col[None, :, None] < self.subtree_end[:, None, :])
        mask = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
        mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
        return {"attention_mask": mask[:, None], "position_ids": self.position_ids}

    def select(self, rows: Tensor | Sequence[int]) -> TrainBatch:
        """The sub-batch of the given rows (trailing all-padding columns trimmed)."""
        index = torch.as_tensor(rows, dtype=torch.long)
        parts = {f.name: getattr(self, f.name) for f in fields(self)}
        parts = {name: None if value is None else value[index] for name, value in parts.items()}
        width = int(parts["attention_mask"].sum(-1).max().item()) if len(index) else 0
        for name, value in parts.items():
            if name != "row_traj" and value is not None:
                parts[name] = value[:, : max(width, 1)]
        return TrainBatch(**parts)

    def to(self, device: torch.device | str) -> TrainBatch:
        """The batch on ``device``."""
        parts = {f.name: getattr(self, f.name) for f in fields(self)}
        return TrainBatch(**{name: None if value is None else value.to(device) for name, value in parts.items()})


def trajectory_rows(trajectories: Sequence[Trajectory]) -> list[tuple[int, FlatSegment]]:
    """``(trajectory index, segment)`` for every segment of every trajectory."""
    return [(i, seg) for i, traj in enumerate(trajectories) for seg in traj.flatten()]


@dataclass
class _Row:
    """One row before padding; every array has the row's length."""

    traj: int
    ids: np.ndarray
    loss: np.ndarray
    obs: np.ndarray
    all_obs: np.ndarray
    old: np.ndarray
    adv: np.ndarray
    tix: np.ndarray
    pos: np.ndarray | None = None
    end: np.ndarray | None = None


def build_batch(
    trajectories: Sequence[Trajectory],
    turn_advantages: Sequence[Sequence[float] | np.ndarray],
    *,
    turn: int | None = None,
    drop_empty: bool = True,
) -> TrainBatch:
    """Pad every segment of ``trajectories`` into one batch with per-token advantages.

    Args:
        trajectories: Complete (tree-resolved) trajectories.
        turn_advantages: Ragged per-turn advantages, one array per trajectory.
        turn: If given, only this turn's action tokens carry loss (SeeUPO).
        drop_empty: Leave out rows without any loss token (and without observation tokens).

    Returns:
        The padded batch.
    """
    return _pad(_path_rows(trajectories, turn_advantages, turn=turn, drop_empty=drop_empty))


def _path_rows(
    trajectories: Sequence[Trajectory], turn_advantages: Sequence[Sequence[float] | np.ndarray], *,
    turn: int | None, drop_empty: bool,
) -> list[_Row]:
    if len(turn_advantages) != len(trajectories):
        raise ValueError(f"{len(turn_advantages)} advantage arrays for {len(trajectories)} trajectories")
    rows: list[_Row] = []
    for i, seg in trajectory_rows(trajectories):
        adv_turns = np.asarray(turn_advantages[i], dtype=np.float64)
        mask = seg.loss_mask.astype(bool)
        if turn is not None:
            mask &= seg.turn_index == turn
        if drop_empty and not mask.any() and (turn is not None or not seg.obs_mask.any()):
            continue
        adv = np.zeros(len(seg.input_ids))
        idx = seg.turn_index[mask]
        if len(adv_turns) and idx.size:
            adv[mask] = adv_turns[idx]
        all_obs = (seg.loss_mask == 0) & (seg.turn_index >= 0)
        rows.append(_Row(i, seg.input_ids, mask.astype(np.float64), seg.obs_mask.astype(np.float64),
                         all_obs.astype(np.float64), seg.old_logprobs, adv, seg.turn_index.astype(np.int64)))
    return rows


def _pad(rows: list[_Row]) -> TrainBatch:
    width = max((len(row.ids) for row in rows), default=1)
    packed = any(row.end is not None for row in rows)

    def column(name: str, dtype: torch.dtype, fill: Tensor | float = 0) -> Tensor:
        out = torch.empty((len(rows), width), dtype=dtype)
        out[:] = fill
        for r, row in enumerate(rows):
            out[r, : len(row.ids)] = torch.from_numpy(np.asarray(getattr(row, name)))
        return out

    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        attn[r, : len(row.ids)] = 1
    return TrainBatch(
        column("ids", torch.long), attn, column("loss", torch.float32), column("obs", torch.float32),
        column("all_obs", torch.float32), column("old", torch.float32), column("adv", torch.float32),
        column("tix", torch.long, -1), torch.tensor([row.traj for row in rows], dtype=torch.long),
        position_ids=column("pos", torch.long) if packed else None,
        subtree_end=column("end", torch.long, torch.arange(1, width + 1)) if packed else None,
    )


# ------------------------------------------------------------------ tree packing
def build_tree_batch(
    trajectories: Sequence[Trajectory],
    turn_advantages: Sequence[Sequence[float] | np.ndarray],
    *,
    agg_mode: str = "token-mean",
) -> TrainBatch:
    """Like :func:`build_batch`, but the rows of each tree are packed into one row (see module notes).

    Rows of the same tree (``tree_id``, else ``episode_id``) are merged along their longest
    common prefixes; tokens merge only when their id, loss flag and old log-prob agree, so a
    merged token has the same logits and the same per-token loss function in every row it
    stands for. With ``w_r`` the weight that ``agg_mode`` gives a token of row ``r`` in the
    per-row batch (e.g. ``1 / sum_r |r|`` for ``token-mean``), a packed token ``t`` gets loss
    weight ``m_t = s * sum_{r through t} w_r`` and advantage ``sum_r w_r A_{r,t} / (rho * m_t)``,
    where ``rho`` is the weight the learner gives the packed token and ``s`` makes ``s * rho = 1``
    (for ``token-mean`` ``m_t`` is the token's multiplicity). So, whenever the per-token loss is
    linear in the advantage (no token clipped), the policy loss and its gradient equal the
    per-row batch's, and so does the KL term (for ``seq-mean-token-mean`` only when every tree
    has the same number of rows). The weights are computed for the batch as one mini-batch (the
    default). With several mini-batches (each holds whole trees) a ``token-mean`` mini-batch
    still equals the per-row update on the same rows; the ``seq-mean-*`` modes then equal it
    only when every tree has the same number of rows (and, for ``seq-mean-token-sum-norm``, up
    to the ratio of padded widths). ECHO's observation masks are not multiplicity-weighted
    (each packed token counts once).

    Args:
        trajectories: Complete (tree-resolved) trajectories.
        turn_advantages: Ragged per-turn advantages, one array per trajectory.
        agg_mode: The learner's loss aggregation (``AlgoConfig.agg_mode``).

    Returns:
        The packed batch (one row per tree), with ``position_ids`` and ``subtree_end`` set.
    """
    rows = _path_rows(trajectories, turn_advantages, turn=None, drop_empty=True)
    weights = _row_weights(rows, agg_mode)
    trees: dict[str, list[int]] = {}
    for r, row in enumerate(rows):
        traj = trajectories[row.traj]
        trees.setdefault(traj.tree_id or traj.episode_id, []).append(r)
    packed = []
    for members in trees.values():
        members.sort(key=lambda r: -len(rows[r].ids))  # a row that is a prefix of another comes after it
        packed.append(_pack_tree([rows[r] for r in members], weights[members]))
    lengths = np.array([row.loss.sum() for row in rows])
    _finish_weights(packed, agg_mode, n_paths=max(int((lengths > 0).sum()), 1), tokens=max(lengths.sum(), 1.0))
    return _pad([row for row, _, _ in packed])


def _row_weights(rows: list[_Row], mode: str) -> np.ndarray:
    """The weight ``agg_mode`` gives one loss token of each row in the per-row batch."""
    lengths = np.array([row.loss.sum() for row in rows], dtype=np.float64)
    n = max(int((lengths > 0).sum()), 1)
    if mode == "token-mean":
        return np.full(len(rows), 1.0 / max(lengths.sum(), 1.0))
    if mode == "seq-mean-token-mean":
        return 1.0 / (n * np.maximum(lengths, 1.0))
    if mode == "seq-mean-token-sum":
        return np.full(len(rows), 1.0 / n)
    if mode == "seq-mean-token-sum-norm":
        return np.full(len(rows), 1.0 / (n * max((len(row.ids) for row in rows), default=1)))
    raise ValueError(f"unknown aggregation mode {mode!r}")


def _finish_weights(packed: list[tuple[_Row, int, float]], mode: str, *, n_paths: int, tokens: float) -> None:
    """Turn each packed row's summed weights (``loss``) and weighted advantages (``adv``) into the
    loss mask and advantages the learner expects (see :func:`build_tree_batch`)."""
    n_rows = max(sum(1 for row, _, _ in packed if row.loss.any()), 1)
    width = max((len(row.ids) for row, _, _ in packed), default=1)
    for row, paths, path_tokens in packed:
        scale = {"token-mean": tokens, "seq-mean-token-sum": n_rows, "seq-mean-token-sum-norm": n_rows * width,
                 "seq-mean-token-mean": n_paths * path_tokens / max(paths, 1)}[mode]
        row.loss = row.loss * scale
    total = max(sum(float(row.loss.sum()) for row, _, _ in packed), 1.0)
    for row, _, _ in packed:
        rho = {"token-mean": 1.0 / total, "seq-mean-token-sum": 1.0 / n_rows,
               "seq-mean-token-sum-norm": 1.0 / (n_rows * width),
               "seq-mean-token-mean": 1.0 / (n_rows * max(float(row.loss.sum()), 1.0))}[mode]
        row.adv = np.divide(row.adv, rho * row.loss, out=np.zeros_like(row.adv), where=row.loss > 0)


@dataclass
class _Chunk:
    """A run of new tokens of one row: positions ``start ..`` of ``row``, first token id ``first``.

    ``attach`` is the id of the token the chunk's first token hangs under (-1: a new root). When
    attached, the first token is a copy of the row's last shared token (it carries no loss)."""

    row: int
    start: int
    first: int
    size: int
    attach: int


def _common_prefix(a: _Row, b: _Row) -> int:
    n = min(len(a.ids), len(b.ids))
    same = (a.ids[:n] == b.ids[:n]) & (a.loss[:n] == b.loss[:n]) & (a.old[:n] == b.old[:n])
    diff = np.flatnonzero(~same)
    return int(diff[0]) if diff.size else n


def _pack_tree(rows: list[_Row], weights: np.ndarray) -> tuple[_Row, int, float]:
    """Merge the rows of one tree; returns the packed row (``loss``: summed weights, ``adv``:
    summed weighted advantages), its number of rows with loss and their loss tokens."""
    chunks: list[_Chunk] = []
    owners: list[np.ndarray] = []  # token id of every position of every row
    total = 0
    for k, row in enumerate(rows):
        best, shared = -1, 0
        for j in range(k):
            common = _common_prefix(rows[j], row)
            if common > shared:
                best, shared = j, common
        if shared == len(row.ids):
            owners.append(owners[best][:shared])
            continue
        start = shared - 1 if shared >= 2 else 0
        new = np.arange(total, total + len(row.ids) - start)
        chunks.append(_Chunk(k, start, total, len(new), int(owners[best][shared - 2]) if shared >= 2 else -1))
        owners.append(np.concatenate([owners[best][:shared], new[1:]]) if shared >= 2 else new)
        total += len(new)
    fields_ = {name: np.concatenate([getattr(rows[c.row], name)[c.start:] for c in chunks])
               for name in ("ids", "loss", "obs", "all_obs", "old", "tix")}
    pos = np.concatenate([np.arange(c.start, len(rows[c.row].ids)) for c in chunks])
    summed, weighted = np.zeros(total), np.zeros(total)
    for k, row in enumerate(rows):
        np.add.at(summed, owners[k], weights[k] * row.loss)
        np.add.at(weighted, owners[k], weights[k] * row.loss * row.adv)
    firsts = np.array([c.first for c in chunks])
    summed[firsts] = weighted[firsts] = 0.0  # a chunk's first column is predicted from no parent
    copies = np.array([c.first for c in chunks if c.attach >= 0], dtype=np.int64)
    fields_["obs"][copies] = fields_["all_obs"][copies] = 0.0
    order, end = _layout(chunks, total)
    packed = _Row(rows[0].traj, fields_["ids"][order], summed[order], fields_["obs"][order],
                  fields_["all_obs"][order], fields_["old"][order], weighted[order], fields_["tix"][order],
                  pos=pos[order], end=end)
    lengths = np.array([row.loss.sum() for row in rows])
    return packed, int((lengths > 0).sum()), float(lengths.sum())


def _layout(chunks: list[_Chunk], total: int) -> tuple[np.ndarray, np.ndarray]:
    """Depth-first column order of the token ids, and each column's subtree end.

    A chunk's tokens stay contiguous; the chunks hanging under it follow, deepest attachment
    first, so the subtree of the chunk's token at offset ``o`` is the rest of the chunk plus the
    chunks attached at offsets ``>= o``."""
    chunk_of = np.repeat(np.arange(len(chunks)), [c.size for c in chunks])
    children: list[list[tuple[int, int]]] = [[] for _ in chunks]
    roots = []
    for c, chunk in enumerate(chunks):
        if chunk.attach < 0:
            roots.append(c)
        else:
            parent = int(chunk_of[chunk.attach])
            children[parent].append((chunk.attach - chunks[parent].first, c))
    order, end = np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64)

    def place(c: int, cursor: int) -> int:
        chunk, start = chunks[c], cursor
        order[start : start + chunk.size] = np.arange(chunk.first, chunk.first + chunk.size)
        cursor += chunk.size
        offsets, bounds = [], []
        for offset, kid in sorted(children[c], key=lambda item: -item[0]):
            cursor = place(kid, cursor)
            offsets.append(offset)
            bounds.append(cursor)
        count = (np.array(offsets)[None, :] >= np.arange(chunk.size)[:, None]).sum(1) if offsets else 0
        end[start : start + chunk.size] = np.array([start + chunk.size, *bounds])[count]
        return cursor

    cursor = 0
    for root in roots:
        cursor = place(root, cursor)
    return order, end
