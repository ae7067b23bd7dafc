"""An in-process cache of the node rows retrieval reads, kept in step with the store.

A query at 100k memories reads some two hundred node rows, each with its embedding:
its candidates, the nodes of the branches it opens and their ancestors. Most of
them were read by the queries before it (an agent asks about the task it works
on), and reading them again cost more than a tenth of the query. A
:class:`RowCache` keeps the rows last read (at most ``accel.row_cache``, the
least recently used going first), with the :class:`~hybrid_memory.model.Node`
made of each, and the lists queries read to open a branch: the live nodes of each
branch and the branches of each family.

It stays in step through ``hm_rows_changed``: a trigger notes every UPDATE and
DELETE of a node row there, in the same transaction, whatever code runs it. Each
query opens a :class:`RowView` in its read transaction, which reads the
namespace's last position (one index seek); if it moved, the rows changed since
are dropped, or all of them after many changes. A new row needs no note: no
cache can hold it before it is read. The lists are dropped whenever the tree
changed shape (``hm_shape_changes``: a node added or deleted, its status, parent,
path or branch changed; a read counted or a new content leaves them).

A view whose transaction does not see the position the cache stands at (a
thread reading an older snapshot than another's) reads from the store and keeps
nothing. Only SQLite stores keep the change table: on PostgreSQL, writers commit
out of the order of their sequence numbers, as for :mod:`hybrid_memory.accel.lexicon`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from ..model import Node, Status
from ..store.schema import node_from_row
from ..store.sql import SqlStore

#: Changes dropped one by one before the whole cache is dropped instead.
_DROP_MAX = 4096
_LIVE = Status.LIVE.value


class RowCache:
    """The node rows (embeddings included) of one namespace that retrieval read
    last, at most ``capacity`` of them (see the module)."""

    def __init__(self, store: SqlStore, namespace: str, capacity: int) -> None:
        if not store.is_sqlite:
            raise ValueError("a RowCache follows SQLite stores only")
        if capacity < 1:
            raise ValueError(f"a RowCache holds at least one row, not {capacity}")
        self._store, self._namespace, self.capacity = store, namespace, capacity
        self._lock = threading.Lock()
        #: node id -> (its row, the Node made of it, or None until asked), least recently used first
        self._rows: OrderedDict[str, list[Any]] = OrderedDict()
        #: The change position the rows stand at (-1: none read yet).
        self.position = -1
        #: How many times the tree had changed shape when the lists below were read
        #: (-1: none read): the live nodes of each branch (their ids, as stored) and
        #: the branches of each family (by id), as the queries since read them.
        self.shape = -1
        self._members: dict[str, list[str]] = {}
        self._families: dict[str, list[str]] = {}
        #: Rows found here, rows read from the store, and times every row was dropped.
        self.hits = self.misses = self.resets = 0

    def __len__(self) -> int:
        return len(self._rows)

    def view(self, conn: Connection) -> RowView:
        """The rows as ``conn``'s read transaction sees them (call inside it)."""
        pos, shape = self._store.changes.rows_position(conn, self._namespace)
        with self._lock:
            if shape != self.shape:
                if self.shape >= 0 and shape < self.shape:  # (an older transaction: as below)
                    return RowView(self, conn, pos, shape, shared=False)
                self._members.clear()
                self._families.clear()
                self.shape = shape
            if pos < self.position:  # a transaction older than the rows here: it reads the store
                return RowView(self, conn, pos, shape, shared=False)
            if self.position < 0:  # nothing read yet: start here
                self._rows.clear()
            elif pos > self.position:
                changed = self._store.changes.rows_changed_since(conn, self._namespace, self.position, _DROP_MAX)
                if changed is None:
                    self._rows.clear()
                    self.resets += 1
                else:
                    for node_id in changed:
                        self._rows.pop(node_id, None)
            self.position = pos
            return RowView(self, conn, pos, shape, shared=True)

    def clear(self) -> None:
        """Drop every row (an erasure in this process drops them before its next query)."""
        with self._lock:
            self._rows.clear()
            self._members.clear()
            self._families.clear()
            self.position = self.shape = -1


class RowView:
    """One read transaction's rows: from the cache where it holds them at this
    transaction's position, from the store otherwise (and kept there)."""

    def __init__(self, cache: RowCache, conn: Connection, position: int, shape: int, *, shared: bool) -> None:
        self._cache, self._conn, self._position, self._shape, self._shared = cache, conn, position, shape, shared

    def _current(self) -> bool:
        """Whether the cache stands where this view's transaction reads (call holding its lock)."""
        cache = self._cache
        return self._shared and cache.position == self._position and cache.shape == self._shape

    def rows(self, ids: Iterable[str], *, live_only: bool = False) -> dict[str, Any]:
        """As :meth:`~hybrid_memory.store.nodes.NodeRepository.node_rows` with the
        embeddings: the rows of ``ids`` that exist (live ones only, if asked), by id,
        in the order of ``ids``."""
        ids = list(dict.fromkeys(ids))
        cache = self._cache
        found: dict[str, Any] = {}
        missing: list[str] = []
        with cache._lock:
            shared = self._current()
            held = cache._rows
            for node_id in ids:
                entry = held.get(node_id) if shared else None
                if entry is None:
                    missing.append(node_id)
                else:
                    held.move_to_end(node_id)
                    found[node_id] = entry[0]
            cache.hits += len(found)
            cache.misses += len(missing)
        if missing:
            read = cache._store.nodes.node_rows(self._conn, missing, embedding=True)
            with cache._lock:
                if self._current():
                    held = cache._rows
                    for node_id, row in read.items():
                        held[node_id] = [row, None]
                    while len(held) > cache.capacity:
                        held.popitem(last=False)
            found.update(read)
        out = {i: found[i] for i in ids if i in found}
        if live_only:
            out = {i: row for i, row in out.items() if row.status == _LIVE}
        return out

    def branch_rows(self, branch_ids: Sequence[str]) -> list[Any]:
        """As :meth:`~hybrid_memory.store.tree.TreeRepository.branch_rows`: every live
        node of the branches, in the order the store lists them (by branch id, then as
        stored)."""
        cache, wanted = self._cache, sorted(set(branch_ids))
        with cache._lock:
            shared = self._current()
            members = {b: cache._members[b] for b in wanted if b in cache._members} if shared else {}
        missing = [b for b in wanted if b not in members]
        if missing:
            read: dict[str, list[str]] = {b: [] for b in missing}
            for node_id, branch in cache._store.tree.branch_members(self._conn, cache._namespace, missing):
                read[branch].append(node_id)
            with cache._lock:
                if shared and self._current():
                    cache._members.update(read)
            members.update(read)
        ids = [i for b in wanted for i in members[b]]
        rows = self.rows(ids, live_only=True)
        return [rows[i] for i in ids if i in rows]

    def branches_under(self, root_id: str) -> list[str]:
        """As :meth:`~hybrid_memory.store.tree.TreeRepository.branches_under`: the
        branches of the family under ``root_id``."""
        cache = self._cache
        with cache._lock:
            shared = self._current()
            if shared and root_id in cache._families:
                return list(cache._families[root_id])
        found = cache._store.tree.branches_under(self._conn, cache._namespace, root_id)
        with cache._lock:
            if shared and self._current():
                cache._families[root_id] = list(found)
        return found

    def node(self, row: Any) -> Node:
        """The Node of ``row`` (one of this view's), made once while the row is kept.
        Shared between queries: not to be handed out (see :func:`own_node`)."""
        cache = self._cache
        with cache._lock:
            entry = cache._rows.get(row.id)
            if entry is not None and entry[0] is row:
                if entry[1] is None:
                    entry[1] = node_from_row(row)
                node: Node = entry[1]
                return node
        return node_from_row(row)


class StoreView:
    """A :class:`RowView` without a cache: every row from the store."""

    def __init__(self, store: SqlStore, conn: Connection, namespace: str) -> None:
        self._store, self._conn, self._namespace = store, conn, namespace

    def rows(self, ids: Iterable[str], *, live_only: bool = False) -> dict[str, Any]:
        return self._store.nodes.node_rows(self._conn, ids, live_only=live_only, embedding=True)

    def branch_rows(self, branch_ids: Sequence[str]) -> list[Any]:
        return self._store.tree.branch_rows(self._conn, self._namespace, branch_ids)

    def branches_under(self, root_id: str) -> list[str]:
        return self._store.tree.branches_under(self._conn, self._namespace, root_id)

    def node(self, row: Any) -> Node:
        return node_from_row(row)


def own_node(node: Node) -> Node:
    """A copy of ``node`` that shares nothing mutable with it (its ``meta``): for
    a node of the cache handed to a caller."""
    copy = object.__new__(Node)
    copy.__dict__.update(node.__dict__)
    copy.__dict__["meta"] = dict(node.meta)
    return copy


__all__ = ["RowCache", "RowView", "StoreView", "own_node"]
