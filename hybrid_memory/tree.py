"""MemoryTree: the one object an agent opens. It orchestrates the relational store
(the truth), the vector index (derived) and the embedder."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, overload

import numpy as np
from sqlalchemy.engine import Connection

from . import _validate as check
from . import context, passages, portability, retokenize, safety, text
from .config import Config
from .crypto import Keyring
from .embed import DEFAULT_MODEL, EARLIER_DEFAULTS, Embedder, make_embedder
from .errors import (
    AccessDeniedError,
    ClosedError,
    ConfigError,
    ConflictError,
    CycleError,
    HybridMemoryError,
    InvalidInputError,
    InvalidTypeError,
    NamespaceError,
)
from .forgetting import (
    alone_shares,
    forgetting_weights,
    heading_factors,
    parent_rows,
    plan_forget,
    superseded_ids,
)
from .model import (
    Checkpoint,
    Drift,
    ForgetReport,
    Node,
    NodeType,
    Recall,
    RecoveryState,
    Stats,
    Status,
    path_ids,
    tree_order,
)
from .progress import progress_bar
from .recovery import FaultHook, corrupt_log_entries, drain_outbox, reindex, repair, verify
from .retrieval import Retriever
from .store.schema import EMBED, FORGET_COLUMNS, node_from_row, to_blob
from .store.sql import SqlStore
from .store.vectors import ChromaIndex, VectorIndex
from .weights import check_unit, weight_array
from .writing import (
    Embedding,
    NodeRef,
    ParentRef,
    Root,
    Writer,
    Written,
    branch_info_for,
    to_json,
)

log = logging.getLogger("hybrid_memory")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: A write of at most this many memories is embedded on a worker thread while its
#: transaction reads what needs no vector (parents, twins' candidates, child
#: counts); a single ``add`` then costs about its embedding plus the commit.
READ_AHEAD_ITEMS = 8

#: How long a write waits for the worker to start its embedding (see _embed_overlapped).
_HANDOFF_S = 0.002


def _same(vectors: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return vectors


def _requires(role: str) -> Callable[[F], F]:
    """Refuse the call (AccessDeniedError, nothing done) on a handle whose role is below ``role``."""
    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def checked(self: MemoryTree, *args: Any, **kwargs: Any) -> Any:
            sig.bind(self, *args, **kwargs)  # a wrong call is a TypeError first, as unwrapped
            self._allow(role, fn.__name__)
            return fn(self, *args, **kwargs)
        return checked  # type: ignore[return-value]
    return wrap




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
        role: str = "admin",
        actor: str | None = None,
    ) -> None:
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
        #: The vector index. Reading it here (query, ids, vectors) first applies the
        #: index writes still waiting in the outbox (see ``write.index_batch``).
        self.index: VectorIndex = index if self.config.write.index_batch == 1 else _AppliedFirst(
            index, self._apply_index_work)
        self._index = index
        self._unindexed = 0  # index writes of this handle waiting in the outbox
        self.embedder = embedder
        self.folder = folder
        self._clock = clock
        self._closed = False
        self._pending_access: dict[str, tuple[int, float]] = {}
        # Embeds small writes and queries while their transaction reads (the thread
        # starts with the first task); the first embedding of a handle runs in the
        # caller, so a model's load never happens inside a transaction.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybrid-memory-embed")
        self._embedded = False
        self._retriever = Retriever(store, index, embedder, self.config, self.namespace,
                                    pending=lambda: self._pending_access, embed_later=self._embed_later,
                                    session=self.session)
        self._writer = Writer(
            store=store, index=index, embedder=embedder, config=self.config,
            namespace=self.namespace, session=self.session, clock=clock,
        )
        #: Test hook: called at named points of the write path; raising there
        #: simulates a crash between the relational commit and the index write.
        self._fault_hook: FaultHook | None = None
        self._writer.fault = self._fault
        self._check_embedder()
        self._check_branch_mode()
        retokenize.check_terms(self.store, self.namespace)
        context.check_version(self.store, self.namespace)
        self._unembedded = self._embed_left()
        self._out_of_context = self._context_left()
        self._uncut = self._cut_left()
        self._replayed = drain_outbox(store, index, self.namespace)
        self._problems = self._open_problems()

    def _allow(self, needed: str, what: str) -> None:
        if check.ROLES.index(self.role) < check.ROLES.index(needed):
            raise AccessDeniedError(f"{what}() needs the {needed!r} role; this handle was opened as {self.role!r}")

    def _fault(self, point: str) -> None:
        if self._fault_hook is not None:
            self._fault_hook(point)

    def _embed_left(self, *, strict: bool = False) -> str:
        """Embed the nodes that were committed before their vector and lost it (a crash
        between the two commits of a single add, or a power cut that took the second
        back), or whose path changed before their write (``Written.misread``): each is
        stored with its vector read in context, and its index write goes to the
        outbox. Returns the problem to report when the embedder fails ("" otherwise;
        ``strict``: raises it)."""
        with self.store.reading() as conn:
            left = self.store.nodes.unembedded(conn, self.store.outbox.embed_waiting(conn, self.namespace))
            rows = self.store.nodes.get_many(conn, sorted(left))
            above = context.ancestors(self.store, conn, [r.path for r in rows.values()])
        if not rows:
            return ""
        ids = list(rows)
        try:
            vectors = context.embed(self.embedder, [(rows[i].content, above[rows[i].path]) for i in ids])
        except Exception as exc:  # the memories are there, found by their words: open anyway
            if strict:
                raise
            return f"{len(ids)} memories wait for their vectors (the embedder failed: {exc})"
        self._embedded = True
        pairs = [(i, to_blob(v)) for i, v in zip(ids, vectors, strict=True)]
        self.store.write(lambda conn: self.store.nodes.settle_embeddings(conn, self.namespace, pairs))
        log.info("embedded %d memories committed before their vectors (namespace %r)", len(pairs), self.namespace)
        return ""

    def _context_left(self) -> str:
        """Read again the vectors whose path changed before a crash (or since an earlier
        version made them). Returns the problem to report when the embedder fails."""
        try:
            context.refresh(self.store, self.embedder, self.namespace)
        except Exception as exc:  # each keeps its earlier vector meanwhile
            return f"vectors wait to be read again with their changed path (the embedder failed: {exc})"
        return ""

    def _cut_left(self) -> str:
        """Cut into passages the long memories that have none for their content (a
        crash after the write's commit, an import, a new key, a lowered
        ``write.passage_tokens``; a memory cut at another size keeps its passages).
        Returns the problem to report when the embedder fails ("" otherwise)."""
        size = self.config.write.passage_tokens
        with self.store.reading() as conn:
            left = passages.uncut(conn, self.namespace, size)
        if not left:
            return ""
        try:
            passages.fill(self.store, self.embedder, self.namespace, left, size)
        except Exception as exc:  # found as before meanwhile, and shown by their first passage
            return f"{len(left)} long memories wait for their passages (the embedder failed: {exc})"
        log.info("cut %d long memories into passages (namespace %r)", len(left), self.namespace)
        return ""

    def _cut(self, written: Iterable[Node]) -> None:
        """Cut the long ones of ``written`` (just committed) into passages. A failure
        leaves them to the next open: each is found as before, and shown by its first
        passage meanwhile."""
        size = self.config.write.passage_tokens
        long = [n.id for n in written if passages.is_long(n.content, size)]
        if not long:
            return
        try:
            passages.fill(self.store, self.embedder, self.namespace, long, size)
        except Exception as exc:
            log.warning("passages of %d long memories left for the next open: %s", len(long), exc)

    def _open_problems(self) -> tuple[str, ...]:
        """What is wrong and was not healed by the open's outbox drain."""
        problems = []
        with self.store.reading() as conn:
            pending = self.store.outbox.pending_count(conn, self.namespace, index_only=True)
            one = self.store.tree.any_live_id(conn, self.namespace)
            vectors = self.store.nodes.embeddings(conn, [] if one is None else [one])
            sample = list(vectors)  # (none while that node's vector is still being computed elsewhere)
        if pending:
            problems.append(f"the vector index is unreachable: {pending} index operations are pending")
        elif sample:
            # An embedded index whose folder is there is taken as whole (verify() compares
            # its contents): asking it would load chromadb, most of a command's start.
            lost = getattr(self._index, "folder_lost", lambda: None)()
            try:
                if lost or (lost is None and not self._index.query(self.namespace, vectors[sample[0]][None, :], 1)[0]):
                    problems.append("the vector index is empty (its folder was lost?): run repair() or reindex()")
            except Exception as exc:  # the index is derived: report, keep serving from the store
                problems.append(f"the vector index cannot be read ({exc}): run reindex()")
        for left in (self._unembedded, self._out_of_context, self._uncut):
            if left:
                problems.append(f"{left}: reopen with a working embedder")
        bad = corrupt_log_entries(self.store, self.namespace, last_only=True)
        if bad:
            problems.append(f"operation-log entry #{bad[0]} is corrupt: run repair()")
        for p in problems:
            log.warning("%s (namespace %r)", p, self.namespace)
        return tuple(problems)

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
        chroma_url: str | None = None,
        key: Keyring | str | None = None,
        role: str = "admin",
        actor: str | None = None,
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
        through the handle in the audit log (the session by default).
        """
        check.namespace(namespace)  # before anything is created on disk
        check.namespace(session, "session")
        if path is not None:
            if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
                raise InvalidTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
            if "\x00" in os.fspath(path) or not str(os.fspath(path)).strip():
                raise InvalidInputError("path must be a non-empty folder path without NUL characters")
            check.utf8(str(os.fspath(path)), "path")
        if store is not None and not isinstance(store, (str, SqlStore)):
            raise InvalidTypeError(f"store must be a SQLAlchemy URL or a SqlStore, got {type(store).__name__}")
        role = check.role(role)
        if actor is not None:
            check.namespace(actor, "actor")
        if index is not None and chroma_url is not None:
            raise InvalidInputError("give index or chroma_url, not both")
        if chroma_url is not None:  # Chroma server; a malformed URL raises InvalidInputError
            index = ChromaIndex.server(chroma_url)
        if path is None and (store is None or index is None):
            raise InvalidInputError("give a folder path, or both store and index (or chroma_url)")
        folder = Path(path) if path is not None else None
        if not isinstance(config, Config):
            config = Config.load(None if config is None else Path(config))
        if folder is not None and folder.exists() and not folder.is_dir():
            raise InvalidInputError(f"{folder} exists and is not a folder")
        ring = Keyring.resolve(key, config.security.key_file or None, data_dir=folder)
        if isinstance(store, SqlStore) and ring is not None and store.keyring is not ring:
            raise InvalidInputError("give the key to SqlStore(..., keyring=...) when passing a store")
        if isinstance(store, str):  # before the folder is made: a bad URL leaves nothing behind
            store = SqlStore(store, keyring=ring)
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise InvalidInputError(f"cannot make the folder {folder}: a part of its path is a file") from None
            except OSError as exc:
                raise InvalidInputError(f"cannot make the folder {folder}: {exc}") from None
        if store is None:
            assert folder is not None
            store = SqlStore(f"sqlite:///{(folder / 'memory.db').resolve()}", keyring=ring)
        if index is None:
            assert folder is not None
            index = ChromaIndex(folder / "chroma", graphs=config.accel.in_memory_vectors)
        if embedder is None:
            embedder = make_embedder(config.embedding)
            if config.embedding.model == DEFAULT_MODEL:
                embedder = _made_with(store, namespace, config, embedder)
        return cls(
            store=store, index=index, embedder=embedder, namespace=namespace,
            session=session, config=config, clock=clock, folder=folder, role=role, actor=actor,
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
            self._flush_reads()
            try:
                self._apply_index_work()
            except Exception as exc:  # what is left waits in the outbox; the next open applies it
                log.warning("index writes left in the outbox at close: %s", exc)
        finally:
            self._closed = True
            self._retriever.close()
            self._worker.shutdown(wait=True)
            self._index.close()
            self.store.close()

    def flush(self) -> None:
        """Write buffered read reinforcement (usage counts) now, and apply this handle's
        index writes still waiting for their batch (``write.index_batch``): after it,
        the vector index holds every write, for whoever reads it directly."""
        self._live_check()
        self._flush_reads()
        self._apply_index_work()

    def _flush_reads(self) -> None:
        if self._pending_access:
            self._write_flushing(lambda conn: None)

    def _write_flushing(self, fn: Callable[[Connection], T]) -> T:
        """``store.write(fn)``, writing the buffered reads in the same transaction.
        The buffer is emptied only once that transaction has committed: a refused
        (rolled back) or retried write keeps the reads."""

        def run(conn: Connection) -> T:
            if self._pending_access:
                self.store.nodes.add_access(conn, self._pending_access)
                # portability: reads are logged too, so that replay counts them.
                self.store.log.append(conn, self.namespace, self.session, self._clock(), "access", None,
                                      portability.access_payload(self._pending_access))
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
            return node_from_row(self._writer.row(conn, node))

    def children(self, node: NodeRef, *, include_archived: bool = False) -> list[Node]:
        """The node's live children (and archived ones with ``include_archived``), oldest first."""
        self._live_check()
        check.flag(include_archived, "include_archived")
        with self.store.reading() as conn:
            row = self._writer.row(conn, node)
            rows = self.store.tree.subtree(conn, self.namespace, row.path)
        kids = [node_from_row(r) for r in rows if r.parent_id == row.id]
        if not include_archived:
            kids = [k for k in kids if k.live]
        return sorted(kids, key=lambda n: (n.created_at, n.id))

    def path(self, node: NodeRef) -> list[Node]:
        """The node's ancestors from the root, then the node."""
        self._live_check()
        with self.store.reading() as conn:
            row = self._writer.row(conn, node)
            ids = path_ids(row.path)
            rows = self.store.nodes.get_many(conn, ids)
        return [node_from_row(rows[i]) for i in ids]

    def nodes(self, *, include_archived: bool = False) -> list[Node]:
        """Every node of the namespace in tree order (parents before children, siblings by time)."""
        self._live_check()
        check.flag(include_archived, "include_archived")
        with self.store.reading() as conn:
            rows = self.store.tree.live_rows(conn, self.namespace) if not include_archived else self.store.tree.subtree_all(conn, self.namespace)
        return tree_order([node_from_row(r) for r in rows])

    @property
    def active(self) -> Node | None:
        """The active node of this session: new memories hang under it by default."""
        self._live_check()
        with self.store.reading() as conn:
            active_id = self.store.sessions.get_cursor(conn, self.namespace, self.session)
            row = self.store.nodes.get(conn, active_id) if active_id else None
        return node_from_row(row) if row is not None and row.status == Status.LIVE.value else None

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

    @_requires("write")
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

    @_requires("write")
    def add_many(self, items: Iterable[Mapping[str, Any]]) -> list[Node]:
        """Write several memories: one embedding batch, one transaction.

        Each item holds the keyword arguments of :meth:`add` (``content`` and ``type``
        required) and may name a ``key``; a later item's ``parent`` may be an earlier
        item's key. Every item is checked before anything is written.
        """
        self._live_check()
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise InvalidTypeError("add_many takes an iterable of mappings (one per memory)")
        prepared = [self._writer.prepare(item, i) for i, item in enumerate(items)]
        if not prepared:
            return []
        keys = [p.key for p in prepared if p.key is not None]
        if len(keys) != len(set(keys)):
            raise InvalidInputError("add_many: item keys must be unique")
        paths = self._writer.paths(prepared)
        texts, combine = context.plan([(p.content, path) for p, path in zip(prepared, paths, strict=True)])
        vectors = self._embed_overlapped(texts, combine, len(prepared))

        def run(conn: Connection) -> Written:
            return self._writer.write_batch(conn, prepared, vectors, paths)

        written = self._write_flushing(run)
        self._writer.settle(written)  # the vectors of what was committed before them
        if written.misread:
            self._embed_left(strict=True)
        result = written.nodes
        self._cut(n for n in result if not n.merged)
        self._drain(sum(not n.merged for n in result))  # a merge writes no vector
        return result

    def _embed_overlapped(self, texts: list[str], then: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]] = _same,
                          items: int | None = None) -> np.ndarray[Any, Any] | Embedding:
        """The vectors of ``texts``. A batch of at most :data:`READ_AHEAD_ITEMS` is
        embedded on this handle's worker thread while the write transaction reads
        what needs no vector (the embedders release the interpreter lock while they
        compute), and a single add that its words settle is written meanwhile
        (``write.overlap_embedding``). A larger batch is embedded here, before its
        transaction: its embedding is long enough that holding the write lock
        through it would stall other writers, and its reads are a small share of
        it. So is the handle's first embedding, which may load the model, and every
        embedding of an embedder that keeps the interpreter lock while it computes
        (``releases_gil = False``: sentence-transformers on torch). ``then`` maps the
        embeddings to the vectors wanted (see :func:`context.plan`), ``items`` of them
        (as many as the texts when not given)."""
        known = getattr(self.embedder, "known", None)
        if known is not None and (held := known(texts)) is not None:
            return then(np.asarray(held))
        if (len(texts) if items is None else items) > READ_AHEAD_ITEMS or not self.config.write.overlap_embedding or not self._embedded \
                or not self._overlaps:
            vectors = self.embedder.embed(texts)
            self._embedded = True
            return then(vectors)
        started = threading.Event()

        def run() -> np.ndarray[Any, Any]:
            started.set()
            return then(self.embedder.embed(texts))

        try:
            future = self._worker.submit(run)
        except RuntimeError:  # the worker was shut down: close() ran meanwhile
            raise ClosedError("this MemoryTree is closed") from None
        # The worker takes the interpreter lock first: the tokenizer holds it for a
        # moment before the model runs without it. Started behind the transaction's
        # reads instead, it waited ~1 ms for the lock (a single add 1.28x one
        # embedding call instead of 1.21x). Bounded, for a worker busy elsewhere.
        started.wait(_HANDOFF_S)
        return Embedding(future)

    @property
    def _overlaps(self) -> bool:
        """Whether the embedder leaves the interpreter lock free while it computes
        (its ``releases_gil``; absent: yes)."""
        return bool(getattr(self.embedder, "releases_gil", True))

    def _embed_later(self, texts: list[str]) -> Callable[[], np.ndarray[Any, Any]]:
        """Start embedding ``texts`` (on the worker thread when they are few) and
        return what waits for their vectors."""
        vectors = self._embed_overlapped(texts)
        if isinstance(vectors, Embedding):
            return vectors.all
        return lambda: vectors

    def is_twin(self, a: str, b: str, cosine: float) -> bool:
        """Whether two contents are near-identical by the dedup rule: they hold the same
        figures (numbers, dates, ids), their lexical overlap reaches ``dedup.lexical``
        and their blended similarity (the cosine trusted as far as the embedder covers
        both texts) reaches ``dedup.similarity``."""
        a = check.text_arg(a, "a")
        b = check.text_arg(b, "b")
        try:  # a cosine a hair past 1 (float rounding) is a cosine
            ok = not isinstance(cosine, bool) and isinstance(cosine, (int, float)) and math.isfinite(float(cosine))
        except OverflowError:
            ok = False
        if not ok:
            raise InvalidTypeError(f"cosine must be a finite number, got {check.show(cosine)}")
        return self._writer.is_twin(a, b, float(cosine))

    @_requires("write")
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
            values["meta"] = to_json(check.meta(meta, self.config.write.max_content_chars))
        if expected_version is not None and (isinstance(expected_version, bool) or not isinstance(expected_version, int)):
            raise InvalidTypeError(f"expected_version must be an integer, got {check.show(expected_version)}")
        if not values:
            raise InvalidInputError("update: nothing to change")
        now = self._now(ts)
        vec, above = None, context.Path()
        left = {"vector": False, "below": False}  # what the commit leaves to embed (set by the last attempt)
        if "content" in values:
            above = self._above(node)
            vec = context.embed(self.embedder, [(values["content"], above)])[0]

        def run(conn: Connection) -> Node:
            row = self._writer.row(conn, node, live=True, lock=True)
            if expected_version is not None and row.version != expected_version:
                raise ConflictError(f"node {row.id} is at version {row.version}, not {expected_version}")
            changes = dict(values, version=row.version + 1, updated_at=now)
            if vec is not None:
                # Read in another path than the node's now: stored later, as a late vector.
                moved = context.above(self.store, conn, row.path) != above
                changes.update(
                    content_hash=self.store.content_hash(values["content"]), tokens=text.count_tokens(values["content"]),
                    embedding=b"" if moved else to_blob(vec), embed_model=self.embedder.name,
                )
                self.store.terms.unindex(conn, [row.id])
                self.store.terms.index(conn, self.namespace, row.id, text.term_counts(values["content"]))
                self.store.outbox.enqueue(conn, self.namespace, [row.id], EMBED if moved else "upsert")
                below = context.below(conn, self.namespace, row.path, inclusive=False)
                context.mark(self.store, conn, self.namespace, below)
                left.update(vector=moved, below=bool(below))
                passages.drop(conn, [row.id])
            self.store.nodes.update(conn, row.id, **changes)
            self.store.log.append(conn, self.namespace, self.session, now, "update", row.id,
                                  dict(values, version=row.version + 1))
            return node_from_row(self.store.nodes.get(conn, row.id))  # type: ignore[arg-type]

        result = self._write_flushing(run)
        if left["vector"]:
            self._embed_left(strict=True)
        if left["below"]:
            self._refresh_context()
        if vec is not None:
            self._cut([result])
        self._drain()
        return result

    def _above(self, node: NodeRef) -> context.Path:
        """The contents above ``node`` now, root first (none when it is not found: the
        write that asks raises it)."""
        with self.store.reading() as conn:
            try:
                row = self._writer.row(conn, node)
            except HybridMemoryError:
                return ()
            return context.above(self.store, conn, row.path)

    def _refresh_context(self) -> None:
        """Read again, in their current path, the vectors marked as read in another.
        A failure is not the caller's (its change is committed): the marked nodes keep
        their vectors, ``verify()`` lists them, and the next open or repair reads them."""
        try:
            replaced = context.refresh(self.store, self.embedder, self.namespace)
        except Exception as exc:
            log.warning("vectors below a changed path wait to be read again (%s): reopen or repair", exc)
            return
        if replaced:
            self._drain(replaced)

    @_requires("write")
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
        if not isinstance(important, bool) or not isinstance(confirmed, bool):
            raise InvalidTypeError("important and confirmed must be true or false")
        if importance is not None:
            importance = check_unit(importance, "importance")
        if confidence is not None:
            confidence = check_unit(confidence, "confidence")
        if not (important or confirmed or importance is not None or confidence is not None):
            raise InvalidInputError("feedback: say important=True, confirmed=True, or give a value")
        now = self._clock()

        def run(conn: Connection) -> Node:
            row = self._writer.row(conn, node, live=True, lock=True)
            imp = importance if importance is not None else row.importance
            conf = confidence if confidence is not None else row.confidence
            if important:
                imp = min(1.0, imp + f.important_step)
            if confirmed:
                conf = min(1.0, conf + f.confirmed_step)
            self.store.nodes.update(conn, row.id, importance=imp, confidence=conf, version=row.version + 1,
                                    accessed_at=max(row.accessed_at, now), updated_at=max(row.updated_at, now))
            self.store.log.append(conn, self.namespace, self.session, now, "feedback", row.id, {"importance": imp, "confidence": conf})
            return node_from_row(self.store.nodes.get(conn, row.id))  # type: ignore[arg-type]

        return self._write_flushing(run)

    @_requires("write")
    def pin(self, node: NodeRef, pinned: bool = True) -> Node:
        """Pinned nodes are never forgotten."""
        self._live_check()
        if not isinstance(pinned, bool):
            raise InvalidTypeError("pinned must be true or false")
        now = self._clock()

        def run(conn: Connection) -> Node:
            row = self._writer.row(conn, node, lock=True)
            self.store.nodes.update(conn, row.id, pinned=pinned, version=row.version + 1)
            self.store.log.append(conn, self.namespace, self.session, now, "pin", row.id, {"pinned": pinned})
            return node_from_row(self.store.nodes.get(conn, row.id))  # type: ignore[arg-type]

        return self.store.write(run)

    @_requires("write")
    def move(self, node: NodeRef, new_parent: Node | str | Root) -> Node:
        """Hang a live node (and its subtree) under another parent. Refuses cycles."""
        self._live_check()
        if new_parent is None:
            raise InvalidInputError("move: give the new parent, or ROOT")
        now = self._clock()
        mode = self.config.write.branch_by

        def run(conn: Connection) -> Node:
            row = self._writer.row(conn, node, live=True, ancestors=True)
            if isinstance(new_parent, Root):
                parent = None
            else:
                parent = self._writer.row(conn, new_parent, live=True, ancestors=True)
                if parent.path.startswith(row.path):
                    raise CycleError(f"cannot move {row.id} under {parent.id}: that is inside its own subtree")
            sub = sorted(self.store.tree.lock_subtree(conn, self.namespace, row.path), key=lambda r: r.depth)
            new_path = f"{row.id}/" if parent is None else f"{parent.path}{row.id}/"
            lim = self.config.write
            deepest = (0 if parent is None else parent.depth + 1) + (sub[-1].depth - row.depth)
            if deepest > self._writer.max_depth:
                raise InvalidInputError(f"the move would put a node at depth {deepest}; "
                                        f"the limit is {self._writer.max_depth} (write.max_depth)")
            if row.parent_id != (None if parent is None else parent.id) and self.store.tree.child_count(
                    conn, self.namespace, None if parent is None else parent.id, lim.max_children) >= lim.max_children:
                raise InvalidInputError(f"the new parent has {lim.max_children} children already (write.max_children)")
            info: dict[str, tuple[str, bool]] = {}
            if parent is not None:
                info[parent.id] = self._writer.branch_info(conn, parent._mapping)
            old_prefix = row.path
            for r in sub:
                path = new_path + r.path[len(old_prefix):]
                pinfo = info.get(r.parent_id) if r.id != row.id else (info.get(parent.id) if parent is not None else None)
                branch, is_task = branch_info_for(r.id, NodeType(r.type), pinfo, mode)
                info[r.id] = (branch, is_task)
                self.store.nodes.update(
                    conn, r.id, path=path, depth=path.count("/") - 1, branch_id=branch,
                    **({"parent_id": None if parent is None else parent.id, "version": r.version + 1, "updated_at": now} if r.id == row.id else {}),
                )
            if parent is not None:
                self.store.nodes.touch(conn, path_ids(parent.path), "active_at", now)
            if parent is not None or row.parent_id is not None:
                context.mark(self.store, conn, self.namespace, [r.id for r in sub])
            self.store.log.append(conn, self.namespace, self.session, now, "move", row.id,
                                  {"parent": None if parent is None else parent.id, "branch_by": mode})  # portability: replay regroups
            return node_from_row(self.store.nodes.get(conn, row.id))  # type: ignore[arg-type]

        moved = self.store.write(run)
        self._refresh_context()
        return moved

    @_requires("write")
    def focus(self, node: NodeRef) -> Node:
        """Make a live node the active one: new memories hang under it, and a
        query-less :meth:`retrieve` returns its task's context."""
        self._live_check()
        now = self._clock()

        def run(conn: Connection) -> Node:
            row = self._writer.row(conn, node, live=True, lock=True)
            seq = self.store.log.append(conn, self.namespace, self.session, now, "focus", row.id, {})
            self._writer.set_active(conn, row.id, now, seq)
            return node_from_row(row)

        return self.store.write(run)


    @_requires("write")
    def checkpoint(self, note: str | None = None) -> Checkpoint:
        """Record where this session stands: the active node and the log position."""
        self._live_check()
        if note is not None:
            check.text_arg(note, "note")
        now = self._clock()

        def run(conn: Connection) -> Checkpoint:
            active = self.store.sessions.get_cursor(conn, self.namespace, self.session)
            seq = self.store.log.append(conn, self.namespace, self.session, now, "checkpoint", active, {"note": note})
            return self.store.sessions.add_checkpoint(conn, self.namespace, self.session, active, seq, now, note)

        return self._write_flushing(run)

    # -- archive, restore, delete, forget ----------------------------------------

    @_requires("write")
    def archive(self, node: NodeRef) -> list[str]:
        """Take a node and its live subtree out of retrieval (restorable). Returns the ids."""
        self._live_check()
        now = self._clock()

        def run(conn: Connection) -> list[str]:
            row = self._writer.row(conn, node, live=True, ancestors=True)
            ids = [r.id for r in self.store.tree.lock_subtree(conn, self.namespace, row.path) if r.status == Status.LIVE.value]
            self._archive_ids(conn, ids, row.parent_id, now, "archive", row.id)
            return ids

        ids = self.store.write(run)
        self._drain()
        return ids

    def _archive_ids(self, conn: Connection, ids: Sequence[str], fallback: str | None, now: float, op: str, head: str | None) -> int:
        seq = self.store.log.append(conn, self.namespace, self.session, now, op, head, {"ids": list(ids)})
        self.store.nodes.set_status(conn, ids, status=Status.ARCHIVED.value, archived_op=seq)
        self.store.terms.unindex(conn, ids)
        self.store.outbox.enqueue(conn, self.namespace, ids, "delete")
        self.store.sessions.repoint_cursors(conn, self.namespace, ids, fallback, now)
        return seq

    # -- portability: time travel, export, import (logic in portability/) ----------

    def _host(self) -> portability.Host:
        """This handle as time travel, export and import use it."""
        return portability.Host(store=self.store, namespace=self.namespace, session=self.session, config=self.config,
                                embedder=self.embedder, folder=self.folder, clock=self._clock, flush=self.flush,
                                drain=self._drain)

    def unarchive(self, node: NodeRef) -> Node:
        """Bring an archived node back, with its archived ancestors and what was archived with it."""
        self._live_check()
        self._allow("write", "unarchive")
        return self._restore_node(node)

    def rewind(self, *, seq: int | None = None, as_of: float | None = None) -> portability.TimeTravel:
        """Bring the whole memory back to a point of its operation log: the position
        ``seq`` or the time ``as_of`` (exactly one). One logged transaction, so a
        later ``rewind(seq=...)`` undoes it; nodes erased by ``delete`` since stay
        gone (see :mod:`hybrid_memory.portability`)."""
        self._live_check()
        if (seq is None) == (as_of is None):
            raise InvalidInputError("rewind: give exactly one of seq= or as_of=")
        self._allow("admin", "rewind")
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

    def export(self, path: str | os.PathLike[str], *, include_log: bool = False) -> portability.Transfer:
        """Write this namespace to ``path`` as a portable JSON Lines snapshot: nodes
        (with their embeddings), cursors, checkpoints and, with ``include_log``, the
        operation log. Written atomically."""
        self._live_check()
        done = portability.export(self._host(), path, include_log=include_log)
        self._audit("export", [], {"nodes": done.nodes, "checkpoints": done.checkpoints, "ops": done.ops})
        return done

    @_requires("admin")
    def import_(self, path: str | os.PathLike[str]) -> portability.Transfer:
        """Load a snapshot written by :meth:`export` into this memory, which must be
        empty (:class:`ConflictError` otherwise), id for id, in one transaction."""
        self._live_check()
        done = portability.import_(self._host(), path)
        self._out_of_context = self._context_left()
        self._uncut = self._cut_left()
        return done

    # -- end portability ------------------------------------------------------------

    def _restore_node(self, node: NodeRef) -> Node:
        now = self._clock()

        def run(conn: Connection) -> Node:
            row = self._writer.row(conn, node, ancestors=True)
            if row.status == Status.LIVE.value:
                return node_from_row(row)
            ancestors = self.store.nodes.get_many(conn, path_ids(row.path)[:-1])
            ids = [a.id for a in ancestors.values() if a.status != Status.LIVE.value]
            ids += [
                r.id for r in self.store.tree.lock_subtree(conn, self.namespace, row.path)
                if r.status == Status.ARCHIVED.value and (r.id == row.id or r.archived_op == row.archived_op)
            ]
            for node_id in ids:
                self.store.nodes.update(conn, node_id, status=Status.LIVE.value, archived_op=None)
            for r in self.store.nodes.get_many(conn, ids).values():
                self.store.terms.index(conn, self.namespace, r.id, text.term_counts(r.content))
            self.store.outbox.enqueue(conn, self.namespace, ids, "upsert")
            self.store.log.append(conn, self.namespace, self.session, now, "restore", row.id, {"ids": ids})
            return node_from_row(self.store.nodes.get(conn, row.id))  # type: ignore[arg-type]

        result = self.store.write(run)
        self._drain()
        return result

    @_requires("write")
    def delete(self, node: NodeRef) -> list[str]:
        """Erase a node and its whole subtree everywhere: rows, lexical and vector
        index, and the content kept in the operation log. Returns the ids."""
        self._live_check()
        now = self._clock()

        def run(conn: Connection) -> list[str]:
            row = self._writer.row(conn, node, ancestors=True)
            ids = [r.id for r in self.store.tree.lock_subtree(conn, self.namespace, row.path)]
            self._delete_ids(conn, ids, row.parent_id, now, row.id)
            return ids

        ids = self.store.write(run)
        self._drain()
        return ids

    @_requires("admin")
    def erase(self, node: NodeRef, *, compact: bool = True) -> list[str]:
        """Erase a node and its subtree everywhere and leave no bytes of it on disk:
        :meth:`delete` (rows, lexical terms, the content kept in the operation log),
        the vectors removed from the index now rather than with the next batch, then
        the store compacted (SQLite: VACUUM and a truncated WAL; PostgreSQL: VACUUM
        FULL). The audit trail records the erasure by id only. ``compact=False``
        leaves the compaction to a later ``hybrid-memory compact`` (erasing many
        subtrees one after another)."""
        check.flag(compact, "compact")  # before anything is deleted
        ids = self.delete(node)
        self._settle_erasure(compact)
        return ids

    @_requires("admin")
    def erase_namespace(self, *, compact: bool = True) -> int:
        """Erase this whole namespace (tenant) everywhere: its nodes, terms, operation
        log, outbox, cursors, checkpoints and settings, its vectors, then compact the
        store as :meth:`erase` does. The handle stays open on the now empty namespace.
        Returns how many nodes were erased."""
        self._live_check()
        check.flag(compact, "compact")
        self._pending_access.clear()
        now = self._clock()

        def run(conn: Connection) -> int:
            ids = safety.erase_namespace_rows(self.store, conn, self.namespace)
            self.store.outbox.enqueue(conn, self.namespace, ids, "delete")
            if self.store.audit.on:
                self.store.audit.append(conn, self.namespace, self.session, [(now, "erase_ns", [], {"nodes": len(ids)})])
            return len(ids)

        n = self.store.write(run)
        self._settle_erasure(compact)
        drop = getattr(self._index, "drop", None)
        if callable(drop):
            drop(self.namespace)  # the collection's own files go too
        return n

    def _settle_erasure(self, compact: bool) -> None:
        if not isinstance(compact, bool):
            raise InvalidTypeError("compact must be true or false")
        self._flush_reads()
        self._apply_index_work(force=True)  # the vectors' deletes: now, not with the next batch
        if self._retriever.rows is not None:
            self._retriever.rows.clear()  # (the next query would drop them: not kept until then)
        if compact:
            safety.compact(self.store)

    @_requires("admin")
    def rotate_key(self, *, progress: bool = False) -> safety.Rotation:
        """Reseal the whole store (every namespace) under the first key of the keyring
        this memory was opened with; see :func:`hybrid_memory.safety.rotate_key`."""
        self._live_check()
        self.flush()
        bar = progress_bar(None, "rotate-key") if progress else None

        def report(done: int, total: int) -> None:
            if bar is not None:
                bar.total = total
                bar.n = done
                bar.refresh()

        try:
            rotation = safety.rotate_key(self.store, progress=report)
        finally:
            if bar is not None:
                bar.close()
        self._uncut = self._cut_left()  # (the content hashes are keyed: the passages follow)
        return rotation

    def _delete_ids(self, conn: Connection, ids: Sequence[str], fallback: str | None, now: float, head: str | None) -> None:
        # portability: what replay needs of the purged entries, without what they said.
        skeletons = portability.skeletons(conn, self.namespace, ids)
        self.store.log.purge(conn, self.namespace, ids)
        self.store.nodes.delete(conn, ids)
        self.store.outbox.enqueue(conn, self.namespace, ids, "delete")
        self.store.sessions.repoint_cursors(conn, self.namespace, ids, fallback, now)
        self.store.log.append(conn, self.namespace, self.session, now, "delete", head, {"ids": list(ids), "skeletons": skeletons})
        for pid in self._pending_access.copy():
            if pid in ids:
                del self._pending_access[pid]

    @_requires("write")
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
        check.flag(delete, "delete")
        check.flag(dry_run, "dry_run")
        f = self.config.forgetting
        thr = f.threshold if threshold is None else check_unit(threshold, "threshold")
        cap = f.max_nodes if max_nodes is None else max_nodes
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise InvalidInputError("max_nodes must be an integer >= 0 (0: no cap)")
        at = self._now(now)

        def run(conn: Connection) -> ForgetReport:
            rows = self.store.tree.lock_live_rows(conn, self.namespace, FORGET_COLUMNS)
            protected: set[str] = set()
            active = self.store.sessions.get_cursor(conn, self.namespace, self.session)
            arow = self.store.nodes.get(conn, active) if active else None
            if arow is not None:
                protected.update(path_ids(arow.path))
            (ids, parents, types, branches, pinned, importance, confidence, accessed,
             created, updated, read, below) = (list(c) for c in zip(*rows, strict=True)) if rows else ([] for _ in range(12))
            touched = np.maximum.reduce([np.array(created), np.array(updated), np.array(read), np.array(below)])
            # Reads buffered in this handle are in the rows already: _write_flushing wrote
            # them in this transaction, before this function runs.
            weights = weight_array(importance=np.array(importance), confidence=np.array(confidence),
                                   access_count=np.array(accessed), touched_at=touched,
                                   now=at, cfg=forgetting_weights(self.config))
            state = NodeType.STATE.value
            states = {ids[i]: i for i, t in enumerate(types) if t == state}
            for node_id in superseded_ids((i, branches[r], created[r]) for i, r in states.items()):
                weights[states[node_id]] *= f.superseded
            parent_row = parent_rows(ids, parents)
            live_children = np.bincount(parent_row[parent_row >= 0], minlength=len(ids))
            # A task is empty once what was under it is forgotten: one with live
            # memories now, or a leaf with forgotten ones. A new task is not.
            is_task = np.array(types, dtype=object) == NodeType.TASK.value
            is_empty = is_task & (live_children > 0)
            leaf_tasks = np.flatnonzero(is_task & ~is_empty)
            if f.empty_task < 1 and len(leaf_tasks):
                emptied = self.store.tree.with_children(conn, self.namespace, [ids[i] for i in leaf_tasks])
                is_empty[[i for i in leaf_tasks.tolist() if ids[i] in emptied]] = True
            weights *= heading_factors(np.arange(len(ids)), parent_row, live_children, is_empty, is_task,
                                       empty_task=f.empty_task, last_in_task=f.last_in_task)
            keep = [bool(pinned[i]) or node_id in protected for i, node_id in enumerate(ids)]
            plan = plan_forget(ids, parents, weights.tolist(), keep, threshold=thr, max_nodes=cap,
                               parent_row=parent_row, alone=alone_shares(parent_row, is_task, f.last_in_task))
            picked = [i for i, _ in plan]
            erased: list[str] = []
            if picked and not dry_run:
                if delete:
                    # A forgotten leaf has no live children but may have archived ones:
                    # as with delete(), they go with it rather than be left orphaned.
                    path_of = {i: row.path for i, row in self.store.nodes.get_many(conn, picked).items()}
                    erased = list(dict.fromkeys(
                        r.id for i in picked for r in self.store.tree.subtree(conn, self.namespace, path_of[i])
                    ))
                    self._delete_ids(conn, erased, None, at, None)
                else:
                    self._archive_ids(conn, picked, None, at, "forget", None)
            return ForgetReport(
                archived=() if delete or dry_run else tuple(picked),
                deleted=tuple(erased),
                live_before=len(ids),
                live_after=len(ids) - (0 if dry_run else len(picked)),
                dry_run=dry_run,
                considered=len(ids),
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
        reinforce: bool = True,
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
        if query is None:
            with self.store.reading() as conn:
                active = self.store.sessions.get_cursor(conn, self.namespace, self.session)
            recall = self._retriever.active_context(active, k=k, budget=budget, now=at)
        else:
            recall = self._retriever.search(query, k=k, budget=budget, branches=nb, now=at)
        if reinforce:
            self._note_access([s.node.id for s in recall.nodes if s.reason in ("hit", "standing", "top")], at)
        self._audit("retrieve", [s.node.id for s in recall.nodes],
                    {"k": k, "budget_tokens": budget, "query": query is not None, "tokens": recall.tokens})
        return recall

    def _audit(self, action: str, ids: Sequence[str], detail: Mapping[str, Any]) -> None:
        """An audit entry of its own for a read (retrieve, export); writes are audited
        with their log entries, in their own transaction."""
        if self.store.audit.on:
            now = self._clock()
            self.store.write(lambda conn: self.store.audit.append(conn, self.namespace, self.session, [(now, action, ids, detail)]))

    def _note_access(self, ids: Sequence[str], at: float) -> None:
        for node_id in ids:
            n, ts = self._pending_access.get(node_id, (0, at))
            self._pending_access[node_id] = (n + 1, max(ts, at))
        if len(self._pending_access) >= self.config.usage.flush_every:
            self._flush_reads()

    # -- recovery and observation ---------------------------------------------------

    def _drain(self, writes: int = 1) -> None:
        """After a mutation: its index writes wait in the outbox (durably) until
        ``write.index_batch`` of them are pending, then go in as one."""
        self._unindexed += writes
        if self._unindexed >= self.config.write.index_batch:
            self._apply_index_work()

    def _apply_index_work(self, *, force: bool = False) -> None:
        """When this handle has index writes waiting for their batch, apply every index
        write waiting in the outbox (with any other's). Work left there by a failed
        index write waits for the next batch or open, as before."""
        if self._unindexed or force:
            self._unindexed = 0
            drain_outbox(self.store, self._index, self.namespace, self._fault)

    def verify(self) -> Drift:
        """Compare the vector index with the relational truth (changes nothing)."""
        self._live_check()
        self._apply_index_work()  # this handle's writes waiting for their batch are not drift
        return verify(self.store, self._index, self.namespace)

    @_requires("admin")
    def repair(self) -> Drift:
        """Replay pending index work, then make the index match the relational truth
        and mark unreadable log entries. Returns the drift that was found."""
        self._live_check()
        self._unindexed = 0
        self._unembedded = self._embed_left()  # memories a crash or a failed embedder left without vectors
        waiting = context.waiting(self.store, self.namespace)
        self._out_of_context = self._context_left()  # vectors read with a path that changed
        self._uncut = self._cut_left()  # long memories without their passages
        drift = repair(self.store, self._index, self.namespace, self._fault)
        self._problems = self._open_problems()
        return replace(drift, out_of_context=waiting)

    @_requires("admin")
    def reindex(self, *, progress: bool = False) -> int:
        """Rebuild this namespace's vector index from the stored embeddings.
        Returns the number of vectors written; ``progress`` shows a bar."""
        self._live_check()
        bar: Any = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=0, unit="node", desc="reindex")

        def report(done: int, total: int) -> None:
            if bar is not None:
                bar.total = total
                bar.update(done - bar.n)

        try:
            self._apply_index_work()
            written = reindex(self.store, self._index, self.namespace, progress=report)
        finally:
            if bar is not None:
                bar.close()
        self._problems = self._open_problems()
        return written

    def recover(self) -> RecoveryState:
        """Where this session stands: the active node, its path, the latest task
        state in its branch, the last checkpoint and the index work replayed at open."""
        self._live_check()
        with self.store.reading() as conn:
            active_id = self.store.sessions.get_cursor(conn, self.namespace, self.session)
            row = self.store.nodes.get(conn, active_id) if active_id else None
            active = node_from_row(row) if row is not None and row.status == Status.LIVE.value else None
            path: tuple[Node, ...] = ()
            state = None
            if active is not None:
                ids = path_ids(active.path)
                rows = self.store.nodes.get_many(conn, ids)
                path = tuple(node_from_row(rows[i]) for i in ids)
                branch = self.store.tree.branch_rows(conn, self.namespace, [active.branch_id])
                states = [r for r in branch if r.type == NodeType.STATE.value]
                if states:
                    state = node_from_row(max(states, key=lambda r: (r.created_at, r.updated_at)))
            last = self.store.sessions.last_checkpoint(conn, self.namespace, self.session)
            live = self.store.tree.live_count(conn, self.namespace)
        return RecoveryState(active=active, path=path, state=state, last_checkpoint=last,
                             replayed=self._replayed, live_nodes=live, problems=self._problems)

    def stats(self) -> Stats:
        """Sizes and shape of the memory, for a dashboard or the command line."""
        self._live_check()
        with self.store.reading() as conn:
            by_status, by_type, depth = self.store.tree.shape(conn, self.namespace)
            active_id = self.store.sessions.get_cursor(conn, self.namespace, self.session)
            arow = self.store.nodes.get(conn, active_id) if active_id else None
            last = self.store.sessions.last_checkpoint(conn, self.namespace, self.session)
            seq = self.store.log.last_seq(conn, self.namespace)
        # The files are the whole store's, every namespace's: an operator's figure. A
        # read or write handle (a tenant's) would learn from it how much others wrote.
        disk: int | None = None
        if self.folder is not None and self.role == "admin":
            disk = sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())
        return Stats(
            namespace=self.namespace,
            live=by_status.get(Status.LIVE.value, 0),
            archived=by_status.get(Status.ARCHIVED.value, 0),
            depth=depth,
            by_type=by_type,
            active_path=tuple(path_ids(arow.path)) if arow is not None else (),
            last_checkpoint_at=last.ts if last else None,
            disk_bytes=disk,
            log_seq=seq,
        )

    def _check_embedder(self) -> None:
        """Refuse an embedder whose vectors cannot sit beside the stored ones: the
        Chroma collection would reject them after the store had committed them, and
        ranking would compare vectors of different lengths."""
        with self.store.reading() as conn:
            held = self.store.nodes.embedding_kind(conn, self.namespace)
        if held is None or held[0] == self.embedder.name:
            return  # an empty namespace, or the model that embedded it: nothing to load
        model, dim = held
        if dim != self.embedder.dim:
            raise ConfigError(
                f"namespace {self.namespace!r} holds {dim}-dimensional embeddings from {model!r}, "
                f"but the embedder {self.embedder.name!r} makes {self.embedder.dim}-dimensional ones: "
                "open it with the model that made it (embedding.model), or export it and import "
                "the file into a new memory opened with the new model (the import re-embeds)"
            )
        log.warning(
            "namespace %r was embedded by %r and is opened with %r: similarities between the "
            "two models' vectors mean little; export and import it to re-embed",
            self.namespace, model, self.embedder.name,
        )

    def _check_branch_mode(self) -> None:
        """Branch heads are stored; if the configured grouping changed, recompute them."""
        mode = self.config.write.branch_by
        key = f"branch_by:{self.namespace}"

        def run(conn: Connection) -> None:
            have = self.store.settings.get(conn, key)
            if have == mode:
                return
            if have is not None:
                rows = sorted(self.store.tree.subtree_all(conn, self.namespace), key=lambda r: r.depth)
                info: dict[str, tuple[str, bool]] = {}
                for r in rows:
                    b = branch_info_for(r.id, NodeType(r.type), info.get(r.parent_id) if r.parent_id else None, mode)
                    info[r.id] = b
                    if b[0] != r.branch_id:
                        self.store.nodes.update(conn, r.id, branch_id=b[0])
                # portability: logged, so that replay regroups the same way.
                self.store.log.append(conn, self.namespace, self.session, self._clock(), "branch_mode", None, {"mode": mode})
            self.store.settings.set(conn, key, mode)

        self.store.write(run)



def _made_with(store: SqlStore, namespace: str, config: Config, default: Embedder) -> Embedder:
    """The embedder of an earlier default model when that model made ``namespace``'s
    stored vectors (a memory made before the default changed opens with its own
    model), else ``default``."""
    with store.reading() as conn:
        held = store.nodes.embedding_kind(conn, namespace)
    if held is None or held[0] == default.name:
        return default
    for spec in EARLIER_DEFAULTS:
        earlier = make_embedder(replace(config.embedding, model=spec))
        if earlier.name == held[0]:
            log.info("namespace %r was embedded by %r: opened with it (embedding.model names the default)",
                     namespace, held[0])
            return earlier
    return default


class _AppliedFirst:
    """A vector index whose reads first apply the index writes waiting in the outbox,
    so that what a caller reads through ``MemoryTree.index`` includes every write."""

    def __init__(self, index: VectorIndex, apply: Callable[[], None]) -> None:
        self._inner, self._apply = index, apply

    def upsert(self, namespace: str, ids: Sequence[str], vectors: Any) -> None:
        self._inner.upsert(namespace, ids, vectors)

    def delete(self, namespace: str, ids: Sequence[str]) -> None:
        self._inner.delete(namespace, ids)

    def query(self, namespace: str, vectors: Any, n: int) -> list[list[tuple[str, float]]]:
        self._apply()
        return self._inner.query(namespace, vectors, n)

    def ids(self, namespace: str) -> set[str]:
        self._apply()
        return self._inner.ids(namespace)

    def vectors(self, namespace: str, ids: Sequence[str]) -> dict[str, Any]:
        self._apply()
        return self._inner.vectors(namespace, ids)

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
