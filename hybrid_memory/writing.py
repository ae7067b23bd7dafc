"""The write path of MemoryTree: checking new memories, placing them in the tree,
finding twins to reinforce instead, and the row lookups every mutation shares."""

from __future__ import annotations

import functools
import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import numpy as np
from sqlalchemy.engine import Connection, Row

from . import _validate as check
from . import context, text
from .config import Config
from .embed import Embedder
from .errors import (
    HybridMemoryError,
    InvalidInputError,
    InvalidTypeError,
    NamespaceError,
    NotFoundError,
)
from .ids import new_node_id
from .model import SUPERSEDING, Node, NodeType, Status, path_ids
from .recovery import nearest
from .store.schema import EMBED, node_from_row, to_blob
from .store.sql import SqlStore
from .store.vectors import VectorIndex
from .weights import blend, check_unit

log = logging.getLogger("hybrid_memory")


class Root:
    """The type of :data:`ROOT`, its one instance: ``add(..., parent=ROOT)`` starts a
    new tree instead of hanging under the active node. ``Root()`` returns ROOT."""

    _instance: Root | None = None

    def __new__(cls) -> Root:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ROOT"


ROOT: Final = Root()

NodeRef = Node | str
#: A node row as read (SQLAlchemy RowMapping) or as just written (a dict).
RowMap = Mapping[Any, Any]
ParentRef = Node | str | Root | None
R = TypeVar("R", Row[Any], RowMap)


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
        if key is not None:
            check.text_arg(key, f"item {i}: key")
        parent = item.get("parent")
        if parent is not None and not isinstance(parent, (Node, str, Root)):
            raise InvalidTypeError(f"item {i}: parent must be a Node, a node id, ROOT or None")
        if isinstance(parent, str) and ("\x00" in parent or len(parent) > 256 or not check.is_utf8(parent)):
            raise NotFoundError(f"item {i}: no node or earlier item {check.show(parent)}")
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
            meta=check.meta(item.get("meta"), self.config.write.max_content_chars),
            ts=self._clock() if ts is None else check.timestamp(ts),
            pinned=pinned,
        )

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
        write checks each against what it finds (:meth:`_Seen.above`)."""
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

        current = under(active, live=True)
        by_key: dict[str, context.Path] = {}
        out: list[context.Path] = []
        for p in prepared:
            if isinstance(p.parent, Root):
                path: context.Path = ()
            elif p.parent is None:
                path = current
            elif isinstance(p.parent, str) and p.parent in by_key:
                path = by_key[p.parent]
            else:
                path = under(p.parent.id if isinstance(p.parent, Node) else p.parent)
            out.append(path)
            if p.key is not None:
                by_key[p.key] = (*path, p.content)
            if p.type is NodeType.TASK and self.config.write.focus_new_tasks:
                current = (*path, p.content)
        return out

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
        ns, cfg = self.namespace, self.config
        active_id = self.store.sessions.get_cursor(conn, ns, self.session)
        seen = _Seen(self, conn, prepared, active_id)
        fanout: dict[str | None, int] = {}  # children per parent: stored, plus this batch's
        late: Embedding | None = None
        rows: Iterable[np.ndarray[Any, Any]] = vectors
        if isinstance(vectors, Embedding):
            self._read_ahead(conn, seen, prepared, active_id, fanout)
            if len(prepared) == 1 and self._settled_by_words(seen, prepared[0], active_id):
                # No stored memory can be this one's twin but by its words: write it
                # now, and its embedding once the embedder returns it.
                late, rows = vectors, np.zeros((1, self.embedder.dim), dtype=np.float32)  # (compared with nothing)
        index_near: list[list[tuple[str, float]]] = []

        def from_index(i: int) -> list[tuple[str, float]]:
            # (asked once for the whole batch, the first time an item needs it)
            if not index_near:
                index_near.extend(self.dedup_candidates(vectors.all() if isinstance(vectors, Embedding) else vectors))
            return index_near[i]

        pending = _Pending(self, conn)
        demoted: dict[str, tuple[float, str]] = {}  # id -> (lowered importance, superseded by)
        by_key: dict[str, RowMap] = {}
        all_counts = [text.term_counts(p.content) for p in prepared]
        term_sets = [set(c) for c in all_counts]
        # Rows written earlier in this batch, by (branch, type): the only ones a twin can be.
        written = _Earlier(term_sets, cfg.dedup.lexical)
        out: list[Node] = []
        misread: list[str] = []
        for at, (p, vec, counts, term_set) in enumerate(zip(prepared, rows, all_counts, term_sets, strict=True)):
            parent_row = self._resolve_parent(seen, p.parent, by_key, active_id)
            twin: RowMap | None = None
            near: list[RowMap] = []
            if cfg.dedup.enabled and parent_row is not None and p.type is not NodeType.TASK:
                branch = seen.branch_info(parent_row)[0]
                earlier = written.candidates((branch, p.type.value), term_set)
                twin, near = self._find_twin(seen, p, vec, term_set, branch, earlier, functools.partial(from_index, at))
            if twin is not None:
                pending.flush()
                node = self._reinforce(conn, twin, p)
                if p.key is not None:
                    by_key[p.key] = self.store.nodes.get(conn, node.id)._mapping  # type: ignore[union-attr]
                out.append(node)
                continue
            node_id = new_node_id()
            if parent_row is None:
                path, depth, pinfo = f"{node_id}/", 0, None
            else:
                path, depth = f"{parent_row['path']}{node_id}/", parent_row["depth"] + 1
                pinfo = seen.branch_info(parent_row)
            self._check_limits(conn, fanout, None if parent_row is None else parent_row["id"], depth)
            branch = branch_info_for(node_id, p.type, pinfo, cfg.write.branch_by)[0]
            above = () if parent_row is None else seen.above(parent_row)
            seen.paths[node_id] = (*above, p.content)
            moved = above != paths[at]  # (since its vector was read: embedded after the commit)
            if moved:
                misread.append(node_id)
            row = dict(
                id=node_id, namespace=ns, parent_id=None if parent_row is None else parent_row["id"],
                type=p.type.value, content=p.content, meta=to_json(p.meta), importance=p.importance,
                confidence=p.confidence, access_count=0, pinned=p.pinned, status=Status.LIVE.value,
                version=1, depth=depth, path=path, branch_id=branch, created_at=p.ts, updated_at=p.ts,
                accessed_at=p.ts, active_at=p.ts, archived_op=None, content_hash=self.store.content_hash(p.content),
                tokens=text.count_tokens(p.content),
                embedding=b"" if late is not None or moved else to_blob(vec),
                embed_model=self.embedder.name,
            )
            seen.rows[node_id] = row
            payload = {k: v for k, v in row.items() if k not in ("embedding",)}
            focus = p.type is NodeType.TASK and cfg.write.focus_new_tasks
            if focus:
                payload["focus"] = True  # portability: replay moves the cursor too
            pending.add(row, counts, path_ids(path)[:-1], payload, focus=focus)
            if focus:
                active_id = node_id
            self.fault("add_many_item")
            if cfg.dedup.enabled and parent_row is not None and p.type in SUPERSEDING and cfg.dedup.supersede < 1:
                key = (branch, p.type.value)
                before: list[tuple[RowMap, set[str]]] = [(r, seen.terms_of(r)) for r in near]
                before += [(r, r["term_set"]) for r in written.last(key, cfg.dedup.candidates)]
                self._supersede(row, term_set, before, demoted)
            if cfg.dedup.enabled:
                written.add((branch, p.type.value), dict(row, embedding_vec=vec, term_set=term_set))
            if p.key is not None:
                by_key[p.key] = row
            out.append(node_from_row(row))
        pending.flush()
        for node_id, (importance, by) in demoted.items():
            fresh = self.store.nodes.get(conn, node_id)  # (a twin merged into it since it was read)
            if fresh is None or fresh.status != Status.LIVE.value or fresh.importance <= importance:
                continue
            # A weight the memory changed by itself, not an edit: the version stays.
            values = dict(importance=importance)
            self.store.nodes.update(conn, node_id, **values)
            self.store.log.append(conn, ns, self.session, seen.rows[by]["created_at"], "supersede", node_id, dict(values, by=by))
        return Written(out, late, tuple(misread))

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

    def _supersede(self, row: RowMap, term_set: set[str], earlier: Sequence[tuple[RowMap, set[str]]],
                   demoted: dict[str, tuple[float, str]]) -> None:
        """Lower the importance of the ``earlier`` memories (of the new ``row``'s branch
        and type) that ``row`` restates or updates: it holds at least
        ``dedup.supersede_words`` of their words (``earlier`` pairs each row with its
        term set), each weighed by its rarity among the memories compared, so that the
        id or the name every memory of a task carries counts for little. Pinned
        memories keep theirs. The new importances are gathered in ``demoted`` and
        written after the batch's rows."""
        d = self.config.dedup
        others = list({r["id"]: (r, words) for r, words in earlier if r["id"] != row["id"] and not r["pinned"]}.values())
        if not others:
            return
        df = Counter(t for words in (*(w for _, w in others), term_set) for t in words)
        n = len(others) + 1
        cap = d.supersede * row["importance"]
        for other, words in others:
            if not words:
                continue
            weight = {t: math.log1p(n / df[t]) for t in words}
            held = sum(w for t, w in weight.items() if t in term_set) / sum(weight.values())
            current = demoted[other["id"]][0] if other["id"] in demoted else other["importance"]
            if held >= d.supersede_words and current > cap:
                demoted[other["id"]] = (cap, row["id"])

    def _settled_by_words(self, seen: _Seen, p: Prepared, active_id: str | None) -> bool:
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
        if seen.exact_twin(p, branch) is not None:
            return True
        group = seen.read_group(branch, p.type.value, d.candidates)
        if group is None or len(group[0]) > d.candidates:
            return False
        return all(self._word_overlap(row["content"], p.content) is None
                   for row in seen.near_rows(group[0], branch, p.type.value))

    def _read_ahead(self, conn: Connection, seen: _Seen, prepared: Sequence[Prepared], active_id: str | None,
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
            if p.type is NodeType.TASK and cfg.write.focus_new_tasks:
                return  # the items after it may go under it

    def _resolve_parent(
        self, seen: _Seen, ref: ParentRef, by_key: Mapping[str, RowMap], active_id: str | None
    ) -> RowMap | None:
        if isinstance(ref, Root):
            return None
        if ref is None:
            if active_id is None:
                return None
            row = seen.parent(active_id, strict=False)
            return row if row is not None and row["status"] == Status.LIVE.value else None
        if isinstance(ref, str) and ref in by_key:
            return by_key[ref]
        try:
            return seen.parent(self.node_id(ref))
        except NotFoundError as exc:
            raise NotFoundError(f"unknown parent: {exc}") from None

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

    def _check_limits(self, conn: Connection, fanout: dict[str | None, int], parent_id: str | None, depth: int) -> None:
        """``write.max_depth`` and ``write.max_children``: a write past either raises
        (its transaction, the whole batch, rolls back)."""
        cfg = self.config.write
        if depth > self.max_depth:
            raise InvalidInputError(f"the new node would be at depth {depth}; the limit is {self.max_depth} (write.max_depth)")
        if parent_id not in fanout:
            fanout[parent_id] = self.store.tree.child_count(conn, self.namespace, parent_id, cfg.max_children)
        fanout[parent_id] += 1
        if fanout[parent_id] > cfg.max_children:
            where = f"node {parent_id}" if parent_id is not None else "the root"
            raise InvalidInputError(f"{where} would have more than {cfg.max_children} children (write.max_children)")

    def _find_twin(
        self,
        seen: _Seen,
        p: Prepared,
        vec: np.ndarray[Any, Any],
        term_set: set[str],
        branch: str,
        earlier: Sequence[RowMap],
        from_index: Callable[[], Sequence[tuple[str, float]]],
    ) -> tuple[RowMap | None, list[RowMap]]:
        """The twin of ``p`` (None: none), and the stored memories of its branch and
        type that were compared with it: its nearest (what supersession looks at)."""
        # (a task heads its own branch; two tasks are never twins: not asked)
        exact = seen.exact_twin(p, branch)
        if exact is not None:
            return exact, []
        lexical = self.config.dedup.lexical
        for row in earlier:  # earlier items of this batch in the same branch, of the same type
            if text.jaccard(row["term_set"], term_set) >= lexical and self.is_twin(
                row["content"], p.content, float(np.dot(row["embedding_vec"], vec))
            ):
                return row, []  # _reinforce reads its latest version
        near = seen.nearest(branch, p.type.value, vec, from_index)
        for other, cosine in near:
            if self.is_twin(other["content"], p.content, cosine):
                return other, []
        return None, [row for row, _ in near]

    def is_twin(self, a: str, b: str, cosine: float) -> bool:
        """Whether two contents are near-identical by the dedup rule: their lexical
        overlap reaches ``dedup.lexical`` and their blended similarity (the cosine
        trusted as far as the embedder covers both texts) reaches ``dedup.similarity``."""
        overlap = self._word_overlap(a, b)
        if overlap is None:
            return False
        coverage = min(self.embedder.coverage(a), self.embedder.coverage(b))
        return blend(cosine, overlap, coverage) >= self.config.dedup.similarity

    def _word_overlap(self, a: str, b: str) -> float | None:
        """The dedup rule's word tests, which no cosine makes up for: the lexical
        overlap of the two texts when it reaches ``dedup.lexical`` and they hold the
        same figures, else None."""
        overlap = text.overlap(a, b)
        if overlap < self.config.dedup.lexical or text.figures(a) != text.figures(b):
            return None
        return overlap

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
        self.store.sessions.set_cursor(conn, self.namespace, self.session, node_id, ts)
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


class Embedding:
    """The vectors of a batch's texts, being embedded on another thread: iterating
    (or :meth:`all`) waits for them."""

    def __init__(self, future: Future[np.ndarray[Any, Any]]) -> None:
        self._future = future

    def __iter__(self) -> Iterator[np.ndarray[Any, Any]]:
        return iter(self.all())

    def all(self) -> np.ndarray[Any, Any]:
        return self._future.result()


#: A branch holding at most this many live memories of a type is scored whole for a
#: new memory's twin (one read of their ids and embeddings); a larger one asks the
#: vector index for the nearest neighbours instead.
SCAN_LIMIT: Final = 2048
#: The types a later memory of the same branch can supersede (dedup.supersede):
#: what the agent knows. Events and states are not: an event does not undo an
#: earlier one, and a branch's latest state stands for its earlier ones already.


class _Seen:
    """What one batch reads, each thing once: the rows its items name as parents, the
    exact-content matches of all items, the embeddings of each (branch, type) a twin
    is looked for in, dedup's nearest rows, branch heads, and the rows the batch
    itself writes. On SQLite (writers serialised) the parents come in one query;
    elsewhere each parent is locked with its ancestors (``store.tree.lock_path``) the
    first time an item names it, so every row kept here is locked or written by this
    batch."""

    def __init__(self, writer: Writer, conn: Connection, prepared: Sequence[Prepared], active_id: str | None) -> None:
        self._writer, self._conn, self._store = writer, conn, writer.store
        #: Rows by id: parents read so far and the rows this batch wrote.
        self.rows: dict[str, RowMap] = {}
        self._heads: dict[str, bool] = {}
        self._near: dict[str, RowMap | None] = {}  # dedup's candidate rows (None: not live)
        self._terms: dict[str, set[str]] = {}  # term sets of stored rows, by id
        self._groups: dict[tuple[str, str], tuple[list[str], np.ndarray[Any, Any]] | None] = {}
        self.by_hash: dict[str, list[RowMap]] = {}
        #: The contents from the root down to each node read or written here, its own last.
        self.paths: dict[str, context.Path] = {}
        named = {p.parent.id if isinstance(p.parent, Node) else p.parent
                 for p in prepared if isinstance(p.parent, (Node, str))}
        # The nodes the batch's items go under: the parents named by id, and the active
        # node when an item names none.
        under = named | ({active_id} if active_id is not None and any(p.parent is None for p in prepared) else set())
        if self._store.is_sqlite:
            self.rows.update((i, r._mapping) for i, r in self._store.nodes.get_many(conn, under).items())
        if writer.config.dedup.enabled:
            # An exact twin lies in a branch that exists already: the branch of a node
            # the batch goes under. An item under an earlier item of the batch is in
            # that item's branch, which is one of these or new.
            hashes = {h for p in prepared if p.type is not NodeType.TASK for h in self._store.content_hashes(p.content)}
            heads: set[str] = set()
            if hashes:
                heads = ({self.rows[i]["branch_id"] for i in under if i in self.rows} if self._store.is_sqlite
                         else self._store.tree.branches_of(conn, under))
            for r in self._store.nodes.find_by_hashes(conn, writer.namespace, hashes, heads):
                self.by_hash.setdefault(r.content_hash, []).append(r._mapping)

    def exact_twin(self, p: Prepared, branch: str) -> RowMap | None:
        """A stored live memory of ``branch`` with ``p``'s type and content."""
        for h in self._store.content_hashes(p.content):
            for r in self.by_hash.get(h, ()):
                if r["branch_id"] == branch and r["type"] == p.type.value:
                    return r
        return None

    def nearest(self, branch: str, ntype: str, vec: np.ndarray[Any, Any],
                from_index: Callable[[], Sequence[tuple[str, float]]]) -> list[tuple[RowMap, float]]:
        """The stored live memories of ``branch`` and type ``ntype`` nearest to ``vec``
        (at most ``dedup.candidates``, nearest first, with their cosines): scored
        exactly from the stored embeddings when the branch holds at most
        :data:`SCAN_LIMIT` of them, else the vector index's nearest of the namespace
        (``from_index``) that are in the branch and of the type."""
        n = self._writer.config.dedup.candidates
        group = self.read_group(branch, ntype)
        if group is None:
            pairs = list(from_index())
        else:
            ids, matrix = group
            if not ids:
                return []
            sims = matrix @ np.asarray(vec, dtype=np.float32)
            top = np.argsort(-sims, kind="stable")[:n]
            pairs = [(ids[j], float(sims[j])) for j in top]
        self._read_near([i for i, _ in pairs])
        rows = {r["id"]: r for r in self.near_rows([i for i, _ in pairs], branch, ntype)}
        return [(rows[i], cosine) for i, cosine in pairs if i in rows]

    def read_group(self, branch: str, ntype: str, rows_up_to: int = 0
                   ) -> tuple[list[str], np.ndarray[Any, Any]] | None:
        """The ids and embeddings of ``branch``'s live memories of type ``ntype`` (None:
        more than :data:`SCAN_LIMIT`), read once. With ``rows_up_to``, a group of at
        most that many also has its rows read: all of them are a new memory's nearest,
        whatever its vector."""
        key = (branch, ntype)
        if key not in self._groups:
            self._groups[key] = self._store.nodes.branch_vectors(self._conn, self._writer.namespace, branch, ntype, SCAN_LIMIT)
        group = self._groups[key]
        if group is not None and len(group[0]) <= rows_up_to:
            self._read_near(group[0])
        return group

    def terms_of(self, row: RowMap) -> set[str]:
        """The term set of a stored row's content, worked out once per batch."""
        if row["id"] not in self._terms:
            self._terms[row["id"]] = set(text.terms(row["content"]))
        return self._terms[row["id"]]

    def _read_near(self, ids: Sequence[str]) -> None:
        """Read the rows of ``ids`` not read yet as dedup candidates (None: not live)."""
        missing = [i for i in ids if i not in self._near]
        if missing:
            found = self._store.nodes.get_many(self._conn, missing, live_only=True)
            self._near.update((i, None if i not in found else found[i]._mapping) for i in missing)

    def near_rows(self, ids: Sequence[str], branch: str, ntype: str) -> list[RowMap]:
        """The rows of ``ids`` read as dedup candidates that are still live, in
        ``branch`` and of type ``ntype``."""
        out = []
        for node_id in ids:
            row = self._near.get(node_id)
            if row is not None and row["branch_id"] == branch and row["type"] == ntype:
                out.append(row)
        return out

    def parent(self, node_id: str, *, strict: bool = True) -> RowMap | None:
        """The live row of ``node_id``, locked with its ancestors (not found: an error, or
        None when not ``strict``)."""
        row = self.rows.get(node_id)
        if row is None:
            found = self._store.tree.lock_path(self._conn, node_id)
            if found is None:
                if not strict:
                    return None
                raise NotFoundError(f"no node {node_id!r}")
            row = self.rows[node_id] = found._mapping
        if strict:
            self._writer.checked(node_id, row, live=True)
        return row

    def above(self, parent: RowMap) -> context.Path:
        """The contents from the root down to ``parent``, its own last: what a node
        under it is read with."""
        if parent["id"] not in self.paths:
            self.paths[parent["id"]] = (*context.above(self._store, self._conn, parent["path"]), parent["content"])
        return self.paths[parent["id"]]

    def branch_info(self, parent: RowMap) -> tuple[str, bool]:
        """(branch head id, whether the head is a task) of the branch ``parent`` is in."""
        head = parent["branch_id"]
        if head == parent["id"]:
            return head, parent["type"] == NodeType.TASK.value
        if head not in self._heads:
            row = self.rows.get(head)
            if row is None:
                found = self._store.nodes.get(self._conn, head)
                row = None if found is None else found._mapping
            self._heads[head] = row is not None and row["type"] == NodeType.TASK.value
        return head, self._heads[head]


class _Earlier:
    """The rows a batch has written so far, by (branch, type), indexed for the lexical
    gate of dedup (term-set Jaccard at least ``threshold``) so that an item is
    compared with the few earlier rows that can pass it, not with every row of its
    branch (a batch of 10,000 siblings made that quadratic).

    Prefix filtering: order every term by its count in the batch, rarest first (ties
    by the term). Two sets A and B with Jaccard >= t share at least ⌈t·max(|A|, |B|)⌉
    terms, so they share one among the first |A| - ⌈t·|A|⌉ + 1 terms of A and the
    first |B| - ⌈t·|B|⌉ + 1 of B; only those prefixes are indexed and looked up.
    :meth:`candidates` returns a superset of the rows that pass the gate, in the order
    they were written, so the first twin found is the one a full scan finds."""

    def __init__(self, term_sets: Sequence[set[str]], threshold: float) -> None:
        self._df = Counter(t for s in term_sets for t in s)
        self._t = threshold
        self._rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._postings: dict[tuple[str, str], dict[str, list[int]]] = {}
        self._empty: dict[tuple[str, str], list[int]] = {}

    def _prefix(self, terms: set[str]) -> list[str]:
        ordered = sorted(terms, key=lambda t: (self._df[t], t))
        n = len(ordered)
        # (a hair below t·n before rounding up: a longer prefix is only ever safer)
        return ordered[: n - math.ceil(self._t * n - 1e-9) + 1]

    def add(self, key: tuple[str, str], row: dict[str, Any]) -> None:
        rows = self._rows.setdefault(key, [])
        at = len(rows)
        rows.append(row)
        terms = row["term_set"]
        if not terms:
            self._empty.setdefault(key, []).append(at)
            return
        postings = self._postings.setdefault(key, {})
        for t in self._prefix(terms):
            postings.setdefault(t, []).append(at)

    def last(self, key: tuple[str, str], n: int) -> list[dict[str, Any]]:
        """The last ``n`` rows written under ``key``."""
        return self._rows.get(key, [])[-n:]

    def candidates(self, key: tuple[str, str], terms: set[str]) -> list[dict[str, Any]]:
        rows = self._rows.get(key)
        if not rows:
            return []
        if self._t <= 1e-9:  # every pair passes a zero threshold, shared terms or not
            return rows
        if not terms:  # only another empty set reaches a Jaccard above zero
            return [rows[i] for i in self._empty.get(key, ())]
        postings = self._postings.get(key, {})
        found = {i for t in self._prefix(terms) for i in postings.get(t, ())}
        return [rows[i] for i in sorted(found)]


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


def to_json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), ensure_ascii=False, sort_keys=True)
