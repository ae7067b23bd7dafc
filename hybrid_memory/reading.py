"""What MemoryTree reads without changing anything, retrieval aside: a node's
children and path, the whole tree, the active node, and where the memory stands
(``recover()`` and ``admin.stats()``).

Invariant: one read transaction per answer, so its parts agree with each other.
"""

from __future__ import annotations

from pathlib import Path

from .items import NodeRef
from .model import Node, NodeType, RecoveryState, Stats, Status, path_ids, tree_order
from .store.schema import node_from_row
from .store.sql import SqlStore
from .writing import Writer


def children(store: SqlStore, writer: Writer, node: NodeRef, *, include_archived: bool) -> list[Node]:
    """The node's live children (and archived ones with ``include_archived``), oldest first."""
    with store.reading() as conn:
        row = writer.row(conn, node)
        rows = store.tree.subtree(conn, writer.namespace, row.path)
    kids = [node_from_row(r) for r in rows if r.parent_id == row.id]
    if not include_archived:
        kids = [k for k in kids if k.live]
    return sorted(kids, key=lambda n: (n.created_at, n.id))


def path(store: SqlStore, writer: Writer, node: NodeRef) -> list[Node]:
    """The node's ancestors from the root, then the node."""
    with store.reading() as conn:
        row = writer.row(conn, node)
        ids = path_ids(row.path)
        rows = store.nodes.get_many(conn, ids)
    return [node_from_row(rows[i]) for i in ids]


def all_nodes(store: SqlStore, namespace: str, *, include_archived: bool) -> list[Node]:
    """Every node of the namespace in tree order (parents before children, siblings by time)."""
    with store.reading() as conn:
        rows = store.tree.live_rows(conn, namespace) if not include_archived else store.tree.subtree_all(conn, namespace)
    return tree_order([node_from_row(r) for r in rows])


def active(store: SqlStore, namespace: str, session: str) -> Node | None:
    """The live node ``session``'s cursor is on (None: none)."""
    with store.reading() as conn:
        active_id = store.sessions.get_cursor(conn, namespace, session)
        row = store.nodes.get(conn, active_id) if active_id else None
    return node_from_row(row) if row is not None and row.status == Status.LIVE.value else None


def recovery_state(store: SqlStore, namespace: str, session: str, *, replayed: int,
                   problems: tuple[str, ...]) -> RecoveryState:
    """The active node of ``session``, its path, the latest task state in its branch,
    the last checkpoint; ``replayed`` and ``problems`` as the open found them."""
    with store.reading() as conn:
        active_id = store.sessions.get_cursor(conn, namespace, session)
        row = store.nodes.get(conn, active_id) if active_id else None
        active = node_from_row(row) if row is not None and row.status == Status.LIVE.value else None
        path: tuple[Node, ...] = ()
        state = None
        if active is not None:
            ids = path_ids(active.path)
            rows = store.nodes.get_many(conn, ids)
            path = tuple(node_from_row(rows[i]) for i in ids)
            branch = store.tree.branch_rows(conn, namespace, [active.branch_id])
            states = [r for r in branch if r.type == NodeType.STATE.value]
            if states:
                state = node_from_row(max(states, key=lambda r: (r.created_at, r.updated_at)))
        last = store.sessions.last_checkpoint(conn, namespace, session)
        live = store.tree.live_count(conn, namespace)
    return RecoveryState(active=active, path=path, state=state, last_checkpoint=last,
                         replayed=replayed, live_nodes=live, problems=problems)


def stats(store: SqlStore, namespace: str, session: str, *, folder: Path | None) -> Stats:
    """Sizes and shape of ``namespace``; ``folder``: the files whose size to count
    (None: not counted)."""
    with store.reading() as conn:
        by_status, by_type, depth = store.tree.shape(conn, namespace)
        active_id = store.sessions.get_cursor(conn, namespace, session)
        arow = store.nodes.get(conn, active_id) if active_id else None
        last = store.sessions.last_checkpoint(conn, namespace, session)
        seq = store.log.last_seq(conn, namespace)
    disk = None if folder is None else sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return Stats(
        namespace=namespace,
        live=by_status.get(Status.LIVE.value, 0),
        archived=by_status.get(Status.ARCHIVED.value, 0),
        depth=depth,
        by_type=by_type,
        active_path=tuple(path_ids(arow.path)) if arow is not None else (),
        last_checkpoint_at=last.ts if last else None,
        disk_bytes=disk,
        log_seq=seq,
    )
