"""An in-process copy of one namespace's vectors, searched without leaving Python.

A top-40 query to embedded Chroma costs about 2 ms at 100k vectors, most of it
around the graph search rather than in it: argument checks, the binding's round
trip and the mapping of the graph's labels back to ids through Chroma's own
database. The same HNSW search (the same links per node and search breadth) over
the same vectors in this process takes about 0.8 ms. So an embedded
:class:`~hybrid_memory.store.vectors.ChromaIndex` keeps, per namespace asked about
more than once, a :class:`Graph` that follows every write it makes to Chroma, and
answers queries from it.

A write to a ready copy is counted at once and inserted into its graph by a thread
of its own (an insert costs about 0.6 ms a vector at 100k; hnswlib lets go of the
interpreter meanwhile); a search or a close that comes first applies it itself.

Chroma stays the index of record: a graph is built from Chroma's vectors, is
saved beside Chroma's files when its handle closes, and is trusted only while it
has seen every write to its namespace. Every write bumps the namespace's
generation (a counter in the folder, under Chroma's inter-process lock); a graph
at another generation than the folder's is stale (another process wrote, or the
process that saved it crashed later), and Chroma answers until a new copy is built
on a thread. The graphs use ``hnswlib`` (the wheel ``chroma-hnswlib``, the HNSW
library Chroma itself was built on); without it, Chroma answers every query.

A deleted node's vector is overwritten in the copy before the copy is saved, and a
saved copy that holds a deleted node's vector is removed at once: what an erasure
removes from Chroma does not stay behind in these files.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("hybrid_memory")

#: Links per node and build breadth of a graph (hnswlib's M and ef_construction).
LINKS = 16
BUILD_EF = 200
#: Deleted nodes overwritten one by one before a save, at most this many, or this
#: share of the graph, whichever is more; past that the copy is not saved (the next
#: handle builds a compact one).
_SCRUB_MAX, _SCRUB_SHARE = 2000, 0.05


def available() -> bool:
    """Whether ``hnswlib`` can be imported (the graphs are off without it)."""
    try:
        import hnswlib  # noqa: F401
    except ImportError:
        return False
    return True


class Graph:
    """HNSW over one namespace's vectors (cosine), with node ids as labels.

    Labels are handed out in order and never reused for another id: a node written
    again (its vector changed, or restored after an archive) keeps its label.
    """

    def __init__(self, dim: int | None, *, capacity: int = 1024, ef: int = 400, index: Any = None,
                 ids: Sequence[str] = ()) -> None:
        #: The vectors' length; None until the first vector (an empty namespace).
        self.dim = dim
        self._ef = ef
        self._index: Any = None
        if index is not None:
            self._setup(index)
        elif dim is not None:
            self._create(dim, capacity)
        self._ids: list[str] = list(ids)
        self._label: dict[str, int] = {node_id: n for n, node_id in enumerate(self._ids)}
        #: Labels whose node is deleted; and of those, the ones whose vector is still in the graph.
        self._deleted: set[int] = set()
        self._unscrubbed: set[int] = set()
        if len(self._ids) != (0 if self._index is None else self._index.element_count):
            raise ValueError(f"{len(self._ids)} ids for a graph of another size")
        #: Whether the graph changed since it was built or loaded.
        self.dirty = False

    def _create(self, dim: int, capacity: int) -> None:
        import hnswlib

        index = hnswlib.Index("cosine", dim)
        index.init_index(max_elements=max(capacity, 16), M=LINKS, ef_construction=BUILD_EF, random_seed=1)
        self.dim = dim
        self._setup(index)

    def _setup(self, index: Any) -> None:
        index.set_ef(self._ef)
        index.set_num_threads(1)
        self._index = index

    @property
    def live(self) -> int:
        return len(self._ids) - len(self._deleted)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray[Any, Any]) -> None:
        if not len(ids):
            return
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if self._index is None and matrix.ndim == 2 and matrix.shape[1]:
            self._create(matrix.shape[1], len(ids))
        if matrix.ndim != 2 or matrix.shape[1] != self.dim:
            raise ValueError(f"vectors of shape {matrix.shape} for a graph of dimension {self.dim}")
        labels = []
        for node_id in ids:
            n = self._label.get(node_id)
            if n is None:
                n = self._label[node_id] = len(self._ids)
                self._ids.append(node_id)
            elif n in self._deleted:
                self._deleted.discard(n)
                self._unscrubbed.discard(n)
            labels.append(n)
        need = len(self._ids)
        if need > self._index.get_max_elements():
            self._index.resize_index(max(need, 2 * self._index.get_max_elements()))
        # (a label written twice in one batch: hnswlib keeps the last)
        self._index.add_items(matrix, np.asarray(labels, dtype=np.uint64), num_threads=1)
        self.dirty = True

    def delete(self, ids: Sequence[str]) -> None:
        for node_id in ids:
            n = self._label.get(node_id)
            if n is None or n in self._deleted:
                continue
            self._index.mark_deleted(n)
            self._deleted.add(n)
            self._unscrubbed.add(n)
            self.dirty = True

    def search(self, vectors: np.ndarray[Any, Any], n: int) -> list[list[tuple[str, float]]]:
        """For each row: up to ``n`` (id, cosine similarity) pairs, nearest first."""
        matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        k = min(n, self.live)
        if k <= 0 or not len(matrix) or self._index is None:
            return [[] for _ in range(len(matrix))]
        if k > self._ef:
            self._index.set_ef(k)
        try:
            labels, dists = self._index.knn_query(matrix, k=k, num_threads=1)
        finally:
            if k > self._ef:
                self._index.set_ef(self._ef)
        ids = self._ids
        return [[(ids[lab], 1.0 - d) for lab, d in zip(row_l.tolist(), row_d.tolist(), strict=True)]
                for row_l, row_d in zip(labels, dists, strict=True)]

    def holds_deleted(self) -> bool:
        """Whether a deleted node's vector is still in the graph's memory."""
        return bool(self._unscrubbed)

    def scrub(self) -> bool:
        """Overwrite the vectors of deleted nodes (so a saved copy holds none of them).
        False when there are too many to do one by one: then the copy is not to be saved."""
        if not self._unscrubbed or self._index is None:
            return True
        if len(self._unscrubbed) > max(_SCRUB_MAX, _SCRUB_SHARE * len(self._ids)):
            return False
        zero = np.zeros((1, self.dim or 1), dtype=np.float32)
        for n in sorted(self._unscrubbed):
            self._index.add_items(zero, np.asarray([n], dtype=np.uint64), num_threads=1)  # (un-deletes it)
            self._index.mark_deleted(n)
        self._unscrubbed.clear()
        return True

    # -- on disk ----------------------------------------------------------------------

    def save(self, folder: Path, name: str, generation: int) -> None:
        """Write the graph as ``name`` in ``folder`` at ``generation``: its files first,
        under a fresh token, then the manifest naming them (an atomic rename), then
        the older files. Call :meth:`scrub` first."""
        if self._unscrubbed:
            raise ValueError("scrub() the deleted vectors before saving")
        if self._index is None:
            remove_saved(folder, name)  # (nothing to keep: an empty namespace is read in no time)
            return
        folder.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(6)
        graph_file, ids_file = folder / f"{name}-{token}.hnsw", folder / f"{name}-{token}.ids.json"
        self._index.save_index(str(graph_file))
        ids_file.write_text(json.dumps({"ids": self._ids, "deleted": sorted(self._deleted)}))
        manifest = {"generation": generation, "token": token, "dim": self.dim, "count": len(self._ids)}
        tmp = folder / f"{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(manifest))
        os.replace(tmp, folder / f"{name}.json")
        _remove_others(folder, name, keep=token)
        self.dirty = False

    @classmethod
    def load(cls, folder: Path, name: str, *, ef: int = 400) -> tuple[Graph, int] | None:
        """The graph saved as ``name`` and its generation, or None (none saved, or
        its files gone or unreadable)."""
        import hnswlib

        try:
            manifest = json.loads((folder / f"{name}.json").read_text())
            token, generation, dim = str(manifest["token"]), int(manifest["generation"]), int(manifest["dim"])
            saved = json.loads((folder / f"{name}-{token}.ids.json").read_text())
            index = hnswlib.Index("cosine", dim)
            index.load_index(str(folder / f"{name}-{token}.hnsw"), max_elements=max(len(saved["ids"]), 16))
            g = cls(dim, ef=ef, index=index, ids=saved["ids"])
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            if (folder / f"{name}.json").exists():
                log.info("the saved vector graph %s is not usable (%s): it is built again", name, exc)
            return None
        g._deleted = {int(n) for n in saved.get("deleted", ())}
        return g, generation


def remove_saved(folder: Path, name: str) -> None:
    """Remove every saved file of ``name``."""
    _remove_others(folder, name, keep=None)
    (folder / f"{name}.json").unlink(missing_ok=True)


def _remove_others(folder: Path, name: str, keep: str | None) -> None:
    if not folder.is_dir():
        return
    for p in folder.iterdir():
        if not p.name.startswith(f"{name}-"):
            continue
        token = p.name[len(name) + 1:].split(".", 1)[0]
        if token != keep:
            p.unlink(missing_ok=True)


@dataclass
class _Copy:
    """One namespace's copy and where it stands."""

    graph: Graph | None = None
    #: The namespace generation the graph holds (-1: none yet).
    generation: int = -1
    #: Writes made while the copy was being loaded or built: (before, after, kind, ids, vectors).
    journal: list[_Entry] = field(default_factory=list)
    thread: threading.Thread | None = None
    #: Copies given up because another process wrote the namespace; past _MAX_LOST,
    #: Chroma answers for the rest of the handle's life.
    lost: int = 0
    failed: bool = False
    #: Whether a saved copy may hold a vector deleted while this one was prepared.
    saved_stale: bool = False
    #: Writes the copy's generation counts but its graph does not hold yet: applied
    #: in order by the inserting thread, or by the next search, whichever comes first.
    pending: list[_Entry] = field(default_factory=list)


#: Copies a handle builds again after another process wrote, before it stops trying.
_MAX_LOST = 2


class Graphs:
    """The in-process graphs of one embedded Chroma folder (see the module).

    ``snapshot(namespace)`` reads the namespace's vectors from Chroma: an iterator
    of (generation, ids, vectors) chunks, the first one's generation the one its
    list of ids was read at. ``generation(namespace)`` is the namespace's generation
    now. Every write the index makes is reported through :meth:`written`, inside
    the lock it was made under, with the generations before and after it.
    """

    def __init__(self, folder: Path, *, ef: int,
                 snapshot: Callable[[str], Iterator[tuple[int, list[str], np.ndarray[Any, Any]]]],
                 generation: Callable[[str], int]) -> None:
        self._folder = folder
        self._ef = ef
        self._snapshot = snapshot
        self._generation = generation
        self._copies: dict[str, _Copy] = {}
        #: Queries asked of each namespace without a copy; writes made before its copy
        #: was started (None: too many, or none worth keeping: a copy will be built).
        self._asked: dict[str, int] = {}
        self._early: dict[str, list[_Entry] | None] = {}
        self._early_n: dict[str, int] = {}  # (vectors in each namespace's early writes)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._inserter: threading.Thread | None = None
        self._stop = threading.Event()
        #: How many copies were loaded from disk and built from Chroma (for tests and benches).
        self.loads = self.builds = 0

    # -- the index's calls --------------------------------------------------------------

    def search(self, namespace: str, name: str, matrix: np.ndarray[Any, Any], n: int,
               generation: int) -> list[list[tuple[str, float]]] | None:
        """The graph's answer, or None when it has none at ``generation`` (Chroma answers)."""
        with self._lock:
            copy = self._copies.get(namespace)
            if copy is None:
                # From a handle's second query on, as the lexicon: a command that asks
                # once never reads (or waits for) a whole graph.
                self._asked[namespace] = self._asked.get(namespace, 0) + 1
                if self._asked[namespace] > 1:
                    self._start(namespace, name)
                return None
            if copy.failed or copy.thread is not None:
                return None
            if copy.generation != generation or copy.graph is None:
                if copy.generation >= 0:  # another process wrote the namespace
                    copy.lost += 1
                    copy.failed = copy.lost > _MAX_LOST
                _drop(copy)
                self._start(namespace, name)
                return None
            self._settle(copy)
            if copy.graph is None:
                self._start(namespace, name)
                return None
            try:
                return copy.graph.search(matrix, n)
            except RuntimeError as exc:  # hnswlib found fewer than asked (a graph of many deletions)
                log.info("the vector graph of namespace %r is built again: %s", namespace, exc)
                _drop(copy)
                return None

    def written(self, namespace: str, name: str, before: int, after: int, kind: str, ids: Sequence[str],
                vectors: np.ndarray[Any, Any] | None) -> None:
        """A write to Chroma, reported inside the lock that made it (generations
        ``before`` and ``after`` of the namespace). Never raises: the copy is dropped
        instead."""
        def saved() -> bool:  # (a stat: not on the hot path of an upsert to a ready copy)
            return (self._folder / f"{name}.json").exists()

        with self._lock:
            copy = self._copies.get(namespace)
            if copy is None:
                early = self._early.setdefault(namespace, [])
                if kind == "delete":
                    remove_saved(self._folder, name)  # it may hold the deleted vector
                if kind == "delete" or early is None or not saved():
                    self._early[namespace] = None  # a copy will have to be built
                    return
                # A handle that writes before it asks: its writes are kept, to be
                # replayed on the saved copy once it is loaded, up to a point.
                early.append(_entry(before, after, kind, ids, vectors))
                self._early_n[namespace] = self._early_n.get(namespace, 0) + len(ids)
                if self._early_n[namespace] > EARLY_MAX:
                    self._early[namespace] = None  # (the saved copy can no longer catch up)
                    remove_saved(self._folder, name)
                return
            if copy.thread is not None:
                copy.journal.append(_entry(before, after, kind, ids, vectors))
                copy.saved_stale |= kind == "delete"
                return
            if copy.graph is None or copy.failed:
                return
            if copy.generation != before:
                _drop(copy)  # missed a write: built again when next asked
                return
            if kind == "delete" and len(ids) > max(copy.graph.live // 2, 1000):
                # Most of the namespace at once (a reindex): a compact copy is built when
                # next asked, rather than each node's slot written over again.
                _drop(copy)
                remove_saved(self._folder, name)
                return
            # The graph's inserts cost about 0.6 ms a vector at 100k: made on a thread of
            # their own (hnswlib lets go of the interpreter), off the write path.
            copy.pending.append(_entry(before, after, kind, ids, vectors))
            copy.generation = after
            if self._inserter is None and not self._stop.is_set():
                self._inserter = threading.Thread(target=self._insert, name="hybrid_memory-graph-insert",
                                                  daemon=True)
                self._inserter.start()
            self._wake.notify()
            if kind == "delete":
                remove_saved(self._folder, name)

    def _insert(self) -> None:
        """The inserting thread: apply pending writes, one at a time (the lock let go
        between them), until closed."""
        while True:
            with self._lock:
                todo = next((c for c in self._copies.values() if c.pending and c.graph is not None), None)
                if todo is None:
                    if self._stop.is_set():
                        return
                    self._wake.wait()
                    continue
                self._settle(todo, one=True)

    def _settle(self, copy: _Copy, *, one: bool = False) -> None:
        """Apply the copy's pending writes (only the first: ``one``); the caller holds
        the lock. A write the graph refuses (a namespace started again at another
        dimension) drops the copy, to be built again when next asked."""
        while copy.pending and copy.graph is not None:
            _, _, kind, ids, vectors = copy.pending.pop(0)
            try:
                _apply(copy.graph, kind, ids, vectors)
            except (ValueError, RuntimeError) as exc:
                log.info("the vector graph is built again: %s", exc)
                _drop(copy)
            if one:
                return

    def dropped(self, namespace: str, name: str) -> None:
        """The namespace's collection was deleted: forget its copy and its files (a
        thread still preparing one finds it dropped and keeps nothing)."""
        with self._lock:
            self._copies.pop(namespace, None)
            remove_saved(self._folder, name)

    def ready(self, namespace: str) -> bool:
        """Whether the namespace's copy answers queries now."""
        with self._lock:
            copy = self._copies.get(namespace)
            return copy is not None and copy.thread is None and copy.graph is not None and not copy.failed

    def pending(self, namespace: str) -> int:
        """How many writes the namespace's copy counts that its graph does not hold yet
        (the inserting thread's backlog)."""
        with self._lock:
            copy = self._copies.get(namespace)
            return 0 if copy is None else len(copy.pending)

    def wait(self, namespace: str, timeout: float | None = None) -> bool:
        """Wait for the namespace's copy being loaded or built; whether it is ready."""
        with self._lock:
            copy = self._copies.get(namespace)
            thread = copy.thread if copy is not None else None
        if thread is not None:
            thread.join(timeout)
        return self.ready(namespace)

    def close(self, names: Callable[[str], str], *, save: bool = True) -> None:
        """Stop the threads and save the copies that changed (``names``: a
        namespace's file name). Call without holding the index's lock: a thread
        reading Chroma may be waiting for it. ``save=False`` saves none: the copies
        are let go as a killed process leaves them (see
        :func:`hybrid_memory.testing.abandon_graphs`)."""
        self._stop.set()
        with self._lock:
            threads = [c.thread for c in self._copies.values() if c.thread is not None]
            if self._inserter is not None:
                threads.append(self._inserter)
            self._wake.notify_all()
        for t in threads:
            t.join()
        with self._lock:
            if not save:
                self._copies.clear()
            for copy in self._copies.values():
                self._settle(copy)
            copies, self._copies = dict(self._copies), {}
        for namespace, copy in copies.items():
            g = copy.graph
            if g is None or copy.failed or not g.dirty or copy.generation < 0:
                continue
            try:
                if g.scrub():
                    g.save(self._folder, names(namespace), copy.generation)
                else:
                    remove_saved(self._folder, names(namespace))
            except (OSError, RuntimeError, ValueError) as exc:  # a copy: the next handle builds one
                log.warning("the vector graph of namespace %r was not saved: %s", namespace, exc)
                remove_saved(self._folder, names(namespace))

    # -- loading and building -----------------------------------------------------------

    def _start(self, namespace: str, name: str) -> _Copy:
        """Start loading (or building) the copy on a thread; the caller holds the lock."""
        copy = self._copies.setdefault(namespace, _Copy())
        if copy.failed or copy.thread is not None or self._stop.is_set():
            return copy
        copy.journal = self._early.pop(namespace, None) or []
        self._early_n.pop(namespace, None)
        copy.thread = threading.Thread(target=self._prepare, args=(namespace, name, copy),
                                       name="hybrid_memory-graph", daemon=True)
        copy.thread.start()
        return copy

    def _prepare(self, namespace: str, name: str, copy: _Copy) -> None:
        try:
            saved = Graph.load(self._folder, name, ef=self._ef)
            if saved is not None:
                self.loads += 1
                if self._finish(namespace, name, copy, *saved):
                    return
            graph, generation = self._build(namespace)
            self.builds += 1
            if not self._finish(namespace, name, copy, graph, generation, last=True):
                log.info("namespace %r is written by another process too: Chroma answers its queries", namespace)
        except _Stopped:
            self._finish(namespace, name, copy, None, -1, last=True)
        except Exception as exc:  # a copy only: Chroma keeps answering
            log.warning("the in-process vector graph of namespace %r was not built: %s", namespace, exc)
            self._finish(namespace, name, copy, None, -1, last=True)

    def _finish(self, namespace: str, name: str, copy: _Copy, graph: Graph | None, generation: int,
                last: bool = False) -> bool:
        """Replay the writes journaled since ``generation`` on ``graph`` and make it the
        namespace's copy; False (and nothing kept) when they do not follow on from it
        (another process wrote) or there is no graph. ``last``: the thread ends."""
        with self._lock:
            ok = graph is not None and generation >= 0
            if ok:
                assert graph is not None
                try:
                    for before, after, kind, ids, vectors in copy.journal:
                        if after <= generation:
                            continue  # (already in what was read)
                        if before != generation:
                            ok = False
                            break
                        _apply(graph, kind, ids, vectors)
                        generation = after
                except (ValueError, RuntimeError):
                    ok = False
                ok = ok and generation == self._generation(namespace)
            if not ok and not last:
                return False
            copy.thread = None
            copy.journal.clear()
            if self._copies.get(namespace) is not copy:
                return ok  # dropped meanwhile
            if ok:
                copy.graph, copy.generation = graph, generation
                copy.pending.clear()
                if copy.saved_stale:
                    remove_saved(self._folder, name)
                    copy.saved_stale = False
            elif graph is not None and not self._stop.is_set():
                copy.lost += 1  # another process wrote meanwhile: built again when next asked
                copy.failed = copy.lost > _MAX_LOST
            else:
                copy.failed = True
            return ok

    def _build(self, namespace: str) -> tuple[Graph, int]:
        graph: Graph | None = None
        first = -1
        for generation, ids, vectors in self._snapshot(namespace):
            if self._stop.is_set():
                raise _Stopped
            if first < 0:
                first = generation
            if len(ids):
                if graph is None:
                    graph = Graph(vectors.shape[1], capacity=len(ids), ef=self._ef)
                graph.upsert(ids, vectors)
        # The chunks after the first may hold writes made since: the journal replays
        # every write from the first chunk's generation on (each idempotent), and
        # anything written by another process shows as a generation the copy lacks.
        g = graph or Graph(None, ef=self._ef)
        g.dirty = True
        return g, first


class _Stopped(Exception):
    pass


def _drop(copy: _Copy) -> None:
    """Let go of the copy's graph (built again when next asked), and of the writes
    pending for it: a new graph is read from Chroma, which holds them."""
    copy.graph, copy.generation = None, -1
    copy.pending.clear()


_Entry = tuple[int, int, str, list[str], Any]
#: Vectors written before a namespace's copy was started that are kept to replay
#: on the saved copy, at most (read at each write: a test may lower it).
EARLY_MAX = 20000


def _entry(before: int, after: int, kind: str, ids: Sequence[str], vectors: np.ndarray[Any, Any] | None) -> _Entry:
    """A journaled write (its vectors copied: the caller's array may change)."""
    return before, after, kind, list(ids), None if vectors is None else np.array(vectors, dtype=np.float32)


def _apply(graph: Graph, kind: str, ids: Sequence[str], vectors: np.ndarray[Any, Any] | None) -> None:
    if kind == "upsert":
        assert vectors is not None
        graph.upsert(ids, vectors)
    else:
        graph.delete(ids)


__all__ = ["EARLY_MAX", "Graph", "Graphs", "available", "remove_saved"]
