"""The write path of MemoryTree: checking new memories, placing them in the tree,
finding twins to reinforce instead, and the row lookups every mutation shares."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from sqlalchemy.engine import Connection, Row

from . import _validate as check
from . import text
from .config import Config
from .embed import Embedder
from .errors import InvalidInputError, InvalidTypeError, NamespaceError, NotFoundError
from .model import Node, NodeType, Status
from .store.sql import SqlStore, node_from_row, to_blob
from .store.vectors import VectorIndex
from .weights import blend, check_unit

log = logging.getLogger("hybrid_memory")


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
class Prepared:
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

    def prepare(self, item: Mapping[str, Any], i: int) -> Prepared:
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
        return Prepared(
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

    def dedup_candidates(self, vectors: np.ndarray[Any, Any]) -> list[list[tuple[str, float]]]:
        # Nearest neighbours from the whole namespace (an unfiltered query is fast);
        # branch and type are checked against the relational truth inside the write.
        n = self.config.dedup.candidates
        try:
            return self.index.query(self.namespace, vectors, n)
        except Exception as exc:  # the index is derived: a failure only skips dedup
            log.warning("dedup lookup skipped: vector index unavailable (%s)", exc)
            return [[] for _ in range(len(vectors))]

    def write_batch(
        self,
        conn: Connection,
        prepared: Sequence[Prepared],
        vectors: np.ndarray[Any, Any],
        neighbours: Sequence[Sequence[tuple[str, float]]],
    ) -> list[Node]:
        ns, cfg = self.namespace, self.config
        by_key: dict[str, RowMap] = {}
        # Rows written earlier in this batch, by (branch, type): the only ones a twin can be.
        written: dict[tuple[str, str], list[dict[str, Any]]] = {}
        out: list[Node] = []
        active_id = self.store.get_cursor(conn, ns, self.session)
        for p, vec, near in zip(prepared, vectors, neighbours, strict=True):
            parent_row = self._resolve_parent(conn, p.parent, by_key, active_id)
            counts = text.term_counts(p.content)
            twin = None
            if cfg.dedup.enabled and parent_row is not None:
                branch = self.branch_info(conn, parent_row)[0]
                earlier = written.get((branch, p.type.value), [])
                twin = self._find_twin(conn, p, vec, set(counts), near, branch, earlier)
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
                pinfo = self.branch_info(conn, parent_row)
            branch = branch_info_for(node_id, p.type, pinfo, cfg.retrieval.branch_by)[0]
            row = dict(
                id=node_id, namespace=ns, parent_id=None if parent_row is None else parent_row["id"],
                type=p.type.value, content=p.content, meta=to_json(p.meta), importance=p.importance,
                confidence=p.confidence, access_count=0, pinned=p.pinned, status=Status.LIVE.value,
                version=1, depth=depth, path=path, branch_id=branch, created_at=p.ts, updated_at=p.ts,
                accessed_at=p.ts, active_at=p.ts, archived_op=None, content_hash=content_hash(p.content),
                tokens=text.count_tokens(p.content), embedding=to_blob(vec), embed_model=self.embedder.name,
            )
            self.store.insert_node(conn, row)
            self.store.index_terms(conn, ns, node_id, counts)
            ancestors = path.rstrip("/").split("/")[:-1]
            self.store.touch(conn, ancestors, "active_at", p.ts)
            payload = {k: v for k, v in row.items() if k not in ("embedding",)}
            if p.type is NodeType.TASK and cfg.write.focus_new_tasks:
                payload["focus"] = True  # portability: replay moves the cursor too
            seq = self.store.log(conn, ns, self.session, p.ts, "add", node_id, payload)
            self.store.enqueue(conn, ns, [node_id], "upsert")
            self.fault("add_many_item")
            if p.type is NodeType.TASK and cfg.write.focus_new_tasks:
                self.set_active(conn, node_id, p.ts, seq)
                active_id = node_id
            written.setdefault((branch, p.type.value), []).append(dict(row, embedding_vec=vec, term_set=set(counts)))
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
            row = self.store.lock_path(conn, active_id)  # locked: see SqlStore.lock_path
            return row._mapping if row is not None and row.status == Status.LIVE.value else None
        if isinstance(ref, str) and ref in by_key:
            return by_key[ref]
        try:
            return self.row(conn, ref, live=True, ancestors=True)._mapping
        except NotFoundError as exc:
            raise NotFoundError(f"unknown parent: {exc}") from None

    def branch_info(self, conn: Connection, parent: RowMap) -> tuple[str, bool]:
        head = parent["branch_id"]
        if head == parent["id"]:
            return head, parent["type"] == NodeType.TASK.value
        row = self.store.get(conn, head)
        return head, row is not None and row.type == NodeType.TASK.value

    def _find_twin(
        self,
        conn: Connection,
        p: Prepared,
        vec: np.ndarray[Any, Any],
        term_set: set[str],
        near: Sequence[tuple[str, float]],
        branch: str,
        earlier: Sequence[RowMap],
    ) -> RowMap | None:
        if p.type is NodeType.TASK:
            return None  # a task heads its own branch; two tasks are never twins
        exact = self.store.find_by_hash(conn, self.namespace, content_hash(p.content), branch, p.type.value)
        if exact is not None:
            return exact._mapping
        lexical = self.config.dedup.lexical
        for row in earlier:  # earlier items of this batch in the same branch, of the same type
            if text.jaccard(row["term_set"], term_set) >= lexical and self.is_twin(
                row["content"], p.content, float(np.dot(row["embedding_vec"], vec))
            ):
                # Re-read it: an earlier merge in this batch may have reinforced it.
                fresh = self.store.get(conn, row["id"])
                return fresh._mapping if fresh is not None else row
        rows = self.store.get_many(conn, [i for i, _ in near], live_only=True)
        for node_id, cosine in near:
            r = rows.get(node_id)
            if r is not None and r.branch_id == branch and r.type == p.type.value and self.is_twin(r.content, p.content, cosine):
                return r._mapping
        return None

    def is_twin(self, a: str, b: str, cosine: float) -> bool:
        """Whether two contents are near-identical by the dedup rule: their lexical
        overlap reaches ``dedup.lexical`` and their blended similarity (the cosine
        trusted as far as the embedder covers both texts) reaches ``dedup.similarity``."""
        d = self.config.dedup
        overlap = text.overlap(a, b)
        if overlap < d.lexical or text.figures(a) != text.figures(b):
            return False
        coverage = min(self.embedder.coverage(a), self.embedder.coverage(b))
        return blend(cosine, overlap, coverage) >= d.similarity

    def _reinforce(self, conn: Connection, twin: RowMap, p: Prepared) -> Node:
        d = self.config.dedup
        fresh = self.store.get(conn, twin["id"], lock=True)  # what is raised below is read here
        twin = twin if fresh is None else fresh._mapping
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

    def set_active(self, conn: Connection, node_id: str | None, ts: float, seq: int) -> None:
        self.store.set_cursor(conn, self.namespace, self.session, node_id, ts)
        if self.config.write.checkpoint_on_focus:
            self.store.add_checkpoint(conn, self.namespace, self.session, node_id, seq, ts, "focus")

    def row(
        self, conn: Connection, ref: object, *, live: bool = False, lock: bool = False, ancestors: bool = False
    ) -> Row[Any]:
        """The row ``ref`` names, checked to be of this namespace (and ``live``).
        In a write: ``lock`` locks it until commit (a write that depends on what it
        reads); ``ancestors`` locks its ancestors too, root first (a write that hangs
        something under it or moves it). Both are no-ops on SQLite."""
        if isinstance(ref, Node):
            if ref.namespace != self.namespace:
                raise NamespaceError(f"node {ref.id} belongs to namespace {ref.namespace!r}, not {self.namespace!r}")
            node_id = ref.id
        elif isinstance(ref, str):
            node_id = ref
        else:
            raise InvalidTypeError(f"expected a Node or a node id, got {type(ref).__name__}")
        row = self.store.lock_path(conn, node_id) if ancestors else self.store.get(conn, node_id, lock=lock)
        if row is None:
            raise NotFoundError(f"no node {node_id!r}")
        if row.namespace != self.namespace:
            raise NamespaceError(f"node {node_id} belongs to another namespace, not {self.namespace!r}")
        if live and row.status != Status.LIVE.value:
            raise NotFoundError(f"node {node_id} is archived; restore it first")
        return row


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


def content_hash(content: str) -> str:
    return hashlib.sha256(" ".join(content.split()).encode("utf-8")).hexdigest()


def to_json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), ensure_ascii=False, sort_keys=True)
