"""Sessions: each session's cursor (the node it works on) and its checkpoints
(a cursor and a log position with a note, to come back to)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from ..model import Checkpoint
from .engine import Database, chunks
from .schema import checkpoints, cursors


class Statements:
    """The prebuilt statements of this repository's hot paths (as
    :class:`hybrid_memory.store.nodes.Statements`)."""

    get_focus = select(cursors.c.active_id, cursors.c.focused).where(cursors.c.namespace == bindparam("ns"),
                                                                     cursors.c.session == bindparam("session"))


class SessionRepository:
    """``hm_cursors`` and ``hm_checkpoints`` (``store.sessions``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get_cursor(self, conn: Connection, namespace: str, session: str) -> str | None:
        """The session's active node (None without a cursor)."""
        return self.get_focus(conn, namespace, session)[0]

    def get_focus(self, conn: Connection, namespace: str, session: str) -> tuple[str | None, bool]:
        """The session's active node and whether the session chose it (``focus``)
        rather than being moved to it by a write; (None, False) without a cursor."""
        row = conn.execute(Statements.get_focus, {"ns": namespace, "session": session}).first()
        return (None, False) if row is None else (row.active_id, bool(row.focused))

    def set_cursor(self, conn: Connection, namespace: str, session: str, active_id: str | None, ts: float,
                   *, focused: bool = False) -> None:
        """Point the session's cursor at ``active_id`` (``focused``: the session chose it)."""
        where = (cursors.c.namespace == namespace) & (cursors.c.session == session)
        values = {"active_id": active_id, "updated_at": ts, "focused": focused}
        if self._db.is_postgres:  # an upsert: two processes may share a session
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            q = pg_insert(cursors).values(namespace=namespace, session=session, **values)
            conn.execute(q.on_conflict_do_update(index_elements=[cursors.c.namespace, cursors.c.session], set_=values))
        elif conn.execute(select(func.count()).where(where)).scalar_one():
            conn.execute(update(cursors).where(where).values(**values))
        else:
            conn.execute(insert(cursors).values(namespace=namespace, session=session, **values))

    def repoint_cursors(self, conn: Connection, namespace: str, gone: Sequence[str], to: str | None, ts: float) -> None:
        """Cursors on nodes that are leaving the live tree move to ``to``."""
        for chunk in chunks(list(gone), 500):
            conn.execute(
                update(cursors)
                .where(cursors.c.namespace == namespace, cursors.c.active_id.in_(chunk))
                .values(active_id=to, updated_at=ts, focused=False)
            )

    def add_checkpoint(self, conn: Connection, namespace: str, session: str, active_id: str | None, log_seq: int, ts: float, note: str | None) -> Checkpoint:
        result = conn.execute(
            insert(checkpoints).values(namespace=namespace, session=session, active_id=active_id, log_seq=log_seq, ts=ts, note=note)
        )
        return Checkpoint(int(result.inserted_primary_key[0]), namespace, session, active_id, log_seq, ts, note)  # type: ignore[index]

    def add_checkpoints(self, conn: Connection, namespace: str, session: str,
                        marks: Sequence[tuple[str | None, int, float, str | None]]) -> None:
        """Several checkpoints (active id, log position, ts, note) in one statement."""
        if marks:
            conn.execute(insert(checkpoints), [
                {"namespace": namespace, "session": session, "active_id": a, "log_seq": seq, "ts": ts, "note": note}
                for a, seq, ts, note in marks
            ])

    def last_checkpoint(self, conn: Connection, namespace: str, session: str) -> Checkpoint | None:
        row = conn.execute(
            select(checkpoints)
            .where(checkpoints.c.namespace == namespace, checkpoints.c.session == session)
            .order_by(checkpoints.c.id.desc())
            .limit(1)
        ).first()
        if row is None:
            return None
        return Checkpoint(row.id, row.namespace, row.session, row.active_id, row.log_seq, row.ts, row.note)
