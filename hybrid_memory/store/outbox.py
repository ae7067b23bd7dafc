"""The index outbox: what the vector index still has to do, written in the same
transaction as the node change it follows.

An "upsert" or "delete" row waits for the index; an :data:`~.schema.EMBED` row for
the node's vector; a :data:`~.schema.CONTEXT` row for its vector to be read again
with a changed path. Rows are cleared only once the index has done them, so the
index can always be healed from the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Integer, bindparam, delete, func, insert, select
from sqlalchemy.engine import Connection, Row

from .engine import Database, chunks, driver_execute
from .schema import CONTEXT, EMBED, outbox


class Statements:
    """The prebuilt statements of this repository's hot paths (as
    :class:`hybrid_memory.store.nodes.Statements`)."""

    pending_upserts = (select(outbox.c.node_id, func.max(outbox.c.seq).label("last"))
                       .where(outbox.c.namespace == bindparam("ns"), outbox.c.action == "upsert")
                       .group_by(outbox.c.node_id).order_by(func.max(outbox.c.seq).desc())
                       .limit(bindparam("limit", type_=Integer)))
    insert_outbox = insert(outbox)


class Outbox:
    """``hm_outbox`` (``store.outbox``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def enqueue(self, conn: Connection, namespace: str, ids: Iterable[str], action: str) -> None:
        rows = [{"namespace": namespace, "node_id": i, "action": action} for i in ids]
        if rows:
            conn.execute(Statements.insert_outbox, rows)

    def pending_count(self, conn: Connection, namespace: str, *, index_only: bool = False) -> int:
        """Outbox rows of ``namespace`` that wait on the index (not :data:`CONTEXT`);
        ``index_only``: not counting the nodes whose vector is still being computed
        (:data:`EMBED`) either."""
        q = select(func.count()).where(outbox.c.namespace == namespace, outbox.c.action != CONTEXT)
        if index_only:
            q = q.where(outbox.c.action != EMBED)
        return int(conn.execute(q).scalar_one())

    def pending(self, conn: Connection, namespace: str) -> list[Row[Any]]:
        """The outbox rows of ``namespace`` that wait on the index, oldest first."""
        return list(conn.execute(select(outbox).where(outbox.c.namespace == namespace, outbox.c.action != CONTEXT)
                                 .order_by(outbox.c.seq)))

    def context_waiting(self, conn: Connection, namespace: str, limit: int) -> list[tuple[int, str]]:
        """(seq, node id) of the oldest ``limit`` :data:`CONTEXT` rows of ``namespace``."""
        q = (select(outbox.c.seq, outbox.c.node_id).where(outbox.c.namespace == namespace, outbox.c.action == CONTEXT)
             .order_by(outbox.c.seq).limit(limit))
        return [(int(s), str(i)) for s, i in conn.execute(q)]

    def context_count(self, conn: Connection, namespace: str) -> int:
        """How many :data:`CONTEXT` rows ``namespace`` has."""
        q = select(func.count()).where(outbox.c.namespace == namespace, outbox.c.action == CONTEXT)
        return int(conn.execute(q).scalar_one())

    def pending_upserts(self, conn: Connection, namespace: str, limit: int = 4096) -> list[str]:
        """Ids of the nodes whose index upsert waits in the outbox, the latest ``limit``."""
        raw = self._db.plain_connection(conn)
        if raw is not None:  # (every query asks: SQLite's cursor, as node_rows)
            return [r[0] for r in driver_execute(raw, Statements.pending_upserts, {"ns": namespace, "limit": limit})]
        return [r[0] for r in conn.execute(Statements.pending_upserts, {"ns": namespace, "limit": limit}).all()]

    def embed_waiting(self, conn: Connection, namespace: str) -> list[str]:
        """Ids of the nodes of ``namespace`` with an :data:`EMBED` outbox row."""
        q = select(outbox.c.node_id).where(outbox.c.namespace == namespace, outbox.c.action == EMBED).distinct()
        return sorted(conn.execute(q).scalars())

    def clear(self, conn: Connection, seqs: Sequence[int]) -> None:
        for chunk in chunks(list(seqs), 500):
            conn.execute(delete(outbox).where(outbox.c.seq.in_(chunk)))
