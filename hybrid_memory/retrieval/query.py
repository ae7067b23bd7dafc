"""Query analysis: the query's words in the lexical index.

:class:`QueryWords` looks the query's words up in the lexical index (the store's,
or the copy :class:`~hybrid_memory.accel.lexicon.Lexicon` keeps in memory): how
many live memories hold each, how informative each is (its idf), and, per memory,
the share of the query's informative words it holds. :func:`top_scores` cuts those
shares to the lexical channel's candidates.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from sqlalchemy.engine import Connection

from ..accel.lexicon import Lexicon, Marks
from ..store.sql import SqlStore

Posting = tuple[str, str, int]  # (term, node id, term frequency)


class LexicalIndex(Protocol):
    """What stage 1 reads of the lexical index: the store's (``store.terms``), or a
    :class:`~hybrid_memory.accel.lexicon.Lexicon`'s (the same answers, from memory)."""

    def term_df(self, conn: Connection, namespace: str, query_terms: Sequence[str]) -> dict[str, int]: ...

    def term_masks(self, conn: Connection, namespace: str, groups: Sequence[Sequence[str]]) -> dict[str, int]: ...

    def postings(self, conn: Connection, namespace: str, query_terms: Sequence[str],
                 node_ids: Iterable[str] | None = None) -> list[tuple[str, str, int]]: ...

    def tie_keys(self, conn: Connection, ids: Iterable[str]) -> dict[str, tuple[float, str]]: ...


class QueryWords:
    """The query's words in the lexical index: per node, the share of the query's
    informative (idf-weighted) words it holds (``lexical``), and the postings read.

    A word held by at most ``common`` live nodes is listed: the database names every
    node holding a listed word and which of them it holds (one row per node, a bit
    mask of the words), so each such node gets a share and can become a candidate. A
    more common word is only counted (its document frequency weighs it): its idf is
    low, and listing it would make a query's cost grow with the memory's size.
    Postings, term frequencies included, are read for the nodes :meth:`complete`
    names, the ones already in question, for every word the namespace knows; their
    shares then count the common words too. A share is an exact sum (``fsum``) of the
    words held, so it is the same however the node came to be scored."""

    def __init__(self, store: SqlStore, conn: Connection, namespace: str, qterms: Sequence[str], common: int,
                 live_count: Callable[[Connection], int] | None = None, index: LexicalIndex | None = None,
                 weights: Mapping[str, float] | None = None) -> None:
        self._conn, self._namespace = conn, namespace
        #: What each query word weighs as a share of a word (``text.term_weights``; 1 when not given).
        self.weights: Mapping[str, float] = weights or {}
        #: Where the postings are read: the store, or a copy of them kept in memory.
        self._index: LexicalIndex = index or store.terms
        # Each query word is looked up as itself: text.terms already made one term of
        # a word's inflections (its stem).
        df = self._index.term_df(conn, namespace, list(qterms))
        # Blinded terms (a keyring) may be stored once per key that blinded them: their
        # postings are merged per node and their counts taken again off the holders.
        # Plain terms come back once per (word, node), and their counts are exact.
        self._blinded = store.keyring is not None
        #: The query's words the namespace knows.
        self.known = [t for t in qterms if t in df]
        count = live_count or (lambda c: store.tree.live_count(c, namespace))
        n_docs = count(conn) if self.known else 0
        # A memory holding a word under two keys is counted by each: a listed word is
        # counted again off the nodes holding it, a common one is capped.
        self.df = {t: min(n, n_docs) for t, n in df.items()}
        listed = [t for t in self.known if not common or self.df[t] <= common]
        # From the copy kept in memory, the holders come as arrays and are named only
        # when they become candidates (a common word: thousands of holders, tens kept).
        marks = self._mask_arrays(listed)
        if marks is not None:
            distinct, counts = _distinct_masks(marks.masks, len(listed))
            held_by: Mapping[int, int] = dict(zip(distinct.tolist(), counts.tolist(), strict=True))
        else:
            masks = self._masks(listed)
            held_by = Counter(masks.values())
        for j, t in enumerate(listed if self._blinded else ()):
            n = sum(c for m, c in held_by.items() if m >> j & 1)
            if n:
                self.df[t] = n
        self.idf = {t: term_idf(n_docs, n) * self.weights.get(t, 1.0) for t, n in self.df.items()}
        total = math.fsum(self.idf.values())  # exact: the same in whatever order the words were counted
        self._part = {t: v / total for t, v in self.idf.items()} if total > 0 else {}
        share = {m: self.share(t for j, t in enumerate(listed) if m >> j & 1) for m in held_by}
        #: Node id -> its share (0.0 for a node holding none of the listed words).
        self.lexical: dict[str, float]
        if marks is not None:
            shares = np.array([share[m] for m in distinct.tolist()], dtype=np.float64)
            self.lexical = _Shares(marks, shares[np.searchsorted(distinct, marks.masks)])
        else:
            self.lexical = defaultdict(float, {i: share[m] for i, m in masks.items()})
        #: The postings read (of the completed nodes).
        self.postings: list[Posting] = []
        #: The postings read, by node, each node's in the order they were read.
        self.by_node: dict[str, list[Posting]] = defaultdict(list)
        self._completed: set[str] = set()

    def _masks(self, listed: Sequence[str]) -> dict[str, int]:
        """Node id -> the listed words it holds, bit j for ``listed[j]``."""
        return self._index.term_masks(self._conn, self._namespace, [[t] for t in listed]) if listed else {}

    def _mask_arrays(self, listed: Sequence[str]) -> Marks | None:
        """:meth:`_masks` as arrays, when the index is a copy kept in memory (None otherwise)."""
        if not listed or not isinstance(self._index, Lexicon):
            return None
        return self._index.term_mask_arrays(self._conn, self._namespace, [[t] for t in listed])

    def top(self, n: int, order: Callable[[Sequence[str]], Mapping[str, tuple[float, str]]]) -> list[tuple[str, float]]:
        """The n best lexical candidates, as :func:`top_scores` picks them."""
        shares = self.lexical
        if isinstance(shares, _Shares) and not dict.__len__(shares):
            return shares.top(n, order)
        return top_scores(shares, n, order)

    def share(self, words: Iterable[str]) -> float:
        """The share of the query's informative words that ``words`` (distinct) make up."""
        part = self._part
        return math.fsum(part.get(t, 0.0) for t in words)

    def held(self, ids: Iterable[str]) -> list[Posting]:
        """The postings read of the nodes ``ids``, node by node (of completed ones)."""
        by_node = self.by_node
        return [p for i in ids if i in by_node for p in by_node[i]]

    def complete(self, ids: Iterable[str]) -> None:
        """Read the postings of ``ids``, every known word, and count the common
        words in their shares too."""
        todo = [i for i in dict.fromkeys(ids) if i not in self._completed]
        self._completed.update(todo)
        if not self.known or not todo:
            return
        more = self._read(self.known, todo)
        self.postings.extend(more)
        words: dict[str, list[str]] = defaultdict(list)
        by_node = self.by_node
        for p in more:
            by_node[p[1]].append(p)
            words[p[1]].append(p[0])
        for node_id, held in words.items():
            self.lexical[node_id] = self.share(set(held))

    def _read(self, words: Sequence[str], ids: Sequence[str] | None = None) -> list[Posting]:
        """The postings of ``words`` (of the nodes ``ids`` only, when given); a blinded
        word a node holds under two keys is held once, with its frequencies added."""
        rows = self._index.postings(self._conn, self._namespace, list(words), ids)
        if not self._blinded:
            return [(term, node_id, n) for term, node_id, n in rows]
        tf: dict[tuple[str, str], int] = defaultdict(int)
        for term, node_id, n in rows:
            tf[(term, node_id)] += n
        return [(term, node_id, n) for (term, node_id), n in tf.items()]


class _Shares(dict[str, float]):
    """The lexical shares of the nodes holding a listed query word, kept as arrays
    (:class:`~hybrid_memory.accel.lexicon.Marks`) and read by id when asked; the shares
    set later (completed nodes) are plain entries and take precedence. A node
    holding none of the words reads 0.0 and is not added."""

    def __init__(self, marks: Marks, values: np.ndarray[Any, Any]) -> None:
        super().__init__()
        self._marks, self._values = marks, values

    def get(self, key: str, default: float = 0.0) -> float:  # type: ignore[override]
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        row = self._marks.row_of(key)
        return float(self._values[row]) if row >= 0 else default

    def __missing__(self, key: str) -> float:
        return self.get(key, 0.0)

    def top(self, n: int, order: Callable[[Sequence[str]], Mapping[str, tuple[float, str]]]) -> list[tuple[str, float]]:
        """:func:`top_scores` over the arrays: the same pairs in the same order, naming only
        the nodes that beat or tie the n-th score."""
        values, nodes = self._values, self._marks.nodes
        if len(values) <= n:
            at = np.argsort(-values, kind="stable")
            return list(zip(self._marks.ids_of(nodes[at]), values[at].tolist(), strict=True))
        edge = float(np.partition(values, len(values) - n)[len(values) - n])
        above = np.flatnonzero(values > edge)
        above = above[np.argsort(-values[above], kind="stable")]
        ranked = list(zip(self._marks.ids_of(nodes[above]), values[above].tolist(), strict=True))
        # Those at the edge go newest first: named only as many as can be (often a
        # few hundred tie, for a score that one common word gives).
        tied = nodes[values == edge]
        newest = self._marks.newest(tied, n - len(ranked))
        if newest is None:
            return _cut_ties(ranked, self._marks.ids_of(tied), edge, n, order)
        return _cut_ties(ranked, self._marks.ids_of(newest), edge, n, order, cut=True)


def _distinct_masks(masks: np.ndarray[Any, Any], bits: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The distinct values of ``masks`` (of ``bits`` bits), ascending, and how many
    times each occurs: ``np.unique``'s answer, by counting when the values are few
    (a query lists a handful of words; a common one is held by thousands)."""
    if bits <= 12:
        counts = np.bincount(masks, minlength=1 << bits)
        distinct = np.flatnonzero(counts)
        return distinct, counts[distinct]
    return np.unique(masks, return_counts=True)


def top_scores(scores: Mapping[str, float], n: int,
               order: Callable[[Sequence[str]], Mapping[str, tuple[float, str]]]) -> list[tuple[str, float]]:
    """The n best (id, score) pairs. Ties across the n-th place are common (every
    memory holding the same query words scores the same share) and can run to
    hundreds; they are broken by ``order`` (node id -> (created_at, content hash)),
    the newer memory first, so the cut never depends on the order the store
    returned them in, nor on random ids."""
    if len(scores) <= n:
        return sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    # Thousands of scores, tens wanted: find the n-th score, sort only what beats it.
    edge = heapq.nlargest(n, scores.values())[-1]
    ranked = sorted(((i, v) for i, v in scores.items() if v > edge), key=lambda kv: kv[1], reverse=True)
    return _cut_ties(ranked, [i for i, v in scores.items() if v == edge], edge, n, order)


def _cut_ties(ranked: list[tuple[str, float]], tied: list[str], edge: float, n: int,
              order: Callable[[Sequence[str]], Mapping[str, tuple[float, str]]],
              cut: bool = False) -> list[tuple[str, float]]:
    """``ranked`` (the pairs that beat the n-th score ``edge``), then as many of
    ``tied`` (the ids scoring ``edge``) as the n places leave, newer memory first.
    ``cut``: ``tied`` is the part of a larger tie that can make the places (it is
    ordered even when it fits them)."""
    lo = len(ranked)
    if cut or lo + len(tied) > n:
        keys = order(tied)
        tied.sort(key=lambda i: (-keys[i][0], keys[i][1]) if i in keys else (math.inf, i))
    return ranked + [(i, edge) for i in tied[: n - lo]]


def term_idf(n_docs: int, df: int) -> float:
    """A term's idf among ``n_docs`` documents, ``df`` of which hold it (BM25's)."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
