"""The relational schema: tables, indexes, triggers, the sealed column type, and
how a stored row becomes a :class:`~hybrid_memory.model.Node` or a vector.

The store is the source of truth: the vector index, the passages, the lexical
index's counts and the change tables are all derived from these tables and can be
rebuilt from them. Everything here is declarative (no connection is opened):
:func:`prepare` makes or brings up to date a database's tables inside the write
transaction the store opens it with.
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    func,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Dialect, Row
from sqlalchemy.schema import CreateIndex
from sqlalchemy.types import TypeDecorator

from ..crypto import Keyring
from ..errors import StorageError
from ..model import Node, NodeType, Status

SCHEMA_VERSION = "1"

metadata = MetaData()


class SealedText(TypeDecorator[str]):
    """A text column that holds what was said: sealed with the store's keyring (set on
    the engine's dialect, one per store) when it has one, plain text otherwise.
    Every read and write through SQLAlchemy passes here, so no query can forget it."""

    impl = Text
    cache_ok = True

    def __init__(self, purpose: str) -> None:
        super().__init__()
        self.purpose = purpose

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        ring: Keyring | None = dialect.__dict__.get("hm_keyring")
        if ring is None:
            return None
        purpose = self.purpose
        return lambda v: None if v is None else ring.seal(v, purpose)

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        ring: Keyring | None = dialect.__dict__.get("hm_keyring")
        if ring is None:
            return None
        purpose = self.purpose
        if purpose == "payload":
            # An altered log entry reads as unreadable (not JSON), as a torn one does:
            # readers of the log already mark and skip those.
            def payload(v: Any) -> Any:
                try:
                    return None if v is None else ring.unseal(v, purpose)
                except StorageError:
                    return "<unreadable sealed payload>"
            return payload
        return lambda v: None if v is None else ring.unseal(v, purpose)


nodes = Table(
    "hm_nodes",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("namespace", String(128), nullable=False),
    Column("parent_id", String(32)),
    Column("type", String(16), nullable=False),
    Column("content", SealedText("content"), nullable=False),
    Column("meta", SealedText("meta"), nullable=False),
    Column("importance", Float, nullable=False),
    Column("confidence", Float, nullable=False),
    Column("access_count", Integer, nullable=False),
    Column("pinned", Boolean, nullable=False),
    Column("status", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    Column("depth", Integer, nullable=False),
    # Materialised path "root/child/.../self/": a subtree is one index range scan.
    # The range bounds assume byte order, hence the "C" collation on PostgreSQL.
    Column("path", Text().with_variant(Text(collation="C"), "postgresql"), nullable=False),
    Column("branch_id", String(32), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("accessed_at", Float, nullable=False),
    Column("active_at", Float, nullable=False),
    # The operation-log position of the archive that took this node, so that
    # restore brings back exactly what that archive took.
    Column("archived_op", Integer),
    Column("content_hash", String(64), nullable=False),
    Column("tokens", Integer, nullable=False),
    # The embedding is kept here too: the vector index is rebuilt from it, and
    # ranking inside a branch uses it without a filtered vector query.
    Column("embedding", LargeBinary, nullable=False),
    Column("embed_model", String(256), nullable=False),
    Index("hm_nodes_branch", "namespace", "status", "branch_id"),
    Index("hm_nodes_path", "namespace", "path"),
    Index("hm_nodes_parent", "namespace", "parent_id"),
    # Exact twins: a write looks up its content hash in the branches it may merge in.
    Index("hm_nodes_twin", "namespace", "content_hash", "branch_id"),
    # stats(): live nodes per type and the depth, off the index alone.
    Index("hm_nodes_kind", "namespace", "status", "type", "depth"),
    # Dedup: the live memories of one type in one branch (SQLite's planner, without
    # statistics, would otherwise seek hm_nodes_kind and read every node of the type).
    Index("hm_nodes_group", "namespace", "branch_id", "type", "status"),
    # The long memories (hybrid_memory.passages): an open looks for those without
    # their passages, a seek past write.passage_tokens instead of a scan (80 ms at 100k).
    Index("hm_nodes_long", "namespace", "tokens"),
)
# SQLite: a forget pass reads the same few columns of every live node, off this index
# alone rather than the rows, which hold the content and the embedding (at a million
# nodes the table is about 2 GB, this index 174 MB; a cold pass 9.5-10.7 s against
# 14-15 s, eval/BENCHMARKS.md). It leads with an
# expression (namespace || '') that no other statement names, so only the pass, which
# asks for it by name, reads it: SQLite's planner, without statistics, took it for
# the dedup read of every write (it also yields ids in order) and scanned the whole
# namespace there. PostgreSQL reads the path as well in that pass: not made there.
FORGET_INDEX = Index(
    "hm_nodes_forget", nodes.c.namespace.concat(""), nodes.c.status, nodes.c.id, nodes.c.parent_id, nodes.c.type,
    nodes.c.branch_id, nodes.c.pinned, nodes.c.importance, nodes.c.confidence, nodes.c.access_count,
    nodes.c.created_at, nodes.c.updated_at, nodes.c.accessed_at, nodes.c.active_at,
    nodes.c.namespace,  # (the column itself too, or SQLite reads each row for it)
).ddl_if(dialect="sqlite")
#: Indexes added after the first stores were made: created on open where missing.
_LATER_INDEXES = ("hm_nodes_twin", "hm_nodes_kind", "hm_nodes_group", "hm_nodes_forget", "hm_nodes_long")

terms = Table(
    "hm_terms",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("term", String(64), primary_key=True),
    Column("node_id", String(32), primary_key=True),
    Column("tf", Integer, nullable=False),
    Index("hm_terms_node", "node_id"),
    # SQLite: rows clustered by (namespace, term, node_id), so a term's postings, tf
    # included, are one range of the table (a rowid table reads each row's tf apart).
    sqlite_with_rowid=False,
)

# How many nodes of a namespace hold each term (a term's document frequency), kept
# with the postings in the same transactions: counting a common word's postings at
# every query grows with the memory (a word in a third of 100k memories is a scan
# of 30k index entries). Built from hm_terms on open where missing (older stores).
term_counts = Table(
    "hm_term_df",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("term", String(64), primary_key=True),
    Column("n", Integer, nullable=False),
    sqlite_with_rowid=False,
)

# The passages of a long memory (hybrid_memory.passages): spans of its content, each
# with its own vector, so that a detail deep in a long document is found by meaning
# and shown alone. Derived from the content, like the vector index: only offsets and
# vectors are kept (the text stays in the node row, sealed with it).
passages = Table(
    "hm_passages",
    metadata,
    Column("node_id", String(32), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("namespace", String(128), nullable=False),
    Column("start", Integer, nullable=False),
    Column("stop", Integer, nullable=False),
    # The node's content hash when the passages were cut: a row of another is stale.
    Column("content_hash", String(64), nullable=False),
    Column("embedding", LargeBinary, nullable=False),
    Index("hm_passages_ns", "namespace"),
)


def _change_table(name: str) -> Table:
    """A table of which nodes changed, in the order they changed (SQLite): one row
    per node, moved to a new position at each change (INSERT OR REPLACE), so it
    holds at most a row per node; a reader catches up from its position."""
    return Table(
        name,
        metadata,
        Column("seq", Integer, primary_key=True, autoincrement=True),
        Column("namespace", String(128), nullable=False),
        Column("node_id", String(32), nullable=False),
        UniqueConstraint("namespace", "node_id"),
        Index(f"{name}_ns", "namespace", "seq"),
        sqlite_autoincrement=True,
    )


# Whose postings changed: an in-process copy of the lexical index
# (hybrid_memory.accel.lexicon) catches up by reading the nodes changed since its position
# instead of the whole index; an erased namespace leaves one row without a node id:
# read it all again.
terms_changed = _change_table("hm_terms_changed")
# Whose rows changed or went: an in-process cache of the rows retrieval reads
# (hybrid_memory.accel.rowcache) drops the nodes changed since its position instead of
# trusting a row it read earlier. Kept by triggers (_ROW_TRIGGERS), so that every
# UPDATE or DELETE of a node row is noted, whatever code runs it; a new row needs no
# note, as no cache can hold it yet.
rows_changed = _change_table("hm_rows_changed")
# How many times each namespace's tree changed shape (SQLite): a node added, deleted,
# or its status, parent, path or branch changed, as counted by the triggers below. A
# read, a new content or weight, a vector settling leave it: the cache drops which
# nodes each branch holds, and which branches each family, when it moves.
shape_changes = Table(
    "hm_shape_changes",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("n", Integer, nullable=False),
)
_COUNT_SHAPE = ("INSERT INTO hm_shape_changes (namespace, n) VALUES ({ns}.namespace, 1) "
                "ON CONFLICT (namespace) DO UPDATE SET n = n + 1")
_ROW_TRIGGERS = (
    *(f"CREATE TRIGGER IF NOT EXISTS hm_rows_{when.lower()} AFTER {when} ON hm_nodes BEGIN "
      f"INSERT OR REPLACE INTO hm_rows_changed (namespace, node_id) VALUES (OLD.namespace, OLD.id); END"
      for when in ("UPDATE", "DELETE")),
    *(f"CREATE TRIGGER IF NOT EXISTS hm_shape_{name} AFTER {when} ON hm_nodes BEGIN {_COUNT_SHAPE.format(ns=ns)}; END"
      for name, when, ns in (("insert", "INSERT", "NEW"), ("delete", "DELETE", "OLD"),
                             ("move", "UPDATE OF status, parent_id, path, branch_id", "OLD"))),
)

oplog = Table(
    "hm_oplog",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("namespace", String(128), nullable=False),
    Column("session", String(128), nullable=False),
    Column("ts", Float, nullable=False),
    Column("op", String(16), nullable=False),
    Column("node_id", String(32)),
    Column("payload", SealedText("payload"), nullable=False),
    Index("hm_oplog_ns", "namespace", "seq"),
    Index("hm_oplog_node", "node_id"),
)

#: The outbox action of a node committed before its vector (a single add whose words
#: settle it: its transaction commits while the embedder runs). The node's embedding
#: is the empty blob until a second commit stores the vector and turns the action
#: into an upsert; a node left so by a crash is embedded at the next open. Readers of
#: embeddings skip the empty blob (:meth:`~hybrid_memory.store.nodes.NodeRepository.embeddings`,
#: ``branch_vectors``).
EMBED = "embed"
#: The outbox action of a node whose vector was read with a path that has changed
#: since (an ancestor renamed, the subtree moved; :mod:`hybrid_memory.context`). The
#: node keeps its vector until a later commit stores the one read with its current
#: path and turns the action into an upsert; it touches no index by itself.
CONTEXT = "context"


outbox = Table(
    "hm_outbox",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("namespace", String(128), nullable=False),
    Column("node_id", String(32), nullable=False),
    # "upsert" | "delete" | "embed" (the node was committed before its vector: the
    # vector's own commit turns it into an upsert; see EMBED) | "context" (its
    # vector waits to be read again with a changed path; see CONTEXT)
    Column("action", String(8), nullable=False),
    Index("hm_outbox_ns", "namespace", "seq"),
)

cursors = Table(
    "hm_cursors",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("session", String(128), primary_key=True),
    Column("active_id", String(32)),
    Column("updated_at", Float, nullable=False),
    # Whether the session chose the active node (``focus``), rather than being moved
    # to it by writing a new task. (Added after the first release: see prepare.)
    Column("focused", Boolean, nullable=False, server_default=false()),
)

checkpoints = Table(
    "hm_checkpoints",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("namespace", String(128), nullable=False),
    Column("session", String(128), nullable=False),
    Column("active_id", String(32)),
    Column("log_seq", Integer, nullable=False),
    Column("ts", Float, nullable=False),
    Column("note", SealedText("note")),
    Index("hm_checkpoints_ns", "namespace", "session", "id"),
)

settings = Table(
    "hm_settings",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

#: The audit trail: append-only, each entry's hash covers the previous entry's, and
#: the head (last seq and hash) is kept in hm_settings under "audit_head". Entries
#: hold ids, operation names and numbers, never what was said.
audit = Table(
    "hm_audit",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("namespace", String(128), nullable=False),
    Column("session", String(128), nullable=False),
    Column("actor", String(128), nullable=False),
    Column("ts", Float, nullable=False),
    Column("action", String(16), nullable=False),
    Column("node_ids", Text, nullable=False),
    Column("detail", Text, nullable=False),
    Column("prev", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Index("hm_audit_ns", "namespace", "seq"),
)

#: The columns a ``Node`` is built from (everything but the embedding).
NODE_COLUMNS = tuple(c for c in nodes.c if c.name not in ("embedding", "embed_model"))
#: What a forget pass reads of every live node, in this order (no content, no vectors).
#: Not the path (a long string): a pass that deletes reads the paths of what it
#: picked, and at a million nodes reading it for all cost ~0.3 s.
FORGET_COLUMNS = (
    nodes.c.id, nodes.c.parent_id, nodes.c.type, nodes.c.branch_id, nodes.c.pinned,
    nodes.c.importance, nodes.c.confidence, nodes.c.access_count,
    nodes.c.created_at, nodes.c.updated_at, nodes.c.accessed_at, nodes.c.active_at,
)


#: Enum members by stored value: a dict lookup instead of the Enum call per row.
_TYPES = {t.value: t for t in NodeType}
_STATUSES = {s.value: s for s in Status}
#: Node fields that are a write's answer, not stored.
_UNSTORED = ("merged", "placement")
#: The columns a Node is made of, in its field order.
_NODE_COLUMNS = tuple(name for name in Node.__dataclass_fields__ if name not in _UNSTORED)


class _PlainRow:
    """A row read through SQLite's own cursor
    (:meth:`~hybrid_memory.store.nodes.NodeRepository.node_rows`): a stored node's
    columns (a Node's first, in its field order), by attribute as a SQLAlchemy row
    gives them, and as a mapping (``_mapping``)."""

    __slots__ = ()

    @property
    def _mapping(self) -> dict[str, Any]:
        return self._asdict()  # type: ignore[attr-defined, no-any-return]


#: The columns of NODE_COLUMNS, those of a Node first, in its field order.
_PLAIN_COLUMNS = (*_NODE_COLUMNS, *(c.name for c in NODE_COLUMNS if c.name not in _NODE_COLUMNS))
NodeRow: Any = type("NodeRow", (_PlainRow, namedtuple("NodeRow", _PLAIN_COLUMNS)), {"__slots__": ()})
NodeRowEmbedded: Any = type("NodeRowEmbedded", (_PlainRow, namedtuple("NodeRowEmbedded", (*_PLAIN_COLUMNS, "embedding"))),
                            {"__slots__": ()})
_PLAIN_ROWS = (NodeRow, NodeRowEmbedded)
PLAIN_SELECT = {emb: f"SELECT {', '.join((*_PLAIN_COLUMNS, *(('embedding',) if emb else ())))} FROM {nodes.name} WHERE "
                for emb in (False, True)}


def node_from_row(row: Row[Any] | Mapping[str, Any], merged: bool = False) -> Node:
    """The :class:`Node` of a stored row.

    Retrieval makes a Node of every row it scores (about a hundred a query), and a
    frozen dataclass's ``__init__`` sets each of its twenty fields through
    ``object.__setattr__``: the fields go into the new instance's ``__dict__`` in one
    update instead, which is what that ``__init__`` ends with (Node has no
    ``__post_init__``; ``tests/test_node_rows.py`` checks the two give equal nodes)."""
    if type(row) in _PLAIN_ROWS:
        values = dict(zip(_NODE_COLUMNS, row, strict=False))
    else:
        m = row._mapping if isinstance(row, Row) else row
        values = {name: m[name] for name in _NODE_COLUMNS}
    kind, status, meta = values["type"], values["status"], values["meta"]
    values["type"] = _TYPES.get(kind) or NodeType(kind)  # (an unknown value raises as the Enum does)
    values["status"] = _STATUSES.get(status) or Status(status)
    values["meta"] = {} if meta == "{}" else json.loads(meta)
    values["pinned"] = bool(values["pinned"])
    values["merged"] = merged
    values["placement"] = None
    node = object.__new__(Node)
    node.__dict__.update(values)
    return node


def to_blob(vector: np.ndarray[Any, Any]) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.frombuffer(blob, dtype=np.float32)


def subtree_range(path: str) -> tuple[str, str]:
    """Bounds of every path that starts with ``path`` (which ends in "/"): ids never
    contain a character below "0", so the next prefix after "x/" is "x0"."""
    return path, path[:-1] + "0"


def postings_counted(namespace: str | None = None) -> Any:
    """(namespace, term, nodes holding it) off the postings, of one namespace or all:
    what the kept document frequencies must equal."""
    q = select(terms.c.namespace, terms.c.term, func.count())
    if namespace is not None:
        q = q.where(terms.c.namespace == namespace)
    return q.group_by(terms.c.namespace, terms.c.term)


def live_select(namespace: str, columns: Sequence[Any]) -> Any:
    """``columns`` of the namespace's live nodes (what
    :meth:`~hybrid_memory.store.tree.TreeRepository.live_columns` reads on PostgreSQL)."""
    return select(*columns).where(nodes.c.namespace == namespace, nodes.c.status == Status.LIVE.value)


def sqlite_live_sql(columns: Sequence[Any]) -> str:
    """:func:`live_select` on SQLite, through ``hm_nodes_forget`` (one parameter: the
    namespace): covering when ``columns`` are among FORGET_COLUMNS."""
    return (f"SELECT {', '.join(c.name for c in columns)} FROM {nodes.name} INDEXED BY hm_nodes_forget "
            f"WHERE namespace || '' = ? AND status = '{Status.LIVE.value}'")


def prepare(conn: Connection) -> None:
    """Make the tables, indexes and triggers a database lacks, inside the store's
    first write transaction, and check its schema version."""
    is_sqlite = conn.dialect.name == "sqlite"
    # Two processes preparing one fresh database at once would collide on the
    # catalog: the first to take the lock creates the tables, the other waits
    # and finds them. (SQLite: the write transaction's BEGIN IMMEDIATE is that lock.)
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('hybrid_memory.schema'))"))
    metadata.create_all(conn)
    _add_later_columns(conn)
    # create_all makes the indexes of new tables only.
    for index in nodes.indexes:
        if index.name in _LATER_INDEXES and (is_sqlite or index is not FORGET_INDEX):
            # (IF NOT EXISTS: reflection does not see an index on an expression)
            conn.execute(CreateIndex(index, if_not_exists=True))
    if is_sqlite:
        for trigger in _ROW_TRIGGERS:
            conn.exec_driver_sql(trigger)
    if conn.execute(select(term_counts.c.term).limit(1)).first() is None and \
            conn.execute(select(terms.c.term).limit(1)).first() is not None:
        # A store made before the counts were kept: count its postings once.
        conn.execute(insert(term_counts).from_select(["namespace", "term", "n"], postings_counted()))
    have = conn.execute(select(settings.c.value).where(settings.c.key == "schema_version")).scalar()
    if have is None:
        conn.execute(insert(settings).values(key="schema_version", value=SCHEMA_VERSION))
    elif have != SCHEMA_VERSION:
        raise StorageError(f"store has schema version {have}, this library reads {SCHEMA_VERSION}")


def _add_later_columns(conn: Connection) -> None:
    """Add the columns a store made before they were kept lacks (each with a default,
    so the rows it has read as they did)."""
    have = {c["name"] for c in inspect(conn).get_columns(cursors.name)}
    if "focused" not in have:
        default = "0" if conn.dialect.name == "sqlite" else "FALSE"
        conn.exec_driver_sql(f"ALTER TABLE {cursors.name} ADD COLUMN focused BOOLEAN NOT NULL DEFAULT {default}")
