"""The reads of one batch write, each done once: the parents its items name (locked
with their ancestors outside SQLite), exact-content twins, the embeddings of the
(branch, type) groups a twin is looked for in, dedup's nearest rows and branch
heads.

Invariant: every row kept here is locked or written by the batch's transaction, so
what the batch decides from it holds until the commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np
from sqlalchemy.engine import Connection

from . import context, text
from .config import Config
from .errors import NotFoundError
from .model import NodeType
from .store.sql import SqlStore

#: A node row as read (SQLAlchemy RowMapping) or as just written (a dict).
RowMap = Mapping[Any, Any]

#: A branch holding at most this many live memories of a type is scored whole for a
#: new memory's twin (one read of their ids and embeddings); a larger one asks the
#: vector index for the nearest neighbours instead.
SCAN_LIMIT: Final = 2048


class Seen:
    """What one batch reads, each thing once: the rows its items name as parents, the
    exact-content matches of all items, the embeddings of each (branch, type) a twin
    is looked for in, dedup's nearest rows, branch heads, and the rows the batch
    itself writes. On SQLite (writers serialised) the parents come in one query;
    elsewhere each parent is locked with its ancestors (``store.tree.lock_path``) the
    first time an item names it, so every row kept here is locked or written by this
    batch."""

    def __init__(self, store: SqlStore, conn: Connection, *, namespace: str, config: Config, under: set[str],
                 contents: Sequence[str], checked: Callable[[str, RowMap], RowMap]) -> None:
        """``under``: the ids of the nodes the batch's items go under (the parents they
        name, and the active node when an item names none); ``contents``: those of its
        items that may have a twin (not tasks); ``checked``: a live row of the
        namespace, or raises."""
        self._conn, self._store = conn, store
        self._namespace, self._config, self._checked = namespace, config, checked
        #: Rows by id: parents read so far and the rows this batch wrote.
        self.rows: dict[str, RowMap] = {}
        self._heads: dict[str, bool] = {}
        self._near: dict[str, RowMap | None] = {}  # dedup's candidate rows (None: not live)
        self._terms: dict[str, set[str]] = {}  # term sets of stored rows, by id
        self._groups: dict[tuple[str, str], tuple[list[str], np.ndarray[Any, Any]] | None] = {}
        self.by_hash: dict[str, list[RowMap]] = {}
        #: The contents from the root down to each node read or written here, its own last.
        self.paths: dict[str, context.Path] = {}
        if self._store.is_sqlite:
            self.rows.update((i, r._mapping) for i, r in self._store.nodes.get_many(conn, under).items())
        if config.dedup.enabled:
            # An exact twin lies in a branch that exists already: the branch of a node
            # the batch goes under. An item under an earlier item of the batch is in
            # that item's branch, which is one of these or new.
            hashes = {h for content in contents for h in self._store.content_hashes(content)}
            heads: set[str] = set()
            if hashes:
                heads = ({self.rows[i]["branch_id"] for i in under if i in self.rows} if self._store.is_sqlite
                         else self._store.tree.branches_of(conn, under))
            for r in self._store.nodes.find_by_hashes(conn, namespace, hashes, heads):
                self.by_hash.setdefault(r.content_hash, []).append(r._mapping)

    def exact_twin(self, content: str, ntype: str, branch: str) -> RowMap | None:
        """A stored live memory of ``branch`` with type ``ntype`` and ``content``."""
        for h in self._store.content_hashes(content):
            for r in self.by_hash.get(h, ()):
                if r["branch_id"] == branch and r["type"] == ntype:
                    return r
        return None

    def nearest(self, branch: str, ntype: str, vec: np.ndarray[Any, Any],
                from_index: Callable[[], Sequence[tuple[str, float]]]) -> list[tuple[RowMap, float]]:
        """The stored live memories of ``branch`` and type ``ntype`` nearest to ``vec``
        (at most ``dedup.candidates``, nearest first, with their cosines): scored
        exactly from the stored embeddings when the branch holds at most
        :data:`SCAN_LIMIT` of them, else the vector index's nearest of the namespace
        (``from_index``) that are in the branch and of the type."""
        n = self._config.dedup.candidates
        group = self.read_group(branch, ntype)
        if group is None:
            pairs = list(from_index())
        else:
            ids, matrix = group
            if not ids:
                return []
            sims = matrix @ np.asarray(vec, dtype=np.float32)
            top = np.argsort(-sims, kind="stable")[:n]
            pairs = [(ids[j], float(sims[j])) for j in top]
        self._read_near([i for i, _ in pairs])
        rows = {r["id"]: r for r in self.near_rows([i for i, _ in pairs], branch, ntype)}
        return [(rows[i], cosine) for i, cosine in pairs if i in rows]

    def read_group(self, branch: str, ntype: str, rows_up_to: int = 0
                   ) -> tuple[list[str], np.ndarray[Any, Any]] | None:
        """The ids and embeddings of ``branch``'s live memories of type ``ntype`` (None:
        more than :data:`SCAN_LIMIT`), read once. With ``rows_up_to``, a group of at
        most that many also has its rows read: all of them are a new memory's nearest,
        whatever its vector."""
        key = (branch, ntype)
        if key not in self._groups:
            self._groups[key] = self._store.nodes.branch_vectors(self._conn, self._namespace, branch, ntype, SCAN_LIMIT)
        group = self._groups[key]
        if group is not None and len(group[0]) <= rows_up_to:
            self._read_near(group[0])
        return group

    def terms_of(self, row: RowMap) -> set[str]:
        """The term set of a stored row's content, worked out once per batch."""
        if row["id"] not in self._terms:
            self._terms[row["id"]] = set(text.terms(row["content"]))
        return self._terms[row["id"]]

    def _read_near(self, ids: Sequence[str]) -> None:
        """Read the rows of ``ids`` not read yet as dedup candidates (None: not live)."""
        missing = [i for i in ids if i not in self._near]
        if missing:
            found = self._store.nodes.get_many(self._conn, missing, live_only=True)
            self._near.update((i, None if i not in found else found[i]._mapping) for i in missing)

    def near_rows(self, ids: Sequence[str], branch: str, ntype: str) -> list[RowMap]:
        """The rows of ``ids`` read as dedup candidates that are still live, in
        ``branch`` and of type ``ntype``."""
        out = []
        for node_id in ids:
            row = self._near.get(node_id)
            if row is not None and row["branch_id"] == branch and row["type"] == ntype:
                out.append(row)
        return out

    def parent(self, node_id: str, *, strict: bool = True) -> RowMap | None:
        """The live row of ``node_id``, locked with its ancestors (not found: an error, or
        None when not ``strict``)."""
        row = self.rows.get(node_id)
        if row is None:
            found = self._store.tree.lock_path(self._conn, node_id)
            if found is None:
                if not strict:
                    return None
                raise NotFoundError(f"no node {node_id!r}")
            row = self.rows[node_id] = found._mapping
        if strict:
            self._checked(node_id, row)
        return row

    def above(self, parent: RowMap) -> context.Path:
        """The contents from the root down to ``parent``, its own last: what a node
        under it is read with."""
        if parent["id"] not in self.paths:
            self.paths[parent["id"]] = (*context.above(self._store, self._conn, parent["path"]), parent["content"])
        return self.paths[parent["id"]]

    def branch_info(self, parent: RowMap) -> tuple[str, bool]:
        """(branch head id, whether the head is a task) of the branch ``parent`` is in."""
        head = parent["branch_id"]
        if head == parent["id"]:
            return head, parent["type"] == NodeType.TASK.value
        if head not in self._heads:
            row = self.rows.get(head)
            if row is None:
                found = self._store.nodes.get(self._conn, head)
                row = None if found is None else found._mapping
            self._heads[head] = row is not None and row["type"] == NodeType.TASK.value
        return head, self._heads[head]
