"""MemoryTree: the one object an agent opens. It orchestrates the relational store
(the truth), the vector index (derived) and the embedder."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

import numpy as np
from sqlalchemy.engine import Connection, Row

from . import _validate as check
from . import text
from .config import Config
from .embed import Embedder, SentenceTransformerEmbedder
from .errors import (
    ClosedError,
    ConflictError,
    CycleError,
    InvalidInputError,
    InvalidTypeError,
    NamespaceError,
    NotFoundError,
)
from .forgetting import plan_forget
from .model import (
    Checkpoint,
    ForgetReport,
    Node,
    NodeType,
    Recall,
    RecoveryState,
    Stats,
    Status,
    tree_order,
)
from .recovery import drain_outbox
from .retrieval import Retriever
from .store.sql import SqlStore, node_from_row, to_blob
from .store.vectors import ChromaIndex, VectorIndex
from .weights import check_unit, weight

log = logging.getLogger("hybrid_memory")

T = TypeVar("T")


class _Root:
    """Sentinel: ``add(..., parent=ROOT)`` starts a new tree instead of hanging under the active node."""

    _instance: _Root | None = None

    def __new__(cls) -> _Root:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ROOT"


ROOT: Final = _Root()

NodeRef = Node | str
#: A node row as read (SQLAlchemy RowMapping) or as just written (a dict).
RowMap = Mapping[Any, Any]
ParentRef = Node | str | _Root | None


@dataclass(frozen=True)
class _Prepared:
    """One validated memory ready to be written."""

    key: str | None
    content: str
    type: NodeType
    parent: ParentRef
    importance: float
    confidence: float
    meta: dict[str, Any]
    ts: float
    pinned: bool


class MemoryTree:
    """A weighted memory tree for one namespace (tenant) and one agent session.

    Open it with :meth:`open`; use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        *,
        store: SqlStore,
        index: VectorIndex,
        embedder: Embedder,
        namespace: str = "default",
        session: str = "main",
        config: Config | None = None,
        clock: Callable[[], float] = time.time,
        folder: Path | None = None,
    ) -> None:
        self.namespace = check.namespace(namespace)
        self.session = check.namespace(session)
        self.config = config or Config.load()
        self.store = store
        self.index = index
        self.embedder = embedder
        self.folder = folder
        self._clock = clock
        self._closed = False
        self._pending_access: dict[str, tuple[int, float]] = {}
        self._retriever = Retriever(store, index, embedder, self.config, self.namespace)
        self._check_branch_mode()
        self._replayed = drain_outbox(store, index, self.namespace)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        namespace: str = "default",
        session: str = "main",
        config: Config | str | os.PathLike[str] | None = None,
        store: SqlStore | str | None = None,
        index: VectorIndex | None = None,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
    ) -> MemoryTree:
        """Create or reopen a memory.

        ``path`` is a folder holding ``memory.db`` (SQLite) and ``chroma/``. ``store``
        may instead be a SQLAlchemy URL or a :class:`SqlStore`; ``index`` any
        :class:`VectorIndex`; ``embedder`` any :class:`Embedder`. Leftover index work
        from a crash is replayed before this returns (see :meth:`recover`).
        """
        check.namespace(namespace)  # before anything is created on disk
        check.namespace(session)
        if path is None and (store is None or index is None):
            raise InvalidInputError("give a folder path, or both store and index")
        folder = Path(path) if path is not None else None
        if folder is not None:
            if folder.exists() and not folder.is_dir():
                raise InvalidInputError(f"{folder} exists and is not a folder")
            folder.mkdir(parents=True, exist_ok=True)
        if not isinstance(config, Config):
            config = Config.load(None if config is None else Path(config))
        if store is None:
            assert folder is not None
            store = SqlStore.sqlite(folder / "memory.db")
        elif isinstance(store, str):
            store = SqlStore(store)
        if index is None:
            assert folder is not None
            index = ChromaIndex(folder / "chroma")
        if embedder is None:
            e = config.embedding
            embedder = SentenceTransformerEmbedder(e.model, device=e.device, batch_size=e.batch_size)
        return cls(
            store=store, index=index, embedder=embedder, namespace=namespace,
            session=session, config=config, clock=clock, folder=folder,
        )

    # -- life cycle ------------------------------------------------------------

    def __enter__(self) -> MemoryTree:
        return self

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.close()

    def close(self) -> None:
        """Flush buffered reads and release the store and the index. Idempotent."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self.index.close()
            self.store.close()

    def flush(self) -> None:
        """Write buffered read reinforcement (usage counts) now."""
        self._live_check()
        if self._pending_access:
            self._write_flushing(lambda conn: None)

    def _write_flushing(self, fn: Callable[[Connection], T]) -> T:
        """``store.write(fn)``, writing the buffered reads in the same transaction.
        The buffer is emptied only once that transaction has committed: a refused
        (rolled back) or retried write keeps the reads."""

        def run(conn: Connection) -> T:
            if self._pending_access:
                self.store.add_access(conn, self._pending_access)
            return fn(conn)

        result = self.store.write(run)
        self._pending_access = {}
        return result

    def _live_check(self) -> None:
        if self._closed:
            raise ClosedError("this MemoryTree is closed")

    def _now(self, now: float | None = None) -> float:
        return self._clock() if now is None else check.timestamp(now, "now")

    # -- reading -------------------------------------------------------------

    def get(self, node: NodeRef) -> Node:
        """The node as stored now (live or archived)."""
        self._live_check()
        with self.store.reading() as conn:
            return node_from_row(self._row(conn, node))

    def children(self, node: NodeRef, *, include_archived: bool = False) -> list[Node]:
        """The node's live children (and archived ones with ``include_archived``), oldest first."""
        self._live_check()
        with self.store.reading() as conn:
            row = self._row(conn, node)
            rows = self.store.subtree(conn, self.namespace, row.path)
        kids = [node_from_row(r) for r in rows if r.parent_id == row.id]
        if not include_archived:
            kids = [k for k in kids if k.live]
        return sorted(kids, key=lambda n: (n.created_at, n.id))

    def path(self, node: NodeRef) -> list[Node]:
        """The node's ancestors from the root, then the node."""
        self._live_check()
        with self.store.reading() as conn:
            row = self._row(conn, node)
            ids = row.path.rstrip("/").split("/")
            rows = self.store.get_many(conn, ids)
        return [node_from_row(rows[i]) for i in ids]

    def nodes(self, *, include_archived: bool = False) -> list[Node]:
        """Every node of the namespace in tree order (parents before children, siblings by time)."""
        self._live_check()
        with self.store.reading() as conn:
            rows = self.store.live_rows(conn, self.namespace) if not include_archived else self.store.subtree_all(conn, self.namespace)
        return tree_order([node_from_row(r) for r in rows])

    @property
    def active(self) -> Node | None:
        """The active node of this session: new memories hang under it by default."""
        self._live_check()
        with self.store.reading() as conn:
            active_id = self.store.get_cursor(conn, self.namespace, self.session)
            row = self.store.get(conn, active_id) if active_id else None
        return node_from_row(row) if row is not None and row.status == Status.LIVE.value else None

    def weight(self, node: Node, now: float | None = None) -> float:
        """The node's weight at ``now`` (default: the clock)."""
        return weight(
            importance=node.importance, confidence=node.confidence, access_count=node.access_count,
            touched_at=node.touched_at, now=self._now(now), cfg=self.config.weights,
        )

    def _row(self, conn: Connection, ref: object, *, live: bool = False) -> Row[Any]:
        if isinstance(ref, Node):
            if ref.namespace != self.namespace:
                raise NamespaceError(f"node {ref.id} belongs to namespace {ref.namespace!r}, not {self.namespace!r}")
            node_id = ref.id
        elif isinstance(ref, str):
            node_id = ref
        else:
            raise InvalidTypeError(f"expected a Node or a node id, got {type(ref).__name__}")
        row = self.store.get(conn, node_id)
        if row is None:
            raise NotFoundError(f"no node {node_id!r}")
        if row.namespace != self.namespace:
            raise NamespaceError(f"node {node_id} belongs to another namespace, not {self.namespace!r}")
        if live and row.status != Status.LIVE.value:
            raise NotFoundError(f"node {node_id} is archived; restore it first")
        return row

    # -- writing ---------------------------------------------------------------

    def add(
        self,
        content: str,
        *,
        type: NodeType | str,
        parent: ParentRef = None,
        importance: float | None = None,
        confidence: float | None = None,
        meta: Mapping[str, Any] | None = None,
        ts: float | None = None,
        pinned: bool = False,
    ) -> Node:
        """Write one memory and return it.

        ``parent=None`` hangs it under the active node (a new root if there is none);
        ``parent=ROOT`` starts a new tree. A near-identical live memory of the same
        type in the same branch is reinforced instead: the existing node comes back
        with ``merged=True``.
        """
        return self.add_many(
            [dict(content=content, type=type, parent=parent, importance=importance,
                  confidence=confidence, meta=meta, ts=ts, pinned=pinned)]
        )[0]

    def add_many(self, items: Iterable[Mapping[str, Any]]) -> list[Node]:
        """Write several memories: one embedding batch, one transaction.

        Each item holds the keyword arguments of :meth:`add` (``content`` and ``type``
        required) and may name a ``key``; a later item's ``parent`` may be an earlier
        item's key. Every item is checked before anything is written.
        """
        self._live_check()
        prepared = [self._prepare(item, i) for i, item in enumerate(items)]
        if not prepared:
            return []
        keys = [p.key for p in prepared if p.key is not None]
        if len(keys) != len(set(keys)):
            raise InvalidInputError("add_many: item keys must be unique")
        vectors = self.embedder.embed([p.content for p in prepared])
        neighbours = self._dedup_candidates(vectors) if self.config.dedup.enabled else [[] for _ in prepared]

        def run(conn: Connection) -> list[Node]:
            return self._write_batch(conn, prepared, vectors, neighbours)

        result = self._write_flushing(run)
        self._drain()
        return result

    def _prepare(self, item: Mapping[str, Any], i: int) -> _Prepared:
        if not isinstance(item, Mapping):
            raise InvalidTypeError(f"item {i} must be a mapping of add() arguments")
        allowed = {"key", "content", "type", "parent", "importance", "confidence", "meta", "ts", "pinned"}
        unknown = set(item) - allowed
        if unknown:
            raise InvalidInputError(f"item {i}: unknown field(s) {sorted(unknown)}")
        if "content" not in item or "type" not in item:
            raise InvalidInputError(f"item {i}: content and type are required")
        ntype = check.node_type(item["type"])
        w = self.config.weights
        imp = item.get("importance")
        conf = item.get("confidence")
        key = item.get("key")
        if key is not None and not isinstance(key, str):
            raise InvalidTypeError(f"item {i}: key must be a string")
        parent = item.get("parent")
        if parent is not None and not isinstance(parent, (Node, str, _Root)):
            raise InvalidTypeError(f"item {i}: parent must be a Node, a node id, ROOT or None")
        pinned = item.get("pinned", False)
        if not isinstance(pinned, bool):
            raise InvalidTypeError(f"item {i}: pinned must be true or false")
        ts = item.get("ts")
        return _Prepared(
            key=key,
            content=check.content(item["content"], self.config.write.max_content_chars),
            type=ntype,
            parent=parent,
            importance=w.importance_by_type[ntype.value] if imp is None else check_unit(imp, "importance"),
            confidence=w.confidence_by_type[ntype.value] if conf is None else check_unit(conf, "confidence"),
            meta=check.meta(item.get("meta")),
            ts=self._clock() if ts is None else check.timestamp(ts),
            pinned=pinned,
        )

    def _dedup_candidates(self, vectors: np.ndarray[Any, Any]) -> list[list[tuple[str, float]]]:
        # Nearest neighbours from the whole namespace (an unfiltered query is fast);
        # branch and type are checked against the relational truth inside the write.
        n = self.config.dedup.candidates
        try:
            return [self.index.query(self.namespace, v, n) for v in vectors]
        except Exception as exc:  # the index is derived: a failure only skips dedup
            log.warning("dedup lookup skipped: vector index unavailable (%s)", exc)
            return [[] for _ in range(len(vectors))]

    def _write_batch(
        self,
        conn: Connection,
        prepared: Sequence[_Prepared],
        vectors: np.ndarray[Any, Any],
        neighbours: Sequence[Sequence[tuple[str, float]]],
    ) -> list[Node]:
        ns, cfg = self.namespace, self.config
        by_key: dict[str, RowMap] = {}
        written: list[dict[str, Any]] = []  # rows written earlier in this batch
        out: list[Node] = []
        active_id = self.store.get_cursor(conn, ns, self.session)
        for p, vec, near in zip(prepared, vectors, neighbours, strict=True):
            parent_row = self._resolve_parent(conn, p.parent, by_key, active_id)
            twin = None
            if cfg.dedup.enabled and parent_row is not None:
                twin = self._find_twin(conn, p, vec, near, self._branch_info(conn, parent_row)[0], written)
            if twin is not None:
                node = self._reinforce(conn, twin, p)
                if p.key is not None:
                    by_key[p.key] = self.store.get(conn, node.id)._mapping  # type: ignore[union-attr]
                out.append(node)
                continue
            node_id = secrets.token_hex(8)
            if parent_row is None:
                path, depth, pinfo = f"{node_id}/", 0, None
            else:
                path, depth = f"{parent_row['path']}{node_id}/", parent_row["depth"] + 1
                pinfo = self._branch_info(conn, parent_row)
            branch = _branch_info_for(node_id, p.type, pinfo, cfg.retrieval.branch_by)[0]
            row = dict(
                id=node_id, namespace=ns, parent_id=None if parent_row is None else parent_row["id"],
                type=p.type.value, content=p.content, meta=_json(p.meta), importance=p.importance,
                confidence=p.confidence, access_count=0, pinned=p.pinned, status=Status.LIVE.value,
                version=1, depth=depth, path=path, branch_id=branch, created_at=p.ts, updated_at=p.ts,
                accessed_at=p.ts, active_at=p.ts, archived_op=None, content_hash=_hash(p.content),
                tokens=text.count_tokens(p.content), embedding=to_blob(vec), embed_model=self.embedder.name,
            )
            self.store.insert_node(conn, row)
            self.store.index_terms(conn, ns, node_id, text.term_counts(p.content))
            ancestors = path.rstrip("/").split("/")[:-1]
            self.store.touch(conn, ancestors, "active_at", p.ts)
            payload = {k: v for k, v in row.items() if k not in ("embedding",)}
            seq = self.store.log(conn, ns, self.session, p.ts, "add", node_id, payload)
            self.store.enqueue(conn, ns, [node_id], "upsert")
            if p.type is NodeType.TASK and cfg.write.focus_new_tasks:
                self._set_active(conn, node_id, p.ts, seq, log_it=False)
                active_id = node_id
            written.append(dict(row, embedding_vec=vec))
            if p.key is not None:
                by_key[p.key] = row
            out.append(node_from_row(row))
        return out

    def _resolve_parent(
        self, conn: Connection, ref: ParentRef, by_key: Mapping[str, RowMap], active_id: str | None
    ) -> RowMap | None:
        if isinstance(ref, _Root):
            return None
        if ref is None:
            if active_id is None:
                return None
            row = self.store.get(conn, active_id)
            return row._mapping if row is not None and row.status == Status.LIVE.value else None
        if isinstance(ref, str) and ref in by_key:
            return by_key[ref]
        try:
            return self._row(conn, ref, live=True)._mapping
        except NotFoundError as exc:
            raise NotFoundError(f"unknown parent: {exc}") from None

    def _branch_info(self, conn: Connection, parent: RowMap) -> tuple[str, bool]:
        head = parent["branch_id"]
        if head == parent["id"]:
            return head, parent["type"] == NodeType.TASK.value
        row = self.store.get(conn, head)
        return head, row is not None and row.type == NodeType.TASK.value

    def _find_twin(
        self,
        conn: Connection,
        p: _Prepared,
        vec: np.ndarray[Any, Any],
        near: Sequence[tuple[str, float]],
        branch: str,
        written: Sequence[RowMap],
    ) -> RowMap | None:
        if p.type is NodeType.TASK:
            return None  # a task heads its own branch; two tasks are never twins
        d = self.config.dedup
        exact = self.store.find_by_hash(conn, self.namespace, _hash(p.content), branch, p.type.value)
        if exact is not None:
            return exact._mapping
        for row in written:  # earlier items of the same batch
            if (
                row["branch_id"] == branch
                and row["type"] == p.type.value
                and float(np.dot(row["embedding_vec"], vec)) >= d.cosine
                and text.overlap(row["content"], p.content) >= d.lexical
            ):
                # Re-read it: an earlier merge in this batch may have reinforced it.
                fresh = self.store.get(conn, row["id"])
                return fresh._mapping if fresh is not None else row
        close = [i for i, sim in near if sim >= d.cosine]
        if not close:
            return None
        rows = self.store.get_many(conn, close, live_only=True)
        for node_id, _sim in near:
            r = rows.get(node_id)
            if r is not None and r.branch_id == branch and r.type == p.type.value and text.overlap(r.content, p.content) >= d.lexical:
                return r._mapping
        return None

    def _reinforce(self, conn: Connection, twin: RowMap, p: _Prepared) -> Node:
        d = self.config.dedup
        values = dict(
            importance=max(twin["importance"], p.importance),
            confidence=min(1.0, max(twin["confidence"], p.confidence) + d.confidence_step),
            accessed_at=max(twin["accessed_at"], p.ts),
            version=twin["version"] + 1,
        )
        self.store.update_node(conn, twin["id"], **values)
        self.store.touch(conn, twin["path"].rstrip("/").split("/")[:-1], "active_at", p.ts)
        self.store.log(conn, self.namespace, self.session, p.ts, "merge", twin["id"], dict(values, content=p.content))
        return node_from_row(self.store.get(conn, twin["id"]), merged=True)  # type: ignore[arg-type]

    def update(
        self,
        node: NodeRef,
        *,
        content: str | None = None,
        importance: float | None = None,
        confidence: float | None = None,
        meta: Mapping[str, Any] | None = None,
        expected_version: int | None = None,
        ts: float | None = None,
    ) -> Node:
        """Change a live node's content, weights or meta (meta is replaced whole).

        With ``expected_version``, a node changed by someone else since raises
        :class:`ConflictError` instead of being overwritten.
        """
        self._live_check()
        values: dict[str, Any] = {}
        if content is not None:
            values["content"] = check.content(content, self.config.write.max_content_chars)
        if importance is not None:
            values["importance"] = check_unit(importance, "importance")
        if confidence is not None:
            values["confidence"] = check_unit(confidence, "confidence")
        if meta is not None:
            values["meta"] = _json(check.meta(meta))
        if not values:
            raise InvalidInputError("update: nothing to change")
        now = self._now(ts)
        vec = self.embedder.embed([values["content"]])[0] if "content" in values else None

        def run(conn: Connection) -> Node:
            row = self._row(conn, node, live=True)
            if expected_version is not None and row.version != expected_version:
                raise ConflictError(f"node {row.id} is at version {row.version}, not {expected_version}")
            changes = dict(values, version=row.version + 1, updated_at=now)
            if vec is not None:
                changes.update(
                    content_hash=_hash(values["content"]), tokens=text.count_tokens(values["content"]),
                    embedding=to_blob(vec), embed_model=self.embedder.name,
                )
                self.store.unindex_terms(conn, [row.id])
                self.store.index_terms(conn, self.namespace, row.id, text.term_counts(values["content"]))
                self.store.enqueue(conn, self.namespace, [row.id], "upsert")
            self.store.update_node(conn, row.id, **changes)
            self.store.log(conn, self.namespace, self.session, now, "update", row.id,
                           dict(values, version=row.version + 1))
            return node_from_row(self.store.get(conn, row.id))  # type: ignore[arg-type]

        result = self._write_flushing(run)
        self._drain()
        return result

    def feedback(
        self,
        node: NodeRef,
        *,
        important: bool = False,
        confirmed: bool = False,
        importance: float | None = None,
        confidence: float | None = None,
    ) -> Node:
        """The user said a memory matters (``important``) or is right (``confirmed``):
        raise its importance or confidence by the configured step, or set them."""
        self._live_check()
        f = self.config.feedback
        if importance is not None:
            importance = check_unit(importance, "importance")
        if confidence is not None:
            confidence = check_unit(confidence, "confidence")
        if not (important or confirmed or importance is not None or confidence is not None):
            raise InvalidInputError("feedback: say important=True, confirmed=True, or give a value")
        now = self._clock()

        def run(conn: Connection) -> Node:
            row = self._row(conn, node, live=True)
            imp = importance if importance is not None else row.importance
            conf = confidence if confidence is not None else row.confidence
            if important:
                imp = min(1.0, imp + f.important_step)
            if confirmed:
                conf = min(1.0, conf + f.confirmed_step)
            self.store.update_node(conn, row.id, importance=imp, confidence=conf, version=row.version + 1, accessed_at=max(row.accessed_at, now))
            self.store.log(conn, self.namespace, self.session, now, "feedback", row.id, {"importance": imp, "confidence": conf})
            return node_from_row(self.store.get(conn, row.id))  # type: ignore[arg-type]

        return self._write_flushing(run)

    def pin(self, node: NodeRef, pinned: bool = True) -> Node:
        """Pinned nodes are never forgotten."""
        self._live_check()
        if not isinstance(pinned, bool):
            raise InvalidTypeError("pinned must be true or false")
        now = self._clock()

        def run(conn: Connection) -> Node:
            row = self._row(conn, node)
            self.store.update_node(conn, row.id, pinned=pinned, version=row.version + 1)
            self.store.log(conn, self.namespace, self.session, now, "pin", row.id, {"pinned": pinned})
            return node_from_row(self.store.get(conn, row.id))  # type: ignore[arg-type]

        return self.store.write(run)

    def move(self, node: NodeRef, new_parent: Node | str | _Root) -> Node:
        """Hang a live node (and its subtree) under another parent. Refuses cycles."""
        self._live_check()
        if new_parent is None:
            raise InvalidInputError("move: give the new parent, or ROOT")
        now = self._clock()
        mode = self.config.retrieval.branch_by

        def run(conn: Connection) -> Node:
            row = self._row(conn, node, live=True)
            if isinstance(new_parent, _Root):
                parent = None
            else:
                parent = self._row(conn, new_parent, live=True)
                if parent.path.startswith(row.path):
                    raise CycleError(f"cannot move {row.id} under {parent.id}: that is inside its own subtree")
            sub = sorted(self.store.subtree(conn, self.namespace, row.path), key=lambda r: r.depth)
            new_path = f"{row.id}/" if parent is None else f"{parent.path}{row.id}/"
            info: dict[str, tuple[str, bool]] = {}
            if parent is not None:
                info[parent.id] = self._branch_info(conn, parent._mapping)
            old_prefix = row.path
            for r in sub:
                path = new_path + r.path[len(old_prefix):]
                pinfo = info.get(r.parent_id) if r.id != row.id else (info.get(parent.id) if parent is not None else None)
                branch, is_task = _branch_info_for(r.id, NodeType(r.type), pinfo, mode)
                info[r.id] = (branch, is_task)
                self.store.update_node(
                    conn, r.id, path=path, depth=path.count("/") - 1, branch_id=branch,
                    **({"parent_id": None if parent is None else parent.id, "version": r.version + 1, "updated_at": now} if r.id == row.id else {}),
                )
            if parent is not None:
                self.store.touch(conn, parent.path.rstrip("/").split("/"), "active_at", now)
            self.store.log(conn, self.namespace, self.session, now, "move", row.id, {"parent": None if parent is None else parent.id})
            return node_from_row(self.store.get(conn, row.id))  # type: ignore[arg-type]

        return self.store.write(run)

    def focus(self, node: NodeRef) -> Node:
        """Make a live node the active one: new memories hang under it, and a
        query-less :meth:`retrieve` returns its task's context."""
        self._live_check()
        now = self._clock()

        def run(conn: Connection) -> Node:
            row = self._row(conn, node, live=True)
            seq = self.store.log(conn, self.namespace, self.session, now, "focus", row.id, {})
            self._set_active(conn, row.id, now, seq, log_it=False)
            return node_from_row(row)

        return self.store.write(run)

    def _set_active(self, conn: Connection, node_id: str | None, ts: float, seq: int, *, log_it: bool) -> None:
        self.store.set_cursor(conn, self.namespace, self.session, node_id, ts)
        if self.config.write.checkpoint_on_focus:
            self.store.add_checkpoint(conn, self.namespace, self.session, node_id, seq, ts, "focus")

    def checkpoint(self, note: str | None = None) -> Checkpoint:
        """Record where this session stands: the active node and the log position."""
        self._live_check()
        if note is not None and not isinstance(note, str):
            raise InvalidTypeError("note must be a string")
        now = self._clock()

        def run(conn: Connection) -> Checkpoint:
            active = self.store.get_cursor(conn, self.namespace, self.session)
            seq = self.store.log(conn, self.namespace, self.session, now, "checkpoint", active, {"note": note})
            return self.store.add_checkpoint(conn, self.namespace, self.session, active, seq, now, note)

        return self._write_flushing(run)

    # -- archive, restore, delete, forget ----------------------------------------

    def archive(self, node: NodeRef) -> list[str]:
        """Take a node and its live subtree out of retrieval (restorable). Returns the ids."""
        self._live_check()
        now = self._clock()

        def run(conn: Connection) -> list[str]:
            row = self._row(conn, node, live=True)
            ids = [r.id for r in self.store.subtree(conn, self.namespace, row.path, status=Status.LIVE)]
            self._archive_ids(conn, ids, row.parent_id, now, "archive", row.id)
            return ids

        ids = self.store.write(run)
        self._drain()
        return ids

    def _archive_ids(self, conn: Connection, ids: Sequence[str], fallback: str | None, now: float, op: str, head: str | None) -> int:
        seq = self.store.log(conn, self.namespace, self.session, now, op, head, {"ids": list(ids)})
        for node_id in ids:
            self.store.update_node(conn, node_id, status=Status.ARCHIVED.value, archived_op=seq)
        self.store.unindex_terms(conn, ids)
        self.store.enqueue(conn, self.namespace, ids, "delete")
        self.store.repoint_cursors(conn, self.namespace, ids, fallback, now)
        return seq

    def restore(self, node: NodeRef) -> Node:
        """Bring an archived node back, with its archived ancestors and what was archived with it."""
        self._live_check()
        now = self._clock()

        def run(conn: Connection) -> Node:
            row = self._row(conn, node)
            if row.status == Status.LIVE.value:
                return node_from_row(row)
            ancestors = self.store.get_many(conn, row.path.rstrip("/").split("/")[:-1])
            ids = [a.id for a in ancestors.values() if a.status != Status.LIVE.value]
            ids += [
                r.id for r in self.store.subtree(conn, self.namespace, row.path, status=Status.ARCHIVED)
                if r.id == row.id or r.archived_op == row.archived_op
            ]
            for node_id in ids:
                self.store.update_node(conn, node_id, status=Status.LIVE.value, archived_op=None)
            for r in self.store.get_many(conn, ids).values():
                self.store.index_terms(conn, self.namespace, r.id, text.term_counts(r.content))
            self.store.enqueue(conn, self.namespace, ids, "upsert")
            self.store.log(conn, self.namespace, self.session, now, "restore", row.id, {"ids": ids})
            return node_from_row(self.store.get(conn, row.id))  # type: ignore[arg-type]

        result = self.store.write(run)
        self._drain()
        return result

    def delete(self, node: NodeRef) -> list[str]:
        """Erase a node and its whole subtree everywhere: rows, lexical and vector
        index, and the content kept in the operation log. Returns the ids."""
        self._live_check()
        now = self._clock()

        def run(conn: Connection) -> list[str]:
            row = self._row(conn, node)
            ids = [r.id for r in self.store.subtree(conn, self.namespace, row.path)]
            self._delete_ids(conn, ids, row.parent_id, now, row.id)
            return ids

        ids = self.store.write(run)
        self._drain()
        return ids

    def _delete_ids(self, conn: Connection, ids: Sequence[str], fallback: str | None, now: float, head: str | None) -> None:
        self.store.purge_log(conn, ids)
        self.store.delete_nodes(conn, ids)
        self.store.enqueue(conn, self.namespace, ids, "delete")
        self.store.repoint_cursors(conn, self.namespace, ids, fallback, now)
        self.store.log(conn, self.namespace, self.session, now, "delete", head, {"ids": list(ids)})
        for pid in self._pending_access.copy():
            if pid in ids:
                del self._pending_access[pid]

    def forget(
        self,
        *,
        threshold: float | None = None,
        max_nodes: int | None = None,
        delete: bool = False,
        dry_run: bool = False,
        now: float | None = None,
    ) -> ForgetReport:
        """Prune low-weight leaves: archive (default) or delete them.

        Takes leaves whose weight is under ``threshold``, then, while more than
        ``max_nodes`` live nodes remain, the lowest-weight leaves. Never a pinned node,
        never the active node or its ancestors, never a node with live children (a
        parent can go once its children have).
        """
        self._live_check()
        f = self.config.forgetting
        thr = f.threshold if threshold is None else check_unit(threshold, "threshold")
        cap = f.max_nodes if max_nodes is None else max_nodes
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise InvalidInputError("max_nodes must be an integer >= 0 (0: no cap)")
        at = self._now(now)

        def run(conn: Connection) -> ForgetReport:
            rows = self.store.live_rows(conn, self.namespace)
            active = self.store.get_cursor(conn, self.namespace, self.session)
            protected: set[str] = set()
            if active:
                arow = self.store.get(conn, active)
                if arow is not None:
                    protected.update(arow.path.rstrip("/").split("/"))
            nodes = [node_from_row(r) for r in rows]
            plan = plan_forget(
                nodes, {n.id: self.weight(n, at) for n in nodes}, protected, threshold=thr, max_nodes=cap
            )
            ids = [i for i, _ in plan]
            erased: list[str] = []
            if ids and not dry_run:
                if delete:
                    # A forgotten leaf has no live children but may have archived ones:
                    # as with delete(), they go with it rather than be left orphaned.
                    paths = {n.id: n.path for n in nodes}
                    erased = list(dict.fromkeys(
                        r.id for i in ids for r in self.store.subtree(conn, self.namespace, paths[i])
                    ))
                    self._delete_ids(conn, erased, None, at, None)
                else:
                    self._archive_ids(conn, ids, None, at, "forget", None)
            return ForgetReport(
                archived=() if delete or dry_run else tuple(ids),
                deleted=tuple(erased),
                live_before=len(nodes),
                live_after=len(nodes) - (0 if dry_run else len(ids)),
                dry_run=dry_run,
                considered=len(nodes),
                details=tuple(plan),
            )

        report = self._write_flushing(run)
        self._drain()
        return report

    # -- retrieval ----------------------------------------------------------------

    def retrieve(
        self,
        query: str | None = None,
        *,
        k: int | None = None,
        budget_tokens: int | None = None,
        branches: int | None = None,
        now: float | None = None,
    ) -> Recall:
        """Find what matters for ``query``: locate the task branch(es) by meaning,
        rank inside by similarity and weight, add standing memories and each chosen
        node's ancestors, and cut to the token budget.

        With no query: the active task's context (its ancestors and its top-k by weight).
        """
        self._live_check()
        r = self.config.retrieval
        k = r.k if k is None else check.positive_int(k, "k")
        budget = r.budget_tokens if budget_tokens is None else check.positive_int(budget_tokens, "budget_tokens")
        nb = r.branches if branches is None else check.positive_int(branches, "branches")
        if query is not None:
            if not isinstance(query, str):
                raise InvalidTypeError("query must be a string")
            if not query.strip():
                raise InvalidInputError("query is empty; pass None for the active task's context")
        at = self._now(now)
        with self.store.reading() as conn:
            active = self.store.get_cursor(conn, self.namespace, self.session)
        if query is None:
            recall = self._retriever.active_context(active, k=k, budget=budget, now=at)
        else:
            recall = self._retriever.search(query, k=k, budget=budget, branches=nb, now=at)
        self._note_access([s.node.id for s in recall.nodes if s.reason in ("hit", "standing", "top")], at)
        return recall

    def _note_access(self, ids: Sequence[str], at: float) -> None:
        for node_id in ids:
            n, ts = self._pending_access.get(node_id, (0, at))
            self._pending_access[node_id] = (n + 1, max(ts, at))
        if len(self._pending_access) >= self.config.usage.flush_every:
            self.flush()

    # -- recovery and observation ---------------------------------------------------

    def _drain(self) -> None:
        drain_outbox(self.store, self.index, self.namespace)

    def recover(self) -> RecoveryState:
        """Where this session stands: the active node, its path, the latest task
        state in its branch, the last checkpoint and the index work replayed at open."""
        self._live_check()
        with self.store.reading() as conn:
            active_id = self.store.get_cursor(conn, self.namespace, self.session)
            row = self.store.get(conn, active_id) if active_id else None
            active = node_from_row(row) if row is not None and row.status == Status.LIVE.value else None
            path: tuple[Node, ...] = ()
            state = None
            if active is not None:
                ids = active.path.rstrip("/").split("/")
                rows = self.store.get_many(conn, ids)
                path = tuple(node_from_row(rows[i]) for i in ids)
                branch = self.store.branch_rows(conn, self.namespace, [active.branch_id])
                states = [r for r in branch if r.type == NodeType.STATE.value]
                if states:
                    state = node_from_row(max(states, key=lambda r: (r.created_at, r.updated_at)))
            last = self.store.last_checkpoint(conn, self.namespace, self.session)
            live = self.store.live_count(conn, self.namespace)
        return RecoveryState(active=active, path=path, state=state, last_checkpoint=last,
                             replayed=self._replayed, live_nodes=live)

    def stats(self) -> Stats:
        """Sizes and shape of the memory, for a dashboard or the command line."""
        self._live_check()
        with self.store.reading() as conn:
            by_status = self.store.count_by_status(conn, self.namespace)
            by_type = self.store.count_by_type(conn, self.namespace)
            depth = self.store.max_depth(conn, self.namespace)
            active_id = self.store.get_cursor(conn, self.namespace, self.session)
            arow = self.store.get(conn, active_id) if active_id else None
            last = self.store.last_checkpoint(conn, self.namespace, self.session)
            seq = self.store.last_seq(conn, self.namespace)
        disk = 0
        if self.folder is not None:
            disk = sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())
        return Stats(
            namespace=self.namespace,
            live=by_status.get(Status.LIVE.value, 0),
            archived=by_status.get(Status.ARCHIVED.value, 0),
            depth=depth,
            by_type=by_type,
            active_path=tuple(arow.path.rstrip("/").split("/")) if arow is not None else (),
            last_checkpoint_at=last.ts if last else None,
            disk_bytes=disk,
            log_seq=seq,
        )

    def _check_branch_mode(self) -> None:
        """Branch heads are stored; if the configured grouping changed, recompute them."""
        mode = self.config.retrieval.branch_by
        key = f"branch_by:{self.namespace}"

        def run(conn: Connection) -> None:
            have = self.store.get_setting(conn, key)
            if have == mode:
                return
            if have is not None:
                rows = sorted(self.store.subtree_all(conn, self.namespace), key=lambda r: r.depth)
                info: dict[str, tuple[str, bool]] = {}
                for r in rows:
                    b = _branch_info_for(r.id, NodeType(r.type), info.get(r.parent_id) if r.parent_id else None, mode)
                    info[r.id] = b
                    if b[0] != r.branch_id:
                        self.store.update_node(conn, r.id, branch_id=b[0])
            self.store.set_setting(conn, key, mode)

        self.store.write(run)


def _branch_info_for(node_id: str, ntype: NodeType, parent: tuple[str, bool] | None, mode: str) -> tuple[str, bool]:
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


def _hash(content: str) -> str:
    return hashlib.sha256(" ".join(content.split()).encode("utf-8")).hexdigest()


def _json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), ensure_ascii=False, sort_keys=True)
