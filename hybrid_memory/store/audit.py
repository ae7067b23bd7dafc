"""The audit trail: an append-only hash chain of who did what to which nodes.

Each entry's hash covers the previous entry's (:func:`audit_hash`), and the head
(last seq and hash) is kept in ``hm_settings`` under "audit_head", updated in the
same transaction as the entries. Entries hold ids, operation names and numbers,
never what was said (:data:`AUDIT_OMITS`). Once a store holds a trail, every handle
keeps it going.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Connection

from ..errors import StorageError
from .engine import Database
from .schema import audit, settings
from .settings import SettingsRepository

#: Payload keys an audit entry leaves out: what was said, and bulky replay detail.
AUDIT_OMITS = frozenset({"content", "meta", "content_hash", "tokens", "note", "skeletons", "counts"})
AUDIT_GENESIS = "0" * 64


def audit_hash(prev: str, seq: int, namespace: str, session: str, actor: str, ts: float,
               action: str, node_ids: str, detail: str) -> str:
    """The hash of one audit entry: SHA-256 over the previous hash and every field."""
    body = json.dumps([prev, seq, namespace, session, actor, repr(float(ts)), action, node_ids, detail],
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


class AuditTrail:
    """``hm_audit`` (``store.audit``)."""

    def __init__(self, db: Database, settings_repo: SettingsRepository) -> None:
        self._db = db
        self._settings = settings_repo
        #: Whether writes are audited (``security.audit``, or a store that holds an audit
        #: trail already: once on, every handle keeps it going), and who acts for a
        #: (namespace, session) in its entries.
        self.on = False
        self.actors: dict[tuple[str, str], str] = {}

    def enable(self) -> None:
        """Start the audit trail (its head row) if the store has none; from then on
        every write through any handle is audited."""
        def run(conn: Connection) -> None:
            value = json.dumps({"seq": 0, "hash": AUDIT_GENESIS})
            if self._db.is_postgres:
                from sqlalchemy.dialects.postgresql import insert as pg_insert

                conn.execute(pg_insert(settings).values(key="audit_head", value=value).on_conflict_do_nothing())
            elif self._settings.get(conn, "audit_head") is None:
                conn.execute(insert(settings).values(key="audit_head", value=value))

        if not self.on:
            self._db.write(run)
            self.on = True

    def append_ops(self, conn: Connection, namespace: str, session: str,
                   entries: Sequence[tuple[float, str, str | None, Mapping[str, Any], int]]) -> None:
        """Audit log entries: the operation, its node ids and its payload without words."""
        rows = []
        for ts, op, node_id, payload, seq in entries:
            ids = ([node_id] if node_id is not None else []) + [
                i for i in payload.get("ids", ()) if isinstance(i, str) and i != node_id]
            detail = {k: v for k, v in payload.items() if k not in AUDIT_OMITS and k != "ids"}
            detail["log_seq"] = seq
            rows.append((ts, op, ids, detail))
        self.append(conn, namespace, session, rows)

    def append(self, conn: Connection, namespace: str, session: str,
               rows: Sequence[tuple[float, str, Sequence[str], Mapping[str, Any]]]) -> None:
        """Append (ts, action, node ids, detail) entries to the audit chain, inside the
        caller's write transaction (the head row is locked on PostgreSQL, so that two
        writers never fork the chain)."""
        if not rows:
            return
        q = select(settings.c.value).where(settings.c.key == "audit_head")
        if not self._db.is_sqlite:
            q = q.with_for_update()
        raw = conn.execute(q).scalar()
        if raw is None:
            raise StorageError("the audit trail has no head row: open the store with audit on (store.audit.enable)")
        head: dict[str, Any] = json.loads(raw)
        seq, prev = int(head["seq"]), str(head["hash"])
        actor = self.actors.get((namespace, session), session)
        out = []
        for ts, action, ids, detail in rows:
            seq += 1
            node_ids = json.dumps(list(ids), separators=(",", ":"))
            body = json.dumps(detail, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            h = audit_hash(prev, seq, namespace, session, actor, ts, action, node_ids, body)
            out.append({"seq": seq, "namespace": namespace, "session": session, "actor": actor, "ts": ts,
                        "action": action, "node_ids": node_ids, "detail": body, "prev": prev, "hash": h})
            prev = h
        conn.execute(insert(audit), out)
        self._settings.set(conn, "audit_head", json.dumps({"seq": seq, "hash": prev}))
