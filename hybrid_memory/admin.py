"""Admin: the maintenance operations of one memory handle, reached as
``mem.admin`` (:attr:`hybrid_memory.MemoryTree.admin`): compare the vector index with
the store (``verify``), heal or rebuild it (``repair``, ``reindex``), reseal the store
under a new key (``rotate_key``), erase a subtree or the whole namespace and leave no
bytes of it on disk (``erase``, ``erase_namespace``), write or load a portable
snapshot (``export``, ``import_``) and the memory's sizes (``stats``).

The handle builds its :class:`Admin` when it opens and hands it the parts these
operations work on. Invariants: each call is refused on a closed handle (the
handle's :class:`~hybrid_memory.errors.ClosedError`) and, where the operation needs a
role, on a handle opened with a lower one, before anything is done.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import _validate as check
from . import portability, reading, safety
from .editing import Editor
from .items import NodeRef
from .leftovers import Leftovers
from .model import Drift, Stats
from .progress import counting_bar, progress_bar, reporting
from .recovery import FaultHook, IndexBatch, reindex, repair, verify
from .store.sql import SqlStore
from .store.vectors import VectorIndex
from .usage import Reads


class Admin:
    """Maintenance of one memory handle (one namespace and session): ``mem.admin``.

    Made by :class:`~hybrid_memory.MemoryTree`, which passes its parts: the store,
    the raw vector index (not the view that applies waiting writes first), the index
    writes waiting for their batch, the unfinished work of the namespace, the editor,
    the buffered reads, the fault hook, and callbacks into the handle: ``live_check``
    (raises once it is closed), ``flush``, ``delete`` (:meth:`MemoryTree.delete`),
    ``settle_erasure`` (after erased rows: their vectors go now, then the store is
    compacted or not), ``recheck`` (the problems :meth:`MemoryTree.recover` reports are
    taken again), ``host`` (the handle as export and import use it) and ``audit`` (an
    audit entry of its own for a read).
    """

    def __init__(
        self,
        *,
        store: SqlStore,
        index: VectorIndex,
        namespace: str,
        session: str,
        role: str,
        folder: Path | None,
        clock: Callable[[], float],
        batch: IndexBatch,
        leftovers: Leftovers,
        editor: Editor,
        reads: Reads,
        fault: FaultHook,
        live_check: Callable[[], None],
        flush: Callable[[], None],
        delete: Callable[[NodeRef], list[str]],
        settle_erasure: Callable[[bool], None],
        recheck: Callable[[], None],
        host: Callable[[], portability.Host],
        audit: Callable[[str, Sequence[str], Mapping[str, Any]], None],
    ) -> None:
        #: What the handle may do: "read", "write" or "admin" (the handle's role).
        self.role = check.role(role)
        self._store, self._index = store, index
        self._namespace, self._session, self._folder = namespace, session, folder
        self._clock = clock
        self._batch, self._left, self._editor, self._reads = batch, leftovers, editor, reads
        self._fault = fault
        self._live_check, self._flush, self._delete = live_check, flush, delete
        self._settle_erasure, self._recheck = settle_erasure, recheck
        self._host, self._audit = host, audit

    def verify(self) -> Drift:
        """Compare the vector index with the relational truth (changes nothing)."""
        self._live_check()
        self._batch.apply()  # this handle's writes waiting for their batch are not drift
        return verify(self._store, self._index, self._namespace)

    @check.requires("admin")
    def repair(self) -> Drift:
        """Replay pending index work, then make the index match the relational truth
        and mark unreadable log entries. Returns the drift that was found."""
        self._live_check()
        self._batch.waiting = 0
        waiting = self._left.heal(waiting=True)
        drift = repair(self._store, self._index, self._namespace, self._fault)
        self._recheck()
        return replace(drift, out_of_context=waiting)

    @check.requires("admin")
    def reindex(self, *, progress: bool = False) -> int:
        """Rebuild this namespace's vector index from the stored embeddings.
        Returns the number of vectors written; ``progress`` shows a bar."""
        self._live_check()
        bar = counting_bar("reindex", "node") if progress else None
        with reporting(bar, advance=True) as report:
            self._batch.apply()
            written = reindex(self._store, self._index, self._namespace, progress=report)
        self._recheck()
        return written

    @check.requires("admin")
    def rotate_key(self, *, progress: bool = False) -> safety.Rotation:
        """Reseal the whole store (every namespace) under the first key of the keyring
        this memory was opened with; see :func:`hybrid_memory.safety.rotate_key`."""
        self._live_check()
        self._flush()
        bar = progress_bar(None, "rotate-key") if progress else None
        with reporting(bar, advance=False) as report:
            rotation = safety.rotate_key(self._store, progress=report)
        # (the content hashes are keyed: the passages follow)
        self._left.uncut = self._left.cut_all()
        return rotation

    @check.requires("admin")
    def erase(self, node: NodeRef, *, compact: bool = True) -> list[str]:
        """Erase a node and its subtree everywhere and leave no bytes of it on disk:
        :meth:`MemoryTree.delete` (rows, lexical terms, the content kept in the operation
        log), the vectors removed from the index now rather than with the next batch,
        then the store compacted (SQLite: VACUUM and a truncated WAL; PostgreSQL: VACUUM
        FULL). The audit trail records the erasure by id only. ``compact=False`` leaves
        the compaction to a later ``hybrid-memory compact`` (erasing many subtrees one
        after another). Returns the erased ids."""
        self._live_check()
        check.flag(compact, "compact")  # before anything is deleted
        ids = self._delete(node)
        self._settle_erasure(compact)
        return ids

    @check.requires("admin")
    def erase_namespace(self, *, compact: bool = True) -> int:
        """Erase this whole namespace (tenant) everywhere: its nodes, terms, operation
        log, outbox, cursors, checkpoints and settings, its vectors, then compact the
        store as :meth:`erase` does. The handle stays open on the now empty
        namespace. Returns how many nodes were erased."""
        self._live_check()
        check.flag(compact, "compact")
        self._reads.pending.clear()
        now = self._clock()
        n = self._store.write(lambda conn: self._editor.erase_namespace(conn, now))
        self._settle_erasure(compact)
        drop = getattr(self._index, "drop", None)
        if callable(drop):
            drop(self._namespace)  # the collection's own files go too
        return n

    def export(self, path: str | os.PathLike[str], *, include_log: bool = False) -> portability.Transfer:
        """Write this namespace to ``path`` as a portable JSON Lines snapshot: nodes
        (with their embeddings), cursors, checkpoints and, with ``include_log``, the
        operation log. Written atomically; any role may export."""
        self._live_check()
        done = portability.export(self._host(), path, include_log=include_log)
        self._audit("export", [], {"nodes": done.nodes, "checkpoints": done.checkpoints, "ops": done.ops})
        return done

    @check.requires("admin")
    def import_(self, path: str | os.PathLike[str]) -> portability.Transfer:
        """Load a snapshot written by :meth:`export` into this memory, which must be
        empty (:class:`~hybrid_memory.errors.ConflictError` otherwise), id for id, in
        one transaction."""
        self._live_check()
        done = portability.import_(self._host(), path)
        # (an older file's vectors are read again in their path; long memories are cut)
        self._left.out_of_context = self._left.read_in_context()
        self._left.uncut = self._left.cut_all()
        return done

    def stats(self) -> Stats:
        """Sizes and shape of the memory, for a dashboard or the command line."""
        self._live_check()
        # The files are the whole store's, every namespace's: an operator's figure. A
        # read or write handle (a tenant's) would learn from it how much others wrote.
        folder = self._folder if self.role == "admin" else None
        return reading.stats(self._store, self._namespace, self._session, folder=folder)


__all__ = ["Admin"]
