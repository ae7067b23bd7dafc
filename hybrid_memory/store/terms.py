"""The lexical index: each node's terms with their counts (postings), each term's
document frequency, and the tie keys its ranking breaks ties by.

The document frequencies (``hm_term_df``) are kept in the same transactions as the
postings, so they always equal the postings counted
(:meth:`TermRepository.term_count_drift` checks it). Terms are stored cut to 64
characters, and blinded under the keyring when the store has one. The in-memory
copy (:class:`~hybrid_memory.accel.lexicon.Lexicon`) answers ``term_df``,
``term_masks``, ``postings`` and ``tie_keys`` as this repository does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.engine import Connection

from .changes import ChangeFeed
from .engine import Database, chunks
from .schema import nodes, postings_counted, term_counts, terms


class Statements:
    """The prebuilt statements of this repository's hot paths (as
    :class:`hybrid_memory.store.nodes.Statements`)."""

    ids: Any = bindparam("ids", expanding=True)
    term_df = (select(term_counts.c.term, term_counts.c.n)
               .where(term_counts.c.namespace == bindparam("ns"),
                      term_counts.c.term.in_(bindparam("terms", expanding=True))))
    held_terms = select(terms.c.namespace, terms.c.term, terms.c.node_id).where(terms.c.node_id.in_(ids))
    insert_terms = insert(terms)
    tie_keys = select(nodes.c.id, nodes.c.created_at, nodes.c.content_hash).where(nodes.c.id.in_(ids))


class TermRepository:
    """Postings and term counts (``store.terms``)."""

    def __init__(self, db: Database, changes: ChangeFeed) -> None:
        self._db = db
        # Whose postings changed, for the in-memory copy to catch up.
        self._changes = changes

    def index(self, conn: Connection, namespace: str, node_id: str, counts: Mapping[str, int]) -> None:
        self.index_many(conn, namespace, [(node_id, counts)])

    def index_many(self, conn: Connection, namespace: str, items: Sequence[tuple[str, Mapping[str, int]]]) -> None:
        """The lexical terms of several nodes (node id, term counts), in one statement."""
        # Terms are stored cut to 64 characters: two long terms sharing that prefix
        # are one stored term (their counts add up), not a duplicate key.
        rows: list[tuple[str, str, str, int]] = []
        for node_id, counts in items:
            stored: dict[str, int] = {}
            for t, n in counts.items():
                stored[t[:64]] = stored.get(t[:64], 0) + n
            if self._db.keyring is not None:
                stored = {self._db.keyring.blind(t)[0]: n for t, n in stored.items()}
            rows.extend((namespace, t, node_id, n) for t, n in stored.items())
        if not rows:
            return
        held = Counter((a, t) for a, t, _, _ in rows)
        self._changes.mark_terms_changed(conn, {(namespace, i) for i, _ in items})
        if self._db.is_sqlite:
            # About ten rows a memory, none sealed: the driver's executemany, without
            # SQLAlchemy's per-row parameter processing (5x faster here).
            conn.exec_driver_sql(f"INSERT INTO {terms.name} (namespace, term, node_id, tf) VALUES (?, ?, ?, ?)", rows)
        else:
            conn.execute(Statements.insert_terms, [{"namespace": a, "term": t, "node_id": i, "tf": n} for a, t, i, n in rows])
        self._count_terms(conn, held, 1)

    def unindex(self, conn: Connection, ids: Sequence[str]) -> None:
        for chunk in chunks(list(ids), 500):
            self._drop_terms(conn, chunk)

    def term_df(self, conn: Connection, namespace: str, query_terms: Sequence[str]) -> dict[str, int]:
        """How many live nodes hold each of ``query_terms`` (terms no node holds are left
        out), off the counts kept with the postings."""
        if not query_terms:
            return {}
        cut = self.stored_terms(query_terms)
        out: dict[str, int] = {}
        for t, n in conn.execute(Statements.term_df, {"ns": namespace, "terms": list(cut)}).all():
            out[cut[t]] = out.get(cut[t], 0) + int(n)
        return out

    def term_masks(self, conn: Connection, namespace: str,
                   groups: Sequence[Sequence[str]]) -> dict[str, int]:
        """Node id -> mask for every live node holding a term of ``groups``: bit j of
        the mask is set when the node holds a term of ``groups[j]`` (the forms of one
        word, say), whichever and however many. One pass over the postings without
        their tf (SQLite groups them slower than Python does: it sorts)."""
        bit_of: dict[str, int] = {}
        for j, group in enumerate(groups):
            for stored in self.stored_terms(group):
                bit_of[stored] = bit_of.get(stored, 0) | 1 << j
        if not bit_of:
            return {}
        rows: Iterable[Any]
        if self._db.is_sqlite:
            # As postings(): the driver's cursor and plain tuples (thousands of rows).
            sql = (f"SELECT term, node_id FROM {terms.name} WHERE namespace = ? "
                   f"AND term IN ({','.join('?' * len(bit_of))})")
            rows = conn.connection.driver_connection.execute(sql, [namespace, *bit_of])  # type: ignore[union-attr]
        else:
            rows = conn.execute(select(terms.c.term, terms.c.node_id).where(
                terms.c.namespace == namespace, terms.c.term.in_(list(bit_of))))
        out: dict[str, int] = {}
        get = out.get
        for term, node_id in rows:
            out[node_id] = get(node_id, 0) | bit_of[term]
        return out

    def postings(self, conn: Connection, namespace: str, query_terms: Sequence[str],
                 node_ids: Iterable[str] | None = None) -> list[tuple[str, str, int]]:
        """(term, node_id, term frequency) for every live node holding one of
        ``query_terms`` (of ``node_ids`` only, when given)."""
        ids = None if node_ids is None else list(dict.fromkeys(node_ids))
        if not query_terms or ids == []:
            return []
        cut = self.stored_terms(query_terms)
        if ids is not None and len(ids) > 500:
            return [p for chunk in chunks(ids, 500) for p in self.postings(conn, namespace, query_terms, chunk)]
        rows: Sequence[Any]
        if self._db.is_sqlite:
            # Thousands of rows for a query of common words: read through the driver's
            # cursor, as plain tuples (SQLAlchemy's rows cost as much again).
            sql = (f"SELECT term, node_id, tf FROM {terms.name} WHERE namespace = ? "
                   f"AND term IN ({','.join('?' * len(cut))})")
            params: list[str] = [namespace, *cut]
            if ids is not None:
                sql += f" AND node_id IN ({','.join('?' * len(ids))})"
                params += ids
            rows = conn.connection.driver_connection.execute(sql, params).fetchall()  # type: ignore[union-attr]
        else:
            q = select(terms.c.term, terms.c.node_id, terms.c.tf).where(
                terms.c.namespace == namespace, terms.c.term.in_(list(cut))
            )
            if ids is not None:
                q = q.where(terms.c.node_id.in_(ids))
            rows = conn.execute(q).all()
        if self._db.keyring is not None or any(len(t) > 64 for t in query_terms):
            return [(cut.get(t, t), i, tf) for t, i, tf in rows]
        return list(rows)

    def tie_keys(self, conn: Connection, ids: Iterable[str]) -> dict[str, tuple[float, str]]:
        """(created_at, content hash) of the given nodes: what breaks a tie between
        equally scored candidates, the same in every copy of a memory."""
        out: dict[str, tuple[float, str]] = {}
        for chunk in chunks(list(dict.fromkeys(ids)), 500):
            if self._db.is_sqlite:
                # Hundreds of ids at a lexical tie: through the driver's cursor (SQLAlchemy
                # spends longer expanding the IN list than SQLite answering it).
                sql = f"SELECT id, created_at, content_hash FROM {nodes.name} WHERE id IN ({','.join('?' * len(chunk))})"
                rows = conn.connection.driver_connection.execute(sql, chunk).fetchall()  # type: ignore[union-attr]
            else:
                rows = conn.execute(Statements.tie_keys, {"ids": chunk}).all()
            out.update((r[0], (r[1], r[2])) for r in rows)
        return out

    def postings_of(self, conn: Connection, namespace: str, node_ids: Sequence[str]) -> list[tuple[str, str, int]]:
        """(stored term, node id, tf) of every posting of the nodes ``node_ids``."""
        raw = conn.connection.driver_connection
        # "+namespace": seek the node index. On the namespace alone, the primary
        # key's first column, SQLite's planner read every posting of the namespace
        # (about 75 ms at 100k memories, for five nodes; 0.05 ms off the node index).
        sql = f"SELECT term, node_id, tf FROM {terms.name} WHERE +namespace = ?"
        out: list[tuple[str, str, int]] = []
        for chunk in chunks(list(node_ids), 500):
            out.extend(raw.execute(sql + f" AND node_id IN ({','.join('?' * len(chunk))})",  # type: ignore[union-attr]
                                   [namespace, *chunk]).fetchall())
        return out

    def all_postings(self, conn: Connection, namespace: str) -> Any:
        """A cursor over (stored term, node id, tf) of every posting of the namespace,
        as stored (terms cut or blinded), by term then node id: read it in chunks."""
        raw = conn.connection.driver_connection
        return raw.execute(  # type: ignore[union-attr]
            f"SELECT term, node_id, tf FROM {terms.name} WHERE namespace = ? ORDER BY term, node_id", (namespace,))

    def term_count_drift(self, conn: Connection, namespace: str) -> int:
        """How many terms of the namespace have a kept document frequency other than
        their postings counted (0: the counts are right)."""
        counted: dict[str, int] = {t: int(n) for _, t, n in conn.execute(postings_counted(namespace))}
        kept: dict[str, int] = {t: int(n) for t, n in conn.execute(
            select(term_counts.c.term, term_counts.c.n).where(term_counts.c.namespace == namespace))}
        return sum(1 for t in counted.keys() | kept.keys() if counted.get(t) != kept.get(t))

    def recount(self, conn: Connection, namespace: str) -> None:
        """Count the namespace's document frequencies afresh off its postings."""
        conn.execute(delete(term_counts).where(term_counts.c.namespace == namespace))
        conn.execute(insert(term_counts).from_select(["namespace", "term", "n"], postings_counted(namespace)))

    def stored_terms(self, query_terms: Iterable[str]) -> dict[str, str]:
        """Stored form -> term, for every form a term may be stored under: cut to 64
        characters, or blinded under each key of the keyring."""
        if self._db.keyring is None:
            return {t[:64]: t for t in query_terms}
        return {b: t for t in query_terms for b in self._db.keyring.blind(t[:64])}

    def _drop_terms(self, conn: Connection, ids: Sequence[str]) -> None:
        """Delete the postings of ``ids`` (at most 500) and count their terms down."""
        rows = conn.execute(Statements.held_terms, {"ids": list(ids)}).all()
        conn.execute(delete(terms).where(terms.c.node_id.in_(ids)))
        self._count_terms(conn, Counter((a, t) for a, t, _ in rows), -1)
        self._changes.mark_terms_changed(conn, {(a, i) for a, _, i in rows})

    def _count_terms(self, conn: Connection, held: Mapping[tuple[str, str], int], sign: int) -> None:
        """Add (sign 1) or take (-1) ``held`` ((namespace, term) -> nodes) to the
        document frequencies. In key order: two PostgreSQL writers counting the same
        terms lock their rows in the same order, so neither waits on the other's."""
        if not held:
            return
        keys = sorted(held)
        # Thousands of terms for a batch: the driver's executemany, as for the postings,
        # in the driver's placeholders (SQLite's "?", psycopg's "%s").
        name, p = term_counts.name, "?" if conn.dialect.paramstyle == "qmark" else "%s"
        if sign > 0:
            conn.exec_driver_sql(f"INSERT INTO {name} (namespace, term, n) VALUES ({p}, {p}, {p}) ON CONFLICT "
                                 f"(namespace, term) DO UPDATE SET n = {name}.n + excluded.n",
                                 [(a, t, held[(a, t)]) for a, t in keys])
        else:
            conn.exec_driver_sql(f"UPDATE {name} SET n = n - {p} WHERE namespace = {p} AND term = {p}",
                                 [(held[(a, t)], a, t) for a, t in keys])
            conn.exec_driver_sql(f"DELETE FROM {name} WHERE namespace = {p} AND term = {p} AND n <= 0", keys)
