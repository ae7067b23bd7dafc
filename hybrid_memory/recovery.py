"""Healing the derived vector index from the relational truth: the outbox drain run
after every write and at open, ``verify``, ``repair`` and ``reindex``, and the view
of the index (:class:`AppliedFirst`) whose reads apply the waiting writes first."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

from . import context
from .model import Drift
from .store.schema import EMBED
from .store.sql import SqlStore
from .store.vectors import VectorIndex

log = logging.getLogger("hybrid_memory")

#: A test hook called at named points of the write path (``"before_index"``,
#: ``"after_index"``, ``"add_many_item"``); it raises to simulate a crash there.
FaultHook = Callable[[str], None]

_STALE_TOLERANCE = 1e-4
_CHUNK = 2000


def _no_fault(_point: str) -> None:
    return None


def drain_outbox(store: SqlStore, index: VectorIndex, namespace: str, fault: FaultHook = _no_fault) -> int:
    """Apply pending index work (idempotent upserts and deletes) and clear it.

    Returns how many outbox rows were applied. If the index fails, the rows stay
    and the next drain (every write, and every open) tries again: the relational
    store already holds the truth, so the caller's write is not failed for it.
    """
    with store.reading() as conn:
        rows = store.outbox.pending(conn, namespace)
        if not rows:
            return 0
        # A node committed before its vector keeps its EMBED row until the vector's
        # commit turns it into an upsert (or an open embeds it); once the node has a
        # vector, or is gone, the row is an upsert like any other.
        waiting = store.nodes.unembedded(conn, sorted({r.node_id for r in rows if r.action == EMBED}))
        rows = [r for r in rows if not (r.action == EMBED and r.node_id in waiting)]
        if not rows:
            return 0
        last: dict[str, str] = {}
        for r in rows:  # the last action on a node wins
            last.pop(r.node_id, None)
            last[r.node_id] = "upsert" if r.action == EMBED else r.action
        wanted = [i for i, a in last.items() if a == "upsert"]
        live = store.nodes.get_many(conn, wanted, live_only=True)
        vectors = store.nodes.embeddings(conn, list(live))
    upserts = [i for i in wanted if i in vectors]
    deletes = [i for i in last if i not in vectors]
    fault("before_index")
    try:
        if upserts:
            index.upsert(namespace, upserts, np.stack([vectors[i] for i in upserts]))
        if deletes:
            index.delete(namespace, deletes)
    except Exception as exc:  # any index failure: keep the outbox for the next drain
        log.warning("vector index update deferred (%d pending): %s", len(rows), exc)
        return 0
    fault("after_index")
    seqs = [r.seq for r in rows]
    store.write(lambda conn: store.outbox.clear(conn, seqs))
    return len(rows)


def nearest(store: SqlStore, index: VectorIndex, namespace: str, vectors: np.ndarray[Any, Any],
            n: int, conn: Connection | None = None) -> list[list[tuple[str, float]]]:
    """The ``n`` nearest nodes (id, cosine) of each vector, best first: the index's
    answer, merged with the nodes whose index write still waits in the outbox,
    scored exactly from their stored embeddings (so a write is found before the
    index has it). Index failures propagate. ``conn``: read the outbox in that
    read transaction instead of a new one.

    The outbox is read before the index is asked: a write applied to the index in
    between (by a drain here or in another process) is then found in one or both,
    where the other order could miss it in both."""
    matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    with store.reading() if conn is None else contextlib.nullcontext(conn) as c:
        waiting = outbox_vectors(store, namespace, c)
    return merge_waiting(index.query(namespace, matrix, n), waiting, matrix, n)


def outbox_vectors(store: SqlStore, namespace: str, conn: Connection) -> dict[str, np.ndarray[Any, Any]]:
    """The stored embeddings of the nodes whose index upsert waits in the outbox: the
    first half of :func:`nearest`, read before the index is asked."""
    ids = store.outbox.pending_upserts(conn, namespace)
    return store.nodes.embeddings(conn, ids) if ids else {}


def merge_waiting(found: list[list[tuple[str, float]]], waiting: Mapping[str, np.ndarray[Any, Any]],
                  vectors: np.ndarray[Any, Any], n: int) -> list[list[tuple[str, float]]]:
    """The index's answer ``found`` for each of ``vectors``, merged with the nodes of
    ``waiting`` (:func:`outbox_vectors`) scored exactly: the second half of
    :func:`nearest`."""
    if not waiting:
        return found
    matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    keys = list(waiting)
    sims = matrix @ np.stack([waiting[k] for k in keys]).T
    out = []
    for row, hits in zip(sims, found, strict=True):
        merged = dict(hits)
        merged.update(zip(keys, (float(x) for x in row), strict=True))
        out.append(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))[:n])
    return out


def _live_embeddings(store: SqlStore, namespace: str) -> Iterator[tuple[list[str], np.ndarray[Any, Any]]]:
    with store.reading() as conn:
        ids = store.tree.live_ids(conn, namespace)
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        with store.reading() as conn:
            vectors = store.nodes.embeddings(conn, chunk)
        present = [j for j in chunk if j in vectors]
        if present:
            yield present, np.stack([vectors[j] for j in present])


def corrupt_log_entries(store: SqlStore, namespace: str, *, last_only: bool = False) -> list[int]:
    """Sequence numbers of operation-log entries whose payload is not a JSON object."""
    with store.reading() as conn:
        rows = store.log.payloads(conn, namespace, last_only=last_only)
    bad = []
    for seq, payload in rows:
        try:
            ok = isinstance(json.loads(payload), dict)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            bad.append(seq)
    return bad


def verify(store: SqlStore, index: VectorIndex, namespace: str) -> Drift:
    """Compare the vector index with the relational truth, changing nothing."""
    indexed = index.ids(namespace)
    live: set[str] = set()
    missing: list[str] = []
    stale: list[str] = []
    for ids, stored in _live_embeddings(store, namespace):
        live.update(ids)
        have = index.vectors(namespace, [i for i in ids if i in indexed])
        for node_id, vec in zip(ids, stored, strict=True):
            if node_id not in have:
                missing.append(node_id)
            elif float(np.max(np.abs(have[node_id] - vec))) > _STALE_TOLERANCE:
                stale.append(node_id)
    with store.reading() as conn:
        pending = len(store.outbox.pending(conn, namespace))
        term_counts = store.terms.term_count_drift(conn, namespace)
    return Drift(
        missing=tuple(missing),
        extra=tuple(sorted(indexed - live)),
        stale=tuple(stale),
        pending=pending,
        out_of_context=context.waiting(store, namespace),
        corrupt_log=tuple(corrupt_log_entries(store, namespace)),
        term_counts=term_counts,
    )


def repair(store: SqlStore, index: VectorIndex, namespace: str, fault: FaultHook = _no_fault) -> Drift:
    """Make the index (and the lexical terms' counts) match the relational truth;
    returns the drift that was found."""
    drain_outbox(store, index, namespace, fault)
    drift = verify(store, index, namespace)
    fix = list(drift.missing) + list(drift.stale)
    if fix:
        with store.reading() as conn:
            vectors = store.nodes.embeddings(conn, fix)
        for i in range(0, len(fix), _CHUNK):
            chunk = fix[i : i + _CHUNK]
            index.upsert(namespace, chunk, np.stack([vectors[j] for j in chunk]))
    if drift.extra:
        index.delete(namespace, list(drift.extra))
    if drift.corrupt_log:
        bad = list(drift.corrupt_log)
        store.write(lambda conn: store.log.mark_corrupt(conn, bad))
    if drift.term_counts:
        store.write(lambda conn: store.terms.recount(conn, namespace))
    return drift


def reindex(
    store: SqlStore, index: VectorIndex, namespace: str, *, progress: Callable[[int, int], None] | None = None
) -> int:
    """Rebuild the namespace's index from the stored embeddings. Returns the vectors written."""
    drain_outbox(store, index, namespace)
    stale = sorted(index.ids(namespace))
    for i in range(0, len(stale), _CHUNK):
        index.delete(namespace, stale[i : i + _CHUNK])
    with store.reading() as conn:
        total = store.tree.live_count(conn, namespace)
    done = 0
    for ids, vectors in _live_embeddings(store, namespace):
        index.upsert(namespace, ids, vectors)
        done += len(ids)
        if progress is not None:
            progress(done, total)
    return done


class AppliedFirst:
    """A vector index whose reads first apply the index writes waiting in the outbox,
    so that what a caller reads through ``MemoryTree.index`` includes every write."""

    def __init__(self, index: VectorIndex, apply: Callable[[], None]) -> None:
        self._inner, self._apply = index, apply

    def upsert(self, namespace: str, ids: Sequence[str], vectors: Any) -> None:
        self._inner.upsert(namespace, ids, vectors)

    def delete(self, namespace: str, ids: Sequence[str]) -> None:
        self._inner.delete(namespace, ids)

    def query(self, namespace: str, vectors: Any, n: int) -> list[list[tuple[str, float]]]:
        self._apply()
        return self._inner.query(namespace, vectors, n)

    def ids(self, namespace: str) -> set[str]:
        self._apply()
        return self._inner.ids(namespace)

    def vectors(self, namespace: str, ids: Sequence[str]) -> dict[str, Any]:
        self._apply()
        return self._inner.vectors(namespace, ids)

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)



class IndexBatch:
    """One handle's index writes waiting in the outbox (durably) until
    ``write.index_batch`` of them are pending, then applied as one with any other's.
    Work left there by a failed index write waits for the next batch or open."""

    def __init__(self, store: SqlStore, index: VectorIndex, namespace: str, size: int, fault: FaultHook) -> None:
        self._store, self._index, self._namespace, self._size, self._fault = store, index, namespace, size, fault
        #: This handle's index writes waiting for their batch.
        self.waiting = 0

    def add(self, writes: int = 1) -> None:
        """After a mutation: ``writes`` more wait; the batch is applied once full."""
        self.waiting += writes
        if self.waiting >= self._size:
            self.apply()

    def apply(self, *, force: bool = False) -> None:
        """When this handle has index writes waiting (or ``force``), apply every index
        write waiting in the outbox."""
        if self.waiting or force:
            self.waiting = 0
            drain_outbox(self._store, self._index, self._namespace, self._fault)


__all__: Sequence[str] = ["AppliedFirst", "IndexBatch", "corrupt_log_entries", "drain_outbox", "nearest", "reindex", "repair", "verify"]
