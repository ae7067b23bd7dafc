"""A memory's vector reads it in its place in the tree.

The vector a memory is stored and searched with is the unit sum of two
embeddings: its content's, and half its path's (its ancestors' contents, root first:
"Trip to Berlin > Book the hotel"). The first keeps what the memory says; the
second where it stands, so that a detail ("moved to Thursday") is found through the
task it belongs to. A memory with no ancestor is stored with its content's
embedding alone. The memories under one task share its path, so
:class:`PathVectors` keeps each path's embedding by its text and a single add
embeds its content alone. (Why this sum and weight: eval/CHANGES.md, 2026-12-06.)

Its ancestors are part of what a vector says: when one of them is renamed (an
update of its content) or a subtree moves, the vectors below were read with a path
that no longer holds. The transaction that changes the path enqueues a
:data:`~hybrid_memory.store.schema.CONTEXT` outbox row for each node below;
:func:`refresh` reads them again after the commit, or at the next open after a
crash. Until then each keeps its earlier vector, and ``admin.verify()`` reports it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np
from sqlalchemy import select
from sqlalchemy.engine import Connection

from .embed import Embedder
from .model import path_ids
from .progress import progress_bar
from .store.schema import CONTEXT, nodes, subtree_range, to_blob
from .store.sql import SqlStore

log = logging.getLogger("hybrid_memory")

#: Names how stored vectors are made. A namespace whose vectors were made otherwise
#: (by a version that embedded the content alone) is read again when it is opened.
VECTORS_VERSION: Final = "path-1"

#: How much the path's embedding counts against the content's (1: as much).
#: Measured at 1 and 0.5 on every dev source (eval/CHANGES.md, 2026-12-06 third
#: session): at 1 the path drowned what long chat turns say (LongMemEval -0.019).
PATH_WEIGHT: Final = 0.5

#: Joins the ancestors' contents in a path's text.
_ABOVE: Final = " > "

#: Path vectors a handle keeps (a few kilobytes each).
_PATHS_KEPT: Final = 4096

#: Nodes read again per transaction.
_CHUNK: Final = 256

#: The contents of a node's ancestors, root first.
Path = tuple[str, ...]


class PathVectors:
    """The embeddings of paths already read, by their text: the memories under one
    task share its path, so a single add embeds its content alone. Bounded; the
    least recently used go first. Safe to share between threads."""

    def __init__(self, size: int = _PATHS_KEPT) -> None:
        self._size = size
        self._held: OrderedDict[str, np.ndarray[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, keys: Iterable[str]) -> dict[str, np.ndarray[Any, Any]]:
        """The held vectors of ``keys`` (those not held are left out)."""
        with self._lock:
            found = {k: self._held[k] for k in keys if k in self._held}
            for k in found:
                self._held.move_to_end(k)
            return found

    def put(self, vectors: Mapping[str, np.ndarray[Any, Any]]) -> None:
        """Hold ``vectors``, dropping the least recently used past the bound."""
        with self._lock:
            for k, v in vectors.items():
                self._held[k] = v
                self._held.move_to_end(k)
            while len(self._held) > self._size:
                self._held.popitem(last=False)


def path_text(ancestors: Path) -> str:
    """The text a path is embedded as: its contents, root first."""
    return _ABOVE.join(ancestors)


def plan(items: Sequence[tuple[str, Path]], held: PathVectors | None = None,
         contents: Mapping[int, np.ndarray[Any, Any]] | None = None,
         ) -> tuple[list[str], Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]]]:
    """The texts to embed for ``items`` (each a content and its ancestors' contents),
    and the function that turns their embeddings into the items' stored vectors.

    The texts are the contents not in ``contents`` (item index -> its content's
    embedding, already made), then each distinct path not in ``held``; one embedder
    call takes them all, and ``combine`` puts the new paths in ``held``."""
    n = len(items)
    given = contents or {}
    todo = [i for i in range(n) if i not in given]
    paths = [path_text(above) if above else None for _, above in items]
    keys = {p for p in paths if p is not None}
    known = held.get(keys) if held is not None else {}
    fresh = sorted(keys - known.keys())
    texts = [items[i][0] for i in todo] + fresh

    def combine(vectors: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        vectors = np.asarray(vectors, dtype=np.float32)
        dim = vectors.shape[1] if vectors.ndim == 2 else len(next(iter(given.values())))
        out = np.empty((n, dim), dtype=np.float32)
        for i, v in given.items():
            out[i] = v
        out[todo] = vectors[: len(todo)]
        if not keys:
            return out
        m = len(todo)
        read = dict(known, **{k: vectors[m + j] for j, k in enumerate(fresh)})
        if held is not None:
            held.put({k: read[k] for k in fresh})
        placed = [i for i, p in enumerate(paths) if p is not None]
        summed = out[placed] + PATH_WEIGHT * np.stack([read[paths[i]] for i in placed])
        norms = np.linalg.norm(summed, axis=1, keepdims=True)
        out[placed] = summed / np.where(norms > 0, norms, 1.0)
        return out

    return texts, combine


def embed(embedder: Embedder, items: Sequence[tuple[str, Path]], held: PathVectors | None = None
          ) -> np.ndarray[Any, Any]:
    """The stored vectors of ``items`` (see :func:`plan`)."""
    if not items:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    texts, combine = plan(items, held)
    return combine(embedder.embed(texts))


def ancestors(store: SqlStore, conn: Connection, paths: Iterable[str]) -> dict[str, Path]:
    """For each materialised path, the contents of the nodes above the one it ends
    at, root first (an ancestor no longer stored is left out)."""
    paths = set(paths)
    above = {p: path_ids(p)[:-1] for p in paths}
    wanted = sorted({i for ids in above.values() for i in ids})
    rows = store.nodes.get_many(conn, wanted) if wanted else {}
    return {p: tuple(rows[i].content for i in ids if i in rows) for p, ids in above.items()}


def above(store: SqlStore, conn: Connection, path: str) -> Path:
    """The contents of the nodes above the one ``path`` ends at, root first."""
    return ancestors(store, conn, [path])[path]


def below(conn: Connection, namespace: str, path: str, *, inclusive: bool) -> list[str]:
    """Ids of the nodes of the subtree at ``path`` (any status), with its top or not."""
    lo, hi = subtree_range(path)
    q = select(nodes.c.id).where(nodes.c.namespace == namespace, nodes.c.path >= lo, nodes.c.path < hi)
    top = path_ids(path)[-1]
    return [i for i in conn.execute(q).scalars() if inclusive or i != top]


def waiting(store: SqlStore, namespace: str) -> tuple[str, ...]:
    """Ids of the nodes of ``namespace`` whose vectors wait to be read again."""
    with store.reading() as conn:
        return tuple(sorted({i for _, i in store.outbox.context_waiting(conn, namespace, 1 << 62)}))


def mark(store: SqlStore, conn: Connection, namespace: str, ids: Sequence[str]) -> None:
    """Record, in ``conn``'s transaction, that the vectors of ``ids`` were read with a
    path that no longer holds."""
    store.outbox.enqueue(conn, namespace, ids, CONTEXT)


def setting_key(namespace: str) -> str:
    """The store setting that records how the namespace's vectors were made."""
    return f"vectors_version:{namespace}"


def check_version(store: SqlStore, namespace: str) -> int:
    """Mark every node of ``namespace`` to be read again in context unless its vectors
    were made as :data:`VECTORS_VERSION` says; how many were marked. A namespace
    without nodes is recorded as current."""
    key = setting_key(namespace)
    with store.reading() as conn:
        if store.settings.get(conn, key) == VECTORS_VERSION:
            return 0

    def run(conn: Connection) -> int:
        if store.settings.get(conn, key) == VECTORS_VERSION:
            return 0
        ids = list(conn.execute(select(nodes.c.id).where(nodes.c.namespace == namespace,
                                                         nodes.c.depth > 0)).scalars())
        mark(store, conn, namespace, ids)
        store.settings.set(conn, key, VECTORS_VERSION)
        return len(ids)

    marked = store.write(run)
    if marked:
        log.info("namespace %r: %d memories will be embedded again with their path", namespace, marked)
    return marked


def refresh(store: SqlStore, embedder: Embedder, namespace: str, held: PathVectors | None = None) -> int:
    """Read again, with its current path, the vector of every node marked
    :data:`CONTEXT`; how many vectors were replaced. Each chunk is one transaction
    that stores the new vectors, enqueues their index upserts and clears the marks it
    read (a node changed meanwhile keeps its vector: its change marked it again or
    gave it a new one)."""
    done = 0
    with store.reading() as conn:
        total = store.outbox.context_count(conn, namespace)
    if not total:
        return 0
    bar = progress_bar(total, "embed in context")
    try:
        while True:
            with store.reading() as conn:
                marks = store.outbox.context_waiting(conn, namespace, _CHUNK)
                if not marks:
                    break
                rows = store.nodes.get_many(conn, sorted({i for _, i in marks}))
                above = ancestors(store, conn, [r.path for r in rows.values()])
            ids = sorted(rows)
            vectors = embed(embedder, [(rows[i].content, above[rows[i].path]) for i in ids], held)
            done += store.write(functools.partial(_replace, store, namespace=namespace, rows=rows, ids=ids,
                                                  vectors=vectors, seqs=[s for s, _ in marks]))
            bar.update(len(marks))
    finally:
        bar.close()
    return done


def _replace(store: SqlStore, conn: Connection, *, namespace: str, rows: Mapping[str, Any], ids: Sequence[str],
             vectors: np.ndarray[Any, Any], seqs: Sequence[int]) -> int:
    replaced = [i for i, v in zip(ids, vectors, strict=True)
                if store.nodes.replace_embedding(conn, i, to_blob(v), path=rows[i].path, content_hash=rows[i].content_hash)]
    store.outbox.enqueue(conn, namespace, replaced, "upsert")
    store.outbox.clear(conn, seqs)
    return len(replaced)
