"""Store-wide safety work: key rotation, physical erasure (compaction) and the
audit trail's verification.

These act on a whole relational store (every namespace in it), not on one
handle: a keyring seals the whole store, compaction rewrites the whole file and
the audit chain runs through every namespace.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from . import text
from .crypto import missing_keys, sealed_by
from .errors import EncryptionKeyError, StorageError
from .store.audit import AUDIT_GENESIS, audit_hash
from .store.schema import audit, checkpoints, nodes, oplog, term_counts, terms
from .store.sql import SqlStore

log = logging.getLogger("hybrid_memory")

_CHUNK = 500

Progress = Callable[[int, int], None]


# -- key rotation ------------------------------------------------------------------


@dataclass(frozen=True)
class Rotation:
    """What ``rotate_key`` resealed: rows per table, under which key."""

    key_id: str
    nodes: int
    log_entries: int
    checkpoints: int


def rotate_key(store: SqlStore, *, progress: Progress | None = None) -> Rotation:
    """Reseal everything the store holds under its keyring's first key: node contents
    and metadata, their content hashes and lexical terms, log payloads and
    checkpoint notes, plain ones included (a store encrypted for the first time).

    The store must have been opened with ``SqlStore(..., keyring=Keyring([new, old,
    ...]), check_keys=False)``. Work goes in short transactions of a few hundred rows,
    so other handles keep reading and writing throughout, provided their keyrings
    hold the old and the new key; once done, the store records the new key alone,
    and a handle holding only the old key is refused. Running it again after an
    interruption finishes the work."""
    ring = store.keyring
    if ring is None:
        raise EncryptionKeyError("rotate_key needs a keyring whose first key is the new key")

    def announce(conn: Connection) -> None:
        gone = missing_keys(store.settings.sealing_keys(conn), ring)
        if gone:
            raise EncryptionKeyError(f"the store holds values sealed with key {', '.join(gone)}: "
                                     "put that key behind the new one in the keyring")
        keys = [k for k in store.settings.sealing_keys(conn) if k != ring.primary]
        store.settings.set(conn, "encryption", json.dumps({"scheme": "aes-256-gcm", "keys": [ring.primary, *keys]}))

    store.write(announce)
    with store.reading() as conn:
        total = sum(int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                    for t in (nodes, oplog, checkpoints))
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    counts = []
    steps: tuple[tuple[Any, Callable[[SqlStore, Connection, list[Any]], None]], ...] = (
        (nodes.c.id, _reseal_nodes), (oplog.c.seq, _reseal_log), (checkpoints.c.id, _reseal_checkpoints))
    for key, step in steps:
        n = 0
        for chunk in _key_chunks(store, key):
            store.write(functools.partial(_run_step, step, store, chunk))
            n += len(chunk)
            tick(len(chunk))
        counts.append(n)

    def finish(conn: Connection) -> None:
        store.settings.set(conn, "encryption", json.dumps({"scheme": "aes-256-gcm", "keys": [ring.primary]}))

    store.write(finish)
    return Rotation(ring.primary, *counts)


def _run_step(step: Callable[[SqlStore, Connection, list[Any]], None], store: SqlStore, chunk: list[Any],
              conn: Connection) -> None:
    step(store, conn, chunk)


def _key_chunks(store: SqlStore, key: object) -> Iterator[list[object]]:
    """The primary keys of a table in order, a chunk at a time (read as the work goes)."""
    last = None
    while True:
        with store.reading() as conn:
            q = select(key).order_by(key).limit(_CHUNK)  # type: ignore[call-overload]
            if last is not None:
                q = q.where(key > last)
            chunk = list(conn.execute(q).scalars())
        if not chunk:
            return
        yield chunk
        last = chunk[-1]


def _locked(store: SqlStore, q: Any) -> Any:
    """``q`` with FOR UPDATE on PostgreSQL (SQLite's writers are serialised already)."""
    return q if store.is_sqlite else q.with_for_update()


def _reseal_nodes(store: SqlStore, conn: Connection, ids: list[object]) -> None:
    # Locked while resealed (PostgreSQL): a concurrent update or erasure of one of
    # these rows waits, and is not overwritten with what this read.
    rows = conn.execute(_locked(store, select(nodes.c.id, nodes.c.namespace, nodes.c.content, nodes.c.meta)
                                .where(nodes.c.id.in_(ids)))).all()
    indexed = set(conn.execute(select(terms.c.node_id).where(terms.c.node_id.in_(ids)).distinct()).scalars())
    store.terms.unindex(conn, [r.id for r in rows if r.id in indexed])
    for r in rows:
        conn.execute(update(nodes).where(nodes.c.id == r.id).values(
            content=r.content, meta=r.meta, content_hash=store.content_hash(r.content)))
    for ns in {r.namespace for r in rows}:
        store.terms.index_many(conn, ns, [(r.id, text.term_counts(r.content)) for r in rows
                                          if r.namespace == ns and r.id in indexed])


def _reseal_log(store: SqlStore, conn: Connection, seqs: list[object]) -> None:
    for seq, payload in conn.execute(_locked(store, select(oplog.c.seq, oplog.c.payload)
                                             .where(oplog.c.seq.in_(seqs)))).all():
        if payload == "<unreadable sealed payload>":
            payload = '{"corrupt": true}'
        conn.execute(update(oplog).where(oplog.c.seq == seq).values(payload=payload))


def _reseal_checkpoints(store: SqlStore, conn: Connection, ids: list[object]) -> None:
    for cid, note in conn.execute(_locked(store, select(checkpoints.c.id, checkpoints.c.note)
                                          .where(checkpoints.c.id.in_(ids)))).all():
        if note is not None:
            conn.execute(update(checkpoints).where(checkpoints.c.id == cid).values(note=note))


def sealed_share(store: SqlStore) -> dict[str, tuple[int, int]]:
    """Per sealed column: (values sealed under the keyring's first key, all values),
    read raw. For checking a rotation or an encryption from the outside."""
    primary = store.keyring.primary if store.keyring is not None else None
    out: dict[str, tuple[int, int]] = {}
    with store.reading() as conn:
        for name, col in (("content", nodes.c.content), ("meta", nodes.c.meta),
                          ("payload", oplog.c.payload), ("note", checkpoints.c.note)):
            raw = conn.exec_driver_sql(f"SELECT {col.name} FROM {col.table.name} "
                                       f"WHERE {col.name} IS NOT NULL").all()
            out[name] = (sum(1 for (v,) in raw if primary is not None and sealed_by(v) == primary), len(raw))
    return out


# -- erasure -------------------------------------------------------------------------


def compact(store: SqlStore, *, attempts: int = 20) -> None:
    """Rewrite the store's files so that erased rows leave no bytes behind.

    SQLite: VACUUM (a fresh copy of the live pages) and a truncating WAL checkpoint
    before and after, so neither the database file nor its WAL keeps old pages.
    It waits (and retries) while another connection reads. PostgreSQL: ``VACUUM
    FULL`` of the memory's tables (PostgreSQL's own WAL and backups are the
    server's to manage)."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            with store.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                if store.is_sqlite:
                    raw = conn.connection.driver_connection
                    assert raw is not None
                    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    raw.execute("VACUUM")
                    busy = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    if busy is not None and busy[0]:
                        raise _Busy()
                elif store.is_postgres:
                    for t in ("hm_nodes", "hm_terms", "hm_term_df", "hm_oplog", "hm_outbox", "hm_checkpoints", "hm_cursors",
                              "hm_settings"):
                        conn.exec_driver_sql(f"VACUUM FULL {t}")
                return
        except (_Busy, OperationalError) as exc:
            if attempt == attempts - 1:
                raise StorageError(f"the erasure is committed, but compacting the store waits for other "
                                   f"connections to finish ({exc}); run it again with `hybrid-memory compact`") from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        except SQLAlchemyError as exc:
            raise StorageError(f"compaction failed: {exc}") from exc


class _Busy(Exception):
    def __str__(self) -> str:
        return "another connection holds the WAL"


def erase_namespace_rows(store: SqlStore, conn: Connection, namespace: str) -> list[str]:
    """Delete every row of ``namespace`` from every table but the audit trail, inside
    ``conn``'s transaction. Returns the node ids (their vectors are the caller's).
    The namespace's settings (its grouping mode: configuration, no data) stay, so a
    handle still open on it keeps writing consistently."""
    from .store.schema import cursors, outbox, passages

    ids = list(conn.execute(select(nodes.c.id).where(nodes.c.namespace == namespace)).scalars())
    conn.execute(delete(terms).where(terms.c.namespace == namespace))
    conn.execute(delete(term_counts).where(term_counts.c.namespace == namespace))
    store.changes.mark_all_changed(conn, namespace)
    conn.execute(delete(nodes).where(nodes.c.namespace == namespace))
    conn.execute(delete(passages).where(passages.c.namespace == namespace))
    store.changes.mark_rows_all_changed(conn, namespace)
    conn.execute(delete(oplog).where(oplog.c.namespace == namespace))
    conn.execute(delete(outbox).where(outbox.c.namespace == namespace))
    conn.execute(delete(cursors).where(cursors.c.namespace == namespace))
    conn.execute(delete(checkpoints).where(checkpoints.c.namespace == namespace))
    return ids


# -- the audit trail -------------------------------------------------------------------


@dataclass(frozen=True)
class AuditCheck:
    """The result of :func:`verify_audit`."""

    ok: bool
    entries: int
    #: The last entry's hash: write it down elsewhere to detect a rewritten chain later.
    head: str
    #: The first entry found wrong (None when ok), and why.
    bad_seq: int | None = None
    reason: str | None = None


def verify_audit(store: SqlStore, *, progress: Progress | None = None) -> AuditCheck:
    """Walk the audit chain: every entry's hash must cover its fields and the previous
    entry's hash, sequence numbers run without a gap from 1, and the chain ends at
    the head the store recorded. An edited, inserted, removed or truncated entry
    breaks one of these."""
    with store.reading() as conn:
        raw = store.settings.get(conn, "audit_head")
        total = int(conn.execute(select(func.count()).select_from(audit)).scalar_one())
        head: dict[str, Any] = json.loads(raw) if raw is not None else {"seq": 0, "hash": AUDIT_GENESIS}
        prev, expect, n = AUDIT_GENESIS, 1, 0
        for r in conn.execute(select(audit).order_by(audit.c.seq)):
            if r.seq != expect:
                return AuditCheck(False, n, prev, expect, f"entry {expect} is missing (next is {r.seq})")
            if r.prev != prev:
                return AuditCheck(False, n, prev, r.seq, "its link to the previous entry does not match")
            h = audit_hash(prev, r.seq, r.namespace, r.session, r.actor, r.ts, r.action, r.node_ids, r.detail)
            if h != r.hash:
                return AuditCheck(False, n, prev, r.seq, "its fields do not match its hash (edited)")
            prev, expect, n = h, expect + 1, n + 1
            if progress is not None and n % 1000 == 0:
                progress(n, total)
    if int(head["seq"]) != n or head["hash"] != prev:
        return AuditCheck(False, n, prev, n + 1 if int(head["seq"]) > n else int(head["seq"]),
                          f"the chain ends at entry {n} but the store's head says {head['seq']} (entries removed)")
    return AuditCheck(True, n, prev)


__all__ = ["AuditCheck", "Rotation", "compact", "erase_namespace_rows", "rotate_key", "sealed_share", "verify_audit"]
