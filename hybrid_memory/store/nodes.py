"""Node rows by id: read, insert, update, delete, access counts and the vectors kept
beside them.

A node row holds its embedding too (the vector index is rebuilt from it); a node
committed before its vector holds the empty blob until
:meth:`NodeRepository.settle_embeddings` stores it (:data:`~.schema.EMBED`), and
every reader of embeddings skips that blob.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np
from sqlalchemy import Float, Integer, bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection, Row

from ..model import Status
from .engine import Database, chunks
from .schema import (
    EMBED,
    NODE_COLUMNS,
    PLAIN_SELECT,
    NodeRow,
    NodeRowEmbedded,
    from_blob,
    nodes,
    outbox,
    passages,
)
from .terms import TermRepository


class Statements:
    """The statements of the hot paths (every add and retrieve), built once with bound
    parameters. Building a statement and its cache key costs more than SQLAlchemy's
    execution of it (about 3x a prebuilt one for a one-row select on this project's
    machine); the compiled form is cached per dialect either way. (Each repository
    keeps its own, under this name.)"""

    ids: Any = bindparam("ids", expanding=True)
    live = nodes.c.status == Status.LIVE.value
    get = select(*NODE_COLUMNS).where(nodes.c.id == bindparam("id"))
    get_lock = get.with_for_update()
    get_many = select(*NODE_COLUMNS).where(nodes.c.id.in_(ids))
    get_many_live = get_many.where(live)
    get_many_emb = select(*NODE_COLUMNS, nodes.c.embedding).where(nodes.c.id.in_(ids))
    get_many_emb_live = get_many_emb.where(live)
    embeddings = select(nodes.c.id, nodes.c.embedding).where(nodes.c.id.in_(ids))
    branch_vectors = (
        select(nodes.c.id, nodes.c.embedding)
        .where(nodes.c.namespace == bindparam("ns"), live, nodes.c.branch_id == bindparam("branch"),
               nodes.c.type == bindparam("type"), nodes.c.embedding.is_not(None))
        .order_by(nodes.c.id).limit(bindparam("limit", type_=Integer))
    )
    by_hashes = select(nodes.c.id, nodes.c.content_hash, nodes.c.branch_id, nodes.c.type).where(
        nodes.c.namespace == bindparam("ns"), nodes.c.content_hash.in_(bindparam("hashes", expanding=True)),
        nodes.c.branch_id.in_(bindparam("branches", expanding=True)), live,
    )
    insert_nodes = insert(nodes)
    # Only over the empty blob: an update that embedded new content meanwhile stays.
    settle_embedding = (update(nodes).where(nodes.c.id == bindparam("nid"), func.length(nodes.c.embedding) == 0)
                        .values(embedding=bindparam("emb")))
    settle_outbox = (update(outbox).where(outbox.c.namespace == bindparam("ns"), outbox.c.node_id.in_(ids),
                                          outbox.c.action == EMBED).values(action="upsert"))
    unembedded = select(nodes.c.id).where(nodes.c.id.in_(ids), func.length(nodes.c.embedding) == 0)
    touch_each = {
        name: update(nodes).where(nodes.c.id == bindparam("b_id"), nodes.c[name] < bindparam("b_ts"))
        .values({name: bindparam("b_ts")})
        for name in ("created_at", "updated_at", "accessed_at", "active_at")
    }
    add_access = {
        sqlite: update(nodes).where(nodes.c.id == bindparam("b_id")).values(
            access_count=nodes.c.access_count + bindparam("b_n", type_=Integer),
            accessed_at=(func.max if sqlite else func.greatest)(nodes.c.accessed_at, bindparam("b_ts", type_=Float)),
        )
        for sqlite in (True, False)
    }


class NodeRepository:
    """The rows of ``hm_nodes`` by id (``store.nodes``)."""

    def __init__(self, db: Database, terms: TermRepository) -> None:
        self._db = db
        # A deleted node's postings go with it.
        self._terms = terms

    def get(self, conn: Connection, node_id: str, *, lock: bool = False) -> Row[Any] | None:
        """The node's row. ``lock``: inside a write, lock the row until commit (``FOR
        UPDATE``) and read its latest committed version; a no-op on SQLite, whose
        writers are already serialised by ``BEGIN IMMEDIATE``."""
        q = Statements.get_lock if lock and not self._db.is_sqlite else Statements.get
        return conn.execute(q, {"id": node_id}).first()

    def get_many(self, conn: Connection, ids: Iterable[str], *, live_only: bool = False,
                 embedding: bool = False) -> dict[str, Row[Any]]:
        """The rows of ``ids`` that exist, by id (with their embedding column if asked)."""
        out: dict[str, Row[Any]] = {}
        ids = list(dict.fromkeys(ids))
        q: Any
        if embedding:
            q = Statements.get_many_emb_live if live_only else Statements.get_many_emb
        else:
            q = Statements.get_many_live if live_only else Statements.get_many
        for chunk in chunks(ids, 500):
            for row in conn.execute(q, {"ids": chunk}).all():
                out[row.id] = row
        return out

    def node_rows(self, conn: Connection, ids: Iterable[str], *, live_only: bool = False,
                  embedding: bool = False) -> dict[str, Any]:
        """:meth:`get_many` for reads that only make nodes of the rows (retrieval):
        on SQLite without a keyring, rows read through the driver's cursor
        (:class:`NodeRow`), with the same columns by attribute."""
        raw = self._db.plain_connection(conn)
        if raw is None:
            return self.get_many(conn, ids, live_only=live_only, embedding=embedding)
        out: dict[str, Any] = {}
        make = (NodeRowEmbedded if embedding else NodeRow)._make
        tail = f" AND status = '{Status.LIVE.value}'" if live_only else ""
        for chunk in chunks(list(dict.fromkeys(ids)), 500):
            sql = f"{PLAIN_SELECT[embedding]}id IN ({','.join('?' * len(chunk))}){tail}"
            for t in raw.execute(sql, chunk):
                row = make(t)
                out[row.id] = row
        return out

    def insert(self, conn: Connection, values: Mapping[str, Any]) -> None:
        conn.execute(insert(nodes).values(**values))

    def insert_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert several node rows (all with the same columns) in one statement."""
        if rows:
            conn.execute(Statements.insert_nodes, list(rows))

    def update(self, conn: Connection, node_id: str, **values: Any) -> None:
        conn.execute(update(nodes).where(nodes.c.id == node_id).values(**values))

    def set_status(self, conn: Connection, ids: Sequence[str], **values: Any) -> None:
        """The same ``values`` (status, archived_op) on every node of ``ids``."""
        for chunk in chunks(list(ids), 500):
            conn.execute(update(nodes).where(nodes.c.id.in_(chunk)).values(**values))

    def delete(self, conn: Connection, ids: Sequence[str]) -> None:
        for chunk in chunks(list(ids), 500):
            conn.execute(delete(nodes).where(nodes.c.id.in_(chunk)))
            conn.execute(delete(passages).where(passages.c.node_id.in_(chunk)))
            self._terms.unindex(conn, chunk)

    def touch(self, conn: Connection, ids: Sequence[str], column: str, ts: float) -> None:
        """Raise ``column`` (a time) to ``ts`` for the given nodes, never lowering it."""
        col = nodes.c[column]
        for chunk in chunks(list(ids), 500):
            conn.execute(update(nodes).where(nodes.c.id.in_(chunk), col < ts).values({column: ts}))

    def touch_each(self, conn: Connection, column: str, times: Mapping[str, float]) -> None:
        """:meth:`touch` with a time per node, in one statement."""
        if times:
            conn.execute(Statements.touch_each[column], [{"b_id": i, "b_ts": ts} for i, ts in times.items()])

    def add_access(self, conn: Connection, counts: Mapping[str, tuple[int, float]]) -> None:
        """Add read counts and raise the last-access time, in one statement."""
        if counts:
            conn.execute(Statements.add_access[self._db.is_sqlite],
                         [{"b_id": i, "b_n": n, "b_ts": ts} for i, (n, ts) in counts.items()])

    def find_by_hashes(self, conn: Connection, namespace: str, hashes: Iterable[str],
                       branches: Iterable[str]) -> list[Row[Any]]:
        """(id, content_hash, branch_id, type) of the live nodes of ``namespace`` in
        ``branches`` whose content hash is one of ``hashes``: the exact twins a write
        may merge into. The branches narrow the index seek: a common text ("tests
        pass") can be held by thousands of nodes in other branches."""
        heads = sorted(set(branches))
        out: list[Row[Any]] = []
        if not heads:
            return out
        for hchunk in chunks(heads, 500):
            for chunk in chunks(list(dict.fromkeys(hashes)), 500):
                params = {"ns": namespace, "hashes": chunk, "branches": hchunk}
                out.extend(cast("list[Row[Any]]", conn.execute(Statements.by_hashes, params).all()))
        return out

    def embeddings(self, conn: Connection, ids: Sequence[str]) -> dict[str, np.ndarray[Any, Any]]:
        out = {}
        for chunk in chunks(list(ids), 500):
            for row in conn.execute(Statements.embeddings, {"ids": chunk}):
                if row.embedding:  # (not the empty blob of a node whose vector follows)
                    out[row.id] = from_blob(row.embedding)
        return out

    def branch_vectors(self, conn: Connection, namespace: str, branch: str, ntype: str,
                       limit: int) -> tuple[list[str], np.ndarray[Any, Any]] | None:
        """(ids, embeddings as rows) of the live nodes of ``branch`` of type ``ntype``,
        by id; None when there are more than ``limit``."""
        rows = conn.execute(Statements.branch_vectors, {"ns": namespace, "branch": branch, "type": ntype,
                                                        "limit": limit + 1}).all()
        if len(rows) > limit:
            return None
        rows = [r for r in rows if r.embedding]
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        return [r.id for r in rows], np.stack([from_blob(r.embedding) for r in rows])

    def embedding_kind(self, conn: Connection, namespace: str) -> tuple[str, int] | None:
        """The model name and dimension of one stored embedding of ``namespace``
        (None when it holds no node). A memory is opened only with an embedder of that
        dimension and embeds with nothing else, so one row stands for all."""
        row = conn.execute(
            select(nodes.c.embed_model, func.length(nodes.c.embedding))
            .where(nodes.c.namespace == namespace, func.length(nodes.c.embedding) > 0).limit(1)
        ).first()
        return None if row is None else (str(row[0]), int(row[1]) // 4)

    def settle_embeddings(self, conn: Connection, namespace: str, pairs: Sequence[tuple[str, bytes]]) -> None:
        """Store the vectors of nodes committed before them (:data:`EMBED`): each where
        the node still has none, and their outbox rows become upserts."""
        if pairs:
            conn.execute(Statements.settle_embedding, [{"nid": i, "emb": b} for i, b in pairs])
            for chunk in chunks([i for i, _ in pairs], 500):
                conn.execute(Statements.settle_outbox, {"ns": namespace, "ids": chunk})

    def unembedded(self, conn: Connection, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` whose node is stored without its vector yet (the empty blob)."""
        out: set[str] = set()
        for chunk in chunks(list(ids), 500):
            out.update(conn.execute(Statements.unembedded, {"ids": chunk}).scalars())
        return out

    def replace_embedding(self, conn: Connection, node_id: str, blob: bytes, *, path: str, content_hash: str) -> bool:
        """Store ``blob`` as the vector of ``node_id`` if the node still has a vector,
        this path and this content; whether it did."""
        q = (update(nodes).where(nodes.c.id == node_id, nodes.c.path == path, nodes.c.content_hash == content_hash,
                                 func.length(nodes.c.embedding) > 0).values(embedding=blob))
        return bool(conn.execute(q).rowcount)
