"""Candidates: the lexical and the dense channels' proposals, merged and scored.

The lexical channel proposes the memories holding most of the query's
informative words (:mod:`.query`); the vector index proposes the nearest
embeddings, cut here as what is stored decides (:func:`dense_cut`). Every
candidate then gets its dense score from its stored embedding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..accel.rowcache import RowView, StoreView
from ..store.schema import from_blob
from .query import QueryWords

#: The vector index is asked for this many times ``retrieval.candidates`` (see dense_cut).
DENSE_FETCH = 2
#: More than the index's float arithmetic can put a cosine off the stored embeddings'.
_DENSE_EPS = 1e-5


def level_scripts(dense: Mapping[str, float], cjk: Mapping[str, bool]) -> dict[str, float]:
    """``dense`` (id -> cosine) with the scores of the memories written mostly in CJK
    and of the others made comparable (``cjk``: id -> which; an id not listed keeps
    its score): each group is scaled so that its best score is the best of all.

    A multilingual embedder scores a text of the query's own language above one of
    another, whatever they say (an English question about a Chinese note scores
    0.41 against it and 0.63 against its English twin), so without this every
    memory in the query's language outranks the right one in the other. Levelled,
    each group's best meets the other's and the lexical channel and the tree decide.
    Within a group nothing changes order; a memory of one group changes nothing."""
    best: dict[bool, float] = {}
    for i, d in dense.items():
        g = cjk.get(i)
        if g is not None:
            best[g] = max(best.get(g, 0.0), d)
    if len(best) < 2 or min(best.values()) <= 0.0:
        return dict(dense)
    top = max(best.values())
    return {i: d * top / best[cjk[i]] if i in cjk else d for i, d in dense.items()}


def dense_cut(fetched: Sequence[tuple[str, float]], rows: Mapping[str, Any], qvec: np.ndarray[Any, Any], n: int,
              asked: int) -> list[tuple[str, float]]:
    """The dense channel's candidates, at most ``n``, as a function of what is stored:
    (node id, its score from the stored embedding), best first.

    The index's answer (``fetched``: the ``asked`` nearest it found, the outbox's
    merged in) depends on its graph: a graph reloaded from disk, Chroma's before
    the in-process copy is ready, or a write still in the outbox order equal and
    nearly equal vectors differently, so the index's own top ``n`` differed between
    a process that ran on and one that restarted whenever a tie straddled the n-th
    place (equal vectors are common: repeated lines, and Chinese lines the
    embedder reads as [UNK]s). Here the live ones (``rows``) are scored from their
    stored embeddings and, when the index filled its window, only those scoring
    clearly above the window's last are kept: every memory that scores so well is
    in the window, whatever the graph. The ``n`` best of them go, ties to the newer
    memory, then by content, then by id."""
    floor = min(s for _, s in fetched) + _DENSE_EPS if len(fetched) >= asked else -math.inf
    ranked = []
    for node_id, _ in fetched:
        row = rows.get(node_id)
        if row is None or not row.embedding:  # (not live, or its vector still being computed)
            continue
        score = float(np.dot(from_blob(row.embedding), qvec))
        if score > floor:
            ranked.append((-score, -row.created_at, row.content, node_id))
    ranked.sort()
    return [(t[3], -t[0]) for t in ranked[:n]]


def ready(vectors: np.ndarray[Any, Any]) -> Callable[[], np.ndarray[Any, Any]]:
    return lambda: vectors


class Candidates(NamedTuple):
    """Stage 1's candidates, what :func:`gather` made of both channels."""

    #: Node id -> its row, by id.
    rows: dict[str, Any]
    #: Node id -> its dense score (from its own stored embedding).
    dense: dict[str, float]
    note: str


def gather(view: RowView | StoreView, words: QueryWords, found: Mapping[str, Any],
           fetched: Sequence[tuple[str, float]], qvec: np.ndarray[Any, Any], n: int) -> Candidates:
    """The lexical channel's candidates (``found``: their live rows) and the dense
    channel's, the ``n`` best of the index's proposals (``fetched``), as rows by id
    with their dense scores; ``words`` completed with their postings."""
    # The dense candidates: the index's proposals cut as what is stored decides.
    fetched_rows = view.rows([i for i, _ in fetched if i not in found], live_only=True)
    dense_hits = dict(dense_cut(fetched, {**fetched_rows, **found}, qvec, n, DENSE_FETCH * n))
    merged = {**found, **{i: fetched_rows[i] for i in dense_hits if i in fetched_rows}}
    # (by id, as one read of them all lists them)
    cand_rows = {i: merged[i] for i in sorted(merged)}
    note = f"lexical {len(found)}, dense {len(dense_hits)}, in all {len(cand_rows)}"
    words.complete(cand_rows)
    # Every candidate's dense score from its stored embedding: the index only
    # proposes candidates, so its float arithmetic (and an approximate search
    # that may order near-ties differently after a reload) never decides.
    # (A node whose vector is still being computed, the empty blob, has no dense score;
    # the dense candidates were scored so by dense_cut.)
    for node_id, row in cand_rows.items():
        if node_id not in dense_hits:
            dense_hits[node_id] = float(np.dot(from_blob(row.embedding), qvec)) if row.embedding else 0.0
    # A long memory is scored by its own vector, not by its closest passage: a
    # memory of many passages would get as many draws, and long memories that do
    # not answer outranked short ones that do (eval/CHANGES.md, "long memories by
    # passage"). Its passages only choose what is shown of it (.select).
    return Candidates(cand_rows, dense_hits, note)
