"""An in-process copy of one namespace's lexical index, kept in step with the store.

Stage 1 of a retrieval asks the lexical index four things: how many live memories
hold each query word, which memories hold the rarer ones, the postings of the
memories in question, and the tie keys of memories scored alike. Read from SQLite,
those answers cost about 8 ms of a query at 100k memories, most of it turning rows
into Python objects. A :class:`Lexicon` holds the postings as arrays (one of node
numbers and one of term frequencies per term) and answers the same four questions
from them, with the same results as the store's methods.

It stays in step through ``hm_terms_changed``: every change to a node's postings
moves that node's row there to a new position, in the same transaction. Before
each answer the lexicon reads the namespace's last position (one index seek); if
it moved, it reads the nodes changed since and their postings, and keeps them in
an overlay beside the arrays (their old postings marked stale), folded into the
arrays once the overlay grows. An erased namespace, many changes at once, or a
store it cannot follow make it read the whole index again.

Only SQLite stores keep the change table: on PostgreSQL, writers commit out of the
order of their sequence numbers, so a reader could not catch up by position.
"""

from __future__ import annotations

import operator
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

from ..store.sql import SqlStore

_EMPTY = np.zeros(0, dtype=np.int32)
_first, _second, _third = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)
#: Changes read one by one before the whole index is read again instead: at least
#: this many nodes, or a quarter of the nodes known, whichever is more.
_CATCH_UP_MIN = 2000
#: Overlay postings folded into the arrays once they pass this share of the arrays'.
_FOLD_SHARE = 0.05
_FOLD_MIN = 5000
_READ_CHUNK = 65536


class Stopped(Exception):
    """A read of the whole lexical index was stopped (its handle is closing)."""


class Marks:
    """The nodes holding some of a query's words, as arrays: ``nodes`` (node numbers,
    in the order :meth:`Lexicon.term_masks` lists them) and ``masks`` (bit j: holds a
    word of group j). ``ids`` and ``ix`` translate numbers and ids (the copy's own
    tables: numbers are never reused, so they stay valid after later syncs)."""

    def __init__(self, nodes: np.ndarray[Any, Any], masks: np.ndarray[Any, Any], ids: list[str],
                 ix: dict[str, int], created: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]] | None = None) -> None:
        self.nodes, self.masks, self._ids, self._ix = nodes, masks, ids, ix
        self._sorted: np.ndarray[Any, Any] | None = None
        self._created = created

    def newest(self, nodes: np.ndarray[Any, Any], m: int) -> np.ndarray[Any, Any] | None:
        """Of the node numbers ``nodes``, those that can be among the ``m`` created
        last: every one created no earlier than the m-th newest, in their order
        (ties at the edge all kept). None when the creation time of one of them is
        not known yet (its tie key was never read)."""
        if self._created is None or m <= 0 or len(nodes) <= m:
            return None
        created = self._created(nodes)
        if np.isnan(created).any():
            return None
        edge = np.partition(created, len(created) - m)[len(created) - m]
        kept: np.ndarray[Any, Any] = nodes[created >= edge]
        return kept

    def ids_of(self, nodes: np.ndarray[Any, Any]) -> list[str]:
        ids = self._ids
        return [ids[k] for k in nodes.tolist()]

    def row_of(self, node_id: str) -> int:
        """The row of ``node_id`` in ``nodes``, or -1."""
        k = self._ix.get(node_id)
        if k is None or not len(self.nodes):
            return -1
        if self._sorted is None:
            self._sorted = np.argsort(self.nodes, kind="stable")
        at = int(np.searchsorted(self.nodes, k, sorter=self._sorted))
        if at < len(self.nodes) and self.nodes[self._sorted[at]] == k:
            return int(self._sorted[at])
        return -1


class Lexicon:
    """The postings of one namespace's live memories, in memory (see the module)."""

    def __init__(self, store: SqlStore, namespace: str, *, stop: threading.Event | None = None) -> None:
        if not store.is_sqlite:
            raise ValueError("a Lexicon follows SQLite stores only")
        self._store, self._namespace = store, namespace
        #: Set: a read of the whole index stops (raising :class:`Stopped`) at its next chunk.
        self._stop = stop or threading.Event()
        # Held while the copy changes or answers: a handle used from two threads at
        # once never reads it half caught up.
        self._lock = threading.RLock()
        #: The change position the copy stands at (-1: nothing read yet).
        self.position = -1
        #: How many times the whole index was read, and how many nodes were caught up.
        self.loads = self.caught_up = 0
        self._reset()

    def _reset(self) -> None:
        self._ids: list[str] = []  # node number -> id
        self._ix: dict[str, int] = {}  # id -> node number
        # term -> (node numbers, term frequencies): the arrays, as of the last read or fold
        self._base: dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}
        self._stale = np.zeros(0, dtype=bool)  # node number -> its postings in the arrays are out of date
        self._any_stale = False
        self._over: dict[str, dict[int, int]] = {}  # term -> {node number: tf}, of nodes changed since
        self._held: dict[int, list[str]] = {}  # node number -> its terms in the overlay
        self._n_base = self._n_over = 0  # postings in the arrays, in the overlay
        # node id -> tie key, read from the store when first asked (a few hundred a
        # query, the same ones again and again); a changed node's is read again
        self._ties: dict[str, tuple[float, str]] = {}
        # node number -> the creation time of its kept tie key (NaN: none kept)
        self._created = np.full(0, np.nan)

    # -- keeping in step -------------------------------------------------------------

    def sync(self, conn: Connection) -> None:
        """Bring the copy to what ``conn`` reads (call inside the reading transaction
        whose answers it gives)."""
        with self._lock:
            self._sync(conn)

    def _sync(self, conn: Connection) -> None:
        store, ns = self._store, self._namespace
        pos = store.changes.terms_position(conn, ns)
        if pos == self.position:
            return
        if self.position < 0 or pos < self.position:
            self._load(conn)
        else:
            changed = store.changes.terms_changed_since(conn, ns, self.position)
            if "" in changed or len(changed) > max(_CATCH_UP_MIN, len(self._ix) // 4):
                self._load(conn)
            else:
                self._catch_up(conn, changed)
        self.position = pos

    def _load(self, conn: Connection) -> None:
        """Read the namespace's whole lexical index."""
        self._reset()
        self.loads += 1
        ids: list[str] = []
        ix: dict[str, int] = {}
        counts: Counter[str] = Counter()
        node_parts: list[np.ndarray[Any, Any]] = []
        tf_parts: list[np.ndarray[Any, Any]] = []
        cur = self._store.terms.all_postings(conn, self._namespace)
        while rows := cur.fetchmany(_READ_CHUNK):
            if self._stop.is_set():
                self._reset()
                raise Stopped("the read of the lexical index was stopped")
            counts.update(map(_first, rows))
            held = list(map(_second, rows))
            for i in sorted(set(held).difference(ix)):  # numbered as first seen
                ix[i] = len(ids)
                ids.append(i)
            node_parts.append(np.fromiter(map(ix.__getitem__, held), dtype=np.int32, count=len(rows)))
            tf_parts.append(np.fromiter(map(_third, rows), dtype=np.int32, count=len(rows)))
        nodes = np.concatenate(node_parts) if node_parts else _EMPTY
        tfs = np.concatenate(tf_parts) if tf_parts else _EMPTY
        start = 0
        base = self._base
        for term, n in counts.items():  # in the order read: by term
            part = nodes[start:start + n], tfs[start:start + n]
            if n > 1 and not bool(np.all(part[0][1:] > part[0][:-1])):
                order = np.argsort(part[0], kind="stable")  # numbered in another chunk than its neighbours
                part = part[0][order], part[1][order]
            base[term] = part
            start += n
        self._ids, self._ix = ids, ix
        self._n_base = len(nodes)
        self._stale = np.zeros(len(ids), dtype=bool)

    def _catch_up(self, conn: Connection, changed: Sequence[str]) -> None:
        """Read the postings of the nodes ``changed`` into the overlay."""
        store, ns = self._store, self._namespace
        self.caught_up += len(changed)
        rows = store.terms.postings_of(conn, ns, changed)
        ids, ix, over, held = self._ids, self._ix, self._over, self._held
        for i in changed:
            k = ix.get(i)
            if k is None:
                ix[i] = len(ids)
                ids.append(i)
                continue
            if k < len(self._stale):
                self._stale[k] = True
                self._any_stale = True
            for t in held.pop(k, ()):
                d = over[t]
                del d[k]
                self._n_over -= 1
                if not d:
                    del over[t]
            if self._ties.pop(i, None) is not None and k < len(self._created):
                self._created[k] = np.nan
        for t, i, tf in rows:
            k = ix[i]
            over.setdefault(t, {})[k] = tf
            held.setdefault(k, []).append(t)
            self._n_over += 1
        if self._n_over > max(_FOLD_MIN, _FOLD_SHARE * self._n_base):
            self._fold()

    def _fold(self) -> None:
        """Fold the overlay into the arrays (no reading: the overlay is current)."""
        stale, base = self._stale, self._base
        for t in set(base) | set(self._over):
            nodes, tfs = base.get(t, (_EMPTY, _EMPTY))
            if self._any_stale and len(nodes):
                keep = ~stale[nodes]
                nodes, tfs = nodes[keep], tfs[keep]
            add = self._over.get(t)
            if add:
                nodes = np.concatenate([nodes, np.fromiter(add.keys(), dtype=np.int32, count=len(add))])
                tfs = np.concatenate([tfs, np.fromiter(add.values(), dtype=np.int32, count=len(add))])
                order = np.argsort(nodes, kind="stable")
                nodes, tfs = nodes[order], tfs[order]
            if len(nodes):
                base[t] = (nodes, tfs)
            else:
                base.pop(t, None)
        self._n_base = sum(len(n) for n, _ in base.values())
        self._over, self._held, self._n_over = {}, {}, 0
        self._stale = np.zeros(len(self._ids), dtype=bool)
        self._any_stale = False

    # -- the store's answers ------------------------------------------------------------

    def _live(self, term: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The numbers and frequencies of the nodes holding ``term`` now, from the arrays."""
        nodes, tfs = self._base.get(term, (_EMPTY, _EMPTY))
        if self._any_stale and len(nodes):
            keep = ~self._stale[nodes]
            return nodes[keep], tfs[keep]
        return nodes, tfs

    def term_df(self, conn: Connection, namespace: str, query_terms: Sequence[str]) -> dict[str, int]:
        """As :meth:`~hybrid_memory.store.terms.TermRepository.term_df`."""
        with self._lock:
            return self._term_df(conn, namespace, query_terms)

    def _term_df(self, conn: Connection, namespace: str, query_terms: Sequence[str]) -> dict[str, int]:
        if not query_terms:
            return {}
        out: dict[str, int] = {}
        for stored, t in self._store.terms.stored_terms(query_terms).items():
            n = len(self._live(stored)[0]) + len(self._over.get(stored, ()))
            if n:
                out[t] = out.get(t, 0) + n
        return out

    def term_masks(self, conn: Connection, namespace: str, groups: Sequence[Sequence[str]]) -> dict[str, int]:
        """As :meth:`~hybrid_memory.store.terms.TermRepository.term_masks`."""
        with self._lock:
            return self._term_masks(conn, namespace, groups)

    def _term_masks(self, conn: Connection, namespace: str, groups: Sequence[Sequence[str]]) -> dict[str, int]:
        if len(groups) > 62:  # the masks outgrow 64 bits: fold them as Python ints
            ids, out = self._ids, dict[str, int]()
            for stored, bit in self._bits(groups).items():
                for k in self._holders(stored).tolist():
                    out[ids[k]] = out.get(ids[k], 0) | bit
            return out
        marks = self._mask_arrays(groups)
        return dict(zip(marks.ids_of(marks.nodes), marks.masks.tolist(), strict=True))

    def term_mask_arrays(self, conn: Connection, namespace: str, groups: Sequence[Sequence[str]]) -> Marks | None:
        """As :meth:`term_masks`, as arrays (node numbers, masks) that name the nodes
        only when asked: a common query word is held by thousands of memories, of
        which stage 1 keeps tens. None for more than 62 groups (64-bit masks)."""
        if len(groups) > 62:
            return None
        with self._lock:
            return self._mask_arrays(groups)

    def _bits(self, groups: Sequence[Sequence[str]]) -> dict[str, int]:
        bit_of: dict[str, int] = {}
        for j, group in enumerate(groups):
            for stored in self._store.terms.stored_terms(group):
                bit_of[stored] = bit_of.get(stored, 0) | 1 << j
        return bit_of

    def _mask_arrays(self, groups: Sequence[Sequence[str]]) -> Marks:
        parts, bits = [], []
        for stored, bit in self._bits(groups).items():
            held = self._holders(stored)
            if len(held):
                parts.append(held)
                bits.append(np.full(len(held), bit, dtype=np.int64))
        if not parts:
            return Marks(_EMPTY, np.zeros(0, dtype=np.int64), self._ids, self._ix)
        nodes, masks = np.concatenate(parts), np.concatenate(bits)
        if len(parts) > 1:
            order = np.argsort(nodes, kind="stable")
            nodes, masks = nodes[order], masks[order]
            starts = np.flatnonzero(np.concatenate(([True], nodes[1:] != nodes[:-1])))
            nodes, masks = nodes[starts], np.bitwise_or.reduceat(masks, starts)
        return Marks(nodes, masks, self._ids, self._ix, self._created_of)

    def _created_of(self, nodes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The creation times of the kept tie keys of ``nodes`` (NaN: not kept)."""
        with self._lock:
            created = self._created
            out = np.full(len(nodes), np.nan)
            known = nodes < len(created)
            out[known] = created[nodes[known]]
            return out

    def _holders(self, stored: str) -> np.ndarray[Any, Any]:
        nodes = self._live(stored)[0]
        add = self._over.get(stored)
        if add:
            nodes = np.concatenate([nodes, np.fromiter(add.keys(), dtype=np.int32, count=len(add))])
        return nodes

    def postings(self, conn: Connection, namespace: str, query_terms: Sequence[str],
                 node_ids: Iterable[str] | None = None) -> list[tuple[str, str, int]]:
        """As :meth:`~hybrid_memory.store.terms.TermRepository.postings`, for the nodes
        ``node_ids`` (in any order)."""
        with self._lock:
            return self._postings(conn, namespace, query_terms, node_ids)

    def _postings(self, conn: Connection, namespace: str, query_terms: Sequence[str],
                  node_ids: Iterable[str] | None) -> list[tuple[str, str, int]]:
        if node_ids is None:
            raise ValueError("a Lexicon reads the postings of given nodes only")
        ix, ids = self._ix, self._ids
        wanted = sorted({ix[i] for i in node_ids if i in ix})
        if not query_terms or not wanted:
            return []
        ks = np.asarray(wanted, dtype=np.int32)
        out: list[tuple[str, str, int]] = []
        for stored, t in self._store.terms.stored_terms(query_terms).items():
            nodes, tfs = self._base.get(stored, (_EMPTY, _EMPTY))
            if len(nodes):
                at = np.searchsorted(nodes, ks)
                at[at == len(nodes)] = 0
                hit = nodes[at] == ks
                if self._any_stale:  # (nodes numbered since the arrays were made are in none of them)
                    hit[hit] = ~self._stale[ks[hit]]
                out.extend((t, ids[k], tf) for k, tf in zip(ks[hit].tolist(), tfs[at[hit]].tolist(), strict=True))
            add = self._over.get(stored)
            if add:
                out.extend((t, ids[k], add[k]) for k in wanted if k in add)
        return out

    def tie_keys(self, conn: Connection, ids: Iterable[str]) -> dict[str, tuple[float, str]]:
        """As :meth:`~hybrid_memory.store.terms.TermRepository.tie_keys`."""
        with self._lock:
            return self._tie_keys(conn, ids)

    def _tie_keys(self, conn: Connection, ids: Iterable[str]) -> dict[str, tuple[float, str]]:
        ties, wanted = self._ties, list(dict.fromkeys(ids))
        missing = [i for i in wanted if i not in ties]
        if missing:
            read = self._store.terms.tie_keys(conn, missing)
            # Kept for the nodes whose changes the copy follows (those with postings).
            kept = {i: key for i, key in read.items() if i in self._ix}
            ties.update(kept)
            if kept:
                at = np.fromiter((self._ix[i] for i in kept), dtype=np.int64, count=len(kept))
                if at.max() >= len(self._created):
                    grown = np.full(max(int(at.max()) + 1, 2 * len(self._created)), np.nan)
                    grown[: len(self._created)] = self._created
                    self._created = grown
                self._created[at] = [key[0] for key in kept.values()]
        else:
            read = {}
        return {i: ties[i] if i in ties else read[i] for i in wanted if i in ties or i in read}
