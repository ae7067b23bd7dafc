"""The operation log: every write's operations in order, with their payloads, from
which a namespace can be replayed, exported or rewound.

An entry is appended in the write transaction of the change it records; when the
store keeps an audit trail, the entry is audited in the same transaction
(:class:`~hybrid_memory.store.audit.AuditTrail`). Unreadable payloads are marked,
never dropped, so positions (``seq``) stay meaningful.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from ..model import Status
from .audit import AuditTrail
from .engine import Database, chunks, driver_execute
from .schema import nodes, oplog

#: Logged operations that leave a namespace's live set as it was.
_LIVE_NEUTRAL = frozenset({"access", "focus", "checkpoint", "feedback", "pin", "move"})


class Statements:
    """The prebuilt statements of this repository's hot paths (as
    :class:`hybrid_memory.store.nodes.Statements`)."""

    last_seq = select(func.max(oplog.c.seq)).where(oplog.c.namespace == bindparam("ns"))
    append_many = insert(oplog).returning(oplog.c.seq, sort_by_parameter_order=True)


class OperationLog:
    """``hm_oplog`` (``store.log``)."""

    def __init__(self, db: Database, audit: AuditTrail) -> None:
        self._db = db
        self._audit = audit

    def append(self, conn: Connection, namespace: str, session: str, ts: float, op: str, node_id: str | None,
               payload: Mapping[str, Any]) -> int:
        """Append one entry; its position."""
        result = conn.execute(
            insert(oplog).values(
                namespace=namespace, session=session, ts=ts, op=op, node_id=node_id,
                payload=json.dumps(payload, ensure_ascii=False, sort_keys=True),
            )
        )
        seq = int(result.inserted_primary_key[0])  # type: ignore[index]
        if self._audit.on and op != "access":
            self._audit.append_ops(conn, namespace, session, [(ts, op, node_id, payload, seq)])
        return seq

    def append_many(self, conn: Connection, namespace: str, session: str,
                    entries: Sequence[tuple[float, str, str | None, Mapping[str, Any]]]) -> list[int]:
        """Append (ts, op, node id, payload) entries in order, in one statement; their positions."""
        if not entries:
            return []
        result = conn.execute(Statements.append_many, [
            {"namespace": namespace, "session": session, "ts": ts, "op": op, "node_id": node_id,
             "payload": json.dumps(payload, ensure_ascii=False, sort_keys=True)}
            for ts, op, node_id, payload in entries
        ])
        seqs = [int(seq) for seq in result.scalars().all()]
        if self._audit.on:
            self._audit.append_ops(conn, namespace, session, [(*e, q) for e, q in zip(entries, seqs, strict=True) if e[1] != "access"])
        return seqs

    def payloads(self, conn: Connection, namespace: str, *, last_only: bool = False) -> list[tuple[int, str]]:
        q = select(oplog.c.seq, oplog.c.payload).where(oplog.c.namespace == namespace).order_by(oplog.c.seq.desc())
        if last_only:
            q = q.limit(1)
        return [(r[0], r[1]) for r in conn.execute(q)]

    def mark_corrupt(self, conn: Connection, seqs: Sequence[int]) -> None:
        """Replace unreadable log payloads by a marker, so that readers of the log can skip them."""
        for chunk in chunks(list(seqs), 500):
            conn.execute(update(oplog).where(oplog.c.seq.in_(chunk)).values(payload='{"corrupt": true}'))

    def live_added(self, conn: Connection, namespace: str, after: int, upto: int) -> int | None:
        """How many live nodes the namespace gained from log position ``after`` to
        ``upto`` (SQLite), when every entry between is an add or leaves the live set
        as it was (a read, focus, checkpoint, feedback, pin or move); None otherwise
        (the count must be read again)."""
        raw = conn.connection.driver_connection
        rows = raw.execute(f"SELECT op, node_id FROM {oplog.name} WHERE namespace = ? AND seq > ? "  # type: ignore[union-attr]
                           "AND seq <= ? LIMIT 1001", (namespace, after, upto)).fetchall()
        if len(rows) > 1000 or any(op not in _LIVE_NEUTRAL and op != "add" for op, _ in rows):
            return None
        added = list(dict.fromkeys(i for op, i in rows if op == "add" and i is not None))
        n = 0
        for chunk in chunks(added, 500):
            n += raw.execute(f"SELECT count(*) FROM {nodes.name} WHERE status = ? "  # type: ignore[union-attr]
                             f"AND namespace = ? AND id IN ({','.join('?' * len(chunk))})",
                             [Status.LIVE.value, namespace, *chunk]).fetchone()[0]
        return n

    def last_seq(self, conn: Connection, namespace: str) -> int:
        raw = self._db.plain_connection(conn)
        if raw is not None:
            value = driver_execute(raw, Statements.last_seq, {"ns": namespace}).fetchone()[0]
            return int(value) if value is not None else 0
        value = conn.execute(Statements.last_seq, {"ns": namespace}).scalar()
        return int(value) if value is not None else 0

    def purge(self, conn: Connection, namespace: str, ids: Sequence[str]) -> None:
        """Remove stored content of deleted nodes from the namespace's operation log
        (another namespace's log may name the same ids: an import after a time travel)."""
        for chunk in chunks(list(ids), 500):
            conn.execute(update(oplog).where(oplog.c.namespace == namespace, oplog.c.node_id.in_(chunk))
                         .values(payload='{"purged": true}'))
