"""MemoryTree: the one object an agent opens. It orchestrates the relational store
(the truth), the vector index (derived) and the embedder.

A facade: each method checks its arguments and role, runs its change in one store
transaction (steps in writing.py, editing.py, ...), then what follows the commit.
The operator's operations (verify, repair, reindex, key rotation, erasing a subtree
or the namespace, export, import, stats) are on ``mem.admin`` (admin.py).
Invariants: the store commits first, the index's writes wait in the outbox; a closed
handle refuses every call."""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, overload

from . import _validate as check
from . import context, ingest, opening, portability, reading, safety, summaries
from .admin import Admin
from .config import Config
from .crypto import Keyring
from .editing import Editor
from .embed import Embedder
from .embedding_worker import EmbeddingWorker
from .errors import ClosedError, InvalidInputError, InvalidTypeError, NamespaceError
from .finishing import Finisher
from .forgetting import forgetting_weights, limits
from .items import NodeRef, ParentRef, Root, feedback_values, prepare_many, update_values
from .leftovers import Leftovers
from .model import Checkpoint, ForgetReport, Node, NodeType, Placement, Recall, RecoveryState
from .placement import Placer
from .recovery import AppliedFirst, IndexBatch, drain_outbox
from .retrieval import Retriever
from .store.schema import node_from_row
from .store.sql import SqlStore
from .store.vectors import VectorIndex
from .testing import Faults
from .usage import Reads
from .writing import Writer

log = logging.getLogger("hybrid_memory")

class MemoryTree:
    """A weighted memory tree for one namespace (tenant) and one agent session.

    Open it with :meth:`open`; use it as a context manager or call :meth:`close`.
    Maintenance (verify, repair, reindex, rotate_key, erase, erase_namespace, export,
    import_, stats) is on :attr:`admin`.
    """

    def __init__(self, *, store: SqlStore, index: VectorIndex, embedder: Embedder, namespace: str = "default",
                 session: str = "main", config: Config | None = None, clock: Callable[[], float] = time.time,
                 folder: Path | None = None, role: str = "admin", actor: str | None = None,
                 faults: Faults | None = None) -> None:
        """The parts made by :meth:`open` (or given by a caller); ``faults``: a test hook
        (:class:`hybrid_memory.testing.Faults`)."""
        self.namespace = check.namespace(namespace)
        self.session = check.namespace(session, "session")
        #: What this handle may do: "read", "write" or "admin".
        self.role = check.role(role)
        self.actor = self.session if actor is None else check.namespace(actor, "actor")
        self.config = config or Config.load()
        self.store = store
        if self.config.security.audit:
            store.audit.enable()
        store.audit.actors[(self.namespace, self.session)] = self.actor
        #: Test hook (hybrid_memory.testing): called at named points of the write path.
        self._fault = faults if faults is not None else Faults()
        self._batch = IndexBatch(store, index, self.namespace, self.config.write.index_batch, self._fault)
        #: The vector index. Reading it here (query, ids, vectors) first applies the
        #: index writes still waiting in the outbox (see ``write.index_batch``).
        self.index: VectorIndex = index if self.config.write.index_batch == 1 else AppliedFirst(index, self._batch.apply)
        self._index = index
        self.embedder = embedder
        self.folder = folder
        self._clock = clock
        self._closed = False
        self._reads = Reads(store, self.namespace, self.session, clock, self.config.usage.flush_every)
        self._worker = EmbeddingWorker(embedder, self.config)
        self._paths = context.PathVectors()  # the paths this handle embedded, by their text
        self._retriever = Retriever(store, index, embedder, self.config, self.namespace, session=self.session,
                                    pending=lambda: self._reads.pending, embed_later=self._worker.later)
        self._placer = Placer(embed=embedder.embed, locate=self._retriever.locate_branches,
                              active=self._active_id, threshold=self.config.write.place_min)
        self._writer = Writer(store=store, index=index, embedder=embedder, config=self.config,
                              namespace=self.namespace, session=self.session, clock=clock)
        self._writer.fault = self._fault
        self._editor = Editor(store=store, writer=self._writer, embedder=embedder, config=self.config,
                              namespace=self.namespace, session=self.session, forget_reads=self._reads.drop)
        self._finisher = Finisher(store=store, namespace=self.namespace, config=self.config, writer=self._writer,
                                  editor=self._editor, add=self.add, weigh=self._retriever.weight_of,
                                  write_with=self._reads.write_with, written=self._batch.add, clock=clock)
        self._fault.attach(self._retriever)
        opening.check_stored(store, self.config, self.namespace, self.session, embedder, clock)
        self._left = Leftovers(store, index, embedder, self.config, self.namespace, self._worker, self._paths)
        self._left.heal()  # what a crash left
        self._replayed = drain_outbox(store, index, self.namespace)
        self._problems = self._left.problems()
        #: The maintenance operations (:class:`hybrid_memory.admin.Admin`): verify,
        #: repair, reindex, rotate_key, erase, erase_namespace, export, import_, stats.
        self.admin = Admin(store=store, index=index, namespace=self.namespace, session=self.session, role=self.role,
                           folder=folder, clock=clock, batch=self._batch, leftovers=self._left, editor=self._editor,
                           reads=self._reads, fault=self._fault, live_check=self._live_check, flush=self.flush,
                           delete=self.delete, settle_erasure=self._settle_erasure, recheck=self._recheck,
                           host=self._host, audit=self._audit)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str] | None = None, *, namespace: str = "default", session: str = "main",
        config: Config | str | os.PathLike[str] | None = None, store: SqlStore | str | None = None,
        index: VectorIndex | None = None, embedder: Embedder | None = None, clock: Callable[[], float] = time.time,
        chroma_url: str | None = None, key: Keyring | str | None = None, role: str = "admin",
        actor: str | None = None, faults: Faults | None = None,
    ) -> MemoryTree:
        """Create or reopen a memory.

        ``path`` is a folder holding ``memory.db`` (SQLite) and ``chroma/``. ``store``
        may instead be a SQLAlchemy URL or a :class:`SqlStore`; ``index`` any
        :class:`VectorIndex`; ``embedder`` any :class:`Embedder`. Leftover index work
        from a crash is replayed before this returns (see :meth:`recover`).

        ``chroma_url`` (e.g. ``"http://127.0.0.1:8000"``) keeps the vectors on a Chroma
        server (:meth:`ChromaIndex.server`) instead of ``chroma/`` in the folder; give
        it or ``index``, not both. The server is reached on first use: while it is
        down, writes still commit and their index work waits in the outbox until a
        later write or open drains it.

        ``key`` (a :class:`Keyring` or key text) encrypts what the memory stores; without
        it the key comes from ``$HYBRID_MEMORY_KEY``, ``$HYBRID_MEMORY_KEY_FILE`` or
        ``security.key_file``. An encrypted memory opened without its key raises
        :class:`EncryptionKeyError`. ``role`` is what this handle may do: ``"read"``,
        ``"write"`` or ``"admin"`` (everything; the default). ``actor`` names who acts
        through the handle in the audit log (the session by default). ``faults`` is a
        test hook (:class:`hybrid_memory.testing.Faults`).
        """
        parts = opening.parts(path, namespace=namespace, session=session, config=config, store=store, index=index,
                              embedder=embedder, chroma_url=chroma_url, key=key, role=role, actor=actor)
        return cls(store=parts.store, index=parts.index, embedder=parts.embedder, namespace=namespace, session=session,
                   config=parts.config, clock=clock, folder=parts.folder, role=parts.role, actor=actor, faults=faults)

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
            self._reads.flush()
            try:
                self._batch.apply()
            except Exception as exc:  # what is left waits in the outbox; the next open applies it
                log.warning("index writes left in the outbox at close: %s", exc)
        finally:
            self._closed = True
            self._retriever.close()
            self._worker.close()
            self._index.close()
            self.store.close()

    def flush(self) -> None:
        """Write buffered read reinforcement (usage counts) now, and apply this handle's
        index writes still waiting for their batch (``write.index_batch``): after it,
        the vector index holds every write, for whoever reads it directly."""
        self._live_check()
        self._reads.flush()
        self._batch.apply()

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
            return node_from_row(self._writer.row(conn, node))

    def children(self, node: NodeRef, *, include_archived: bool = False) -> list[Node]:
        """The node's live children (and archived ones with ``include_archived``), oldest first."""
        self._live_check()
        check.flag(include_archived, "include_archived")
        return reading.children(self.store, self._writer, node, include_archived=include_archived)

    def path(self, node: NodeRef) -> list[Node]:
        """The node's ancestors from the root, then the node."""
        self._live_check()
        return reading.path(self.store, self._writer, node)

    def nodes(self, *, include_archived: bool = False) -> list[Node]:
        """Every node of the namespace in tree order (parents before children, siblings by time)."""
        self._live_check()
        check.flag(include_archived, "include_archived")
        return reading.all_nodes(self.store, self.namespace, include_archived=include_archived)

    @property
    def active(self) -> Node | None:
        """The active node of this session: new memories hang under it by default."""
        self._live_check()
        return reading.active(self.store, self.namespace, self.session)

    def _active_id(self) -> str | None:
        active = reading.active(self.store, self.namespace, self.session)
        return active.id if active is not None and active.live else None

    def place(self, content: str) -> Placement:
        """Where a memory of ``content`` written with ``parent=AUTO`` would go, and why
        (see :mod:`hybrid_memory.placement`). Writes nothing."""
        self._live_check()
        return self._placer.place(check.content(content, self.config.write.max_content_chars))

    def weight(self, node: Node, now: float | None = None, *, forgetting: bool = False) -> float:
        """The node's weight at ``now`` (default: the clock), reads not yet written included.

        ``forgetting=True``: the weight forgetting starts from, which counts recency
        with ``[forgetting]`` recency and half_life_s. forget() then applies the shares
        that depend on where the node stands (superseded, empty_task, last_in_task).
        """
        self._live_check()
        if not isinstance(node, Node):
            raise InvalidTypeError(f"weight() takes a Node, got {type(node).__name__}")
        check.flag(forgetting, "forgetting")
        if node.namespace != self.namespace:
            raise NamespaceError(f"node {node.id} belongs to namespace {node.namespace!r}, not {self.namespace!r}")
        cfg = forgetting_weights(self.config) if forgetting else None
        return self._retriever.weight_of(node, self._now(now), cfg)

    # -- writing ---------------------------------------------------------------

    @check.requires("write")
    def add(
        self, content: str, *, type: NodeType | str, parent: ParentRef = None, importance: float | None = None,
        confidence: float | None = None, meta: Mapping[str, Any] | None = None, ts: float | None = None,
        pinned: bool = False,
    ) -> Node:
        """Write one memory and return it.

        ``parent=None`` hangs it under the active node (a new root if there is none);
        ``parent=ROOT`` starts a new tree; ``parent=AUTO`` puts it under the task
        branch it reads closest to (the node's ``placement`` says where and why; see
        :meth:`place`). A near-identical live memory of the same
        type in the same branch is reinforced instead: the existing node comes back
        with ``merged=True``.
        """
        return self.add_many([dict(content=content, type=type, parent=parent, importance=importance,
                                   confidence=confidence, meta=meta, ts=ts, pinned=pinned)])[0]

    @check.requires("write")
    def add_many(self, items: Iterable[Mapping[str, Any]]) -> list[Node]:
        """Write several memories: one embedding batch, one transaction.

        Each item holds the keyword arguments of :meth:`add` (``content`` and ``type``
        required) and may name a ``key``; a later item's ``parent`` may be an earlier
        item's key. Every item is checked before anything is written.
        """
        self._live_check()
        prepared = prepare_many(items, self.config, self._clock)
        if not prepared:
            return []
        prepared, placements, contents = self._placer.resolve(prepared)  # parent=AUTO
        paths = self._writer.paths(prepared)
        self._writer.check_depths(paths)  # before the embedding, which a refused batch would waste
        texts, combine = context.plan([(p.content, path) for p, path in zip(prepared, paths, strict=True)],
                                      self._paths, contents)
        vectors = self._worker.vectors(texts, combine, len(prepared))
        written = self._reads.write_with(lambda conn: self._writer.write_batch(conn, prepared, vectors, paths))
        self._writer.settle(written)  # the vectors of what was committed before them
        if written.misread:
            self._left.embed(strict=True)
        result = [replace(n, placement=placements[i]) if i in placements else n for i, n in enumerate(written.nodes)]
        self._left.cut(n for n in result if not n.merged)
        self._batch.add(sum(not n.merged for n in result))  # a merge writes no vector
        return result

    @check.requires("write")
    def update(
        self, node: NodeRef, *, content: str | None = None, importance: float | None = None,
        confidence: float | None = None, meta: Mapping[str, Any] | None = None,
        expected_version: int | None = None, ts: float | None = None,
    ) -> Node:
        """Change a live node's content, weights or meta (meta is replaced whole).

        With ``expected_version``, a node changed by someone else since raises
        :class:`ConflictError` instead of being overwritten.
        """
        self._live_check()
        values = update_values(content, importance, confidence, meta, expected_version, self.config)
        now = self._now(ts)
        vec, above = None, context.Path()
        if "content" in values:
            above = self._editor.above(node)
            vec = context.embed(self.embedder, [(values["content"], above)], self._paths)[0]
        done = self._reads.write_with(lambda conn: self._editor.update(
            conn, node, values, now=now, expected_version=expected_version, vec=vec, above=above))
        if done.vector_left:
            self._left.embed(strict=True)
        if done.below_left:
            self._refresh_context()
        if vec is not None:
            self._left.cut([done.node])
        self._batch.add()
        return done.node

    def _refresh_context(self) -> None:
        """Read again, in their current path, the vectors marked as read in another
        (:meth:`Leftovers.refresh`), and apply their index writes with the batch."""
        replaced = self._left.refresh()
        if replaced:
            self._batch.add(replaced)

    @check.requires("write")
    def feedback(
        self, node: NodeRef, *, important: bool = False, confirmed: bool = False,
        importance: float | None = None, confidence: float | None = None,
    ) -> Node:
        """The user said a memory matters (``important``) or is right (``confirmed``):
        raise its importance or confidence by the configured step, or set them."""
        self._live_check()
        importance, confidence = feedback_values(important, confirmed, importance, confidence)
        now = self._clock()
        return self._reads.write_with(lambda conn: self._editor.feedback(conn, node, important=important, confirmed=confirmed,
                                                                         importance=importance, confidence=confidence, now=now))

    @check.requires("write")
    def pin(self, node: NodeRef, pinned: bool = True) -> Node:
        """Pinned nodes are never forgotten."""
        self._live_check()
        if not isinstance(pinned, bool):
            raise InvalidTypeError("pinned must be true or false")
        now = self._clock()
        return self.store.write(lambda conn: self._editor.pin(conn, node, pinned, now))

    @check.requires("write")
    def move(self, node: NodeRef, new_parent: Node | str | Root) -> Node:
        """Hang a live node (and its subtree) under another parent. Refuses cycles."""
        self._live_check()
        if new_parent is None:
            raise InvalidInputError("move: give the new parent, or ROOT")
        now = self._clock()
        moved = self.store.write(lambda conn: self._editor.move(conn, node, new_parent, now))
        self._refresh_context()
        return moved

    @check.requires("write")
    def focus(self, node: NodeRef) -> Node:
        """Make a live node the active one: new memories hang under it, and a
        query-less :meth:`retrieve` returns its task's context."""
        self._live_check()
        now = self._clock()
        return self.store.write(lambda conn: self._editor.focus(conn, node, now))

    @check.requires("write")
    def checkpoint(self, note: str | None = None) -> Checkpoint:
        """Record where this session stands: the active node and the log position."""
        self._live_check()
        if note is not None:
            check.text_arg(note, "note")
        now = self._clock()
        return self._reads.write_with(lambda conn: self._editor.checkpoint(conn, note, now))

    # -- summaries (summaries.py) ---------------------------------------------------

    @check.requires("write")
    def summarize(self, node: NodeRef, summarizer: summaries.Summarizer | None = None, *,
                  budget_tokens: int | None = None) -> Node:
        """Write a ``summary`` node under ``node`` of the live memories below it, and
        return it. ``summarizer``: any callable from their texts (oldest first) to one
        text, an LLM call for example; by default :class:`summaries.Extractive` keeps
        the highest-weighted, least redundant sentences within ``budget_tokens``
        (``write.summary_tokens``). The summary's meta lists what it ``covers``;
        forgetting takes those details first. A new summary of the node archives the
        one before it."""
        self._live_check()
        return self._finisher.summarize(node, summarizer, budget_tokens, finish=False)

    @check.requires("write")
    def finish(self, task: NodeRef, summarizer: summaries.Summarizer | None = None, *,
               budget_tokens: int | None = None) -> Node:
        """Mark a task finished and :meth:`summarize` it; returns the summary. A recall
        that cannot fit what it picked under a finished task shows its summary instead."""
        self._live_check()
        return self._finisher.summarize(task, summarizer, budget_tokens, finish=True)

    # -- ingest (ingest/) -------------------------------------------------------------

    @check.requires("write")
    def ingest(
        self, source: str | os.PathLike[str] | None = None, *, text: str | None = None, name: str | None = None,
        format: str = "auto", parent: ParentRef = None, dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> ingest.IngestReport:
        """Write a chat transcript or document (the file ``source``, or ``text`` named
        ``name``): each session a task, each message an event under it at its original
        time, with its speaker and key in meta (see :mod:`hybrid_memory.ingest`).

        ``format``: "auto", "messages", "sessions" or "text". Sessions go at the top,
        under ``parent``, or with ``parent=AUTO`` under the branch each reads closest to.
        ``dry_run`` writes nothing and reports the tree it would build. A transcript
        that cannot be read raises :class:`IngestError` naming the line, and nothing of
        it is written; what an earlier ingest of the same name wrote is not written
        again. ``progress(done, total)`` is called after each session.
        """
        self._live_check()
        check.flag(dry_run, "dry_run")
        transcript = ingest.load(source, text=text, name=name, format=format)
        target = ingest.Target(add_many=self.add_many, place=self.place,
                               nodes=lambda: self.nodes(include_archived=True),
                               max_chars=self.config.write.max_content_chars)
        return ingest.write(transcript, target, parent=parent, dry_run=dry_run, progress=progress)

    # -- archive, restore, delete, forget ----------------------------------------

    @check.requires("write")
    def archive(self, node: NodeRef) -> list[str]:
        """Take a node and its live subtree out of retrieval (restorable). Returns the ids."""
        self._live_check()
        now = self._clock()
        ids = self.store.write(lambda conn: self._editor.archive(conn, node, now))
        self._batch.add()
        return ids

    # -- portability: time travel (logic in portability/; export, import: admin) ----

    def _host(self) -> portability.Host:
        """This handle as time travel, export and import use it."""
        return portability.Host(store=self.store, namespace=self.namespace, session=self.session, config=self.config,
                                embedder=self.embedder, folder=self.folder, clock=self._clock, flush=self.flush,
                                drain=self._batch.add)

    def unarchive(self, node: NodeRef) -> Node:
        """Bring an archived node back, with its archived ancestors and what was archived with it."""
        self._live_check()
        check.allow(self.role, "write", "unarchive")
        now = self._clock()
        result = self.store.write(lambda conn: self._editor.restore(conn, node, now))
        self._batch.add()
        return result

    def rewind(self, *, seq: int | None = None, as_of: float | None = None) -> portability.TimeTravel:
        """Bring the whole memory back to a point of its operation log: the position
        ``seq`` or the time ``as_of`` (exactly one). One logged transaction, so a
        later ``rewind(seq=...)`` undoes it; nodes erased by ``delete`` since stay
        gone (see :mod:`hybrid_memory.portability`)."""
        self._live_check()
        if (seq is None) == (as_of is None):
            raise InvalidInputError("rewind: give exactly one of seq= or as_of=")
        check.allow(self.role, "admin", "rewind")
        travelled = portability.time_travel(self._host(), seq=seq, as_of=as_of)
        self._refresh_context()
        return travelled

    @overload
    def restore(self, node: NodeRef) -> Node: ...

    @overload
    def restore(self, node: None = None, *, seq: int | None = None, as_of: float | None = None) -> portability.TimeTravel: ...

    def restore(
        self, node: NodeRef | None = None, *, seq: int | None = None, as_of: float | None = None
    ) -> Node | portability.TimeTravel:
        """Deprecated: :meth:`unarchive` (a node) or :meth:`rewind` (``seq=`` or
        ``as_of=``), which this calls. One verb named two unrelated acts."""
        warnings.warn("MemoryTree.restore is deprecated: use unarchive(node) or rewind(seq=/as_of=)",
                      DeprecationWarning, stacklevel=2)
        if sum(x is not None for x in (node, seq, as_of)) != 1:
            self._live_check()
            raise InvalidInputError("restore: give exactly one of a node, seq= or as_of=")
        if node is None:
            return self.rewind(seq=seq, as_of=as_of)
        return self.unarchive(node)

    @check.requires("write")
    def delete(self, node: NodeRef) -> list[str]:
        """Erase a node and its whole subtree everywhere: rows, lexical and vector
        index, and the content kept in the operation log. Returns the ids."""
        self._live_check()
        now = self._clock()
        ids = self.store.write(lambda conn: self._editor.delete(conn, node, now))
        self._batch.add()
        return ids

    def _settle_erasure(self, compact: bool) -> None:
        """After erased rows (``admin.erase``, ``admin.erase_namespace``): the buffered
        reads written, the vectors' deletes applied now, the store compacted or not."""
        if not isinstance(compact, bool):
            raise InvalidTypeError("compact must be true or false")
        self._reads.flush()
        self._batch.apply(force=True)  # the vectors' deletes: now, not with the next batch
        if self._retriever.rows is not None:
            self._retriever.rows.clear()  # (the next query would drop them: not kept until then)
        if compact:
            safety.compact(self.store)

    @check.requires("write")
    def forget(
        self, *, threshold: float | None = None, max_nodes: int | None = None, delete: bool = False,
        dry_run: bool = False, now: float | None = None,
    ) -> ForgetReport:
        """Prune low-weight leaves: archive (default) or delete them.

        Takes leaves whose weight is under ``threshold``, then, while more than
        ``max_nodes`` live nodes remain, the lowest-weight leaves. Never a pinned node,
        never the active node or its ancestors, never a node with live children (a
        parent can go once its children have).
        """
        self._live_check()
        check.flag(delete, "delete")
        check.flag(dry_run, "dry_run")
        thr, cap = limits(self.config, threshold, max_nodes)
        at = self._now(now)
        report = self._reads.write_with(lambda conn: self._editor.forget(
            conn, threshold=thr, max_nodes=cap, delete=delete, dry_run=dry_run, at=at))
        self._batch.add()
        return report

    # -- retrieval ----------------------------------------------------------------

    def retrieve(
        self, query: str | None = None, *, k: int | None = None, budget_tokens: int | None = None,
        branches: int | None = None, now: float | None = None, reinforce: bool = True,
    ) -> Recall:
        """Find what matters for ``query``: locate the task branch(es) by meaning,
        rank inside by similarity and weight, add standing memories and each chosen
        node's ancestors, and cut to the token budget.

        With no query: the active task's context (its ancestors and its top-k by weight).
        ``reinforce=False`` looks without counting as a use: the weights stay as they are.
        """
        self._live_check()
        check.flag(reinforce, "reinforce")
        r = self.config.retrieval
        k = r.k if k is None else check.positive_int(k, "k")
        budget = r.budget_tokens if budget_tokens is None else check.positive_int(budget_tokens, "budget_tokens")
        nb = r.branches if branches is None else check.positive_int(branches, "branches")
        if query is not None:
            check.text_arg(query, "query")
            if not query.strip():
                raise InvalidInputError("query is empty; pass None for the active task's context")
        at = self._now(now)
        recall = self._retriever.recall(query, k=k, budget=budget, branches=nb, now=at)
        if reinforce:
            self._reads.note([s.node.id for s in recall.nodes if s.reason in ("hit", "standing", "top", "summary")], at)
        self._audit("retrieve", [s.node.id for s in recall.nodes],
                    {"k": k, "budget_tokens": budget, "query": query is not None, "tokens": recall.tokens})
        return recall

    def _audit(self, action: str, ids: Sequence[str], detail: Mapping[str, Any]) -> None:
        """An audit entry of its own for a read (retrieve, export); writes are audited
        with their log entries, in their own transaction."""
        if self.store.audit.on:
            now = self._clock()
            self.store.write(lambda conn: self.store.audit.append(conn, self.namespace, self.session, [(now, action, ids, detail)]))

    # -- recovery and observation ---------------------------------------------------

    def _recheck(self) -> None:
        """Take again the problems :meth:`recover` reports (after a repair or reindex)."""
        self._problems = self._left.problems()

    def recover(self) -> RecoveryState:
        """Where this session stands: the active node, its path, the latest task
        state in its branch, the last checkpoint and the index work replayed at open."""
        self._live_check()
        return reading.recovery_state(self.store, self.namespace, self.session, replayed=self._replayed,
                                     problems=self._problems)
