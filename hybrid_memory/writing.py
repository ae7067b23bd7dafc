"""The write path of MemoryTree: placing new memories in the tree (a twin is
reinforced instead: :mod:`~hybrid_memory.dedup`), written one statement per kind for
a whole batch, and the row lookups every mutation shares. Items come checked
(:mod:`~hybrid_memory.items`); what a batch reads, it reads once
(:mod:`~hybrid_memory.batch_reads`).

Invariant: a batch is one transaction: a failure anywhere in it (a limit, an unknown
parent, a fault) writes none of its items."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from sqlalchemy.engine import Connection, Row

from . import _validate as check
from . import context, text
from .batch_reads import RowMap, Seen
from .config import Config
from .dedup import Dedup, Earlier
from .embed import Embedder
from .embedding_worker import Embedding
from .errors import (
    HybridMemoryError,
    InvalidInputError,
    InvalidTypeError,
    NamespaceError,
    NotFoundError,
)
from .ids import new_node_id
from .items import ROOT as ROOT
from .items import Auto, Prepared, prepare
from .items import NodeRef as NodeRef
from .items import ParentRef as ParentRef
from .items import Root as Root
from .items import to_json as to_json
from .model import SUPERSEDING, Node, NodeType, Status, path_ids
from .recovery import nearest
from .store.schema import EMBED, node_from_row, to_blob
from .store.sql import SqlStore
from .store.vectors import VectorIndex

log = logging.getLogger("hybrid_memory")

R = TypeVar("R", Row[Any], RowMap)
T = TypeVar("T")


class Writer:
    """What a MemoryTree needs to write memories for one namespace and session."""

    def __init__(
        self,
        *,
        store: SqlStore,
        index: VectorIndex,
        embedder: Embedder,
        config: Config,
        namespace: str,
        session: str,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.index = index
        self.embedder = embedder
        self.config = config
        self.namespace = namespace
        self.session = session
        self._clock = clock
        #: Called after each node a batch writes (a fault-injection point for tests).
        self.fault: Callable[[str], None] = lambda _point: None
        self.dedup = Dedup(config, embedder)

    def prepare(self, item: Mapping[str, Any], i: int) -> Prepared:
        """Item ``i`` of a write, checked (:func:`items.prepare`)."""
        return prepare(item, i, self.config, self._clock)

    def dedup_candidates(self, vectors: np.ndarray[Any, Any]) -> list[list[tuple[str, float]]]:
        # Nearest neighbours from the whole namespace (an unfiltered query is fast), for
        # items whose branch holds too many memories of their type to score here;
        # branch and type are checked against the relational truth inside the write.
        n = self.config.dedup.candidates
        try:
            return nearest(self.store, self.index, self.namespace, vectors, n)
        except Exception as exc:  # the index is derived: a failure only skips dedup
            log.warning("dedup lookup skipped: vector index unavailable (%s)", exc)
            return [[] for _ in range(len(vectors))]

    def paths(self, prepared: Sequence[Prepared]) -> list[context.Path]:
        """The contents above where each item will go, read before the batch's
        transaction so that the items are embedded in context while it reads. The
        write checks each against what it finds (:meth:`Seen.above`)."""
        refs: set[str] = set()
        for p in prepared:
            try:
                if isinstance(p.parent, (Node, str)):
                    refs.add(self.node_id(p.parent))
            except HybridMemoryError:
                pass  # (the write raises it)
        with self.store.reading() as conn:
            active = self.store.sessions.get_cursor(conn, self.namespace, self.session)
            rows = self.store.nodes.get_many(conn, refs | ({active} if active is not None else set()))
            above = context.ancestors(self.store, conn, [r.path for r in rows.values()])

        def under(node_id: str | None, *, live: bool = False) -> context.Path:
            row = rows.get(node_id) if node_id is not None else None
            if row is None or row.namespace != self.namespace or (live and row.status != Status.LIVE.value):
                return ()
            return (*above[row.path], row.content)

        current = under(active, live=True)  # (moved by each new task that takes the focus)

        def now_active() -> context.Path:
            return current

        def named(node: NodeRef) -> context.Path:
            return under(node.id if isinstance(node, Node) else node)

        by_key: dict[str, context.Path] = {}
        out: list[context.Path] = []
        for p in prepared:
            path = choose_parent(p.parent, root=(), active=now_active, by_key=by_key, named=named)
            out.append(path)
            if p.key is not None:
                by_key[p.key] = (*path, p.content)
            if self.takes_focus(p):
                current = (*path, p.content)
        return out

    def takes_focus(self, p: Prepared) -> bool:
        """Whether ``p``, once written, is the session's active node (the one the
        items after it without a parent go under): a new task, with
        ``write.focus_new_tasks``."""
        return p.type is NodeType.TASK and self.config.write.focus_new_tasks

    def write_batch(self, conn: Connection, prepared: Sequence[Prepared],
                    vectors: np.ndarray[Any, Any] | Embedding, paths: Sequence[context.Path]) -> Written:
        """Write ``prepared`` in ``conn``'s transaction: each item becomes a new node or
        reinforces its twin. Statements are gathered per kind and written together
        (:class:`_Pending`); a twin to reinforce writes the gathered ones first (it may
        be one of them, and its merge is logged after them).

        ``vectors`` may be an :class:`Embedding` still running on another thread: the
        reads that need no vector are done first (:meth:`_read_ahead`), then the
        items wait for it. A single item that :meth:`_settled_by_words` settles waits
        for nothing: it is written with the empty blob and an EMBED outbox row, the
        transaction commits while the embedder runs, and :meth:`settle` stores the
        vector (``Written.late``).

        ``vectors`` are the items read with ``paths`` (:meth:`paths`). An item whose
        path the transaction finds changed is written without its vector, as one
        committed before it, and embedded after the commit (``Written.misread``)."""
        b = self._begin(conn, prepared, vectors)
        for at, (p, vec, counts, term_set) in enumerate(zip(prepared, b.rows, b.counts, b.term_sets, strict=True)):
            self._write_item(b, at, p, vec, counts, term_set, paths[at])
        b.pending.flush()
        self._demote(conn, b)
        return Written(b.out, b.late, tuple(b.misread))

    def _begin(self, conn: Connection, prepared: Sequence[Prepared], vectors: np.ndarray[Any, Any] | Embedding) -> _Batch:
        """A batch's state, with the reads that need no vector done (the embedding may
        still be running), and ``late`` set for an item written before its vector."""
        active_id = self.store.sessions.get_cursor(conn, self.namespace, self.session)
        named = {p.parent.id if isinstance(p.parent, Node) else p.parent
                 for p in prepared if isinstance(p.parent, (Node, str))}
        # The nodes the batch's items go under: the parents named by id, and the active
        # node when an item names none.
        under = named | ({active_id} if active_id is not None and any(p.parent is None for p in prepared) else set())
        seen = Seen(self.store, conn, namespace=self.namespace, config=self.config, under=under,
                    contents=[p.content for p in prepared if p.type is not NodeType.TASK],
                    checked=lambda node_id, row: self.checked(node_id, row, live=True))
        fanout: dict[str | None, int] = {}  # children per parent: stored, plus this batch's
        late: Embedding | None = None
        rows: Iterable[np.ndarray[Any, Any]] = vectors
        if isinstance(vectors, Embedding):
            self._read_ahead(conn, seen, prepared, active_id, fanout)
            if len(prepared) == 1 and self._settled_by_words(seen, prepared[0], active_id):
                # No stored memory can be this one's twin but by its words: write it
                # now, and its embedding once the embedder returns it.
                late, rows = vectors, np.zeros((1, self.embedder.dim), dtype=np.float32)  # (compared with nothing)
        return _Batch(self, conn, seen, prepared, vectors, active_id=active_id, fanout=fanout, late=late, rows=rows)

    def _write_item(self, b: _Batch, at: int, p: Prepared, vec: np.ndarray[Any, Any], counts: Mapping[str, int],
                    term_set: set[str], path_read: context.Path) -> None:
        """Write item ``at`` of the batch: reinforce its twin, or gather its new node."""
        cfg = self.config
        parent_row = self._resolve_parent(b.seen, p.parent, b.by_key, b.active_id)
        twin: RowMap | None = None
        near: list[RowMap] = []
        if cfg.dedup.enabled and parent_row is not None and p.type is not NodeType.TASK:
            branch = b.seen.branch_info(parent_row)[0]
            earlier = b.written.candidates((branch, p.type.value), term_set)
            twin, near = self.dedup.find_twin(b.seen, p.content, p.type.value, vec, term_set, branch, earlier,
                                              functools.partial(b.from_index, at))
        if twin is not None:
            b.pending.flush()
            node = self._reinforce(b.conn, twin, p)
            if p.key is not None:
                b.by_key[p.key] = self.store.nodes.get(b.conn, node.id)._mapping  # type: ignore[union-attr]
            b.out.append(node)
            return
        row, branch = self._new_row(b, p, vec, parent_row, path_read)
        payload = {k: v for k, v in row.items() if k not in ("embedding",)}
        focus = self.takes_focus(p)
        if focus:
            payload["focus"] = True  # portability: replay moves the cursor too
        b.pending.add(row, counts, path_ids(row["path"])[:-1], payload, focus=focus)
        if focus:
            b.active_id = row["id"]
        self.fault("add_many_item")
        if cfg.dedup.enabled and parent_row is not None and p.type in SUPERSEDING and cfg.dedup.supersede < 1:
            key = (branch, p.type.value)
            before: list[tuple[RowMap, set[str]]] = [(r, b.seen.terms_of(r)) for r in near]
            before += [(r, r["term_set"]) for r in b.written.last(key, cfg.dedup.candidates)]
            self.dedup.supersede(row, term_set, before, b.demoted)
        if cfg.dedup.enabled:
            b.written.add((branch, p.type.value), dict(row, embedding_vec=vec, term_set=term_set))
        if p.key is not None:
            b.by_key[p.key] = row
        b.out.append(node_from_row(row))

    def _new_row(self, b: _Batch, p: Prepared, vec: np.ndarray[Any, Any], parent_row: RowMap | None,
                 path_read: context.Path) -> tuple[dict[str, Any], str]:
        """The row of ``p``'s new node under ``parent_row`` (within the limits), and its
        branch. Written without its vector when its path is not the one it was read
        with (``path_read``), or when its vector comes after the commit."""
        node_id = new_node_id()
        if parent_row is None:
            path, depth, pinfo = f"{node_id}/", 0, None
        else:
            path, depth = f"{parent_row['path']}{node_id}/", parent_row["depth"] + 1
            pinfo = b.seen.branch_info(parent_row)
        self._check_limits(b.conn, b.fanout, None if parent_row is None else parent_row["id"], depth)
        branch = branch_info_for(node_id, p.type, pinfo, self.config.write.branch_by)[0]
        above = () if parent_row is None else b.seen.above(parent_row)
        b.seen.paths[node_id] = (*above, p.content)
        moved = above != path_read  # (since its vector was read: embedded after the commit)
        if moved:
            b.misread.append(node_id)
        row = dict(
            id=node_id, namespace=self.namespace, parent_id=None if parent_row is None else parent_row["id"],
            type=p.type.value, content=p.content, meta=to_json(p.meta), importance=p.importance,
            confidence=p.confidence, access_count=0, pinned=p.pinned, status=Status.LIVE.value,
            version=1, depth=depth, path=path, branch_id=branch, created_at=p.ts, updated_at=p.ts,
            accessed_at=p.ts, active_at=p.ts, archived_op=None, content_hash=self.store.content_hash(p.content),
            tokens=text.count_tokens(p.content),
            embedding=b"" if b.late is not None or moved else to_blob(vec),
            embed_model=self.embedder.name,
        )
        b.seen.rows[node_id] = row
        return row, branch

    def _demote(self, conn: Connection, b: _Batch) -> None:
        """Write the importances the batch's new memories lowered (``dedup.supersede``)."""
        for node_id, (importance, by) in b.demoted.items():
            fresh = self.store.nodes.get(conn, node_id)  # (a twin merged into it since it was read)
            if fresh is None or fresh.status != Status.LIVE.value or fresh.importance <= importance:
                continue
            # A weight the memory changed by itself, not an edit: the version stays.
            values = dict(importance=importance)
            self.store.nodes.update(conn, node_id, **values)
            self.store.log.append(conn, self.namespace, self.session, b.seen.rows[by]["created_at"], "supersede",
                                  node_id, dict(values, by=by))

    def settle(self, written: Written) -> None:
        """Store the vectors of a batch committed before them (``written.late``), in a
        commit of their own that does not wait for the disk: they are derived from
        the committed contents, and a node that a crash or a power cut leaves without
        its vector is embedded at the next open."""
        if written.late is None or all(n.merged for n in written.nodes):
            return
        try:
            got = written.late.all()
        except Exception:
            # The memory stays (found by its words now, by meaning once an open embeds
            # it); the caller still hears of the failure.
            log.warning("the embedder failed after %s was committed: kept without its vector until the next open",
                        ", ".join(n.id for n in written.nodes if not n.merged))
            raise
        pairs = [(n.id, to_blob(v)) for n, v in zip(written.nodes, got, strict=True)
                 if not n.merged and n.id not in written.misread]
        self.fault("before_vector")
        self.store.write(lambda conn: self.store.nodes.settle_embeddings(conn, self.namespace, pairs), synced=False)

    def _settled_by_words(self, seen: Seen, p: Prepared, active_id: str | None) -> bool:
        """Whether dedup can decide ``p`` (the only item of its batch) without its
        vector: it is a task or goes under no node (never a twin), it has an exact
        twin, or its branch holds no more memories of its type than dedup compares
        (so all of them are its nearest) and none of them passes the dedup rule's
        word tests (the lexical overlap and the same figures), which the cosine
        cannot make up for. Read after :meth:`_read_ahead`, from what it read."""
        d = self.config.dedup
        if not d.enabled or p.type is NodeType.TASK:
            return True
        try:
            parent_row = self._resolve_parent(seen, p.parent, {}, active_id)
        except HybridMemoryError:
            return False  # the write raises it
        if parent_row is None:
            return True
        branch = seen.branch_info(parent_row)[0]
        if seen.exact_twin(p.content, p.type.value, branch) is not None:
            return True
        group = seen.read_group(branch, p.type.value, d.candidates)
        if group is None or len(group[0]) > d.candidates:
            return False
        return all(self.dedup.word_overlap(row["content"], p.content) is None
                   for row in seen.near_rows(group[0], branch, p.type.value))

    def _read_ahead(self, conn: Connection, seen: Seen, prepared: Sequence[Prepared], active_id: str | None,
                    fanout: dict[str | None, int]) -> None:
        """Read what the leading items of the batch will need and no vector decides:
        their parents, branch heads, the stored memories a twin of each could be (ids
        and embeddings, and the rows themselves when there are no more of them than
        dedup compares), and their parents' child counts. It stops at the first item
        whose parent this batch writes (an earlier item's key, or a new task that
        takes the focus). A problem found here (an unknown parent, say) is left for
        the write itself to raise, in item order."""
        cfg = self.config
        keys = {p.key for p in prepared if p.key is not None}
        for p in prepared:
            if isinstance(p.parent, str) and p.parent in keys:
                return
            try:
                parent_row = self._resolve_parent(seen, p.parent, {}, active_id)
            except HybridMemoryError:
                return
            parent_id = None if parent_row is None else parent_row["id"]
            if parent_id not in fanout:
                fanout[parent_id] = self.store.tree.child_count(conn, self.namespace, parent_id, cfg.write.max_children)
            if cfg.dedup.enabled and parent_row is not None and p.type is not NodeType.TASK:
                seen.read_group(seen.branch_info(parent_row)[0], p.type.value, cfg.dedup.candidates)
            if self.takes_focus(p):
                return  # the items after it may go under it

    def _resolve_parent(
        self, seen: Seen, ref: ParentRef, by_key: Mapping[str, RowMap], active_id: str | None
    ) -> RowMap | None:
        """The row of the node an item naming ``ref`` goes under (:func:`choose_parent`),
        None for the top; an unknown parent raises."""
        def active() -> RowMap | None:
            if active_id is None:
                return None
            row = seen.parent(active_id, strict=False)
            return row if row is not None and row["status"] == Status.LIVE.value else None

        def named(node: NodeRef) -> RowMap | None:
            try:
                return seen.parent(self.node_id(node))
            except NotFoundError as exc:
                raise NotFoundError(f"unknown parent: {exc}") from None

        return choose_parent(ref, root=None, active=active, by_key=by_key, named=named)

    def branch_info(self, conn: Connection, parent: RowMap) -> tuple[str, bool]:
        head = parent["branch_id"]
        if head == parent["id"]:
            return head, parent["type"] == NodeType.TASK.value
        row = self.store.nodes.get(conn, head)
        return head, row is not None and row.type == NodeType.TASK.value

    @property
    def max_depth(self) -> int:
        """``write.max_depth``, and on PostgreSQL no deeper than its B-tree index rows
        (2,704 bytes, holding the namespace and the path, 17 bytes a level) allow."""
        if self.store.is_postgres:
            return min(self.config.write.max_depth, (2680 - len(self.namespace.encode("utf-8"))) // 17 - 1)
        return self.config.write.max_depth

    def check_depths(self, paths: Sequence[context.Path]) -> None:
        """Refuse a batch whose items :meth:`paths` places deeper than ``write.max_depth``,
        before anything is embedded (the write checks again against what it finds)."""
        deepest = max((len(path) for path in paths), default=0)
        if deepest > self.max_depth:
            raise self._too_deep(deepest)

    def _too_deep(self, depth: int) -> InvalidInputError:
        return InvalidInputError(f"the new node would be at depth {depth}; the limit is {self.max_depth} (write.max_depth)")

    def _check_limits(self, conn: Connection, fanout: dict[str | None, int], parent_id: str | None, depth: int) -> None:
        """``write.max_depth`` and ``write.max_children``: a write past either raises
        (its transaction, the whole batch, rolls back)."""
        cfg = self.config.write
        if depth > self.max_depth:
            raise self._too_deep(depth)
        if parent_id not in fanout:
            fanout[parent_id] = self.store.tree.child_count(conn, self.namespace, parent_id, cfg.max_children)
        fanout[parent_id] += 1
        if fanout[parent_id] > cfg.max_children:
            where = f"node {parent_id}" if parent_id is not None else "the root"
            raise InvalidInputError(f"{where} would have more than {cfg.max_children} children (write.max_children)")

    def _reinforce(self, conn: Connection, twin: RowMap, p: Prepared) -> Node:
        d = self.config.dedup
        fresh = self.store.nodes.get(conn, twin["id"], lock=True)  # what is raised below is read here
        if fresh is not None:  # the twin may be a row of this batch, or an exact twin's few columns
            twin = fresh._mapping
        values = dict(
            importance=max(twin["importance"], p.importance),
            confidence=min(1.0, max(twin["confidence"], p.confidence) + d.confidence_step),
            accessed_at=max(twin["accessed_at"], p.ts),
            updated_at=max(twin["updated_at"], p.ts),
            version=twin["version"] + 1,
        )
        self.store.nodes.update(conn, twin["id"], **values)
        self.store.nodes.touch(conn, path_ids(twin["path"])[:-1], "active_at", p.ts)
        self.store.log.append(conn, self.namespace, self.session, p.ts, "merge", twin["id"], dict(values, content=p.content))
        return node_from_row(self.store.nodes.get(conn, twin["id"]), merged=True)  # type: ignore[arg-type]

    def set_active(self, conn: Connection, node_id: str | None, ts: float, seq: int) -> None:
        self.store.sessions.set_cursor(conn, self.namespace, self.session, node_id, ts, focused=True)
        if self.config.write.checkpoint_on_focus:
            self.store.sessions.add_checkpoint(conn, self.namespace, self.session, node_id, seq, ts, "focus")

    def row(
        self, conn: Connection, ref: object, *, live: bool = False, lock: bool = False, ancestors: bool = False
    ) -> Row[Any]:
        """The row ``ref`` names, checked to be of this namespace (and ``live``).
        In a write: ``lock`` locks it until commit (a write that depends on what it
        reads); ``ancestors`` locks its ancestors too, root first (a write that hangs
        something under it or moves it). Both are no-ops on SQLite."""
        node_id = self.node_id(ref)
        row = self.store.tree.lock_path(conn, node_id) if ancestors else self.store.nodes.get(conn, node_id, lock=lock)
        return self.checked(node_id, row, live=live)

    def node_id(self, ref: object) -> str:
        """The id ``ref`` names (a Node of another namespace is refused here)."""
        if isinstance(ref, Node):
            if ref.namespace != self.namespace:
                raise NamespaceError(f"node {ref.id} belongs to namespace {ref.namespace!r}, not {self.namespace!r}")
            return ref.id
        if isinstance(ref, str):
            if len(ref) > 64 or "\x00" in ref or not ref.isprintable() or not ref.isascii():
                # No stored id looks like this (ids are short ASCII): not found, without a query.
                raise NotFoundError(f"no node {check.show(ref)}")
            return ref
        raise InvalidTypeError(f"expected a Node or a node id, got {type(ref).__name__}")

    def checked(self, node_id: str, row: R | None, *, live: bool) -> R:
        """``row`` (a Row or a mapping) when it exists in this namespace (and is live)."""
        if row is None:
            raise NotFoundError(f"no node {node_id!r}")
        m = row._mapping if isinstance(row, Row) else row
        if m["namespace"] != self.namespace:
            raise NamespaceError(f"node {node_id} belongs to another namespace, not {self.namespace!r}")
        if live and m["status"] != Status.LIVE.value:
            raise NotFoundError(f"node {node_id} is archived; restore it first")
        return row


@dataclass(frozen=True)
class Written:
    """What :meth:`Writer.write_batch` wrote: the nodes, and the embedding still
    running for those written before their vector (see :meth:`Writer.settle`)."""

    nodes: list[Node]
    late: Embedding | None = None
    #: Nodes written without a vector because their path changed after it was read.
    misread: tuple[str, ...] = ()


class _Batch:
    """What one :meth:`Writer.write_batch` holds while it goes through its items."""

    def __init__(self, writer: Writer, conn: Connection, seen: Seen, prepared: Sequence[Prepared],
                 vectors: np.ndarray[Any, Any] | Embedding, *, active_id: str | None, fanout: dict[str | None, int],
                 late: Embedding | None, rows: Iterable[np.ndarray[Any, Any]]) -> None:
        self._writer, self.conn, self.seen, self._vectors = writer, conn, seen, vectors
        #: The active node new items hang under (a new task that takes the focus moves it).
        self.active_id = active_id
        self.fanout = fanout  # children per parent: stored, plus this batch's
        #: The embedding the items are written before (see Writer.settle), and the vectors written.
        self.late, self.rows = late, rows
        self._index_near: list[list[tuple[str, float]]] = []
        self.pending = _Pending(writer, conn)
        self.demoted: dict[str, tuple[float, str]] = {}  # id -> (lowered importance, superseded by)
        self.by_key: dict[str, RowMap] = {}
        self.counts = [text.term_counts(p.content) for p in prepared]
        self.term_sets = [set(c) for c in self.counts]
        # Rows written earlier in this batch, by (branch, type): the only ones a twin can be.
        self.written = Earlier(self.term_sets, writer.config.dedup.lexical)
        self.out: list[Node] = []
        self.misread: list[str] = []

    def from_index(self, i: int) -> list[tuple[str, float]]:
        """Item ``i``'s nearest in the vector index (asked once for the whole batch,
        the first time an item needs it)."""
        if not self._index_near:
            vectors = self._vectors
            self._index_near.extend(self._writer.dedup_candidates(
                vectors.all() if isinstance(vectors, Embedding) else vectors))
        return self._index_near[i]


class _Pending:
    """A batch's new nodes, written one statement per kind instead of one per node:
    node rows, lexical terms, operation-log entries, outbox rows, the raised
    ``active_at`` of their ancestors, and the focus moves of new tasks (one
    checkpoint each, naming the log position of the task's add; the cursor ends
    on the last)."""

    def __init__(self, writer: Writer, conn: Connection) -> None:
        self._writer, self._conn = writer, conn
        self._nodes: list[dict[str, Any]] = []
        self._terms: list[tuple[str, Mapping[str, int]]] = []
        self._log: list[tuple[float, str, str, Mapping[str, Any]]] = []
        self._touch: dict[str, float] = {}
        self._focus: list[tuple[int, str, float]] = []  # (index in _log, node id, ts)

    def add(self, row: dict[str, Any], counts: Mapping[str, int], ancestors: Sequence[str],
            payload: Mapping[str, Any], *, focus: bool) -> None:
        ts = row["created_at"]
        if focus:
            self._focus.append((len(self._log), row["id"], ts))
        self._nodes.append(row)
        self._terms.append((row["id"], counts))
        self._log.append((ts, "add", row["id"], payload))
        for a in ancestors:
            if self._touch.get(a, float("-inf")) < ts:
                self._touch[a] = ts

    def flush(self) -> None:
        """Write what is gathered."""
        w, conn = self._writer, self._conn
        store, ns, session = w.store, w.namespace, w.session
        if self._nodes:
            store.nodes.insert_many(conn, self._nodes)
            store.terms.index_many(conn, ns, self._terms)
            seqs = store.log.append_many(conn, ns, session, self._log)
            store.outbox.enqueue(conn, ns, [r["id"] for r in self._nodes if r["embedding"]], "upsert")
            store.outbox.enqueue(conn, ns, [r["id"] for r in self._nodes if not r["embedding"]], EMBED)
            store.nodes.touch_each(conn, "active_at", self._touch)
            if self._focus:
                _, last, ts = self._focus[-1]
                store.sessions.set_cursor(conn, ns, session, last, ts)
                if w.config.write.checkpoint_on_focus:
                    store.sessions.add_checkpoints(conn, ns, session, [(i, seqs[at], t, "focus") for at, i, t in self._focus])
        self._nodes, self._terms, self._log, self._touch, self._focus = [], [], [], {}, []


def choose_parent(ref: ParentRef, *, root: T, active: Callable[[], T], by_key: Mapping[str, T],
                  named: Callable[[NodeRef], T]) -> T:
    """Where an item naming ``ref`` as its parent goes: the one rule, for the write
    (:meth:`Writer.write_batch`, in rows) and for the paths read before it
    (:meth:`Writer.paths`). ``ROOT``: at the top (``root``); no parent: under the
    session's active node (``active()``, asked only then); the key of an earlier item
    of the batch: under that item (``by_key``); any other node or id: under that node
    (``named``). ``AUTO`` is resolved before a write reaches this
    (:class:`hybrid_memory.placement.Placer`)."""
    if isinstance(ref, Auto):
        raise TypeError("parent=AUTO must be placed before the write")
    if isinstance(ref, Root):
        return root
    if ref is None:
        return active()
    if isinstance(ref, str) and ref in by_key:
        return by_key[ref]
    return named(ref)


def branch_info_for(node_id: str, ntype: NodeType, parent: tuple[str, bool] | None, mode: str) -> tuple[str, bool]:
    """(branch head id, whether the head is a task) for a node whose parent has ``parent``."""
    is_task = ntype is NodeType.TASK
    if mode == "nearest_task":
        if is_task:
            return node_id, True
        return parent if parent is not None else (node_id, False)
    # top_task: the outermost task above; a task under no task heads its own branch.
    if parent is None:
        return node_id, is_task
    if parent[1]:
        return parent
    return (node_id, True) if is_task else parent


content_hash = text.content_hash

