"""Change feeds (SQLite only): which nodes' postings or rows changed, in commit
order, so that an in-process copy (the lexicon, the row cache) catches up from its
position instead of reading everything again.

Each feed holds at most a row per node, moved to a new position at each change; an
erased namespace leaves one row without a node id, which means "read it all again".
The rows feed and the shape counts are kept by triggers (:mod:`.schema`); the terms
feed by :class:`~hybrid_memory.store.terms.TermRepository`. A PostgreSQL sequence
does not number commits in their order, so nothing is noted there.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete
from sqlalchemy.engine import Connection

from .engine import Database
from .schema import rows_changed, shape_changes, terms_changed


class ChangeFeed:
    """The terms and rows change tables (``store.changes``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def mark_terms_changed(self, conn: Connection, pairs: Iterable[tuple[str, str]]) -> None:
        """Note that the postings of these (namespace, node id) changed (SQLite only:
        a PostgreSQL sequence does not number commits in their order, so a reader
        could not catch up by position; nothing there reads the table)."""
        if self._db.is_sqlite and (rows := sorted(pairs)):
            conn.exec_driver_sql(f"INSERT OR REPLACE INTO {terms_changed.name} (namespace, node_id) VALUES (?, ?)", rows)

    def mark_all_changed(self, conn: Connection, namespace: str) -> None:
        """Note that every posting of ``namespace`` may have changed (an erasure)."""
        if self._db.is_sqlite:
            conn.execute(delete(terms_changed).where(terms_changed.c.namespace == namespace))
            self.mark_terms_changed(conn, [(namespace, "")])

    def mark_rows_all_changed(self, conn: Connection, namespace: str) -> None:
        """Note that every node row of ``namespace`` may have changed (an erasure of
        the namespace, after its rows are deleted): the ids the triggers noted give
        way to one row without a node id, which makes a cache drop every row."""
        if self._db.is_sqlite:
            conn.execute(delete(rows_changed).where(rows_changed.c.namespace == namespace))
            conn.exec_driver_sql(f"INSERT INTO {rows_changed.name} (namespace, node_id) VALUES (?, '')", (namespace,))

    def terms_position(self, conn: Connection, namespace: str) -> int:
        """The position of the namespace's last change to its postings (0: none noted)."""
        raw = conn.connection.driver_connection
        row = raw.execute(f"SELECT max(seq) FROM {terms_changed.name} WHERE namespace = ?",  # type: ignore[union-attr]
                          (namespace,)).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def terms_changed_since(self, conn: Connection, namespace: str, seq: int) -> list[str]:
        """The nodes whose postings changed after position ``seq`` ("" for an erasure)."""
        raw = conn.connection.driver_connection
        return [r[0] for r in raw.execute(  # type: ignore[union-attr]
            f"SELECT node_id FROM {terms_changed.name} WHERE namespace = ? AND seq > ?", (namespace, seq))]

    def rows_position(self, conn: Connection, namespace: str) -> tuple[int, int]:
        """The position of the namespace's last change to a node row, and how many
        times its tree changed shape (0 for none noted; SQLite only)."""
        raw = conn.connection.driver_connection
        row = raw.execute(f"SELECT (SELECT max(seq) FROM {rows_changed.name} WHERE namespace = ?), "  # type: ignore[union-attr]
                          f"(SELECT n FROM {shape_changes.name} WHERE namespace = ?)", (namespace, namespace)).fetchone()
        return int(row[0] or 0), int(row[1] or 0)

    def rows_changed_since(self, conn: Connection, namespace: str, seq: int, limit: int) -> list[str] | None:
        """The nodes whose rows changed or went after position ``seq``; None when
        there are more than ``limit``, or the namespace was erased (SQLite only)."""
        raw = conn.connection.driver_connection
        out = [r[0] for r in raw.execute(  # type: ignore[union-attr]
            f"SELECT node_id FROM {rows_changed.name} WHERE namespace = ? AND seq > ? LIMIT ?",
            (namespace, seq, limit + 1))]
        return None if len(out) > limit or "" in out else out
