"""Which leaves to forget. Pure: the facade applies the plan in one transaction.

It runs over the whole live tree, so it works on plain columns (ids, parents,
weights as an array), never on one object per node: a pass over a million nodes
stays a matter of seconds. :func:`choose` is the entry point: the live rows'
columns in, the plan out (the one store read it needs, which tasks have children,
is handed in).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .config import Config, WeightConfig
from .errors import InvalidInputError
from .model import Node, NodeType
from .weights import check_unit, weight_array


@dataclasses.dataclass(frozen=True)
class LiveColumns:
    """The live nodes as columns, one row per node, in the order of
    ``store.schema.FORGET_COLUMNS``."""

    ids: list[str]
    parents: list[str | None]
    types: list[str]
    branches: list[str]
    pinned: list[bool]
    importance: list[float]
    confidence: list[float]
    accessed: list[int]
    created: list[float]
    updated: list[float]
    read: list[float]
    below: list[float]

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]]) -> LiveColumns:
        columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(12)]
        return cls(*columns)


def limits(config: Config, threshold: float | None, max_nodes: int | None) -> tuple[float, int]:
    """The checked threshold and cap of a ``forget`` (the configured ones by default)."""
    f = config.forgetting
    thr = f.threshold if threshold is None else check_unit(threshold, "threshold")
    cap = f.max_nodes if max_nodes is None else max_nodes
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise InvalidInputError("max_nodes must be an integer >= 0 (0: no cap)")
    return thr, cap


def choose(cols: LiveColumns, *, now: float, config: Config, threshold: float, max_nodes: int,
           protected: set[str], with_children: Callable[[list[str]], set[str]],
           covered: set[str] | frozenset[str] = frozenset()) -> list[tuple[str, float]]:
    """The (id, weight) pairs ``forget()`` prunes, in pruning order (:func:`plan_forget`):
    the forgetting weights, lowered for a superseded state, an empty task, the last
    memory of a task and a memory a live summary ``covered``. Pinned and ``protected``
    nodes stay. ``with_children``: which of the given tasks have children, live or not
    (a leaf task with forgotten ones is empty)."""
    f = config.forgetting
    ids = cols.ids
    weights = forget_weights(cols, now, config)
    if covered:
        weights[[i for i, node_id in enumerate(ids) if node_id in covered]] *= f.summarized
    parent_row = parent_rows(ids, cols.parents)
    live_children = np.bincount(parent_row[parent_row >= 0], minlength=len(ids))
    # A task is empty once what was under it is forgotten: one with live
    # memories now, or a leaf with forgotten ones. A new task is not.
    is_task = np.array(cols.types, dtype=object) == NodeType.TASK.value
    is_empty = is_task & (live_children > 0)
    leaf_tasks = np.flatnonzero(is_task & ~is_empty)
    if f.empty_task < 1 and len(leaf_tasks):
        emptied = with_children([ids[i] for i in leaf_tasks])
        is_empty[[i for i in leaf_tasks.tolist() if ids[i] in emptied]] = True
    weights *= heading_factors(np.arange(len(ids)), parent_row, live_children, is_empty, is_task,
                               empty_task=f.empty_task, last_in_task=f.last_in_task)
    keep = [bool(cols.pinned[i]) or node_id in protected for i, node_id in enumerate(ids)]
    return plan_forget(ids, cols.parents, weights.tolist(), keep, threshold=threshold, max_nodes=max_nodes,
                       parent_row=parent_row, alone=alone_shares(parent_row, is_task, f.last_in_task))


def forget_weights(cols: LiveColumns, now: float, config: Config) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Each live node's forgetting weight (:func:`forgetting_weights`), a superseded
    state's lowered by ``forgetting.superseded``. A node was touched when it was made,
    changed, read or had something written below it."""
    touched = np.maximum.reduce([np.array(cols.created), np.array(cols.updated), np.array(cols.read),
                                 np.array(cols.below)])
    weights = weight_array(importance=np.array(cols.importance), confidence=np.array(cols.confidence),
                           access_count=np.array(cols.accessed), touched_at=touched,
                           now=now, cfg=forgetting_weights(config))
    states = {cols.ids[i]: i for i, t in enumerate(cols.types) if t == NodeType.STATE.value}
    for node_id in superseded_ids((i, cols.branches[r], cols.created[r]) for i, r in states.items()):
        weights[states[node_id]] *= config.forgetting.superseded
    return weights


def plan_forget(
    ids: Sequence[str],
    parents: Sequence[str | None],
    weights: Sequence[float],
    keep: Sequence[bool],
    *,
    threshold: float,
    max_nodes: int,
    parent_row: Sequence[int] | np.ndarray[Any, Any] | None = None,
    alone: Sequence[float] | np.ndarray[Any, Any] | None = None,
) -> list[tuple[str, float]]:
    """The (id, weight) pairs to prune, in pruning order.

    ``ids``, ``parents``, ``weights`` and ``keep`` are columns of the live nodes,
    one row per node. Only leaves go (nodes without live children), lowest weight
    first (equal weights: lower id first); a parent becomes a candidate once its
    last child is gone, so a subtree is never orphaned. A leaf is taken while its
    weight is under ``threshold``, or while more than ``max_nodes`` (when > 0) live
    nodes remain. Rows marked ``keep`` (pinned, the active path) stay.
    ``parent_row``: :func:`parent_rows` of ``ids`` and ``parents``, when the caller
    has it already. ``alone``: per row, the share of its weight it keeps once the pass
    leaves it its parent's only live child (:func:`alone_shares`; the weights given
    already count it for a row that starts alone). Its weight drops then, so the
    pass takes it if it now falls under the threshold: a pass leaves nothing a
    second pass would take.
    """
    rows_parent = parent_rows(ids, parents) if parent_row is None else np.asarray(parent_row, dtype=np.int64)
    walk = _Pass(ids, rows_parent, weights, keep, alone)
    live = len(ids)
    plan: list[tuple[str, float]] = []
    while (head := walk.next()) is not None:
        w, node_id, i = head
        if walk.gone[i]:  # an entry from before its weight dropped: taken at the lower one
            continue
        over_cap = max_nodes > 0 and live > max_nodes
        if w >= threshold and not over_cap:
            break
        walk.take(i)
        plan.append((node_id, w))
        live -= 1
    return plan


class _Pass:
    """The state of one pruning pass (:func:`plan_forget`): the candidates in pruning
    order, and what taking one changes (its parent's child count, the weight of a
    child left alone)."""

    def __init__(self, ids: Sequence[str], rows_parent: np.ndarray[Any, Any], weights: Sequence[float],
                 keep: Sequence[bool], alone: Sequence[float] | np.ndarray[Any, Any] | None) -> None:
        counts = np.bincount(rows_parent[rows_parent >= 0], minlength=len(ids))
        start = np.flatnonzero((counts == 0) & ~np.asarray(keep, dtype=bool).reshape(-1))
        self._ids, self._keep = ids, keep
        self._children = counts.tolist()
        self._parent_row = rows_parent.tolist()
        self._weights = list(weights)
        self._shares = None if alone is None else np.asarray(alone, dtype=np.float64).tolist()
        # Per node, the sum of its live children's rows: once one child is left, the sum is its row.
        has = rows_parent >= 0
        self._child_sum = [] if self._shares is None else \
            np.bincount(rows_parent[has], weights=np.flatnonzero(has), minlength=len(ids)).astype(np.int64).tolist()
        self.gone = [False] * len(ids)
        # The leaves of the start, sorted once, and a heap for the parents that become
        # leaves on the way: the lower head of the two is what one heap of all of them
        # would pop (a heap of a million entries costs several times the sort).
        self._leaves = _sorted_leaves(ids, self._weights, start)
        self._freed: list[tuple[float, str, int]] = []
        self._at = 0

    def next(self) -> tuple[float, str, int] | None:
        """The next candidate (weight, id, row), lowest weight first (None: no more)."""
        leaves, freed = self._leaves, self._freed
        if freed and (self._at == len(leaves) or freed[0] < leaves[self._at]):
            return heapq.heappop(freed)
        if self._at < len(leaves):
            self._at += 1
            return leaves[self._at - 1]
        return None

    def take(self, i: int) -> None:
        """Prune row ``i``: its parent may become a leaf, or leave one child alone."""
        self.gone[i] = True
        p = self._parent_row[i]
        if p < 0:
            return
        children, weights, ids, keep = self._children, self._weights, self._ids, self._keep
        children[p] -= 1
        if children[p] == 0 and not keep[p]:
            heapq.heappush(self._freed, (weights[p], ids[p], p))
        elif self._shares is not None:
            self._child_sum[p] -= i
            left = self._child_sum[p]
            if children[p] == 1 and self._shares[left] < 1.0:
                weights[left] *= self._shares[left]
                if children[left] == 0 and not keep[left]:  # a leaf waiting: again, at its new weight
                    heapq.heappush(self._freed, (weights[left], ids[left], left))


def _sorted_leaves(ids: Sequence[str], weights: Sequence[float],
                   rows: np.ndarray[Any, Any]) -> list[tuple[float, str, int]]:
    """(weight, id, row) of ``rows``, sorted: numpy orders the weights, and only runs of
    equal weights are ordered by id in Python (sorting a million tuples costs more)."""
    if not len(rows):
        return []
    w = np.asarray(weights, dtype=np.float64)[rows]
    order = np.argsort(w, kind="stable")
    ranked = rows[order].tolist()
    ws = w[order]
    same = np.flatnonzero(ws[1:] == ws[:-1])
    if len(same):
        start = int(same[0])
        prev = start
        for k in [*same.tolist()[1:], None]:  # runs of consecutive equal pairs
            if k is not None and k == prev + 1:
                prev = k
                continue
            ranked[start : prev + 2] = sorted(ranked[start : prev + 2], key=lambda r: ids[r])
            if k is not None:
                start = prev = k
    return [(weights[r], ids[r], r) for r in ranked]


def parent_rows(ids: Sequence[str], parents: Sequence[str | None]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Each row's parent as a row of the same columns: -1 for a root, or for a parent
    that is not among ``ids`` (not live)."""
    row_of = {node_id: i for i, node_id in enumerate(ids)}
    return np.array([-1 if p is None else row_of.get(p, -1) for p in parents], dtype=np.int64)


def forgetting_weights(config: Config) -> WeightConfig:
    """The weight coefficients forgetting uses: [weights], with [forgetting]'s own
    recency coefficient and half-life."""
    f = config.forgetting
    return dataclasses.replace(config.weights, recency=f.recency, half_life_s=f.half_life_s)


def alone_shares(parent_row: np.ndarray[Any, Any], is_task: np.ndarray[Any, Any],
                 last_in_task: float) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Per row, the share of its weight a node keeps while it is its parent's only
    live child: ``last_in_task`` under a task, else all of it."""
    parent = np.asarray(parent_row, dtype=np.int64)
    has = parent >= 0
    under_task = has & np.asarray(is_task, dtype=bool)[np.where(has, parent, 0)]
    return np.where(under_task, last_in_task, 1.0)


def heading_factors(
    rows: np.ndarray[Any, Any],
    parent_row: np.ndarray[Any, Any],
    live_children: np.ndarray[Any, Any],
    is_empty: np.ndarray[Any, Any],
    is_task: np.ndarray[Any, Any],
    *,
    empty_task: float,
    last_in_task: float,
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The share of its forgetting weight each of ``rows`` keeps for where it stands.

    Columns are over all live nodes: ``parent_row`` (-1 for a root or a parent that is
    not live), ``live_children``, ``is_task``, and ``is_empty``: a task whose memories
    are forgotten, or will have been when forgetting weighs it (forgetting only ever
    weighs a leaf). An empty task, a heading over nothing, keeps ``empty_task``; a new
    task, nothing under it yet, keeps its weight. The one live child of a task keeps
    ``last_in_task``: forgetting it empties the heading too, two places freed under a cap.
    """
    rows = np.asarray(rows, dtype=np.int64)
    out = np.ones(len(rows))
    out[np.asarray(is_empty, dtype=bool)[rows]] *= empty_task
    parent = np.asarray(parent_row, dtype=np.int64)[rows]
    alone_now = (parent >= 0) & (np.asarray(live_children)[np.where(parent >= 0, parent, 0)] == 1)
    out[alone_now] *= alone_shares(parent, is_task, last_in_task)[alone_now]
    return out


def superseded_ids(states: Iterable[tuple[str, str, float]]) -> set[str]:
    """Of ``(id, branch_id, created_at)`` rows of state nodes, the ids that a later
    state of the same branch supersedes (equal times: the higher id stands)."""
    rows = list(states)
    latest: dict[str, tuple[float, str]] = {}
    for node_id, branch, created in rows:
        cur = latest.get(branch)
        if cur is None or (created, node_id) > cur:
            latest[branch] = (created, node_id)
    return {node_id for node_id, branch, _ in rows if latest[branch][1] != node_id}


def superseded_states(nodes: Sequence[Node]) -> set[str]:
    """The ids of the state nodes that a later state of the same branch supersedes."""
    return superseded_ids((n.id, n.branch_id, n.created_at) for n in nodes if n.type is NodeType.STATE)
