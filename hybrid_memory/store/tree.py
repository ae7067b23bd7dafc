"""Where nodes sit in the tree: paths and subtrees, branches, children, the live set
of a namespace, and the row locks a PostgreSQL write takes on them.

A node's materialised path ("root/child/.../self/") makes a subtree one index range
scan (:func:`~.schema.subtree_range`). Every writer locks a path root first, so two
writers in one tree meet at its root instead of deadlocking.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import Integer, bindparam, func, select
from sqlalchemy.engine import Connection, Row

from ..model import Status, path_ids, root_of
from .engine import Database, chunks, driver_execute
from .nodes import NodeRepository
from .schema import (
    NODE_COLUMNS,
    PLAIN_SELECT,
    NodeRowEmbedded,
    live_select,
    nodes,
    sqlite_live_sql,
    subtree_range,
)

#: Which rows are the live nodes of some branches (the branch ids follow, as parameters).
_IN_BRANCHES = f"namespace = ? AND status = '{Status.LIVE.value}' AND branch_id IN "


class Statements:
    """The prebuilt statements of this repository's hot paths (as
    :class:`hybrid_memory.store.nodes.Statements`)."""

    ids: Any = bindparam("ids", expanding=True)
    live = nodes.c.status == Status.LIVE.value
    branch_rows = select(*NODE_COLUMNS, nodes.c.embedding).where(
        nodes.c.namespace == bindparam("ns"), live, nodes.c.branch_id.in_(bindparam("branches", expanding=True))
    )
    branches_of = select(nodes.c.branch_id).where(nodes.c.id.in_(ids))
    branches_under = (
        select(nodes.c.branch_id).distinct()
        .where(nodes.c.namespace == bindparam("ns"), nodes.c.path >= bindparam("lo"), nodes.c.path < bindparam("hi"), live)
        .order_by(nodes.c.branch_id)
    )
    # The parent column, not the id: the count then reads the (namespace, parent_id)
    # index alone (SQLite would look each row up for its id: 10 ms for 5,000 children).
    children_of = {
        root: select(func.count()).select_from(
            select(nodes.c.parent_id).where(
                nodes.c.namespace == bindparam("ns"),
                nodes.c.parent_id.is_(None) if root else nodes.c.parent_id == bindparam("parent"),
            ).limit(bindparam("limit", type_=Integer)).subquery()
        )
        for root in (True, False)
    }
    more_branches = (select(nodes.c.branch_id).where(nodes.c.namespace == bindparam("ns"), live)
                     .distinct().limit(bindparam("limit", type_=Integer)))
    live_count = select(func.count()).where(nodes.c.namespace == bindparam("ns"), live)


class TreeRepository:
    """The tree's shape as the node rows record it (``store.tree``)."""

    def __init__(self, db: Database, node_repo: NodeRepository) -> None:
        self._db = db
        self._nodes = node_repo

    def lock_path(self, conn: Connection, node_id: str) -> Row[Any] | None:
        """Lock the node and every ancestor of it, root first, and return the
        node's latest row (None when it is gone). A write hanging something under a
        node takes this, so that a concurrent move or archive of any node above
        either waits for it or is seen by it. No locking on SQLite."""
        row = self._nodes.get(conn, node_id)
        if self._db.is_sqlite:
            return row
        locked: set[str] = set()
        while row is not None:
            ids = path_ids(row.path)
            if locked.issuperset(ids):
                return row
            # Root first, like every path lock: two of them in one tree meet at the root
            # instead of deadlocking (across trees PostgreSQL detects it and write() retries).
            conn.execute(select(nodes.c.id).where(nodes.c.id.in_(ids)).order_by(nodes.c.depth).with_for_update())
            locked.update(ids)
            row = self._nodes.get(conn, node_id)  # the latest version: it may have moved meanwhile
        return None

    def lock_subtree(self, conn: Connection, namespace: str, path: str) -> list[Row[Any]]:
        """Every node of the subtree at ``path`` (live or archived), locked until
        commit. Repeats until no node appeared since the last round: a writer adding
        a child locks the parent first, so once every node here is locked, nothing
        new can be hung under it before commit. Just :meth:`subtree` on SQLite."""
        if self._db.is_sqlite:
            return self.subtree(conn, namespace, path)
        lo, hi = subtree_range(path)
        q = (
            select(*NODE_COLUMNS)
            .where(nodes.c.namespace == namespace, nodes.c.path >= lo, nodes.c.path < hi)
            .order_by(nodes.c.depth, nodes.c.id)
            .with_for_update()
        )
        locked: set[str] = set()
        while True:
            rows = list(conn.execute(q))
            ids = {r.id for r in rows}
            if locked.issuperset(ids):
                return rows
            locked |= ids

    def subtree(self, conn: Connection, namespace: str, path: str, *, status: Status | None = None) -> list[Row[Any]]:
        lo, hi = subtree_range(path)
        q = select(*NODE_COLUMNS).where(nodes.c.namespace == namespace, nodes.c.path >= lo, nodes.c.path < hi)
        if status is not None:
            q = q.where(nodes.c.status == status.value)
        return list(conn.execute(q))

    def subtree_all(self, conn: Connection, namespace: str) -> list[Row[Any]]:
        """Every node of the namespace, live or archived."""
        return list(conn.execute(select(*NODE_COLUMNS).where(nodes.c.namespace == namespace)))

    def branches_under(self, conn: Connection, namespace: str, root_id: str) -> list[str]:
        """The branches (their head ids) of the live nodes under ``root_id``, itself
        included: a top-level task's family. By id."""
        lo, hi = subtree_range(f"{root_id}/")
        raw = self._db.plain_connection(conn)
        if raw is not None:
            return [r[0] for r in driver_execute(raw, Statements.branches_under, {"ns": namespace, "lo": lo, "hi": hi})]
        return [r[0] for r in conn.execute(Statements.branches_under, {"ns": namespace, "lo": lo, "hi": hi})]

    def branch_rows(self, conn: Connection, namespace: str, branch_ids: Sequence[str]) -> list[Any]:
        """Every live node of the given branches, with its embedding (as
        :meth:`NodeRepository.node_rows` reads them)."""
        raw = self._db.plain_connection(conn)
        if raw is None or len(branch_ids) > 500:
            return list(conn.execute(Statements.branch_rows, {"ns": namespace, "branches": list(branch_ids)}).all())
        sql = f"{PLAIN_SELECT[True]}{_IN_BRANCHES}({','.join('?' * len(branch_ids))})"
        return list(map(NodeRowEmbedded._make, raw.execute(sql, (namespace, *branch_ids))))

    def branch_members(self, conn: Connection, namespace: str, branch_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(id, branch id) of every live node of the given branches, in the order
        :meth:`branch_rows` reads their rows (by branch id, then as stored)."""
        raw = self._db.plain_connection(conn)
        if raw is None or len(branch_ids) > 500:
            return [(row.id, row.branch_id) for row in self.branch_rows(conn, namespace, branch_ids)]
        sql = f"SELECT id, branch_id FROM {nodes.name} WHERE {_IN_BRANCHES}({','.join('?' * len(branch_ids))})"
        return raw.execute(sql, (namespace, *branch_ids)).fetchall()

    def branches_of(self, conn: Connection, ids: Iterable[str]) -> set[str]:
        """The branch ids of the given nodes (unknown ids are left out)."""
        out: set[str] = set()
        for chunk in chunks(list(dict.fromkeys(ids)), 500):
            out.update(r[0] for r in conn.execute(Statements.branches_of, {"ids": chunk}))
        return out

    def child_count(self, conn: Connection, namespace: str, parent_id: str | None, limit: int) -> int:
        """How many nodes (any status) hang directly under ``parent_id`` (None: the root),
        counted up to ``limit`` (reads at most that many index entries)."""
        params: dict[str, Any] = {"ns": namespace, "limit": limit}
        if parent_id is not None:
            params["parent"] = parent_id
        return int(conn.execute(Statements.children_of[parent_id is None], params).scalar_one())

    def with_children(self, conn: Connection, namespace: str, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that have a child row in any status (reads the
        (namespace, parent_id) index)."""
        out: set[str] = set()
        ids = list(ids)
        for at in range(0, len(ids), 500):
            chunk = ids[at : at + 500]
            q = select(nodes.c.parent_id).where(nodes.c.namespace == namespace, nodes.c.parent_id.in_(chunk)).distinct()
            out.update(r[0] for r in conn.execute(q))
        return out

    def live_rows(self, conn: Connection, namespace: str, columns: Sequence[Any] = NODE_COLUMNS) -> list[Row[Any]]:
        q = select(*columns).where(nodes.c.namespace == namespace, nodes.c.status == Status.LIVE.value)
        return cast("list[Row[Any]]", conn.execute(q).all())

    def live_columns(self, conn: Connection, namespace: str, columns: Sequence[Any]) -> list[tuple[Any, ...]]:
        """``columns`` of every live node as plain tuples, for a pass over the whole
        namespace (forget): on SQLite read through the driver's cursor, since building
        SQLAlchemy rows costs about as much as the read itself at a million nodes."""
        if not self._db.is_sqlite:
            return cast("list[tuple[Any, ...]]", conn.execute(live_select(namespace, columns)).all())
        return cast("list[tuple[Any, ...]]", conn.connection.driver_connection.execute(  # type: ignore[union-attr]
            sqlite_live_sql(columns), (namespace,)).fetchall())

    def lock_live_rows(self, conn: Connection, namespace: str, columns: Sequence[Any]) -> list[tuple[Any, ...]]:
        """:meth:`live_rows` for a write that decides on the whole namespace (forget):
        first every tree's root is locked, so no writer can change a tree (they all
        lock the root first, see :meth:`lock_path`) until commit. Just
        :meth:`live_rows` on SQLite."""
        if self._db.is_sqlite:
            return self.live_columns(conn, namespace, columns)
        roots = (
            select(nodes.c.id)
            .where(nodes.c.namespace == namespace, nodes.c.parent_id.is_(None))
            .order_by(nodes.c.id)
            .with_for_update()
        )
        locked: set[str] = set()
        while True:
            locked.update(r[0] for r in conn.execute(roots))
            rows = self.live_rows(conn, namespace, (*columns, nodes.c.path.label("_locked_path")))
            if all(root_of(r._locked_path) in locked for r in rows):
                return [tuple(r)[:-1] for r in rows]

    def any_live_id(self, conn: Connection, namespace: str) -> str | None:
        """One live node's id (which one is unspecified), or None for an empty namespace."""
        q = select(nodes.c.id).where(nodes.c.namespace == namespace, nodes.c.status == Status.LIVE.value).limit(1)
        return conn.execute(q).scalar()

    def live_ids(self, conn: Connection, namespace: str) -> list[str]:
        return [
            r[0] for r in conn.execute(
                select(nodes.c.id).where(nodes.c.namespace == namespace, nodes.c.status == Status.LIVE.value)
            )
        ]

    def live_count(self, conn: Connection, namespace: str) -> int:
        return int(conn.execute(Statements.live_count, {"ns": namespace}).scalar_one())

    def shape(self, conn: Connection, namespace: str) -> tuple[dict[str, int], dict[str, int], int]:
        """(nodes per status, live nodes per type, the deepest live node's depth), in
        one pass over the index that holds all three (no table rows are read): at a
        million nodes one pass costs ~0.1 s, and stats used to make two."""
        rows = conn.execute(
            select(nodes.c.status, nodes.c.type, func.count(), func.max(nodes.c.depth))
            .where(nodes.c.namespace == namespace)
            .group_by(nodes.c.status, nodes.c.type)
        ).all()
        by_status: dict[str, int] = {}
        by_type: dict[str, int] = {}
        depth = 0
        for status, type_, count, deepest in rows:
            by_status[status] = by_status.get(status, 0) + int(count)
            if status == Status.LIVE.value:
                by_type[type_] = int(count)
                depth = max(depth, int(deepest))
        return by_status, by_type, depth

    def has_more_branches(self, conn: Connection, namespace: str, than: int) -> bool:
        """Whether the namespace's live nodes fall into more than ``than`` branches (reads
        at most ``than + 1`` distinct branch ids off the branch index)."""
        return len(conn.execute(Statements.more_branches, {"ns": namespace, "limit": than + 1}).all()) > than
