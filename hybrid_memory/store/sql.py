"""The relational store: schema and queries through SQLAlchemy Core.

It is the source of truth. Every mutation runs in one short write transaction
(``write``) that the caller fills with the node change, its operation-log row
and its index-outbox rows, so that the vector index can always be healed from it.
On SQLite: WAL, a busy timeout, ``BEGIN IMMEDIATE`` for writers and a retry with
backoff when another process holds the lock. On PostgreSQL: READ COMMITTED writers
that take row locks (``SELECT ... FOR UPDATE``) on what a write depends on, a
REPEATABLE READ snapshot for readers, and the same retry for serialization
failures and deadlocks.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import sqlite3
import time
from collections import Counter, namedtuple
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

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
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Dialect, Engine, Row
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.schema import CreateIndex
from sqlalchemy.types import TypeDecorator

from ..crypto import KEY_ENV, KEY_FILE_ENV, Keyring, missing_keys
from ..errors import EncryptionKeyError, StorageError
from ..model import Checkpoint, Node, NodeType, Status, path_ids, root_of
from ..text import content_hash as text_content_hash

T = TypeVar("T")
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
#: embeddings skip the empty blob (:meth:`SqlStore.embeddings`, ``branch_vectors``).
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

#: Payload keys an audit entry leaves out: what was said, and bulky replay detail.
AUDIT_OMITS = frozenset({"content", "meta", "content_hash", "tokens", "note", "skeletons", "counts"})
AUDIT_GENESIS = "0" * 64


def audit_hash(prev: str, seq: int, namespace: str, session: str, actor: str, ts: float,
               action: str, node_ids: str, detail: str) -> str:
    """The hash of one audit entry: SHA-256 over the previous hash and every field."""
    body = json.dumps([prev, seq, namespace, session, actor, repr(float(ts)), action, node_ids, detail],
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()

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


class _Q:
    """The statements of the hot paths (every add and retrieve), built once with bound
    parameters. Building a statement and its cache key costs more than SQLAlchemy's
    execution of it (about 3x a prebuilt one for a one-row select on this project's
    machine); the compiled form is cached per dialect either way."""

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
    branch_rows = select(*NODE_COLUMNS, nodes.c.embedding).where(
        nodes.c.namespace == bindparam("ns"), live, nodes.c.branch_id.in_(bindparam("branches", expanding=True))
    )
    by_hashes = select(nodes.c.id, nodes.c.content_hash, nodes.c.branch_id, nodes.c.type).where(
        nodes.c.namespace == bindparam("ns"), nodes.c.content_hash.in_(bindparam("hashes", expanding=True)),
        nodes.c.branch_id.in_(bindparam("branches", expanding=True)), live,
    )
    tie_keys = select(nodes.c.id, nodes.c.created_at, nodes.c.content_hash).where(nodes.c.id.in_(ids))
    branches_of = select(nodes.c.branch_id).where(nodes.c.id.in_(ids))
    branches_under = (
        select(nodes.c.branch_id).distinct()
        .where(nodes.c.namespace == bindparam("ns"), nodes.c.path >= bindparam("lo"), nodes.c.path < bindparam("hi"), live)
        .order_by(nodes.c.branch_id)
    )
    # The parent column, not the id: the count then reads the (namespace, parent_id)
    # index alone (SQLite would look each row up for its id: 10 ms for 5,000 children).
    children_of = {
        root: select(func.count()).select_from(
            select(nodes.c.parent_id).where(
                nodes.c.namespace == bindparam("ns"),
                nodes.c.parent_id.is_(None) if root else nodes.c.parent_id == bindparam("parent"),
            ).limit(bindparam("limit", type_=Integer)).subquery()
        )
        for root in (True, False)
    }
    term_df = (select(term_counts.c.term, term_counts.c.n)
               .where(term_counts.c.namespace == bindparam("ns"),
                      term_counts.c.term.in_(bindparam("terms", expanding=True))))
    held_terms = select(terms.c.namespace, terms.c.term, terms.c.node_id).where(terms.c.node_id.in_(ids))
    more_branches = (select(nodes.c.branch_id).where(nodes.c.namespace == bindparam("ns"), live)
                     .distinct().limit(bindparam("limit", type_=Integer)))
    live_count = select(func.count()).where(nodes.c.namespace == bindparam("ns"), live)
    last_seq = select(func.max(oplog.c.seq)).where(oplog.c.namespace == bindparam("ns"))
    pending_upserts = (select(outbox.c.node_id, func.max(outbox.c.seq).label("last"))
                       .where(outbox.c.namespace == bindparam("ns"), outbox.c.action == "upsert")
                       .group_by(outbox.c.node_id).order_by(func.max(outbox.c.seq).desc())
                       .limit(bindparam("limit", type_=Integer)))
    get_cursor = select(cursors.c.active_id).where(cursors.c.namespace == bindparam("ns"),
                                                   cursors.c.session == bindparam("session"))
    get_setting = select(settings.c.value).where(settings.c.key == bindparam("key"))
    insert_nodes = insert(nodes)
    # Only over the empty blob: an update that embedded new content meanwhile stays.
    settle_embedding = (update(nodes).where(nodes.c.id == bindparam("nid"), func.length(nodes.c.embedding) == 0)
                        .values(embedding=bindparam("emb")))
    settle_outbox = (update(outbox).where(outbox.c.namespace == bindparam("ns"), outbox.c.node_id.in_(ids),
                                          outbox.c.action == EMBED).values(action="upsert"))
    unembedded = select(nodes.c.id).where(nodes.c.id.in_(ids), func.length(nodes.c.embedding) == 0)
    insert_terms = insert(terms)
    insert_outbox = insert(outbox)
    log_many = insert(oplog).returning(oplog.c.seq, sort_by_parameter_order=True)
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


#: Enum members by stored value: a dict lookup instead of the Enum call per row.
_TYPES = {t.value: t for t in NodeType}
_STATUSES = {s.value: s for s in Status}
#: The columns a Node is made of, in its field order (``merged`` is not stored).
_NODE_COLUMNS = tuple(name for name in Node.__dataclass_fields__ if name != "merged")


class _PlainRow:
    """A row read through SQLite's own cursor (:meth:`SqlStore.node_rows`): a stored
    node's columns (a Node's first, in its field order), by attribute as a SQLAlchemy
    row gives them, and as a mapping (``_mapping``)."""

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
_PLAIN_SELECT = {emb: f"SELECT {', '.join((*_PLAIN_COLUMNS, *(('embedding',) if emb else ())))} FROM {nodes.name} WHERE "
                 for emb in (False, True)}
#: Which rows are the live nodes of some branches (the branch ids follow, as parameters).
_IN_BRANCHES = f"namespace = ? AND status = '{Status.LIVE.value}' AND branch_id IN "


@functools.cache
def _sqlite_form(stmt: Any) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """A prebuilt statement of :class:`_Q` as SQLite's driver takes it: its SQL, the
    names of its positional parameters in order, and the values bound in it."""
    from sqlalchemy.dialects.sqlite import dialect  # (loaded by then: the store is SQLite)

    compiled = stmt.compile(dialect=dialect())
    return compiled.string, tuple(compiled.positiontup or ()), dict(compiled.params)


def _driver_execute(raw: sqlite3.Connection, stmt: Any, params: Mapping[str, Any]) -> sqlite3.Cursor:
    """Run a prebuilt statement (no expanding parameters) through SQLite's own cursor."""
    sql, names, bound = _sqlite_form(stmt)
    return raw.execute(sql, [params[n] if n in params else bound[n] for n in names])


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


#: PostgreSQL SQLSTATEs after which the whole transaction is simply run again:
#: serialization_failure, deadlock_detected, lock_not_available.
_PG_RETRY = frozenset({"40001", "40P01", "55P03"})


def _is_locked(exc: BaseException) -> bool:
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) in _PG_RETRY:
        return True
    return isinstance(orig, sqlite3.OperationalError) and (
        "locked" in str(orig) or "busy" in str(orig)
    )


#: Logged operations that leave a namespace's live set as it was.
_LIVE_NEUTRAL = frozenset({"access", "focus", "checkpoint", "feedback", "pin", "move"})


class SqlStore:
    """The relational store, over any SQLAlchemy URL (SQLite by default)."""

    def __init__(self, url: str | Engine, *, busy_timeout_ms: int = 30_000, keyring: Keyring | None = None,
                 check_keys: bool = True) -> None:
        try:
            self.engine = url if isinstance(url, Engine) else create_engine(url)
        except (SQLAlchemyError, ValueError) as exc:
            raise StorageError(f"cannot open relational store {url!r}: {exc}") from None
        except ImportError as exc:
            raise StorageError(f"cannot open relational store {url!r}: its driver is not installed ({exc})") from None
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        self.is_postgres = self.engine.dialect.name == "postgresql"
        if self.engine.dialect.__dict__.get("hm_keyring", keyring) is not keyring:
            raise StorageError("an engine shared by two stores must carry one keyring: create one engine per store")
        #: Whether writes are audited (``security.audit``, or a store that holds an audit
        #: trail already: once on, every handle keeps it going), and who acts for a
        #: (namespace, session) in its entries.
        self.audit_on = False
        self.actors: dict[tuple[str, str], str] = {}
        #: The keyring that seals contents, or None. Set on the dialect before the first
        #: statement: SQLAlchemy keeps each column type's processors per dialect.
        self.keyring: Keyring | None = keyring
        # False: open whatever the keys (store-wide work that reads no sealed column,
        # or rotate_key, which checks them itself).
        self._check_keys_on_open = check_keys
        self.engine.dialect.hm_keyring = keyring  # type: ignore[attr-defined]
        if self.is_sqlite:
            _configure_sqlite(self.engine, busy_timeout_ms)
        try:
            self._init_settings()
        except SQLAlchemyError as exc:
            self.engine.dispose()
            raise StorageError(f"cannot prepare relational store: {exc}") from None
        except BaseException:
            self.engine.dispose()
            raise

    @classmethod
    def sqlite(cls, path: str | Path) -> SqlStore:
        return cls(f"sqlite:///{Path(path).resolve()}")

    @property
    def file(self) -> Path | None:
        db = self.engine.url.database
        return Path(db) if self.is_sqlite and db and db != ":memory:" else None

    def _init_settings(self) -> None:
        def run(conn: Connection) -> None:
            # Two processes preparing one fresh database at once would collide on the
            # catalog: the first to take the lock creates the tables, the other waits
            # and finds them. (SQLite: the write transaction's BEGIN IMMEDIATE is that lock.)
            if self.is_postgres:
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('hybrid_memory.schema'))"))
            metadata.create_all(conn)
            # create_all makes the indexes of new tables only.
            for index in nodes.indexes:
                if index.name in _LATER_INDEXES and (self.is_sqlite or index is not FORGET_INDEX):
                    # (IF NOT EXISTS: reflection does not see an index on an expression)
                    conn.execute(CreateIndex(index, if_not_exists=True))
            if self.is_sqlite:
                for trigger in _ROW_TRIGGERS:
                    conn.exec_driver_sql(trigger)
            if conn.execute(select(term_counts.c.term).limit(1)).first() is None and \
                    conn.execute(select(terms.c.term).limit(1)).first() is not None:
                # A store made before the counts were kept: count its postings once.
                conn.execute(insert(term_counts).from_select(["namespace", "term", "n"], _postings_counted()))
            have = conn.execute(select(settings.c.value).where(settings.c.key == "schema_version")).scalar()
            if have is None:
                conn.execute(insert(settings).values(key="schema_version", value=SCHEMA_VERSION))
            elif have != SCHEMA_VERSION:
                raise StorageError(f"store has schema version {have}, this library reads {SCHEMA_VERSION}")
            if self._check_keys_on_open:
                self._check_keys(conn)
            self.audit_on = self.get_setting(conn, "audit_head") is not None

        self.write(run)

    # -- encryption ---------------------------------------------------------------

    def _check_keys(self, conn: Connection) -> None:
        """The keys this store's sealed values need are all in the keyring; a store
        first opened with a keyring records its key; plain data is never mixed in
        silently (``rotate_key`` seals it)."""
        stored = self.sealing_keys(conn)
        if stored:
            gone = missing_keys(stored, self.keyring)
            if self.keyring is None:
                raise EncryptionKeyError(
                    f"this memory is encrypted (key {', '.join(stored)}): give its key "
                    f"(${KEY_ENV}, ${KEY_FILE_ENV} or security.key_file)")
            if gone:
                raise EncryptionKeyError(
                    f"this memory is sealed with key {', '.join(gone)}, which the keyring does not hold "
                    f"(it holds {', '.join(self.keyring.key_ids)}): the wrong key")
        elif self.keyring is not None:
            if conn.execute(select(nodes.c.id).limit(1)).first() is not None or \
                    conn.execute(select(oplog.c.seq).limit(1)).first() is not None:
                raise EncryptionKeyError(
                    "this memory holds unencrypted data: seal it with `hybrid-memory rotate-key` "
                    "(or MemoryTree.rotate_key) before opening it with a key")
            self.set_setting(conn, "encryption", json.dumps({"scheme": "aes-256-gcm", "keys": [self.keyring.primary]}))

    def sealing_keys(self, conn: Connection) -> list[str]:
        """The ids of the keys the store's sealed values may be under ([] for a plain store)."""
        raw = self.get_setting(conn, "encryption")
        if raw is None:
            return []
        try:
            keys = json.loads(raw)["keys"]
        except (ValueError, KeyError, TypeError):
            raise StorageError(f"the store's encryption setting is unreadable: {raw!r}") from None
        return [str(k) for k in keys]

    def content_hash(self, content: str) -> str:
        """The hash that finds exact twins: SHA-256 of the whitespace-normalised content,
        keyed by the keyring when the store has one (a plain hash could be checked
        against guessed contents)."""
        if self.keyring is not None:
            return self.keyring.content_hash(content)
        return text_content_hash(content)

    def content_hashes(self, content: str) -> list[str]:
        """The content's hash under every key of the keyring (one while no rotation runs)."""
        if self.keyring is not None:
            return self.keyring.content_hashes(content)
        return [self.content_hash(content)]

    def _stored_terms(self, query_terms: Iterable[str]) -> dict[str, str]:
        """Stored form -> term, for every form a term may be stored under: cut to 64
        characters, or blinded under each key of the keyring."""
        if self.keyring is None:
            return {t[:64]: t for t in query_terms}
        return {b: t for t in query_terms for b in self.keyring.blind(t[:64])}

    def close(self) -> None:
        self.engine.dispose()

    # -- transactions -------------------------------------------------------

    def write(self, fn: Callable[[Connection], T], *, attempts: int = 12, synced: bool = True) -> T:
        """Run ``fn`` in one write transaction, retrying with backoff while the
        database is locked by another writer. ``fn`` must be safe to re-run.

        ``synced=False`` is for derived data only (a vector computed from a committed
        content): the commit does not wait for the disk (SQLite ``synchronous=NORMAL``,
        PostgreSQL ``synchronous_commit = off``). It survives a crash of the process;
        a power cut may take it back, never the writes committed before it."""
        delay = 0.01
        for attempt in range(attempts):
            try:
                with self.engine.connect() as conn:
                    conn.execution_options(hm_write=True, hm_synced=synced)
                    with conn.begin():
                        if not synced and self.is_postgres:
                            conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
                        return fn(conn)
            except OperationalError as exc:
                if not _is_locked(exc) or attempt == attempts - 1:
                    raise StorageError(f"write failed: {exc.orig}") from exc
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
            except SQLAlchemyError as exc:
                raise StorageError(f"write failed: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read transaction: a consistent snapshot (SQLite WAL; REPEATABLE READ on PostgreSQL)."""
        try:
            with self.engine.connect() as conn, conn.begin():
                if self.is_postgres:
                    conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                yield conn
        except SQLAlchemyError as exc:
            raise StorageError(f"read failed: {exc}") from exc

    # -- nodes ----------------------------------------------------------------

    def get(self, conn: Connection, node_id: str, *, lock: bool = False) -> Row[Any] | None:
        """The node's row. ``lock``: inside a write, lock the row until commit (``FOR
        UPDATE``) and read its latest committed version; a no-op on SQLite, whose
        writers are already serialised by ``BEGIN IMMEDIATE``."""
        q = _Q.get_lock if lock and not self.is_sqlite else _Q.get
        return conn.execute(q, {"id": node_id}).first()

    def lock_path(self, conn: Connection, node_id: str) -> Row[Any] | None:
        """Lock the node and every ancestor of it, root first, and return the
        node's latest row (None when it is gone). A write hanging something under a
        node takes this, so that a concurrent move or archive of any node above
        either waits for it or is seen by it. No locking on SQLite."""
        row = self.get(conn, node_id)
        if self.is_sqlite:
            return row
        locked: set[str] = set()
        while row is not None:
            ids = path_ids(row.path)
            if locked.issuperset(ids):
                return row
            # Root first, like every path lock: two of them in one tree meet at the root
            # instead of deadlocking (across trees PostgreSQL detects it and write() retries).
            conn.execute(select(nodes.c.id).where(nodes.c.id.in_(ids)).order_by(nodes.c.depth).with_for_update())
            locked.update(ids)
            row = self.get(conn, node_id)  # the latest version: it may have moved meanwhile
        return None

    def lock_subtree(self, conn: Connection, namespace: str, path: str) -> list[Row[Any]]:
        """Every node of the subtree at ``path`` (live or archived), locked until
        commit. Repeats until no node appeared since the last round: a writer adding
        a child locks the parent first, so once every node here is locked, nothing
        new can be hung under it before commit. Just :meth:`subtree` on SQLite."""
        if self.is_sqlite:
            return self.subtree(conn, namespace, path)
        lo, hi = subtree_range(path)
        q = (
            select(*NODE_COLUMNS)
            .where(nodes.c.namespace == namespace, nodes.c.path >= lo, nodes.c.path < hi)
            .order_by(nodes.c.depth, nodes.c.id)
            .with_for_update()
        )
        locked: set[str] = set()
        while True:
            rows = list(conn.execute(q))
            ids = {r.id for r in rows}
            if locked.issuperset(ids):
                return rows
            locked |= ids

    def get_many(self, conn: Connection, ids: Iterable[str], *, live_only: bool = False,
                 embedding: bool = False) -> dict[str, Row[Any]]:
        """The rows of ``ids`` that exist, by id (with their embedding column if asked)."""
        out: dict[str, Row[Any]] = {}
        ids = list(dict.fromkeys(ids))
        q: Any
        if embedding:
            q = _Q.get_many_emb_live if live_only else _Q.get_many_emb
        else:
            q = _Q.get_many_live if live_only else _Q.get_many
        for chunk in _chunks(ids, 500):
            for row in conn.execute(q, {"ids": chunk}).all():
                out[row.id] = row
        return out

    def _plain(self, conn: Connection) -> sqlite3.Connection | None:
        """SQLite's own connection under ``conn`` when no column needs SQLAlchemy's
        processing on the way out (no keyring seals the text); None otherwise. A
        query reads a few hundred rows in some ten statements, and SQLAlchemy's
        execution and row building cost more than SQLite's answer (retrieve at 100k:
        about 1 ms of 6)."""
        if self.is_sqlite and self.keyring is None:
            return cast("sqlite3.Connection", conn.connection.driver_connection)
        return None

    def node_rows(self, conn: Connection, ids: Iterable[str], *, live_only: bool = False,
                  embedding: bool = False) -> dict[str, Any]:
        """:meth:`get_many` for reads that only make nodes of the rows (retrieval):
        on SQLite without a keyring, rows read through the driver's cursor
        (:class:`NodeRow`), with the same columns by attribute."""
        raw = self._plain(conn)
        if raw is None:
            return self.get_many(conn, ids, live_only=live_only, embedding=embedding)
        out: dict[str, Any] = {}
        make = (NodeRowEmbedded if embedding else NodeRow)._make
        tail = f" AND status = '{Status.LIVE.value}'" if live_only else ""
        for chunk in _chunks(list(dict.fromkeys(ids)), 500):
            sql = f"{_PLAIN_SELECT[embedding]}id IN ({','.join('?' * len(chunk))}){tail}"
            for t in raw.execute(sql, chunk):
                row = make(t)
                out[row.id] = row
        return out

    def embeddings(self, conn: Connection, ids: Sequence[str]) -> dict[str, np.ndarray[Any, Any]]:
        out = {}
        for chunk in _chunks(list(ids), 500):
            for row in conn.execute(_Q.embeddings, {"ids": chunk}):
                if row.embedding:  # (not the empty blob of a node whose vector follows)
                    out[row.id] = from_blob(row.embedding)
        return out

    def branch_vectors(self, conn: Connection, namespace: str, branch: str, ntype: str,
                       limit: int) -> tuple[list[str], np.ndarray[Any, Any]] | None:
        """(ids, embeddings as rows) of the live nodes of ``branch`` of type ``ntype``,
        by id; None when there are more than ``limit``."""
        rows = conn.execute(_Q.branch_vectors, {"ns": namespace, "branch": branch, "type": ntype,
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

    def insert_node(self, conn: Connection, values: Mapping[str, Any]) -> None:
        conn.execute(insert(nodes).values(**values))

    def insert_nodes(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert several node rows (all with the same columns) in one statement."""
        if rows:
            conn.execute(_Q.insert_nodes, list(rows))

    def settle_embeddings(self, conn: Connection, namespace: str, pairs: Sequence[tuple[str, bytes]]) -> None:
        """Store the vectors of nodes committed before them (:data:`EMBED`): each where
        the node still has none, and their outbox rows become upserts."""
        if pairs:
            conn.execute(_Q.settle_embedding, [{"nid": i, "emb": b} for i, b in pairs])
            for chunk in _chunks([i for i, _ in pairs], 500):
                conn.execute(_Q.settle_outbox, {"ns": namespace, "ids": chunk})

    def embed_waiting(self, conn: Connection, namespace: str) -> list[str]:
        """Ids of the nodes of ``namespace`` with an :data:`EMBED` outbox row."""
        q = select(outbox.c.node_id).where(outbox.c.namespace == namespace, outbox.c.action == EMBED).distinct()
        return sorted(conn.execute(q).scalars())

    def unembedded(self, conn: Connection, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` whose node is stored without its vector yet (the empty blob)."""
        out: set[str] = set()
        for chunk in _chunks(list(ids), 500):
            out.update(conn.execute(_Q.unembedded, {"ids": chunk}).scalars())
        return out

    def update_node(self, conn: Connection, node_id: str, **values: Any) -> None:
        conn.execute(update(nodes).where(nodes.c.id == node_id).values(**values))

    def set_status(self, conn: Connection, ids: Sequence[str], **values: Any) -> None:
        """The same ``values`` (status, archived_op) on every node of ``ids``."""
        for chunk in _chunks(list(ids), 500):
            conn.execute(update(nodes).where(nodes.c.id.in_(chunk)).values(**values))

    def subtree(self, conn: Connection, namespace: str, path: str, *, status: Status | None = None) -> list[Row[Any]]:
        lo, hi = subtree_range(path)
        q = select(*NODE_COLUMNS).where(nodes.c.namespace == namespace, nodes.c.path >= lo, nodes.c.path < hi)
        if status is not None:
            q = q.where(nodes.c.status == status.value)
        return list(conn.execute(q))

    def branches_under(self, conn: Connection, namespace: str, root_id: str) -> list[str]:
        """The branches (their head ids) of the live nodes under ``root_id``, itself
        included: a top-level task's family. By id."""
        lo, hi = subtree_range(f"{root_id}/")
        raw = self._plain(conn)
        if raw is not None:
            return [r[0] for r in _driver_execute(raw, _Q.branches_under, {"ns": namespace, "lo": lo, "hi": hi})]
        return [r[0] for r in conn.execute(_Q.branches_under, {"ns": namespace, "lo": lo, "hi": hi})]

    def branch_rows(self, conn: Connection, namespace: str, branch_ids: Sequence[str]) -> list[Any]:
        """Every live node of the given branches, with its embedding (as
        :meth:`node_rows` reads them)."""
        raw = self._plain(conn)
        if raw is None or len(branch_ids) > 500:
            return list(conn.execute(_Q.branch_rows, {"ns": namespace, "branches": list(branch_ids)}).all())
        sql = f"{_PLAIN_SELECT[True]}{_IN_BRANCHES}({','.join('?' * len(branch_ids))})"
        return list(map(NodeRowEmbedded._make, raw.execute(sql, (namespace, *branch_ids))))

    def branch_members(self, conn: Connection, namespace: str, branch_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(id, branch id) of every live node of the given branches, in the order
        :meth:`branch_rows` reads their rows (by branch id, then as stored)."""
        raw = self._plain(conn)
        if raw is None or len(branch_ids) > 500:
            return [(row.id, row.branch_id) for row in self.branch_rows(conn, namespace, branch_ids)]
        sql = f"SELECT id, branch_id FROM {nodes.name} WHERE {_IN_BRANCHES}({','.join('?' * len(branch_ids))})"
        return raw.execute(sql, (namespace, *branch_ids)).fetchall()

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
        for hchunk in _chunks(heads, 500):
            for chunk in _chunks(list(dict.fromkeys(hashes)), 500):
                params = {"ns": namespace, "hashes": chunk, "branches": hchunk}
                out.extend(cast("list[Row[Any]]", conn.execute(_Q.by_hashes, params).all()))
        return out

    def tie_keys(self, conn: Connection, ids: Iterable[str]) -> dict[str, tuple[float, str]]:
        """(created_at, content hash) of the given nodes: what breaks a tie between
        equally scored candidates, the same in every copy of a memory."""
        out: dict[str, tuple[float, str]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids)), 500):
            if self.is_sqlite:
                # Hundreds of ids at a lexical tie: through the driver's cursor (SQLAlchemy
                # spends longer expanding the IN list than SQLite answering it).
                sql = f"SELECT id, created_at, content_hash FROM {nodes.name} WHERE id IN ({','.join('?' * len(chunk))})"
                rows = conn.connection.driver_connection.execute(sql, chunk).fetchall()  # type: ignore[union-attr]
            else:
                rows = conn.execute(_Q.tie_keys, {"ids": chunk}).all()
            out.update((r[0], (r[1], r[2])) for r in rows)
        return out

    def branches_of(self, conn: Connection, ids: Iterable[str]) -> set[str]:
        """The branch ids of the given nodes (unknown ids are left out)."""
        out: set[str] = set()
        for chunk in _chunks(list(dict.fromkeys(ids)), 500):
            out.update(r[0] for r in conn.execute(_Q.branches_of, {"ids": chunk}))
        return out

    def live_rows(self, conn: Connection, namespace: str, columns: Sequence[Any] = NODE_COLUMNS) -> list[Row[Any]]:
        q = select(*columns).where(nodes.c.namespace == namespace, nodes.c.status == Status.LIVE.value)
        return cast("list[Row[Any]]", conn.execute(q).all())

    def live_columns(self, conn: Connection, namespace: str, columns: Sequence[Any]) -> list[tuple[Any, ...]]:
        """``columns`` of every live node as plain tuples, for a pass over the whole
        namespace (forget): on SQLite read through the driver's cursor, since building
        SQLAlchemy rows costs about as much as the read itself at a million nodes."""
        if not self.is_sqlite:
            return cast("list[tuple[Any, ...]]", conn.execute(live_select(namespace, columns)).all())
        return cast("list[tuple[Any, ...]]", conn.connection.driver_connection.execute(  # type: ignore[union-attr]
            sqlite_live_sql(columns), (namespace,)).fetchall())

    def lock_live_rows(self, conn: Connection, namespace: str, columns: Sequence[Any]) -> list[tuple[Any, ...]]:
        """:meth:`live_rows` for a write that decides on the whole namespace (forget):
        first every tree's root is locked, so no writer can change a tree (they all
        lock the root first, see :meth:`lock_path`) until commit. Just
        :meth:`live_rows` on SQLite."""
        if self.is_sqlite:
            return self.live_columns(conn, namespace, columns)
        roots = (
            select(nodes.c.id)
            .where(nodes.c.namespace == namespace, nodes.c.parent_id.is_(None))
            .order_by(nodes.c.id)
            .with_for_update()
        )
        locked: set[str] = set()
        while True:
            locked.update(r[0] for r in conn.execute(roots))
            rows = self.live_rows(conn, namespace, (*columns, nodes.c.path.label("_locked_path")))
            if all(root_of(r._locked_path) in locked for r in rows):
                return [tuple(r)[:-1] for r in rows]

    def child_count(self, conn: Connection, namespace: str, parent_id: str | None, limit: int) -> int:
        """How many nodes (any status) hang directly under ``parent_id`` (None: the root),
        counted up to ``limit`` (reads at most that many index entries)."""
        params: dict[str, Any] = {"ns": namespace, "limit": limit}
        if parent_id is not None:
            params["parent"] = parent_id
        return int(conn.execute(_Q.children_of[parent_id is None], params).scalar_one())

    def with_children(self, conn: Connection, namespace: str, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that have a child row in any status (reads the
        (namespace, parent_id) index)."""
        out: set[str] = set()
        ids = list(ids)
        for at in range(0, len(ids), 500):
            chunk = ids[at : at + 500]
            q = select(nodes.c.parent_id).where(nodes.c.namespace == namespace, nodes.c.parent_id.in_(chunk)).distinct()
            out.update(r[0] for r in conn.execute(q))
        return out

    def any_live_id(self, conn: Connection, namespace: str) -> str | None:
        """One live node's id (which one is unspecified), or None for an empty namespace."""
        q = select(nodes.c.id).where(nodes.c.namespace == namespace, nodes.c.status == Status.LIVE.value).limit(1)
        return conn.execute(q).scalar()

    def live_ids(self, conn: Connection, namespace: str) -> list[str]:
        return [
            r[0] for r in conn.execute(
                select(nodes.c.id).where(nodes.c.namespace == namespace, nodes.c.status == Status.LIVE.value)
            )
        ]

    def shape(self, conn: Connection, namespace: str) -> tuple[dict[str, int], dict[str, int], int]:
        """(nodes per status, live nodes per type, the deepest live node's depth), in
        one pass over the index that holds all three (no table rows are read): at a
        million nodes one pass costs ~0.1 s, and stats used to make two."""
        rows = conn.execute(
            select(nodes.c.status, nodes.c.type, func.count(), func.max(nodes.c.depth))
            .where(nodes.c.namespace == namespace)
            .group_by(nodes.c.status, nodes.c.type)
        ).all()
        by_status: dict[str, int] = {}
        by_type: dict[str, int] = {}
        depth = 0
        for status, type_, count, deepest in rows:
            by_status[status] = by_status.get(status, 0) + int(count)
            if status == Status.LIVE.value:
                by_type[type_] = int(count)
                depth = max(depth, int(deepest))
        return by_status, by_type, depth

    def touch(self, conn: Connection, ids: Sequence[str], column: str, ts: float) -> None:
        """Raise ``column`` (a time) to ``ts`` for the given nodes, never lowering it."""
        col = nodes.c[column]
        for chunk in _chunks(list(ids), 500):
            conn.execute(update(nodes).where(nodes.c.id.in_(chunk), col < ts).values({column: ts}))

    def touch_each(self, conn: Connection, column: str, times: Mapping[str, float]) -> None:
        """:meth:`touch` with a time per node, in one statement."""
        if times:
            conn.execute(_Q.touch_each[column], [{"b_id": i, "b_ts": ts} for i, ts in times.items()])

    def add_access(self, conn: Connection, counts: Mapping[str, tuple[int, float]]) -> None:
        """Add read counts and raise the last-access time, in one statement."""
        if counts:
            conn.execute(_Q.add_access[self.is_sqlite],
                         [{"b_id": i, "b_n": n, "b_ts": ts} for i, (n, ts) in counts.items()])

    def delete_nodes(self, conn: Connection, ids: Sequence[str]) -> None:
        for chunk in _chunks(list(ids), 500):
            conn.execute(delete(nodes).where(nodes.c.id.in_(chunk)))
            conn.execute(delete(passages).where(passages.c.node_id.in_(chunk)))
            self._drop_terms(conn, chunk)

    # -- the lexical index ------------------------------------------------------

    def index_terms(self, conn: Connection, namespace: str, node_id: str, counts: Mapping[str, int]) -> None:
        self.index_terms_many(conn, namespace, [(node_id, counts)])

    def index_terms_many(self, conn: Connection, namespace: str, items: Sequence[tuple[str, Mapping[str, int]]]) -> None:
        """The lexical terms of several nodes (node id, term counts), in one statement."""
        # Terms are stored cut to 64 characters: two long terms sharing that prefix
        # are one stored term (their counts add up), not a duplicate key.
        rows: list[tuple[str, str, str, int]] = []
        for node_id, counts in items:
            stored: dict[str, int] = {}
            for t, n in counts.items():
                stored[t[:64]] = stored.get(t[:64], 0) + n
            if self.keyring is not None:
                stored = {self.keyring.blind(t)[0]: n for t, n in stored.items()}
            rows.extend((namespace, t, node_id, n) for t, n in stored.items())
        if not rows:
            return
        held = Counter((a, t) for a, t, _, _ in rows)
        self._mark_changed(conn, {(namespace, i) for i, _ in items})
        if self.is_sqlite:
            # About ten rows a memory, none sealed: the driver's executemany, without
            # SQLAlchemy's per-row parameter processing (5x faster here).
            conn.exec_driver_sql(f"INSERT INTO {terms.name} (namespace, term, node_id, tf) VALUES (?, ?, ?, ?)", rows)
        else:
            conn.execute(_Q.insert_terms, [{"namespace": a, "term": t, "node_id": i, "tf": n} for a, t, i, n in rows])
        self._count_terms(conn, held, 1)

    def unindex_terms(self, conn: Connection, ids: Sequence[str]) -> None:
        for chunk in _chunks(list(ids), 500):
            self._drop_terms(conn, chunk)

    def _drop_terms(self, conn: Connection, ids: Sequence[str]) -> None:
        """Delete the postings of ``ids`` (at most 500) and count their terms down."""
        rows = conn.execute(_Q.held_terms, {"ids": list(ids)}).all()
        conn.execute(delete(terms).where(terms.c.node_id.in_(ids)))
        self._count_terms(conn, Counter((a, t) for a, t, _ in rows), -1)
        self._mark_changed(conn, {(a, i) for a, _, i in rows})

    def _mark_changed(self, conn: Connection, pairs: Iterable[tuple[str, str]]) -> None:
        """Note that the postings of these (namespace, node id) changed (SQLite only:
        a PostgreSQL sequence does not number commits in their order, so a reader
        could not catch up by position; nothing there reads the table)."""
        if self.is_sqlite and (rows := sorted(pairs)):
            conn.exec_driver_sql(f"INSERT OR REPLACE INTO {terms_changed.name} (namespace, node_id) VALUES (?, ?)", rows)

    def mark_all_changed(self, conn: Connection, namespace: str) -> None:
        """Note that every posting of ``namespace`` may have changed (an erasure)."""
        if self.is_sqlite:
            conn.execute(delete(terms_changed).where(terms_changed.c.namespace == namespace))
            self._mark_changed(conn, [(namespace, "")])

    def mark_rows_all_changed(self, conn: Connection, namespace: str) -> None:
        """Note that every node row of ``namespace`` may have changed (an erasure of
        the namespace, after its rows are deleted): the ids the triggers noted give
        way to one row without a node id, which makes a cache drop every row."""
        if self.is_sqlite:
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

    def all_postings(self, conn: Connection, namespace: str) -> Any:
        """A cursor over (stored term, node id, tf) of every posting of the namespace,
        as stored (terms cut or blinded), by term then node id: read it in chunks."""
        raw = conn.connection.driver_connection
        return raw.execute(  # type: ignore[union-attr]
            f"SELECT term, node_id, tf FROM {terms.name} WHERE namespace = ? ORDER BY term, node_id", (namespace,))

    def postings_of(self, conn: Connection, namespace: str, node_ids: Sequence[str]) -> list[tuple[str, str, int]]:
        """(stored term, node id, tf) of every posting of the nodes ``node_ids``."""
        raw = conn.connection.driver_connection
        # "+namespace": seek the node index. On the namespace alone, the primary
        # key's first column, SQLite's planner read every posting of the namespace
        # (about 75 ms at 100k memories, for five nodes; 0.05 ms off the node index).
        sql = f"SELECT term, node_id, tf FROM {terms.name} WHERE +namespace = ?"
        out: list[tuple[str, str, int]] = []
        for chunk in _chunks(list(node_ids), 500):
            out.extend(raw.execute(sql + f" AND node_id IN ({','.join('?' * len(chunk))})",  # type: ignore[union-attr]
                                   [namespace, *chunk]).fetchall())
        return out

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

    def term_df(self, conn: Connection, namespace: str, query_terms: Sequence[str]) -> dict[str, int]:
        """How many live nodes hold each of ``query_terms`` (terms no node holds are left
        out), off the counts kept with the postings."""
        if not query_terms:
            return {}
        cut = self._stored_terms(query_terms)
        out: dict[str, int] = {}
        for t, n in conn.execute(_Q.term_df, {"ns": namespace, "terms": list(cut)}).all():
            out[cut[t]] = out.get(cut[t], 0) + int(n)
        return out

    def postings(self, conn: Connection, namespace: str, query_terms: Sequence[str],
                 node_ids: Iterable[str] | None = None) -> list[tuple[str, str, int]]:
        """(term, node_id, term frequency) for every live node holding one of
        ``query_terms`` (of ``node_ids`` only, when given)."""
        ids = None if node_ids is None else list(dict.fromkeys(node_ids))
        if not query_terms or ids == []:
            return []
        cut = self._stored_terms(query_terms)
        if ids is not None and len(ids) > 500:
            return [p for chunk in _chunks(ids, 500) for p in self.postings(conn, namespace, query_terms, chunk)]
        rows: Sequence[Any]
        if self.is_sqlite:
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
        if self.keyring is not None or any(len(t) > 64 for t in query_terms):
            return [(cut.get(t, t), i, tf) for t, i, tf in rows]
        return list(rows)

    def term_count_drift(self, conn: Connection, namespace: str) -> int:
        """How many terms of the namespace have a kept document frequency other than
        their postings counted (0: the counts are right)."""
        counted: dict[str, int] = {t: int(n) for _, t, n in conn.execute(_postings_counted(namespace))}
        kept: dict[str, int] = {t: int(n) for t, n in conn.execute(
            select(term_counts.c.term, term_counts.c.n).where(term_counts.c.namespace == namespace))}
        return sum(1 for t in counted.keys() | kept.keys() if counted.get(t) != kept.get(t))

    def recount_terms(self, conn: Connection, namespace: str) -> None:
        """Count the namespace's document frequencies afresh off its postings."""
        conn.execute(delete(term_counts).where(term_counts.c.namespace == namespace))
        conn.execute(insert(term_counts).from_select(["namespace", "term", "n"], _postings_counted(namespace)))

    def term_masks(self, conn: Connection, namespace: str,
                   groups: Sequence[Sequence[str]]) -> dict[str, int]:
        """Node id -> mask for every live node holding a term of ``groups``: bit j of
        the mask is set when the node holds a term of ``groups[j]`` (the forms of one
        word, say), whichever and however many. One pass over the postings without
        their tf (SQLite groups them slower than Python does: it sorts)."""
        bit_of: dict[str, int] = {}
        for j, group in enumerate(groups):
            for stored in self._stored_terms(group):
                bit_of[stored] = bit_of.get(stored, 0) | 1 << j
        if not bit_of:
            return {}
        rows: Iterable[Any]
        if self.is_sqlite:
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

    def has_more_branches(self, conn: Connection, namespace: str, than: int) -> bool:
        """Whether the namespace's live nodes fall into more than ``than`` branches (reads
        at most ``than + 1`` distinct branch ids off the branch index)."""
        return len(conn.execute(_Q.more_branches, {"ns": namespace, "limit": than + 1}).all()) > than

    def subtree_all(self, conn: Connection, namespace: str) -> list[Row[Any]]:
        """Every node of the namespace, live or archived."""
        return list(conn.execute(select(*NODE_COLUMNS).where(nodes.c.namespace == namespace)))

    def get_setting(self, conn: Connection, key: str) -> str | None:
        return conn.execute(_Q.get_setting, {"key": key}).scalar()

    def set_setting(self, conn: Connection, key: str, value: str) -> None:
        if self.is_postgres:  # an upsert: two processes may set the same key at once
            # Imported here, as below: loading the dialect slows every start.
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            q = pg_insert(settings).values(key=key, value=value)
            conn.execute(q.on_conflict_do_update(index_elements=[settings.c.key], set_={"value": value}))
        elif self.get_setting(conn, key) is None:
            conn.execute(insert(settings).values(key=key, value=value))
        else:
            conn.execute(update(settings).where(settings.c.key == key).values(value=value))

    def live_count(self, conn: Connection, namespace: str) -> int:
        return int(conn.execute(_Q.live_count, {"ns": namespace}).scalar_one())

    # -- the operation log, the outbox, cursors and checkpoints ---------------------

    def log(self, conn: Connection, namespace: str, session: str, ts: float, op: str, node_id: str | None, payload: Mapping[str, Any]) -> int:
        result = conn.execute(
            insert(oplog).values(
                namespace=namespace, session=session, ts=ts, op=op, node_id=node_id,
                payload=json.dumps(payload, ensure_ascii=False, sort_keys=True),
            )
        )
        seq = int(result.inserted_primary_key[0])  # type: ignore[index]
        if self.audit_on and op != "access":
            self.audit_ops(conn, namespace, session, [(ts, op, node_id, payload, seq)])
        return seq

    def log_many(self, conn: Connection, namespace: str, session: str,
                 entries: Sequence[tuple[float, str, str | None, Mapping[str, Any]]]) -> list[int]:
        """Append (ts, op, node id, payload) entries in order, in one statement; their positions."""
        if not entries:
            return []
        result = conn.execute(_Q.log_many, [
            {"namespace": namespace, "session": session, "ts": ts, "op": op, "node_id": node_id,
             "payload": json.dumps(payload, ensure_ascii=False, sort_keys=True)}
            for ts, op, node_id, payload in entries
        ])
        seqs = [int(seq) for seq in result.scalars().all()]
        if self.audit_on:
            self.audit_ops(conn, namespace, session, [(*e, q) for e, q in zip(entries, seqs, strict=True) if e[1] != "access"])
        return seqs

    # -- the audit trail ------------------------------------------------------------

    def enable_audit(self) -> None:
        """Start the audit trail (its head row) if the store has none; from then on
        every write through any handle is audited."""
        def run(conn: Connection) -> None:
            value = json.dumps({"seq": 0, "hash": AUDIT_GENESIS})
            if self.is_postgres:
                from sqlalchemy.dialects.postgresql import insert as pg_insert

                conn.execute(pg_insert(settings).values(key="audit_head", value=value).on_conflict_do_nothing())
            elif self.get_setting(conn, "audit_head") is None:
                conn.execute(insert(settings).values(key="audit_head", value=value))

        if not self.audit_on:
            self.write(run)
            self.audit_on = True

    def audit_ops(self, conn: Connection, namespace: str, session: str,
                  entries: Sequence[tuple[float, str, str | None, Mapping[str, Any], int]]) -> None:
        """Audit log entries: the operation, its node ids and its payload without words."""
        rows = []
        for ts, op, node_id, payload, seq in entries:
            ids = ([node_id] if node_id is not None else []) + [
                i for i in payload.get("ids", ()) if isinstance(i, str) and i != node_id]
            detail = {k: v for k, v in payload.items() if k not in AUDIT_OMITS and k != "ids"}
            detail["log_seq"] = seq
            rows.append((ts, op, ids, detail))
        self.audit(conn, namespace, session, rows)

    def audit(self, conn: Connection, namespace: str, session: str,
              rows: Sequence[tuple[float, str, Sequence[str], Mapping[str, Any]]]) -> None:
        """Append (ts, action, node ids, detail) entries to the audit chain, inside the
        caller's write transaction (the head row is locked on PostgreSQL, so that two
        writers never fork the chain)."""
        if not rows:
            return
        q = select(settings.c.value).where(settings.c.key == "audit_head")
        if not self.is_sqlite:
            q = q.with_for_update()
        raw = conn.execute(q).scalar()
        if raw is None:
            raise StorageError("the audit trail has no head row: open the store with audit on (enable_audit)")
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
        self.set_setting(conn, "audit_head", json.dumps({"seq": seq, "hash": prev}))

    def log_payloads(self, conn: Connection, namespace: str, *, last_only: bool = False) -> list[tuple[int, str]]:
        q = select(oplog.c.seq, oplog.c.payload).where(oplog.c.namespace == namespace).order_by(oplog.c.seq.desc())
        if last_only:
            q = q.limit(1)
        return [(r[0], r[1]) for r in conn.execute(q)]

    def mark_corrupt(self, conn: Connection, seqs: Sequence[int]) -> None:
        """Replace unreadable log payloads by a marker, so that readers of the log can skip them."""
        for chunk in _chunks(list(seqs), 500):
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
        for chunk in _chunks(added, 500):
            n += raw.execute(f"SELECT count(*) FROM {nodes.name} WHERE status = ? "  # type: ignore[union-attr]
                             f"AND namespace = ? AND id IN ({','.join('?' * len(chunk))})",
                             [Status.LIVE.value, namespace, *chunk]).fetchone()[0]
        return n

    def last_seq(self, conn: Connection, namespace: str) -> int:
        raw = self._plain(conn)
        if raw is not None:
            value = _driver_execute(raw, _Q.last_seq, {"ns": namespace}).fetchone()[0]
            return int(value) if value is not None else 0
        value = conn.execute(_Q.last_seq, {"ns": namespace}).scalar()
        return int(value) if value is not None else 0

    def purge_log(self, conn: Connection, namespace: str, ids: Sequence[str]) -> None:
        """Remove stored content of deleted nodes from the namespace's operation log
        (another namespace's log may name the same ids: an import after a time travel)."""
        for chunk in _chunks(list(ids), 500):
            conn.execute(update(oplog).where(oplog.c.namespace == namespace, oplog.c.node_id.in_(chunk))
                         .values(payload='{"purged": true}'))

    def enqueue(self, conn: Connection, namespace: str, ids: Iterable[str], action: str) -> None:
        rows = [{"namespace": namespace, "node_id": i, "action": action} for i in ids]
        if rows:
            conn.execute(_Q.insert_outbox, rows)

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

    def replace_embedding(self, conn: Connection, node_id: str, blob: bytes, *, path: str, content_hash: str) -> bool:
        """Store ``blob`` as the vector of ``node_id`` if the node still has a vector,
        this path and this content; whether it did."""
        q = (update(nodes).where(nodes.c.id == node_id, nodes.c.path == path, nodes.c.content_hash == content_hash,
                                 func.length(nodes.c.embedding) > 0).values(embedding=blob))
        return bool(conn.execute(q).rowcount)

    def pending_upserts(self, conn: Connection, namespace: str, limit: int = 4096) -> list[str]:
        """Ids of the nodes whose index upsert waits in the outbox, the latest ``limit``."""
        raw = self._plain(conn)
        if raw is not None:  # (every query asks: SQLite's cursor, as node_rows)
            return [r[0] for r in _driver_execute(raw, _Q.pending_upserts, {"ns": namespace, "limit": limit})]
        return [r[0] for r in conn.execute(_Q.pending_upserts, {"ns": namespace, "limit": limit}).all()]

    def clear_outbox(self, conn: Connection, seqs: Sequence[int]) -> None:
        for chunk in _chunks(list(seqs), 500):
            conn.execute(delete(outbox).where(outbox.c.seq.in_(chunk)))

    def get_cursor(self, conn: Connection, namespace: str, session: str) -> str | None:
        return conn.execute(_Q.get_cursor, {"ns": namespace, "session": session}).scalar()

    def set_cursor(self, conn: Connection, namespace: str, session: str, active_id: str | None, ts: float) -> None:
        where = (cursors.c.namespace == namespace) & (cursors.c.session == session)
        if self.is_postgres:  # an upsert: two processes may share a session
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            q = pg_insert(cursors).values(namespace=namespace, session=session, active_id=active_id, updated_at=ts)
            conn.execute(q.on_conflict_do_update(
                index_elements=[cursors.c.namespace, cursors.c.session],
                set_={"active_id": active_id, "updated_at": ts},
            ))
        elif conn.execute(select(func.count()).where(where)).scalar_one():
            conn.execute(update(cursors).where(where).values(active_id=active_id, updated_at=ts))
        else:
            conn.execute(insert(cursors).values(namespace=namespace, session=session, active_id=active_id, updated_at=ts))

    def repoint_cursors(self, conn: Connection, namespace: str, gone: Sequence[str], to: str | None, ts: float) -> None:
        """Cursors on nodes that are leaving the live tree move to ``to``."""
        for chunk in _chunks(list(gone), 500):
            conn.execute(
                update(cursors)
                .where(cursors.c.namespace == namespace, cursors.c.active_id.in_(chunk))
                .values(active_id=to, updated_at=ts)
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


def _postings_counted(namespace: str | None = None) -> Any:
    """(namespace, term, nodes holding it) off the postings, of one namespace or all:
    what the kept document frequencies must equal."""
    q = select(terms.c.namespace, terms.c.term, func.count())
    if namespace is not None:
        q = q.where(terms.c.namespace == namespace)
    return q.group_by(terms.c.namespace, terms.c.term)


def live_select(namespace: str, columns: Sequence[Any]) -> Any:
    """``columns`` of the namespace's live nodes (what :meth:`SqlStore.live_columns`
    reads on PostgreSQL)."""
    return select(*columns).where(nodes.c.namespace == namespace, nodes.c.status == Status.LIVE.value)


def sqlite_live_sql(columns: Sequence[Any]) -> str:
    """:func:`live_select` on SQLite, through ``hm_nodes_forget`` (one parameter: the
    namespace): covering when ``columns`` are among FORGET_COLUMNS."""
    return (f"SELECT {', '.join(c.name for c in columns)} FROM {nodes.name} INDEXED BY hm_nodes_forget "
            f"WHERE namespace || '' = ? AND status = '{Status.LIVE.value}'")


def _chunks(items: list[T], n: int) -> Iterator[list[T]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        # Let SQLAlchemy's begin event issue BEGIN itself (pysqlite's own is deferred).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        # FULL: a commit is on disk before the call returns (survives power loss, not only a crash).
        cur.execute("PRAGMA synchronous=FULL")
        cur.close()
        record.info["hm_synchronous"] = "FULL"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if not options.get("hm_write"):
            # (SQLite's own cursor: a read transaction begins at every query, and
            # SQLAlchemy's execution of the statement costs ten times SQLite's)
            conn.connection.driver_connection.execute("BEGIN")  # type: ignore[union-attr]
            return
        # The level is a property of the connection and cannot change inside a
        # transaction: set before BEGIN, when this write wants another than the last.
        level = "FULL" if options.get("hm_synced", True) else "NORMAL"
        info = conn.connection.info
        if info.get("hm_synchronous") != level:
            conn.exec_driver_sql(f"PRAGMA synchronous={level}")
            info["hm_synchronous"] = level
        # Writers take the lock up front so two writers never deadlock upgrading a read lock.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


__all__ = ["SqlStore", "node_from_row", "nodes"]
