"""Expand: open the located branches and read every memory in them.

The branches stage 1 chose (within ``retrieval.branch_ratio`` of the located one)
are opened with the located branch's family (``retrieval.family_open``): every
live memory in them is read and gets its dense score and a lexical score counted
inside its branch (BM25). The strongest candidates of the other branches come
along, so a question whose answer spans branches still reaches it.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..accel.rowcache import RowView, StoreView
from ..config import RetrievalConfig
from ..model import Node, root_of
from ..store.schema import from_blob
from .candidates import Candidates
from .query import Posting, QueryWords, term_idf

_BM25_K1, _BM25_B = 1.2, 0.75
#: A question spreading over a small memory opens the branches scoring at least this
#: share of the best (``retrieval.branch_ratio`` otherwise); see eval/CHANGES.md.
SPREAD_RATIO = 0.5


class Opened(NamedTuple):
    """The branches a query opens."""

    #: (score, branch id, candidates) of the branches opened as stage 1 scored them.
    chosen: list[tuple[float, str, int]]
    #: Branch id -> stage 1's score, of the branches opened for their score.
    branch_score: dict[str, float]
    #: Branch id -> stage 1's score, of every branch scored (the family's opened
    #: branches, when stage 1 did not score them: the located one's).
    every_branch: dict[str, float]
    #: The other branches of the located branch's family, opened with it.
    family: set[str]
    #: The located branch's score.
    best: float
    #: How close to ``best`` a branch (or a match outside the opened ones) must come.
    ratio: float
    #: Whether the question spreads over a small memory's branches.
    spread: bool
    #: The top-level task of the located branch's family.
    root: str

    @property
    def ids(self) -> set[str]:
        """Every branch opened."""
        return self.branch_score.keys() | self.family


def open_branches(r: RetrievalConfig, view: RowView | StoreView, located: list[tuple[float, str, int]],
                  cand_rows: Mapping[str, Any], branches: int, spread: bool) -> Opened:
    """The branches of ``located`` (stage 1's, best first) to open, at most
    ``branches`` (``spread``: at least ``retrieval.spread_branches``), and the located
    branch's family."""
    best = located[0][0]
    n_open, ratio = (max(branches, r.spread_branches), SPREAD_RATIO) if spread else (branches, r.branch_ratio)
    chosen = [sb for sb in located[:n_open] if sb[0] >= ratio * best]
    branch_score = {b: s for s, b, _ in chosen}
    every_branch = {b: s for s, b, _ in located}
    # The located branch's family (its top-level task's tree) is opened with it.
    located_root = root_of(next(row.path for row in cand_rows.values() if row.branch_id == located[0][1]))
    family = _family(r, view, located_root, branch_score, every_branch)
    for b in family:
        every_branch.setdefault(b, best)
    return Opened(chosen, branch_score, every_branch, family, best, ratio, spread, located_root)


def _family(r: RetrievalConfig, view: RowView | StoreView, root: str, opened: Mapping[str, float],
            every_branch: Mapping[str, float]) -> set[str]:
    """The branches of the family under ``root`` (the located branch's top-level
    task) not opened already, at most ``retrieval.family_open``: those stage 1 scored first,
    best first, then the newest. Empty when the family is one branch."""
    n = r.family_open
    if n <= 0:
        return set()
    others = [b for b in view.branches_under(root) if b not in opened]
    others.reverse()  # newest first (ids grow with time), then by stage 1's score (a stable sort)
    others.sort(key=lambda b: (b not in every_branch, -every_branch.get(b, 0.0)))
    return set(others[:n])


class Expanded(NamedTuple):
    """What is scored: (node, dense score, lexical score) of every node of the opened
    branches, then of the candidates of the other branches."""

    entries: list[tuple[Node, float, float]]
    #: The nodes of the opened branches.
    nodes: list[Node]
    note: str


def expand(view: RowView | StoreView, words: QueryWords, cands: Candidates, opened: Opened,
           qvec: np.ndarray[Any, Any]) -> Expanded:
    """Read the opened branches' nodes and score each: dense from its stored
    embedding, lexical by BM25 inside its branch; the candidates of other branches
    keep stage 1's scores."""
    rows = view.branch_rows([*opened.branch_score, *opened.family])
    branch_nodes = [view.node(row) for row in rows]
    words.complete({n.id: None for n in branch_nodes})
    local = _local_lexical(words.held(n.id for n in branch_nodes), branch_nodes, words.known, words.weights)
    zero = np.zeros(len(qvec), dtype=np.float32)
    matrix = np.stack([from_blob(row.embedding) if row.embedding else zero for row in rows]) if rows \
        else np.zeros((0, len(qvec)))
    branch_dense = [float(d) for d in matrix @ qvec]
    # The opened branches, every node, with lexical scores counted inside each
    # branch; and the strongest stage-1 candidates of the other branches, so a
    # question whose answer spans branches still reaches it. A node pays for
    # how far its branch's score falls behind the located (best) one.
    entries = [(n, d, local.get(n.id, 0.0)) for n, d in zip(branch_nodes, branch_dense, strict=True)]
    ids = opened.ids
    entries += [(view.node(row), cands.dense.get(i, 0.0), words.lexical.get(i, 0.0))
                for i, row in cands.rows.items() if row.branch_id not in ids]
    note = (f"branches opened {len(ids)} (of the located family {len(opened.family)}"
            f"{', spread' if opened.spread else ''}), memories scored {len(entries)}")
    return Expanded(entries, branch_nodes, note)


def _local_lexical(postings: Sequence[Posting], nodes: Sequence[Node], known: Iterable[str],
                   weights: Mapping[str, float]) -> dict[str, float]:
    """BM25 inside each branch, scaled to about [0, 1]: document frequencies and the
    average length are counted in the node's branch alone, so the words every memory
    of a branch shares (its ticket id, its customer) locate the branch in stage 1
    but no longer tell its memories apart, and a long memory does not win by
    holding more words. The scale is the idf mass of every query term the
    namespace knows (a one-term-each match of average length scores that mass), so
    a weak branch whose memories share only the query's common words stays low.
    Each term's idf is multiplied by its ``weights`` (1 when not listed)."""
    branch_of = {n.id: n.branch_id for n in nodes}
    length = {n.id: len(n.content) for n in nodes}
    sizes = Counter(branch_of.values())
    avg = defaultdict(float, {b: sum(length[i] for i, bb in branch_of.items() if bb == b) / n for b, n in sizes.items()})
    known = set(known)
    df = Counter((branch_of[node_id], term) for term, node_id, _ in postings if node_id in branch_of)
    # fsum: exact, so the same in every process (a set's order is not)
    total = {b: math.fsum(term_idf(n, df.get((b, t), 0)) * weights.get(t, 1.0) for t in known)
             for b, n in sizes.items()}
    terms: dict[str, list[float]] = defaultdict(list)
    for term, node_id, tf in postings:
        b = branch_of.get(node_id)
        if b is None:
            continue
        norm = tf + _BM25_K1 * (1 - _BM25_B + _BM25_B * length[node_id] / max(avg[b], 1.0))
        idf = term_idf(sizes[b], df[(b, term)]) * weights.get(term, 1.0)
        terms[node_id].append(idf * tf * (_BM25_K1 + 1) / norm / total[b])
    # fsum: the same score whatever order a node's postings were read in
    return {i: min(math.fsum(v), 1.0) for i, v in terms.items()}
