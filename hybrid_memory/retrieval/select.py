"""Select: fit the picks to the token budget and render them as a context.

The picks are taken in order, each with its ancestors not yet in (the tasks above
it, as its context), while they fit the budget; the context is rendered in tree
order, a long memory by the passage that best answers the query.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .. import passages, summaries, text
from ..accel.rowcache import RowView, StoreView, own_node
from ..model import Node, NodeType, ScoredNode, tree_order
from ..passages import Passages
from .rank import Scored


class Selected(NamedTuple):
    """The context a recall returns: its nodes in tree order, its text and tokens,
    and how many picks did not fit the budget."""

    nodes: tuple[ScoredNode, ...]
    context: str
    tokens: int
    dropped: int
    note: str


def assemble(view: RowView | StoreView, picked: Sequence[tuple[Scored, str]], scored: Mapping[str, Scored],
             budget: int, weigh: Callable[[Node], float], shown: Shown) -> Selected:
    """Take the picks in order, each with the ancestors not yet in, while they fit
    the token budget; render in tree order (a long memory by one passage).
    ``weigh``: the weight of an ancestor that was not scored."""
    ancestor_ids = {a for s, _ in picked for a in s.node.ancestor_ids}
    # The passages of the long memories scored for the query that may be shown.
    shown.prefetch([scored[i].node for i in {*ancestor_ids, *(s.node.id for s, _ in picked)} if i in scored])
    known: dict[str, Scored] = dict(scored)
    unknown = [a for a in ancestor_ids if a not in known]
    for node_id, arow in view.rows(unknown).items():
        node = view.node(arow)
        known[node_id] = Scored(node, weight=weigh(node))
    cost_of = _line_cost(shown)
    chosen, dropped = _fit(picked, known, budget, cost_of)
    summarized = ""
    if dropped:
        # What does not fit: a finished task's summary in place of its details.
        swapped, replaced = _summaries_for(view, picked, known, weigh, cost_of)
        refit = _fit(swapped, known, budget, cost_of) if replaced else None
        # (kept only when every summary it put in fits: else the details that fit stay)
        if refit is not None and all(sid in refit[0] for sid in replaced):
            chosen, dropped = refit
            summarized = f", finished tasks shown by their summary {len(replaced)} ({sum(replaced.values())} memories)"
    nodes, context, tokens = _render(view, chosen, cost_of, shown)
    by_passage = sum(s.passage is not None for s in nodes)
    note = (f"tokens {tokens}/{budget}, dropped for budget {dropped}, "
            f"long memories shown by a passage {by_passage}{summarized}")
    return Selected(nodes, context, tokens, dropped, note)


def _summaries_for(view: RowView | StoreView, picked: Sequence[tuple[Scored, str]], known: dict[str, Scored],
                   weigh: Callable[[Node], float], cost_of: Callable[[Node], int]
                   ) -> tuple[list[tuple[Scored, str]], dict[str, int]]:
    """``picked`` with the picks under each finished task replaced by the task's live
    summary, where the summary costs fewer tokens than they do (placed where the first
    of them was), and how many picks each summary replaced (by summary id). The
    summaries' rows are added to ``known``."""
    finished: dict[str, str] = {}  # task id -> its summary's id
    for s, _ in picked:
        for a in s.node.ancestor_ids:
            sid = summaries.finished_summary(known[a].node) if a in known else None
            if sid is not None:
                finished[a] = sid
    if not finished:
        return list(picked), {}
    for sid, row in view.rows(list(set(finished.values())), live_only=True).items():
        if sid not in known:
            node = view.node(row)
            known[sid] = Scored(node, weight=weigh(node))
    under: dict[str, list[int]] = {}  # summary id -> the picks it would replace
    for n, (s, _) in enumerate(picked):
        task = next((a for a in s.node.ancestor_ids if a in finished and finished[a] in known), None)
        if task is not None:
            under.setdefault(finished[task], []).append(n)
    swap = {sid: ns for sid, ns in under.items()
            if cost_of(known[sid].node) < sum(cost_of(picked[n][0].node) for n in ns)}
    first = {ns[0]: sid for sid, ns in swap.items()}
    gone = {n for ns in swap.values() for n in ns}
    out = [(known[first[n]], "summary") if n in first else picked[n] for n in range(len(picked))
           if n in first or n not in gone]
    return out, {sid: len(ns) for sid, ns in swap.items()}


def _line_cost(shown: Shown) -> Callable[[Node], int]:
    """The tokens of a node's line, as ``shown`` shows it."""
    # A node's line costs the same each time it is counted (as an ancestor of
    # several picks, and in the rendering): count it once.
    tokens: dict[str, int] = {}

    def cost_of(node: Node) -> int:
        if node.id not in tokens:
            tokens[node.id] = _count_line(_line(node, shown.span(node)))
        return tokens[node.id]

    return cost_of


def _fit(picked: Sequence[tuple[Scored, str]], known: Mapping[str, Scored], budget: int,
         cost_of: Callable[[Node], int]) -> tuple[dict[str, tuple[Scored, str]], int]:
    """The picks that fit the budget with their ancestors (those in ``known``), by
    id with their reasons, and how many were dropped."""
    chosen: dict[str, tuple[Scored, str]] = {}
    used = dropped = 0
    for s, reason in picked:
        if s.node.id in chosen:
            # Already in as an earlier pick's ancestor: it was picked on its own
            # merit too, so say so (and let retrieve() count the read).
            if chosen[s.node.id][1] == "ancestor":
                chosen[s.node.id] = (s, reason)
            continue
        need = [a for a in s.node.ancestor_ids if a not in chosen and a in known] + [s.node.id]
        cost = sum(cost_of(known[i].node if i != s.node.id else s.node) for i in need)
        if used + cost > budget:
            dropped += 1
            continue
        used += cost
        for i in need[:-1]:
            chosen[i] = (known[i], "ancestor")
        chosen[s.node.id] = (s, reason)
    return chosen, dropped


def _render(view: RowView | StoreView, chosen: Mapping[str, tuple[Scored, str]], cost_of: Callable[[Node], int],
            shown: Shown) -> tuple[tuple[ScoredNode, ...], str, int]:
    """The chosen nodes in tree order, the context and its tokens."""
    order = tree_order([c[0].node for c in chosen.values()])
    shared = isinstance(view, RowView)  # (its nodes are the cache's: each caller gets a copy)
    out = []
    lines = []
    for node in order:
        s, reason = chosen[node.id]
        span = shown.span(node)
        line = _line(node, span)
        lines.append("  " * node.depth + line)
        out.append(
            ScoredNode(
                node=own_node(node) if shared else node, reason=reason, similarity=s.similarity, dense=s.dense, lexical=s.lexical,
                weight=s.weight, branch_score=s.branch_score, score=s.score, tokens=cost_of(node),
                branch_factor=s.branch_factor, newest_factor=s.newest_factor,
                superseded_factor=s.superseded_factor, passage=span,
            )
        )
    context = "\n".join(lines)
    # The context's count is its lines' (counted above): a token never spans a
    # line break or the indentation (text.count_tokens counts no whitespace).
    return tuple(out), context, sum(cost_of(node) for node in order)


class Shown:
    """Which passage of each long memory a context shows: the one that best answers
    the query, among those stored and fetched (:meth:`prefetch`, by ``fetch``); the
    first where there is no query or none is stored. A memory of at most ``size``
    tokens is shown whole (None)."""

    def __init__(self, size: int, fetch: Callable[[list[str]], Mapping[str, Passages]] | None = None,
                 qvec: np.ndarray[Any, Any] | None = None, idf: Mapping[str, float] | None = None,
                 dense_mix: float = 1.0) -> None:
        self.size, self.fetch, self.qvec, self.idf, self.dense_mix = size, fetch, qvec, idf or {}, dense_mix
        self.held: dict[str, Passages] = {}
        self._spans: dict[str, tuple[int, int] | None] = {}
        self._long: dict[str, bool] = {}  # node id -> whether it is long (its tokens counted once)

    def is_long(self, node: Node) -> bool:
        if node.id not in self._long:
            self._long[node.id] = passages.is_long(node.content, self.size)
        return self._long[node.id]

    def prefetch(self, nodes: Sequence[Node]) -> None:
        """Read the stored passages of the long ones of ``nodes``, in one read."""
        if self.fetch is not None and self.qvec is not None:
            long = sorted(n.id for n in nodes if self.is_long(n))
            if long:
                self.held.update(self.fetch(long))

    def span(self, node: Node) -> tuple[int, int] | None:
        if node.id not in self._spans:
            content = node.content
            span: tuple[int, int] | None = None
            if self.is_long(node):
                held = self.held.get(node.id)
                if held is not None and self.qvec is not None:
                    span = held.spans[passages.choose(content, held, self.qvec, self.idf, self.dense_mix)[0]]
                else:
                    span = passages.cut(content, self.size)[0]
            self._spans[node.id] = span
        return self._spans[node.id]


def _line(node: Node, span: tuple[int, int] | None = None) -> str:
    return _TAG[node.type] + passages.render(node.content, span)


#: The line's lead of each node type (an Enum's ``value`` is a property: slow per line).
_TAG = {t: f"[{t.value}] " for t in NodeType}


# A query counts a few dozen lines, most of them counted by the queries before it
# (the located branch's memories, their ancestors): each line's count is kept.
_count_line = functools.lru_cache(maxsize=1 << 14)(text.count_tokens)


def clip(text_: str, n: int = 60) -> str:
    text_ = " ".join(text_.split())
    return text_ if len(text_) <= n else text_[: n - 1] + "…"
