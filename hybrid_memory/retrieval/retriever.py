"""The retriever: one memory handle's searches, run as a sequence of stages.

:meth:`Retriever.search` runs the stages of :mod:`hybrid_memory.retrieval` in one
read transaction and notes what each did in the recall (``Recall.stages``). It
also keeps what lets a handle answer fast: the query thread the lexical channel
runs on beside the embedding and the index search, the lexical index kept in
memory, the row cache, and the counts kept until the log moves on.
"""

from __future__ import annotations

import functools
import heapq
import logging
import math
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any, NamedTuple, TypeVar

import numpy as np
from sqlalchemy.engine import Connection

from .. import passages, text
from ..accel.lexicon import Lexicon
from ..accel.rowcache import RowCache, RowView, StoreView
from ..config import Config, WeightConfig
from ..embed import Embedder
from ..errors import ClosedError
from ..model import BranchScore, Node, Recall, path_ids, root_of
from ..recovery import merge_waiting, outbox_vectors
from ..store.schema import node_from_row
from ..store.sql import SqlStore
from ..store.vectors import VectorIndex
from ..weights import weight
from .candidates import DENSE_FETCH, Candidates, gather, ready
from .expand import Opened, expand, open_branches
from .locate import Located, locate
from .query import LexicalIndex, QueryWords
from .rank import Scored, rank, rank_key
from .select import Shown, assemble, clip

log = logging.getLogger("hybrid_memory")


class _Lexical(NamedTuple):
    """What the lexical channel found for a query (Retriever.search)."""

    qterms: list[str]
    words: QueryWords
    found: dict[str, Any]
    dense_mix: float

    @property
    def note(self) -> str:
        cjk = [w for t, w in self.words.weights.items() if text.is_cjk(t)]
        weighed = f" (CJK terms {len(cjk)}, weighing {math.fsum(cjk):.1f} words)" if cjk else ""
        return (f"words known to the memory {len(self.words.known)} of {len(self.qterms)}{weighed}, "
                f"dense share {self.dense_mix:.3f}")


class _Stage1(NamedTuple):
    """What a query's stages up to locate made (Retriever._located): the rows as the
    transaction reads them, what the lexical channel found, the query's vector, the
    candidates and the located branches."""

    view: RowView | StoreView
    said: _Lexical
    qvec: np.ndarray[Any, Any]
    cands: Candidates
    located: Located
    #: The session's cursor as this transaction reads it (read at most once).
    cursor: Callable[[], _Cursor]


class _Cursor(NamedTuple):
    """The top-level tasks of the session's active node (None: no live active node)
    and of the node it chose to work on and still does (None: it was moved there by
    a write, or has no active node)."""

    active_root: str | None
    focused_root: str | None


_T_ = TypeVar("_T_")


class Retriever:
    """The searches of one memory handle (its namespace and session)."""

    def __init__(
        self, store: SqlStore, index: VectorIndex, embedder: Embedder, config: Config, namespace: str,
        pending: Callable[[], Mapping[str, tuple[int, float]]] = dict,
        embed_later: Callable[[list[str]], Callable[[], np.ndarray[Any, Any]]] | None = None,
        session: str | None = None,
    ) -> None:
        self.store = store
        #: The agent session whose active node is the prior of a query (None: no prior).
        self.session = session
        #: Starts embedding texts and returns what waits for the vectors: the query is
        #: embedded on another thread while the lexical channel reads (default: here).
        self.embed_later = embed_later or (lambda texts: ready(embedder.embed(texts)))
        #: The handle's buffered reads (node id -> (count, last time)), not yet written.
        self.pending = pending
        self.index = index
        self.embedder = embedder
        self.config = config
        self.namespace = namespace
        self._counted: tuple[int, int] | None = None  # (log position, live nodes) of the last count
        self._branchy: tuple[int, int, bool] | None = None  # (log position, than, answer) of the last ask
        #: The lexical index kept in memory (accel.in_memory_lexicon), once built:
        #: a handle's second query starts building it on a thread of its own.
        self.lexicon: Lexicon | None = None
        self._building: threading.Thread | None = None
        self._stop = threading.Event()
        self._searches = 0
        #: The thread each query's lexical channel runs on (made by the first query).
        self._query_thread: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        #: The node rows the last queries read, kept in step with the store
        #: (accel.row_cache; SQLite only).
        n_rows = config.accel.row_cache
        self.rows: RowCache | None = RowCache(store, namespace, n_rows) if n_rows and store.is_sqlite else None

    # -- with a query ------------------------------------------------------------

    def recall(self, query: str | None, *, k: int, budget: int, branches: int, now: float) -> Recall:
        """:meth:`search` for ``query``; with none, the :meth:`active_context` of the
        session's active node."""
        if query is not None:
            return self.search(query, k=k, budget=budget, branches=branches, now=now)
        with self.store.reading() as conn:
            active = self.store.sessions.get_cursor(conn, self.namespace, self.session) if self.session else None
        return self.active_context(active, k=k, budget=budget, now=now)

    def search(self, query: str, *, k: int, budget: int, branches: int, now: float) -> Recall:
        """The recall of ``query``: the stages run in one read transaction, each noted."""
        r, size = self.config.retrieval, self.config.write.passage_tokens
        vector = self.embed_later([query])
        with self.store.reading() as conn:
            # The log's last position, read at most once in this read transaction.
            seq = functools.cache(lambda: self.store.log.last_seq(conn, self.namespace))
            view, said, qvec, cands, located, cursor = self._located(conn, query, vector, seq)
            words, dense_mix = said.words, said.dense_mix
            stages = [("query", said.note), ("candidates", cands.note), ("locate", located.note)]
            if not located.branches:
                return Recall(query, (), "", 0, (), budget, stages=tuple(stages))
            # A question to a memory of no more branches than spread_branches (0: off)
            # spreads over them: with so few branches, a located one singles out
            # little, and an answer in another costs only a small shortfall.
            spread = r.spread_branches > 0 and not self.has_more_branches(conn, r.spread_branches, seq())
            opened = open_branches(r, view, located.branches, cands.rows, branches, spread)
            grown = expand(view, words, cands, opened, qvec)
            stages.append(("expand", grown.note))
            d = self.config.dedup
            picks = rank(r, grown, cands.rows, opened, words.lexical, dense_mix, self._weigher(now), k,
                         focused_root=cursor().focused_root,
                         restates=d.supersede_words if d.enabled and d.supersede < 1 else None)
            stages.append(("rank", picks.note))
            # The passages of the long memories shown are read when they are picked.
            shown = Shown(size, lambda ids: passages.read(conn, view.rows(ids, live_only=True)), qvec, words.idf,
                          dense_mix)
            chosen = assemble(view, picks.picked, picks.scored, budget, self._weigher(now), shown)
            stages.append(("select", chosen.note))
            scored_branches = _listed(opened, picks.scored)
        return Recall(
            query=query,
            nodes=chosen.nodes,
            context=chosen.context,
            tokens=chosen.tokens,
            branches=scored_branches,
            budget_tokens=budget,
            dropped=chosen.dropped,
            stages=tuple(stages),
        )

    def locate_branches(self, text_: str, vector: np.ndarray[Any, Any]) -> list[tuple[float, str, int]]:
        """Stage 1 alone for ``text_`` (its embedding ``vector`` given): the branches
        it reads closest to, (score, branch id, candidates) best first, the session's
        active family preferred as for a query. Where a new memory belongs
        (``parent=AUTO``) is read this way."""
        with self.store.reading() as conn:
            seq = functools.cache(lambda: self.store.log.last_seq(conn, self.namespace))
            return self._located(conn, text_, ready(vector[None, :]), seq).located.branches

    def _located(self, conn: Connection, query: str, vector: Callable[[], np.ndarray[Any, Any]],
                 seq: Callable[[], int]) -> _Stage1:
        """The stages up to locate for ``query`` in ``conn``'s read transaction (the
        session's active family preferred)."""
        # The outbox is read first, as recovery.nearest reads it: the index is asked after.
        waiting = outbox_vectors(self.store, self.namespace, conn)
        view = self._view(conn)
        said, qvec, fetched = self._channels(conn, view, query, vector, waiting, seq)
        cands = gather(view, said.words, said.found, fetched, qvec, self.config.retrieval.candidates)
        cursor = functools.cache(functools.partial(self._cursor, conn, view))
        active = None if self.session is None else (lambda: cursor().active_root)
        located = locate(self.config.retrieval, said.words, cands, said.dense_mix, active)
        return _Stage1(view, said, qvec, cands, located, cursor)

    def _channels(
        self, conn: Connection, view: RowView | StoreView, query: str,
        vector: Callable[[], np.ndarray[Any, Any]], waiting: Mapping[str, np.ndarray[Any, Any]],
        seq: Callable[[], int],
    ) -> tuple[_Lexical, np.ndarray[Any, Any], list[tuple[str, float]]]:
        """Both channels of the query: what the lexical channel found, the query's
        vector and the index's proposals (with the outbox's ``waiting`` merged in)."""
        r = self.config.retrieval
        # Asked for more than it proposes: see dense_cut.
        search = self._prepared_search(DENSE_FETCH * r.candidates)

        def lexical_channel() -> _Lexical:
            # Needs no vector: runs while the query embeds and the index searches.
            weights = text.term_weights(query)
            qterms = list(weights)
            index = self._lexical_index(conn)
            words = QueryWords(self.store, conn, self.namespace, qterms, self.config.accel.common_postings,
                               lambda c: self.live_count(c, seq()), index, weights)
            lex_top = words.top(r.candidates, lambda ids: index.tie_keys(conn, ids))
            # The lexical candidates' rows and postings; the dense candidates' come after.
            found = view.rows([i for i, _ in lex_top], live_only=True)
            words.complete(found)
            return _Lexical(qterms=qterms, words=words, found=found,
                            dense_mix=r.dense_share * self.embedder.coverage(query))

        # The lexical channel runs on the handle's query thread while this one
        # waits for the query's vector and asks the index, whose search gives up
        # the interpreter lock (the graph's, for about a millisecond at 100k).
        channel = self.beside(lexical_channel)
        try:
            qvec = vector()[0]  # (an embedding failure raises here, not as the index's)
            try:
                fetched = merge_waiting(search(qvec[None, :]), waiting, qvec[None, :],
                                        DENSE_FETCH * r.candidates)[0]
            except Exception as exc:  # the index is derived; lexical search still answers
                log.warning("vector index unavailable, lexical retrieval only: %s", exc)
                fetched = []
        finally:
            # (waited for whatever happened here: it reads through this transaction)
            futures_wait([channel])
        return channel.result(), qvec, fetched

    def _cursor(self, conn: Connection, view: RowView | StoreView) -> _Cursor:
        """The session's cursor as ``conn`` reads it."""
        if self.session is None:
            return _Cursor(None, None)
        active, focused = self.store.sessions.get_focus(conn, self.namespace, self.session)
        row = view.rows([active], live_only=True).get(active) if active is not None else None
        root = None if row is None else root_of(row.path)
        return _Cursor(root, root if focused else None)

    def _view(self, conn: Connection) -> RowView | StoreView:
        """The node rows as ``conn`` reads them: through the cache when there is one."""
        return self.rows.view(conn) if self.rows is not None else StoreView(self.store, conn, self.namespace)

    def _prepared_search(self, n: int) -> Callable[[np.ndarray[Any, Any]], list[list[tuple[str, float]]]]:
        """The index's top-``n`` search, with what the index does before searching
        done now (``searcher``: reading the namespace's generation off the disk).
        Done before the lexical channel starts beside it: this thread, had it given
        up the interpreter lock for a file read, would wait to get it back until the
        other gives it up. A failure to prepare is raised by the search."""
        searcher = getattr(self.index, "searcher", None)
        if searcher is None:
            return functools.partial(self.index.query, self.namespace, n=n)
        try:
            prepared: Callable[[np.ndarray[Any, Any]], list[list[tuple[str, float]]]] = searcher(self.namespace, n)
        except Exception as exc:
            failed = exc

            def fail(vectors: np.ndarray[Any, Any]) -> list[list[tuple[str, float]]]:
                raise failed

            return fail
        return prepared

    @property
    def query_thread(self) -> ThreadPoolExecutor | None:
        """The thread each query's lexical channel runs on (None until the first query
        made it, and once the retriever is closed)."""
        return self._query_thread

    def beside(self, fn: Callable[[], _T_]) -> Future[_T_]:
        """Run ``fn`` on this retriever's query thread (made by the first query);
        :class:`ClosedError` once the retriever is closed."""
        with self._lock:
            if self._stop.is_set():
                raise ClosedError("this MemoryTree is closed")
            if self._query_thread is None:
                self._query_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybrid-memory-query")
            try:
                return self._query_thread.submit(fn)
            except RuntimeError:  # shut down: close() ran meanwhile
                raise ClosedError("this MemoryTree is closed") from None

    def _lexical_index(self, conn: Connection) -> LexicalIndex:
        """Where this query reads the lexical index: the copy kept in memory, brought
        up to date, or the store. A handle's second query starts building the copy on
        a thread (reading the whole index takes about 0.9 s at 100k memories), and the
        queries read the store until it is built; a process that asks once (a
        command line) never reads the whole index."""
        self._searches += 1
        lexicon = self.lexicon
        if lexicon is not None:
            lexicon.sync(conn)
            return lexicon
        if (self._building is None and self._searches > 1 and self.config.accel.in_memory_lexicon
                and self.store.is_sqlite):
            self._building = threading.Thread(target=self._build_lexicon, name="hybrid_memory-lexicon", daemon=True)
            self._building.start()
        return self.store.terms

    def _build_lexicon(self) -> None:
        lexicon = Lexicon(self.store, self.namespace, stop=self._stop)
        try:
            with self.store.reading() as conn:
                lexicon.sync(conn)
        except Exception as exc:  # the store still answers every query
            if not self._stop.is_set():
                log.warning("the in-memory lexical index was not built; queries read the store: %s", exc)
            return
        self.lexicon = lexicon

    def wait_for_lexicon(self, timeout: float | None = None) -> bool:
        """Wait until the lexical index kept in memory is built, if it is being built;
        whether it is."""
        if self._building is not None:
            self._building.join(timeout)
        return self.lexicon is not None

    def close(self) -> None:
        """Stop building the in-memory lexical index, if it is being built."""
        self._stop.set()
        if self._building is not None:
            self._building.join()
        with self._lock:
            pool, self._query_thread = self._query_thread, None
            if pool is not None:
                pool.shutdown(wait=True)

    def live_count(self, conn: Connection, seq: int | None = None) -> int:
        """How many live nodes the namespace holds (the idf's document count). Counting
        reads the whole status index; every change to the live set is logged, so the
        count is kept until the log moves on (a seek to its last position: ``seq``,
        when the query read it already)."""
        if seq is None:
            seq = self.store.log.last_seq(conn, self.namespace)
        if self._counted is None or self._counted[0] != seq:
            # After adds alone (an agent's loop: write, ask), the count moves by the
            # nodes added, read off the log (SQLite: positions are commits in order).
            count = None
            if self._counted is not None and self.store.is_sqlite and seq > self._counted[0]:
                added = self.store.log.live_added(conn, self.namespace, self._counted[0], seq)
                count = None if added is None else self._counted[1] + added
            self._counted = (seq, self.store.tree.live_count(conn, self.namespace) if count is None else count)
        return self._counted[1]

    def has_more_branches(self, conn: Connection, than: int, seq: int | None = None) -> bool:
        """Whether the live nodes fall into more than ``than`` branches, kept, as the
        live count is, until the log moves on."""
        if seq is None:
            seq = self.store.log.last_seq(conn, self.namespace)
        if self._branchy is None or self._branchy[:2] != (seq, than):
            self._branchy = (seq, than, self.store.tree.has_more_branches(conn, self.namespace, than))
        return self._branchy[2]

    @property
    def kept_branches(self) -> tuple[int, int, bool] | None:
        """The answer :meth:`has_more_branches` keeps: (log position, ``than``, answer)
        of its last ask (None until asked; read only)."""
        return self._branchy

    def _weigher(self, now: float, cfg: WeightConfig | None = None, *,
                 reads: bool | None = None) -> Callable[[Node], float]:
        """The weight a node is ranked by at ``now`` under ``cfg`` (default
        [weights]): :meth:`weight_of` when ``reads`` (default ``retrieval.rank_reads``),
        else the same as if it had never been read. For many nodes: what each reads
        is looked up once."""
        if cfg is None:
            cfg = self.config.weights
        if not (self.config.retrieval.rank_reads if reads is None else reads):
            return lambda node: weight(importance=node.importance, confidence=node.confidence, access_count=0,
                                       touched_at=node.written_at, now=now, cfg=cfg)
        pending = self.pending()

        def of(node: Node) -> float:
            read = pending.get(node.id)
            n, at = (0, node.touched_at) if read is None else read
            return weight(importance=node.importance, confidence=node.confidence, access_count=node.access_count + n,
                          touched_at=max(node.touched_at, at), now=now, cfg=cfg)

        return of

    def weight_of(self, node: Node, now: float, cfg: WeightConfig | None = None) -> float:
        """The node's weight at ``now`` (under ``cfg``, default [weights]), counting the
        reads still buffered in this handle: a read changes the next answer whether or
        not it was written yet, so a restart (which writes them) never changes what is
        returned."""
        return self._weigher(now, cfg, reads=True)(node)

    # -- without a query -----------------------------------------------------------

    def active_context(self, active_id: str | None, *, k: int, budget: int, now: float) -> Recall:
        """The active task's ancestors and its top-k memories by weight."""
        with self.store.reading() as conn:
            row = self.store.nodes.get(conn, active_id) if active_id else None
            if row is None or row.status != "live":
                return Recall(None, (), "", 0, (), budget)
            anchor = self.store.nodes.get(conn, row.branch_id) or row
            on_path = set(path_ids(row.path))
            scored: dict[str, Scored] = {}
            weigh = self._weigher(now)
            for r in self.store.tree.subtree(conn, self.namespace, anchor.path, status=None):
                if r.status != "live":
                    continue
                node = node_from_row(r)
                s = Scored(node, weight=weigh(node))
                s.score = s.weight
                scored[node.id] = s
            top = heapq.nlargest(k, (s for s in scored.values() if s.node.id not in on_path), key=rank_key)
            active = scored.get(row.id) or Scored(node_from_row(row))
            picked = [(active, "active")] + [(s, "top") for s in top]
            chosen = assemble(StoreView(self.store, conn, self.namespace), picked, scored, budget, self._weigher(now),
                              Shown(self.config.write.passage_tokens))
        # (the subtree may hold subtasks heading branches of their own: not counted)
        branch = BranchScore(anchor.id, 1.0, sum(s.node.branch_id == anchor.id for s in top), clip(anchor.content))
        return Recall(None, chosen.nodes, chosen.context, chosen.tokens, (branch,), budget, chosen.dropped,
                      (("select", chosen.note),))


def _listed(opened: Opened, scored: Mapping[str, Scored]) -> tuple[BranchScore, ...]:
    """The opened branches as a recall lists them, each titled by its task's content."""
    titles = {b: scored[b].node.content if b in scored else "" for b in opened.branch_score}
    return tuple(BranchScore(b, s, n, clip(titles[b])) for s, b, n in opened.chosen)
