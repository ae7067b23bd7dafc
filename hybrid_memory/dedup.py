"""Duplicate detection, the dedup rule: which stored or just-written memory a new one
is a twin of (reinforced instead of written), and which earlier memories it
supersedes (their importance lowered); :func:`is_twin` asks the rule about two given
texts.

Invariants: figures (numbers, dates, ids) and the lexical overlap are tested
before any cosine, and no cosine makes up for failing them; the first twin found
is the one a full scan in written order finds.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from . import _validate as check
from . import text
from .batch_reads import RowMap, Seen
from .config import Config
from .embed import Embedder
from .model import SUPERSEDING, Node, NodeType
from .weights import blend


def is_twin(a: str, b: str, cosine: float, *, config: Config, embedder: Embedder) -> bool:
    """Whether two contents are near-identical by the dedup rule of a memory opened
    with ``config`` and ``embedder`` (``mem.config``, ``mem.embedder``): they hold the
    same figures (numbers, dates, ids), their lexical overlap reaches ``dedup.lexical``
    and their blended similarity (the cosine trusted as far as the embedder covers
    both texts) reaches ``dedup.similarity``. The arguments are checked first (typed
    errors, as the memory's own calls raise)."""
    a, b = check.text_arg(a, "a"), check.text_arg(b, "b")
    return Dedup(config, embedder).is_twin(a, b, check.finite(cosine, "cosine"))


class Dedup:
    """The dedup rule of one memory handle (``[dedup]``), with its embedder's coverage."""

    def __init__(self, config: Config, embedder: Embedder) -> None:
        self.config = config
        self.embedder = embedder

    def find_twin(
        self,
        seen: Seen,
        content: str,
        ntype: str,
        vec: np.ndarray[Any, Any],
        term_set: set[str],
        branch: str,
        earlier: Sequence[RowMap],
        from_index: Callable[[], Sequence[tuple[str, float]]],
    ) -> tuple[RowMap | None, list[RowMap]]:
        """The twin of a new memory of ``content`` and type ``ntype`` (None: none), and
        the stored memories of its branch and type that were compared with it: its
        nearest (what supersession looks at)."""
        # (a task heads its own branch; two tasks are never twins: not asked)
        exact = seen.exact_twin(content, ntype, branch)
        if exact is not None:
            return exact, []
        lexical = self.config.dedup.lexical
        for row in earlier:  # earlier items of this batch in the same branch, of the same type
            if text.jaccard(row["term_set"], term_set) >= lexical and self.is_twin(
                row["content"], content, float(np.dot(row["embedding_vec"], vec))
            ):
                return row, []  # (the writer reads its latest version to reinforce it)
        near = seen.nearest(branch, ntype, vec, from_index)
        for other, cosine in near:
            if self.is_twin(other["content"], content, cosine):
                return other, []
        return None, [row for row, _ in near]

    def is_twin(self, a: str, b: str, cosine: float) -> bool:
        """Whether two contents are near-identical by the dedup rule: their lexical
        overlap reaches ``dedup.lexical`` and their blended similarity (the cosine
        trusted as far as the embedder covers both texts) reaches ``dedup.similarity``."""
        overlap = self.word_overlap(a, b)
        if overlap is None:
            return False
        coverage = min(self.embedder.coverage(a), self.embedder.coverage(b))
        return blend(cosine, overlap, coverage) >= self.config.dedup.similarity

    def word_overlap(self, a: str, b: str) -> float | None:
        """The dedup rule's word tests, which no cosine makes up for: the lexical
        overlap of the two texts when it reaches ``dedup.lexical`` and they hold the
        same figures, else None."""
        overlap = text.overlap(a, b)
        if overlap < self.config.dedup.lexical or text.figures(a) != text.figures(b):
            return None
        return overlap

    def supersede(self, row: RowMap, term_set: set[str], earlier: Sequence[tuple[RowMap, set[str]]],
                   demoted: dict[str, tuple[float, str]]) -> None:
        """Lower the importance of the ``earlier`` memories (of the new ``row``'s branch
        and type) that ``row`` restates or updates: it holds at least
        ``dedup.supersede_words`` of their words (``earlier`` pairs each row with its
        term set), each weighed by its rarity among the memories compared, so that the
        id or the name every memory of a task carries counts for little. Pinned
        memories keep theirs. The new importances are gathered in ``demoted`` and
        written after the batch's rows."""
        d = self.config.dedup
        others = list({r["id"]: (r, words) for r, words in earlier if r["id"] != row["id"] and not r["pinned"]}.values())
        if not others:
            return
        df = Counter(t for words in (*(w for _, w in others), term_set) for t in words)
        n = len(others) + 1
        cap = d.supersede * row["importance"]
        for other, words in others:
            if not words:
                continue
            current = demoted[other["id"]][0] if other["id"] in demoted else other["importance"]
            if held_share(words, term_set, df, n) >= d.supersede_words and current > cap:
                demoted[other["id"]] = (cap, row["id"])


def held_share(words: Iterable[str], later: Container[str], df: Mapping[str, int], n: int) -> float:
    """The share of ``words`` (a memory's distinct terms) that ``later`` holds, each
    word weighed by its rarity among the ``n`` memories compared (``df``: how many
    of them hold it), so that the id or the name all of them carry counts for little."""
    weight = {t: math.log1p(n / df[t]) for t in words}
    whole = sum(weight.values())
    return sum(w for t, w in weight.items() if t in later) / whole if whole > 0 else 0.0


def restated(nodes: Iterable[Node], share: float) -> set[str]:
    """The ids of the facts, preferences and decisions among ``nodes`` that a later
    memory of the same branch and type restates: it holds at least ``share`` of
    their words (:func:`held_share`, rarity counted among that branch's memories of
    the type). The rule :meth:`Dedup.supersede` applies when writing, read again over
    what is stored: a restatement deleted or rewound no longer counts. Pinned
    memories are never restated. Equal times are ordered by content (ids are random)."""
    groups: dict[tuple[str, NodeType], list[Node]] = defaultdict(list)
    for node in nodes:
        if node.type in SUPERSEDING:
            groups[(node.branch_id, node.type)].append(node)
    out: set[str] = set()
    for group in groups.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda node: (node.created_at, node.content))
        words = [_TERM_SETS.of(node) for node in group]
        df = Counter(t for w in words for t in w)
        for i, node in enumerate(group):
            if node.pinned or not words[i]:
                continue
            if any(held_share(words[i], later, df, len(group)) >= share for later in words[i + 1 :]):
                out.add(node.id)
    return out


class TermSets:
    """The term sets of the last ``size`` memories asked about, keyed by id and a hash
    of the content (an edited memory is a new key). Retrieval asks again about the
    memories it ranks on every query; the key holds no text, so a memory of long
    facts does not keep their contents alive in the cache."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._sets: OrderedDict[tuple[str, int], frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sets)

    def of(self, node: Node) -> frozenset[str]:
        """``node``'s distinct terms (:func:`text.term_set`)."""
        key = (node.id, hash(node.content))
        with self._lock:
            found = self._sets.get(key)
            if found is not None:
                self._sets.move_to_end(key)
                return found
        found = text.term_set(node.content)
        with self._lock:
            self._sets[key] = found
            while len(self._sets) > self._size:
                self._sets.popitem(last=False)
        return found


_TERM_SETS = TermSets(16384)


class Earlier:
    """The rows a batch has written so far, by (branch, type), indexed for the lexical
    gate of dedup (term-set Jaccard at least ``threshold``) so that an item is
    compared with the few earlier rows that can pass it, not with every row of its
    branch (a batch of 10,000 siblings made that quadratic).

    Prefix filtering: order every term by its count in the batch, rarest first (ties
    by the term). Two sets A and B with Jaccard >= t share at least ⌈t·max(|A|, |B|)⌉
    terms, so they share one among the first |A| - ⌈t·|A|⌉ + 1 terms of A and the
    first |B| - ⌈t·|B|⌉ + 1 of B; only those prefixes are indexed and looked up.
    :meth:`candidates` returns a superset of the rows that pass the gate, in the order
    they were written, so the first twin found is the one a full scan finds."""

    def __init__(self, term_sets: Sequence[set[str]], threshold: float) -> None:
        self._df = Counter(t for s in term_sets for t in s)
        self._t = threshold
        self._rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._postings: dict[tuple[str, str], dict[str, list[int]]] = {}
        self._empty: dict[tuple[str, str], list[int]] = {}

    def _prefix(self, terms: set[str]) -> list[str]:
        ordered = sorted(terms, key=lambda t: (self._df[t], t))
        n = len(ordered)
        # (a hair below t·n before rounding up: a longer prefix is only ever safer)
        return ordered[: n - math.ceil(self._t * n - 1e-9) + 1]

    def add(self, key: tuple[str, str], row: dict[str, Any]) -> None:
        rows = self._rows.setdefault(key, [])
        at = len(rows)
        rows.append(row)
        terms = row["term_set"]
        if not terms:
            self._empty.setdefault(key, []).append(at)
            return
        postings = self._postings.setdefault(key, {})
        for t in self._prefix(terms):
            postings.setdefault(t, []).append(at)

    def last(self, key: tuple[str, str], n: int) -> list[dict[str, Any]]:
        """The last ``n`` rows written under ``key``."""
        return self._rows.get(key, [])[-n:]

    def candidates(self, key: tuple[str, str], terms: set[str]) -> list[dict[str, Any]]:
        rows = self._rows.get(key)
        if not rows:
            return []
        if self._t <= 1e-9:  # every pair passes a zero threshold, shared terms or not
            return rows
        if not terms:  # only another empty set reaches a Jaccard above zero
            return [rows[i] for i in self._empty.get(key, ())]
        postings = self._postings.get(key, {})
        found = {i for t in self._prefix(terms) for i in postings.get(t, ())}
        return [rows[i] for i in sorted(found)]
