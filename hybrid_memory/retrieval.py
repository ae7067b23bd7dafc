"""Two-stage retrieval: locate the task branch by meaning, then rank inside it.

Stage 1 takes the nearest nodes from the vector index and from the lexical index
(both unfiltered within the namespace), scores each by a similarity that blends
the two, and groups them by branch. Stage 2 scores every live node of the chosen
branches with ``lambda*similarity + (1-lambda)*weight(now)`` using embeddings kept
in the relational store (no filtered vector query), adds the branch's standing
memories, adds each chosen node's ancestors, and cuts to the token budget.
"""

from __future__ import annotations

import functools
import heapq
import logging
import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np
from sqlalchemy.engine import Connection

from . import passages, text
from .config import Config, RetrievalConfig, WeightConfig
from .embed import Embedder
from .errors import ClosedError
from .forgetting import superseded_states
from .lexicon import Lexicon, Marks
from .model import (
    BranchScore,
    Node,
    NodeType,
    Recall,
    ScoredNode,
    path_ids,
    root_of,
    tree_order,
)
from .passages import Passages
from .recovery import merge_waiting, outbox_vectors
from .rowcache import RowCache, RowView, StoreView, own_node
from .store.sql import SqlStore, from_blob, node_from_row
from .store.vectors import VectorIndex
from .weights import blend, weight

log = logging.getLogger("hybrid_memory")

Posting = tuple[str, str, int]  # (term, node id, term frequency)
_BM25_K1, _BM25_B = 1.2, 0.75

# Branch score: the best hit, plus a little for breadth (a second and third hit).
_BREADTH = (1.0, 0.15, 0.05)


@dataclass(slots=True)
class _Scored:
    node: Node
    similarity: float = 0.0
    dense: float = 0.0
    lexical: float = 0.0
    weight: float = 0.0
    score: float = 0.0
    branch_score: float = 0.0
    branch_factor: float = 1.0


class _Lexical(NamedTuple):
    """What the lexical channel found for a query (Retriever.search)."""

    qterms: list[str]
    words: _QueryWords
    found: dict[str, Any]
    dense_mix: float


_T_ = TypeVar("_T_")


class Retriever:
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
        self.embed_later = embed_later or (lambda texts: _ready(embedder.embed(texts)))
        #: The handle's buffered reads (node id -> (count, last time)), not yet written.
        self.pending = pending
        self.index = index
        self.embedder = embedder
        self.config = config
        self.namespace = namespace
        self._counted: tuple[int, int] | None = None  # (log position, live nodes) of the last count
        self._branchy: tuple[int, int, bool] | None = None  # (log position, than, answer) of the last ask
        #: The lexical index kept in memory (retrieval.in_memory_lexicon), once built:
        #: a handle's second query starts building it on a thread of its own.
        self.lexicon: Lexicon | None = None
        self._building: threading.Thread | None = None
        self._stop = threading.Event()
        self._searches = 0
        #: The thread each query's lexical channel runs on (made by the first query).
        self._query_thread: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        #: The node rows the last queries read, kept in step with the store
        #: (retrieval.row_cache; SQLite only).
        n_rows = config.retrieval.row_cache
        self.rows: RowCache | None = RowCache(store, namespace, n_rows) if n_rows and store.is_sqlite else None

    # -- with a query ------------------------------------------------------------

    def search(self, query: str, *, k: int, budget: int, branches: int, now: float) -> Recall:
        r = self.config.retrieval
        vector = self.embed_later([query])
        with self.store.reading() as conn:
            # The log's last position, read at most once in this read transaction.
            seq = functools.cache(lambda: self.store.last_seq(conn, self.namespace))
            # The outbox is read first, as recovery.nearest reads it: the index is asked after.
            waiting = outbox_vectors(self.store, self.namespace, conn)
            view = self._view(conn)
            # Asked for more than it proposes: see _dense_cut.
            search = self._prepared_search(_DENSE_FETCH * r.candidates)

            def lexical_channel() -> _Lexical:
                # Needs no vector: runs while the query embeds and the index searches.
                qterms = list(dict.fromkeys(text.terms(query)))
                index = self._lexical_index(conn)
                words = _QueryWords(self.store, conn, self.namespace, qterms, r.common_postings,
                                    lambda c: self._live_count(c, seq()), index)
                lex_top = words.top(r.candidates, lambda ids: index.tie_keys(conn, ids))
                # The lexical candidates' rows and postings; the dense candidates' come after.
                found = view.rows([i for i, _ in lex_top], live_only=True)
                words.complete(found)
                return _Lexical(qterms=qterms, words=words, found=found,
                                dense_mix=r.dense_share * self.embedder.coverage(query))

            # The lexical channel runs on the handle's query thread while this one
            # waits for the query's vector and asks the index, whose search gives up
            # the interpreter lock (the graph's, for about a millisecond at 100k).
            channel = self._beside(lexical_channel)
            try:
                qvec = vector()[0]  # (an embedding failure raises here, not as the index's)
                try:
                    fetched = merge_waiting(search(qvec[None, :]), waiting, qvec[None, :],
                                            _DENSE_FETCH * r.candidates)[0]
                except Exception as exc:  # the index is derived; lexical search still answers
                    log.warning("vector index unavailable, lexical retrieval only: %s", exc)
                    fetched = []
            finally:
                # (waited for whatever happened here: it reads through this transaction)
                futures_wait([channel])
            said = channel.result()
            words, found, dense_mix = said.words, said.found, said.dense_mix
            # The dense candidates: the index's proposals cut as what is stored decides.
            fetched_rows = view.rows([i for i, _ in fetched if i not in found], live_only=True)
            dense_hits = dict(_dense_cut(fetched, {**fetched_rows, **found}, qvec, r.candidates,
                                         _DENSE_FETCH * r.candidates))
            found.update((i, fetched_rows[i]) for i in dense_hits if i in fetched_rows)
            # (by id, as one read of them all lists them)
            cand_rows = {i: found[i] for i in sorted(found)}
            words.complete(cand_rows)
            lexical = words.lexical
            # Every candidate's dense score from its stored embedding: the index only
            # proposes candidates, so its float arithmetic (and an approximate search
            # that may order near-ties differently after a reload) never decides.
            # (A node whose vector is still being computed, the empty blob, has no dense score;
            # the dense candidates were scored so by _dense_cut.)
            for node_id, row in cand_rows.items():
                if node_id not in dense_hits:
                    dense_hits[node_id] = float(np.dot(from_blob(row.embedding), qvec)) if row.embedding else 0.0
            # A long memory is as close as its closest passage.
            held = self._passages(conn, cand_rows)
            for node_id, p in held.items():
                dense_hits[node_id] = max(dense_hits[node_id], float(np.max(p.vectors @ qvec)))

            postings = words.held(cand_rows)
            # Stage 1 reads each candidate with its task path as context.
            near, held_words = (_in_context(view, words, cand_rows, dense_hits, qvec, r.context_weight)
                                if r.context_weight > 0 else (dense_hits, lexical))
            scored_branches = _locate(r, cand_rows, postings, near, held_words, dense_mix, words.idf)
            if r.active_prior > 0 and self.session is not None:
                scored_branches = _prefer_active(scored_branches, cand_rows, self._active_root(conn, view),
                                                 r.active_prior)
            if not scored_branches:
                return Recall(query, (), "", 0, (), budget)
            best = scored_branches[0][0]
            # A question to a memory of no more branches than spread_branches spreads
            # over them: with so few branches, a located one singles out little, and
            # an answer in another costs only a small shortfall.
            spread = r.small_memory and not self._has_more_branches(conn, r.spread_branches, seq())
            n_open, ratio = (max(branches, r.spread_branches), r.spread_ratio) if spread else (branches, r.branch_ratio)
            chosen = [sb for sb in scored_branches[:n_open] if sb[0] >= ratio * best]
            branch_score = {b: s for s, b, _ in chosen}
            every_branch = {b: s for s, b, _ in scored_branches}
            # The located branch's family (its top-level task's tree) is opened with it.
            located_root = root_of(next(row.path for row in cand_rows.values()
                                        if row.branch_id == scored_branches[0][1]))
            family = self._family(view, located_root, branch_score, every_branch)
            for b in family:
                every_branch.setdefault(b, best)

            opened = branch_score.keys() | family
            rows = view.branch_rows([*branch_score, *family])
            branch_nodes = [view.node(row) for row in rows]
            words.complete({n.id: None for n in branch_nodes})
            local = _local_lexical(words.held(n.id for n in branch_nodes), branch_nodes, words.known)
            zero = np.zeros(len(qvec), dtype=np.float32)
            matrix = np.stack([from_blob(row.embedding) if row.embedding else zero for row in rows]) if rows \
                else np.zeros((0, len(qvec)))
            held.update(self._passages(conn, {row.id: row for row in rows if row.id not in held}))
            branch_dense = [max(float(d), float(np.max(held[row.id].vectors @ qvec))) if row.id in held else float(d)
                            for row, d in zip(rows, matrix @ qvec, strict=True)]
            # The opened branches, every node, with lexical scores counted inside each
            # branch; and the strongest stage-1 candidates of the other branches, so a
            # question whose answer spans branches still reaches it. A node pays for
            # how far its branch's score falls behind the located (best) one.
            scored: dict[str, _Scored] = {}
            entries = [(n, d, local.get(n.id, 0.0)) for n, d in zip(branch_nodes, branch_dense, strict=True)]
            entries += [(view.node(row), dense_hits.get(i, 0.0), lexical.get(i, 0.0))
                        for i, row in cand_rows.items() if row.branch_id not in opened]
            # A node of an unopened branch that holds the query's informative words as
            # fully as the best node of the opened branches is about the same thing
            # (the same subject, written down in another session): it pays nothing
            # for its branch.
            top_lex = max((lexical.get(n.id, 0.0) for n in branch_nodes), default=0.0)
            peers = {i for i, row in cand_rows.items() if row.branch_id not in branch_score and r.lexical_peer > 0
                     and lexical.get(i, 0.0) >= max(r.lexical_peer * top_lex, 1e-9)}
            weigh = self._weigher(now)
            lam, opened_weight = r.lambda_, (r.spread_weight if spread else r.branch_weight)
            for node, dense, lex in entries:
                b = node.branch_id
                similarity, w, bs = blend(dense, lex, dense_mix), weigh(node), every_branch[b]
                # Opened branches pay branch_weight (spread_weight for a spreading
                # question) of their shortfall, other branches outside_weight, peers nothing.
                bw = opened_weight if b in branch_score else \
                    0.0 if node.id in peers or b in family else r.outside_weight
                bf = branch_factor(bs, best, bw)
                scored[node.id] = _Scored(node, similarity, dense, lex, w, (lam * similarity + (1 - lam) * w) * bf,
                                          bs, bf)
            # Who may be one of the k: not a branch's own task node (it is the context
            # of every hit below it, rendered as their ancestor) unless it stands alone;
            # a node of an unopened branch only as a match nearly as strong as the best
            # of the opened ones (within branch_ratio of it).
            top_sim = max((s.similarity for s in scored.values() if s.node.branch_id in branch_score), default=0.0)
            with_members = {s.node.branch_id for s in scored.values() if s.node.id != s.node.branch_id}
            pool = [s for s in scored.values() if s.similarity >= r.min_similarity
                    and not (s.node.type is NodeType.TASK and s.node.id in with_members)
                    and (s.node.branch_id in opened or s.node.id in peers
                         or s.similarity >= ratio * top_sim)]
            # The k best-scored memories, and the standing ones of the opened branches
            # besides; their ancestors come with them as context.
            groups: dict[str, list[_Scored]] = {b: [] for b in branch_score}
            for s in pool:
                if s.node.branch_id in groups:
                    groups[s.node.branch_id].append(s)
            reserved, rest = self._pick(pool, list(groups.values()) if not spread else [], k,
                                        r.quota_similarity * top_sim)
            hits = reserved + rest
            standing = self._standing([s for s in pool if s.node.branch_id in branch_score], {s.node.id for s in hits})
            titles = {b: scored[b].node.content if b in scored else "" for b in branch_score}
            # The budget takes the picks in this order: each opened branch's reserved
            # places first, then the rest by score.
            picked = [(s, "hit") for s in reserved] + sorted(
                [(s, "standing") for s in standing] + [(s, "hit") for s in rest], key=lambda p: rank_key(p[0]), reverse=True)
            shown = _Shown(self.config.write.passage_tokens, held, qvec, words.idf, dense_mix)
            recall = self._assemble(view, query, picked, scored, budget, now, shown)
        return Recall(
            query=query,
            nodes=recall[0],
            context=recall[1],
            tokens=recall[2],
            branches=tuple(BranchScore(b, s, n, _clip(titles[b])) for s, b, n in chosen),
            budget_tokens=budget,
            dropped=recall[3],
        )

    def _passages(self, conn: Connection, rows: Mapping[str, Any]) -> dict[str, Passages]:
        """The passages of the long memories among ``rows``."""
        size = self.config.write.passage_tokens
        return passages.read(conn, {i: row for i, row in rows.items() if row.tokens > size})

    def _active_root(self, conn: Connection, view: RowView | StoreView) -> str | None:
        """The top-level task of this session's active node (None: no live active node)."""
        assert self.session is not None
        active = self.store.get_cursor(conn, self.namespace, self.session)
        row = view.rows([active], live_only=True).get(active) if active is not None else None
        return None if row is None else root_of(row.path)

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

    def _beside(self, fn: Callable[[], _T_]) -> Future[_T_]:
        """Run ``fn`` on this retriever's query thread (made by the first query)."""
        with self._lock:
            if self._stop.is_set():
                raise ClosedError("this MemoryTree is closed")
            if self._query_thread is None:
                self._query_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybrid-memory-query")
            try:
                return self._query_thread.submit(fn)
            except RuntimeError:  # shut down: close() ran meanwhile
                raise ClosedError("this MemoryTree is closed") from None

    def _family(self, view: RowView | StoreView, root: str, opened: Mapping[str, float],
                every_branch: Mapping[str, float]) -> set[str]:
        """The branches of the family under ``root`` (the located branch's top-level
        task) not opened already, at most ``retrieval.family_open``: those stage 1 scored first,
        best first, then the newest. Empty when the family is one branch."""
        n = self.config.retrieval.family_open
        if n <= 0 or not self.config.retrieval.by_family:
            return set()
        others = [b for b in view.branches_under(root) if b not in opened]
        others.reverse()  # newest first (ids grow with time), then by stage 1's score (a stable sort)
        others.sort(key=lambda b: (b not in every_branch, -every_branch.get(b, 0.0)))
        return set(others[:n])

    def _pick(self, pool: Sequence[_Scored], groups: Sequence[Sequence[_Scored]], k: int,
              floor: float) -> tuple[list[_Scored], list[_Scored]]:
        """The k hits, as (reserved, rest), each best first. When more than one branch
        is open, each (in the order located) first reserves its best ``branch_quota``
        nodes whose similarity reaches ``floor``: a question that opened two sessions
        gets an answer from each, not ten from the stronger one. The rest of the k go
        by score."""
        quota = self.config.retrieval.branch_quota if len(groups) > 1 else 0
        reserved: dict[str, _Scored] = {}
        for group in groups if quota else ():
            for s in heapq.nlargest(quota, (s for s in group if s.similarity >= floor), key=rank_key):
                if len(reserved) < k:
                    reserved[s.node.id] = s
        rest = heapq.nlargest(k - len(reserved), (s for s in pool if s.node.id not in reserved), key=rank_key)
        return sorted(reserved.values(), key=rank_key, reverse=True), rest

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
        if (self._building is None and self._searches > 1 and self.config.retrieval.in_memory_lexicon
                and self.store.is_sqlite):
            self._building = threading.Thread(target=self._build_lexicon, name="hybrid_memory-lexicon", daemon=True)
            self._building.start()
        return self.store

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

    def _live_count(self, conn: Connection, seq: int | None = None) -> int:
        """How many live nodes the namespace holds (the idf's document count). Counting
        reads the whole status index; every change to the live set is logged, so the
        count is kept until the log moves on (a seek to its last position: ``seq``,
        when the query read it already)."""
        if seq is None:
            seq = self.store.last_seq(conn, self.namespace)
        if self._counted is None or self._counted[0] != seq:
            # After adds alone (an agent's loop: write, ask), the count moves by the
            # nodes added, read off the log (SQLite: positions are commits in order).
            count = None
            if self._counted is not None and self.store.is_sqlite and seq > self._counted[0]:
                added = self.store.live_added(conn, self.namespace, self._counted[0], seq)
                count = None if added is None else self._counted[1] + added
            self._counted = (seq, self.store.live_count(conn, self.namespace) if count is None else count)
        return self._counted[1]

    def _has_more_branches(self, conn: Connection, than: int, seq: int | None = None) -> bool:
        """Whether the live nodes fall into more than ``than`` branches, kept, as the
        live count is, until the log moves on."""
        if seq is None:
            seq = self.store.last_seq(conn, self.namespace)
        if self._branchy is None or self._branchy[:2] != (seq, than):
            self._branchy = (seq, than, self.store.has_more_branches(conn, self.namespace, than))
        return self._branchy[2]

    def _standing(self, scored: Iterable[_Scored], taken: set[str]) -> list[_Scored]:
        """The branch's high-weight state, preferences and decisions, the query aside.
        Of ``state`` nodes only the latest per branch stands: it supersedes the rest."""
        r = self.config.retrieval
        pool = [s for s in scored if s.node.type.value in r.standing_types and s.weight >= r.standing_min_weight]
        gone = superseded_states([s.node for s in pool]) | taken
        return heapq.nlargest(r.standing_max, (s for s in pool if s.node.id not in gone),
                              key=lambda s: (s.weight, s.node.created_at, s.node.content))

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
            row = self.store.get(conn, active_id) if active_id else None
            if row is None or row.status != "live":
                return Recall(None, (), "", 0, (), budget)
            anchor = self.store.get(conn, row.branch_id) or row
            on_path = set(path_ids(row.path))
            scored: dict[str, _Scored] = {}
            weigh = self._weigher(now)
            for r in self.store.subtree(conn, self.namespace, anchor.path, status=None):
                if r.status != "live":
                    continue
                node = node_from_row(r)
                s = _Scored(node, weight=weigh(node))
                s.score = s.weight
                scored[node.id] = s
            top = heapq.nlargest(k, (s for s in scored.values() if s.node.id not in on_path), key=rank_key)
            active = scored.get(row.id) or _Scored(node_from_row(row))
            picked = [(active, "active")] + [(s, "top") for s in top]
            nodes, context, tokens, dropped = self._assemble(StoreView(self.store, conn, self.namespace), None, picked,
                                                             scored, budget, now,
                                                             _Shown(self.config.write.passage_tokens))
        # (the subtree may hold subtasks heading branches of their own: not counted)
        branch = BranchScore(anchor.id, 1.0, sum(s.node.branch_id == anchor.id for s in top), _clip(anchor.content))
        return Recall(None, nodes, context, tokens, (branch,), budget, dropped)

    # -- shared: ancestors, budget, rendering -----------------------------------------

    def _assemble(
        self,
        view: RowView | StoreView,
        query: str | None,
        picked: Sequence[tuple[_Scored, str]],
        scored: Mapping[str, _Scored],
        budget: int,
        now: float,
        shown: _Shown,
    ) -> tuple[tuple[ScoredNode, ...], str, int, int]:
        """Take the picks in order, each with the ancestors not yet in, while they fit
        the token budget; render in tree order (a long memory by one passage)."""
        ancestor_ids = {a for s, _ in picked for a in s.node.ancestor_ids}
        known: dict[str, _Scored] = dict(scored)
        unknown = [a for a in ancestor_ids if a not in known]
        weigh = self._weigher(now)
        for node_id, arow in view.rows(unknown).items():
            node = view.node(arow)
            known[node_id] = _Scored(node, weight=weigh(node))
        chosen: dict[str, tuple[_Scored, str]] = {}
        used = dropped = 0
        # A node's line costs the same each time it is counted (as an ancestor of
        # several picks, and in the rendering): count it once.
        tokens: dict[str, int] = {}

        def cost_of(node: Node) -> int:
            if node.id not in tokens:
                tokens[node.id] = _count_line(_line(node, shown.span(node)))
            return tokens[node.id]

        for s, reason in picked:
            if s.node.id in chosen:
                # Already in as an earlier pick's ancestor: it was picked on its own
                # merit too, so say so (and let retrieve() count the read).
                if chosen[s.node.id][1] == "ancestor":
                    chosen[s.node.id] = (s, reason)
                continue
            need = [a for a in s.node.ancestor_ids if a not in chosen and a in known] + [s.node.id]
            cost = sum(cost_of(known[i].node if i != s.node.id else s.node) for i in need)
            if used + cost > budget:
                dropped += 1
                continue
            used += cost
            for i in need[:-1]:
                chosen[i] = (known[i], "ancestor")
            chosen[s.node.id] = (s, reason)
        order = tree_order([c[0].node for c in chosen.values()])
        shared = isinstance(view, RowView)  # (its nodes are the cache's: each caller gets a copy)
        out = []
        lines = []
        for node in order:
            s, reason = chosen[node.id]
            span = shown.span(node)
            line = _line(node, span)
            lines.append("  " * node.depth + line)
            out.append(
                ScoredNode(
                    node=own_node(node) if shared else node, reason=reason, similarity=s.similarity, dense=s.dense, lexical=s.lexical,
                    weight=s.weight, branch_score=s.branch_score, score=s.score, tokens=cost_of(node),
                    branch_factor=s.branch_factor, passage=span,
                )
            )
        context = "\n".join(lines)
        # The context's count is its lines' (counted above): a token never spans a
        # line break or the indentation (text.count_tokens counts no whitespace).
        return tuple(out), context, sum(cost_of(node) for node in order), dropped


class _Ranked(Protocol):
    @property
    def node(self) -> Node: ...

    @property
    def score(self) -> float: ...


class LexicalIndex(Protocol):
    """What stage 1 reads of the lexical index: the store's methods, or a
    :class:`~hybrid_memory.lexicon.Lexicon`'s (the same answers, from memory)."""

    def term_df(self, conn: Connection, namespace: str, query_terms: Sequence[str]) -> dict[str, int]: ...

    def term_masks(self, conn: Connection, namespace: str, groups: Sequence[Sequence[str]]) -> dict[str, int]: ...

    def postings(self, conn: Connection, namespace: str, query_terms: Sequence[str],
                 node_ids: Iterable[str] | None = None) -> list[tuple[str, str, int]]: ...

    def tie_keys(self, conn: Connection, ids: Iterable[str]) -> dict[str, tuple[float, str]]: ...


class _QueryWords:
    """The query's words in the lexical index: per node, the share of the query's
    informative (idf-weighted) words it holds (``lexical``), and the postings read.

    A word held by at most ``common`` live nodes is listed: the database names every
    node holding a listed word and which of them it holds (one row per node, a bit
    mask of the words), so each such node gets a share and can become a candidate. A
    more common word is only counted (its document frequency weighs it): its idf is
    low, and listing it would make a query's cost grow with the memory's size.
    Postings, term frequencies included, are read for the nodes :meth:`complete`
    names, the ones already in question, for every word the namespace knows; their
    shares then count the common words too. A share is an exact sum (``fsum``) of the
    words held, so it is the same however the node came to be scored."""

    def __init__(self, store: SqlStore, conn: Connection, namespace: str, qterms: Sequence[str], common: int,
                 live_count: Callable[[Connection], int] | None = None, index: LexicalIndex | None = None) -> None:
        self._conn, self._namespace = conn, namespace
        #: Where the postings are read: the store, or a copy of them kept in memory.
        self._index: LexicalIndex = index or store
        # Each query word is looked up as itself: text.terms already made one term of
        # a word's inflections (its stem).
        df = self._index.term_df(conn, namespace, list(qterms))
        # Blinded terms (a keyring) may be stored once per key that blinded them: their
        # postings are merged per node and their counts taken again off the holders.
        # Plain terms come back once per (word, node), and their counts are exact.
        self._blinded = store.keyring is not None
        #: The query's words the namespace knows.
        self.known = [t for t in qterms if t in df]
        count = live_count or (lambda c: store.live_count(c, namespace))
        n_docs = count(conn) if self.known else 0
        # A memory holding a word under two keys is counted by each: a listed word is
        # counted again off the nodes holding it, a common one is capped.
        self.df = {t: min(n, n_docs) for t, n in df.items()}
        listed = [t for t in self.known if not common or self.df[t] <= common]
        # From the copy kept in memory, the holders come as arrays and are named only
        # when they become candidates (a common word: thousands of holders, tens kept).
        marks = self._mask_arrays(listed)
        if marks is not None:
            distinct, counts = _distinct_masks(marks.masks, len(listed))
            held_by: Mapping[int, int] = dict(zip(distinct.tolist(), counts.tolist(), strict=True))
        else:
            masks = self._masks(listed)
            held_by = Counter(masks.values())
        for j, t in enumerate(listed if self._blinded else ()):
            n = sum(c for m, c in held_by.items() if m >> j & 1)
            if n:
                self.df[t] = n
        self.idf = {t: _idf(n_docs, n) for t, n in self.df.items()}
        total = math.fsum(self.idf.values())  # exact: the same in whatever order the words were counted
        self._part = {t: v / total for t, v in self.idf.items()} if total > 0 else {}
        share = {m: self.share(t for j, t in enumerate(listed) if m >> j & 1) for m in held_by}
        #: Node id -> its share (0.0 for a node holding none of the listed words).
        self.lexical: dict[str, float]
        if marks is not None:
            shares = np.array([share[m] for m in distinct.tolist()], dtype=np.float64)
            self.lexical = _Shares(marks, shares[np.searchsorted(distinct, marks.masks)])
        else:
            self.lexical = defaultdict(float, {i: share[m] for i, m in masks.items()})
        #: The postings read (of the completed nodes).
        self.postings: list[Posting] = []
        #: The postings read, by node, each node's in the order they were read.
        self.by_node: dict[str, list[Posting]] = defaultdict(list)
        self._completed: set[str] = set()

    def _masks(self, listed: Sequence[str]) -> dict[str, int]:
        """Node id -> the listed words it holds, bit j for ``listed[j]``."""
        return self._index.term_masks(self._conn, self._namespace, [[t] for t in listed]) if listed else {}

    def _mask_arrays(self, listed: Sequence[str]) -> Marks | None:
        """:meth:`_masks` as arrays, when the index is a copy kept in memory (None otherwise)."""
        if not listed or not isinstance(self._index, Lexicon):
            return None
        return self._index.term_mask_arrays(self._conn, self._namespace, [[t] for t in listed])

    def top(self, n: int, order: Callable[[Sequence[str]], Mapping[str, tuple[float, str]]]) -> list[tuple[str, float]]:
        """The n best lexical candidates, as :func:`_top` picks them."""
        shares = self.lexical
        if isinstance(shares, _Shares) and not dict.__len__(shares):
            return shares.top(n, order)
        return _top(shares, n, order)

    def share(self, words: Iterable[str]) -> float:
        """The share of the query's informative words that ``words`` (distinct) make up."""
        part = self._part
        return math.fsum(part.get(t, 0.0) for t in words)

    def held(self, ids: Iterable[str]) -> list[Posting]:
        """The postings read of the nodes ``ids``, node by node (of completed ones)."""
        by_node = self.by_node
        return [p for i in ids if i in by_node for p in by_node[i]]

    def complete(self, ids: Iterable[str]) -> None:
        """Read the postings of ``ids``, every known word, and count the common
        words in their shares too."""
        todo = [i for i in dict.fromkeys(ids) if i not in self._completed]
        self._completed.update(todo)
        if not self.known or not todo:
            return
        more = self._read(self.known, todo)
        self.postings.extend(more)
        words: dict[str, list[str]] = defaultdict(list)
        by_node = self.by_node
        for p in more:
            by_node[p[1]].append(p)
            words[p[1]].append(p[0])
        for node_id, held in words.items():
            self.lexical[node_id] = self.share(set(held))

    def _read(self, words: Sequence[str], ids: Sequence[str] | None = None) -> list[Posting]:
        """The postings of ``words`` (of the nodes ``ids`` only, when given); a blinded
        word a node holds under two keys is held once, with its frequencies added."""
        rows = self._index.postings(self._conn, self._namespace, list(words), ids)
        if not self._blinded:
            return [(term, node_id, n) for term, node_id, n in rows]
        tf: dict[tuple[str, str], int] = defaultdict(int)
        for term, node_id, n in rows:
            tf[(term, node_id)] += n
        return [(term, node_id, n) for (term, node_id), n in tf.items()]


class _Shares(dict[str, float]):
    """The lexical shares of the nodes holding a listed query word, kept as arrays
    (:class:`~hybrid_memory.lexicon.Marks`) and read by id when asked; the shares
    set later (completed nodes) are plain entries and take precedence. A node
    holding none of the words reads 0.0 and is not added."""

    def __init__(self, marks: Marks, values: np.ndarray[Any, Any]) -> None:
        super().__init__()
        self._marks, self._values = marks, values

    def get(self, key: str, default: float = 0.0) -> float:  # type: ignore[override]
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        row = self._marks.row_of(key)
        return float(self._values[row]) if row >= 0 else default

    def __missing__(self, key: str) -> float:
        return self.get(key, 0.0)

    def top(self, n: int, order: Callable[[Sequence[str]], Mapping[str, tuple[float, str]]]) -> list[tuple[str, float]]:
        """:func:`_top` over the arrays: the same pairs in the same order, naming only
        the nodes that beat or tie the n-th score."""
        values, nodes = self._values, self._marks.nodes
        if len(values) <= n:
            at = np.argsort(-values, kind="stable")
            return list(zip(self._marks.ids_of(nodes[at]), values[at].tolist(), strict=True))
        edge = float(np.partition(values, len(values) - n)[len(values) - n])
        above = np.flatnonzero(values > edge)
        above = above[np.argsort(-values[above], kind="stable")]
        ranked = list(zip(self._marks.ids_of(nodes[above]), values[above].tolist(), strict=True))
        # Those at the edge go newest first: named only as many as can be (often a
        # few hundred tie, for a score that one common word gives).
        tied = nodes[values == edge]
        newest = self._marks.newest(tied, n - len(ranked))
        if newest is None:
            return _cut_ties(ranked, self._marks.ids_of(tied), edge, n, order)
        return _cut_ties(ranked, self._marks.ids_of(newest), edge, n, order, cut=True)


def _distinct_masks(masks: np.ndarray[Any, Any], bits: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The distinct values of ``masks`` (of ``bits`` bits), ascending, and how many
    times each occurs: ``np.unique``'s answer, by counting when the values are few
    (a query lists a handful of words; a common one is held by thousands)."""
    if bits <= 12:
        counts = np.bincount(masks, minlength=1 << bits)
        distinct = np.flatnonzero(counts)
        return distinct, counts[distinct]
    return np.unique(masks, return_counts=True)


#: The vector index is asked for this many times ``retrieval.candidates`` (see _dense_cut).
_DENSE_FETCH = 2
#: More than the index's float arithmetic can put a cosine off the stored embeddings'.
_DENSE_EPS = 1e-5


def _dense_cut(fetched: Sequence[tuple[str, float]], rows: Mapping[str, Any], qvec: np.ndarray[Any, Any], n: int,
               asked: int) -> list[tuple[str, float]]:
    """The dense channel's candidates, at most ``n``, as a function of what is stored:
    (node id, its score from the stored embedding), best first.

    The index's answer (``fetched``: the ``asked`` nearest it found, the outbox's
    merged in) depends on its graph: a graph reloaded from disk, Chroma's before
    the in-process copy is ready, or a write still in the outbox order equal and
    nearly equal vectors differently, so the index's own top ``n`` differed between
    a process that ran on and one that restarted whenever a tie straddled the n-th
    place (equal vectors are common: repeated lines, and Chinese lines the
    embedder reads as [UNK]s). Here the live ones (``rows``) are scored from their
    stored embeddings and, when the index filled its window, only those scoring
    clearly above the window's last are kept: every memory that scores so well is
    in the window, whatever the graph. The ``n`` best of them go, ties to the newer
    memory, then by content, then by id."""
    floor = min(s for _, s in fetched) + _DENSE_EPS if len(fetched) >= asked else -math.inf
    ranked = []
    for node_id, _ in fetched:
        row = rows.get(node_id)
        if row is None or not row.embedding:  # (not live, or its vector still being computed)
            continue
        score = float(np.dot(from_blob(row.embedding), qvec))
        if score > floor:
            ranked.append((-score, -row.created_at, row.content, node_id))
    ranked.sort()
    return [(t[3], -t[0]) for t in ranked[:n]]


def _ready(vectors: np.ndarray[Any, Any]) -> Callable[[], np.ndarray[Any, Any]]:
    return lambda: vectors


def rank_key(s: _Ranked) -> tuple[float, float, str]:
    """The sort key of retrieved memories, largest best: by score; ties go to the
    newer memory, then by content, never by id (random), so the same memories
    always give the same answer, in any copy."""
    return (s.score, s.node.created_at, s.node.content)


def _top(scores: Mapping[str, float], n: int,
         order: Callable[[Sequence[str]], Mapping[str, tuple[float, str]]]) -> list[tuple[str, float]]:
    """The n best (id, score) pairs. Ties across the n-th place are common (every
    memory holding the same query words scores the same share) and can run to
    hundreds; they are broken by ``order`` (node id -> (created_at, content hash)),
    the newer memory first, so the cut never depends on the order the store
    returned them in, nor on random ids."""
    if len(scores) <= n:
        return sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    # Thousands of scores, tens wanted: find the n-th score, sort only what beats it.
    edge = heapq.nlargest(n, scores.values())[-1]
    ranked = sorted(((i, v) for i, v in scores.items() if v > edge), key=lambda kv: kv[1], reverse=True)
    return _cut_ties(ranked, [i for i, v in scores.items() if v == edge], edge, n, order)


def _cut_ties(ranked: list[tuple[str, float]], tied: list[str], edge: float, n: int,
              order: Callable[[Sequence[str]], Mapping[str, tuple[float, str]]],
              cut: bool = False) -> list[tuple[str, float]]:
    """``ranked`` (the pairs that beat the n-th score ``edge``), then as many of
    ``tied`` (the ids scoring ``edge``) as the n places leave, newer memory first.
    ``cut``: ``tied`` is the part of a larger tie that can make the places (it is
    ordered even when it fits them)."""
    lo = len(ranked)
    if cut or lo + len(tied) > n:
        keys = order(tied)
        tied.sort(key=lambda i: (-keys[i][0], keys[i][1]) if i in keys else (math.inf, i))
    return ranked + [(i, edge) for i in tied[: n - lo]]


def branch_factor(branch_score: float, best: float, branch_weight: float) -> float:
    """What a node's score is multiplied by for its branch: 1 in the located (best)
    branch, less the further its branch's score falls behind."""
    if best <= 0.0:
        return 1.0
    return 1.0 - branch_weight * (1.0 - min(branch_score / best, 1.0))


def _idf(n_docs: int, df: int) -> float:
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def _branch_scores(
    cand_rows: Mapping[str, Any], postings: Sequence[Posting], dense: Mapping[str, float],
    lexical: Mapping[str, float], dense_mix: float, by_family: bool, *,
    family_dense: float = 1.0, rarity: Mapping[str, float] | None = None,
) -> list[tuple[float, str, int]]:
    """(score, branch id, candidates) of every branch holding a stage-1 candidate, best
    first. A branch scores its best candidate's similarity plus a little for breadth.

    ``by_family``: a task and its subtasks (a family: one top-level task's tree) name
    the same ticket or person, so the family is scored as one, over all its
    candidates, and its branches are then told apart by the words they do not share:
    within the family those shared words weigh almost nothing (idf counted among the
    family's candidates), and the question's other words ("panel", "refund") decide
    which branch comes first, with the dense share of the blend multiplied by
    ``family_dense``: the embeddings of one family's memories are close to each other
    and to the question because of what they share. Each branch gets the family's
    score times its share of the best branch of the family.

    ``rarity``: what each query word's in-family idf is multiplied by (its idf in the
    whole memory, to the power ``retrieval.family_rarity``; a word not listed: 1):
    the family's candidates are a small sample, in which a word common everywhere
    ("need", "trip") can look as rare as the word that tells a subtask from its
    parent. None: no factor.

    """
    groups: dict[str, dict[str, Any]] = defaultdict(dict)
    for i, row in cand_rows.items():
        groups[root_of(row.path) if by_family else row.branch_id][i] = row
    held: dict[str, list[Posting]] | None = None  # a candidate's postings (read for a family of branches)
    out: list[tuple[float, str, int]] = []
    for members in groups.values():
        score = _branch_score([blend(dense.get(i, 0.0), lexical.get(i, 0.0), dense_mix) for i in members])
        first = next(iter(members.values())).branch_id
        if all(row.branch_id == first for row in members.values()):
            out.append((score, first, len(members)))
            continue
        count = Counter(row.branch_id for row in members.values())
        if held is None:
            held = defaultdict(list)
            for p in postings:
                if p[1] in cand_rows:
                    held[p[1]].append(p)
        local = _idf_share([p for i in members for p in held[i]], len(members), rarity)
        sims: dict[str, list[float]] = defaultdict(list)
        for i, row in members.items():
            sims[row.branch_id].append(blend(dense.get(i, 0.0), local.get(i, 0.0), dense_mix * family_dense))
        inner = {b: _branch_score(v) for b, v in sims.items()}
        top = max(inner.values())
        out += [(score * inner[b] / top if top > 0 else score, b, n) for b, n in count.items()]
    return sorted(out, reverse=True)


def _locate(r: RetrievalConfig, cand_rows: Mapping[str, Any], postings: Sequence[Posting], dense: Mapping[str, float],
            lexical: Mapping[str, float], dense_mix: float,
            idf: Mapping[str, float]) -> list[tuple[float, str, int]]:
    """Stage 1 under the settings ``r``: :func:`_branch_scores` of the candidates,
    the query words' in-family factors taken from their idf in the whole memory
    (``idf``)."""
    return _branch_scores(cand_rows, postings, dense, lexical, dense_mix, r.by_family, family_dense=r.family_dense,
                          rarity=_rarity(idf, r.family_rarity))


def _in_context(view: RowView | StoreView, words: _QueryWords, cand_rows: Mapping[str, Any],
                dense: Mapping[str, float], qvec: np.ndarray[Any, Any],
                weight: float) -> tuple[dict[str, float], dict[str, float]]:
    """Each candidate's (dense, lexical) scores read with its ancestors (the tasks
    above it) as context, ``weight`` saying how much the context counts against the
    node's own text. Dense: the query's cosine with the unit sum of the node's vector
    and ``weight`` times its ancestors' (their unit sum): what embedding the titles
    with the content would give, computed from the stored vectors, so a renamed or
    moved task is the context of its memories at once. Lexical: a query word counts
    in full where the node holds it and ``weight`` of it where only an ancestor does
    (fields, as BM25F weighs them). "Moved to Thursday" is then found through the
    trip it belongs to."""
    ancestors = {a for row in cand_rows.values() for a in path_ids(row.path)[:-1]}
    arows = view.rows(sorted(ancestors), live_only=True)
    words.complete(arows)
    own: dict[str, set[str]] = defaultdict(set)
    for term, node_id, _ in words.held([*cand_rows, *arows]):
        own[node_id].add(term)
    vectors = {a: from_blob(row.embedding) for a, row in arows.items() if row.embedding}
    near: dict[str, float] = {}
    held: dict[str, float] = {}
    for i, row in cand_rows.items():
        above = [a for a in path_ids(row.path)[:-1] if a in arows]
        d = dense.get(i, 0.0)
        near[i], held[i] = d, words.lexical.get(i, 0.0)
        if not above:
            continue
        inherited = set().union(*(own[a] for a in above)) - own[i]
        held[i] += weight * words.share(inherited)
        stacked = [vectors[a] for a in above if a in vectors]
        if stacked and row.embedding:
            t = np.sum(stacked, axis=0)
            t /= max(float(np.linalg.norm(t)), 1e-12)
            c = from_blob(row.embedding)
            norm = math.sqrt(max(1.0 + weight * weight + 2.0 * weight * float(np.dot(c, t)), 1e-12))
            near[i] = (d + weight * float(np.dot(qvec, t))) / norm
    return near, held


def _prefer_active(scored: list[tuple[float, str, int]], cand_rows: Mapping[str, Any], root: str | None,
                   prior: float) -> list[tuple[float, str, int]]:
    """Stage 1's branches with those of the active family (the tree of the active
    node's top-level task) scored ``1 + prior`` times higher, best first: an agent
    is asked most often about what it is working on, and a question that reads
    clearly closer to another task still goes there."""
    if root is None:
        return scored
    family = {row.branch_id for row in cand_rows.values() if root_of(row.path) == root}
    if not family:
        return scored
    return sorted(((s * (1.0 + prior) if b in family else s, b, n) for s, b, n in scored), reverse=True)


def _rarity(idf: Mapping[str, float], power: float) -> dict[str, float] | None:
    """The in-family factor of each query word (``retrieval.family_rarity``): its idf
    in the whole memory to ``power``; None when no word gets a factor. A CJK term is
    a character pair, often one across a word boundary ("高艳的" gives "艳的"): its
    rarity in the memory is the pair's, not a word's, so it is left out (factor 1)."""
    out = {t: v**power for t, v in idf.items() if not text.is_cjk(t)} if power else {}
    return out or None


def _branch_score(sims: Sequence[float]) -> float:
    """The best similarity, plus a little for breadth (a second and third)."""
    return sum(w * s for w, s in zip(_BREADTH, sorted(sims, reverse=True), strict=False))


def _idf_share(postings: Sequence[Posting], n_docs: int, scale: Mapping[str, float] | None = None) -> dict[str, float]:
    """Per node: the idf mass of the query terms it holds over the idf mass of all
    the query terms the postings hold (each term's idf multiplied by ``scale``'s
    factor for it, when given)."""
    df = Counter(term for term, _, _ in postings)
    idf = {t: _idf(n_docs, n) * (scale.get(t, 1.0) if scale is not None else 1.0) for t, n in df.items()}
    # Exact sums (fsum): the same shares whatever order the postings come in.
    total = math.fsum(idf.values())
    if total <= 0.0:  # every term held weighs nothing (a factor of 0)
        return defaultdict(float)
    held: dict[str, list[float]] = defaultdict(list)
    for term, node_id, _ in postings:
        held[node_id].append(idf[term])
    return defaultdict(float, {node_id: math.fsum(v) / total for node_id, v in held.items()})


def _local_lexical(postings: Sequence[Posting], nodes: Sequence[Node], known: Iterable[str]) -> dict[str, float]:
    """BM25 inside each branch, scaled to about [0, 1]: document frequencies and the
    average length are counted in the node's branch alone, so the words every memory
    of a branch shares (its ticket id, its customer) locate the branch in stage 1
    but no longer tell its memories apart, and a long memory does not win by
    holding more words. The scale is the idf mass of every query term the
    namespace knows (a one-term-each match of average length scores that mass), so
    a weak branch whose memories share only the query's common words stays low."""
    branch_of = {n.id: n.branch_id for n in nodes}
    length = {n.id: len(n.content) for n in nodes}
    sizes = Counter(branch_of.values())
    avg = defaultdict(float, {b: sum(length[i] for i, bb in branch_of.items() if bb == b) / n for b, n in sizes.items()})
    known = set(known)
    df = Counter((branch_of[node_id], term) for term, node_id, _ in postings if node_id in branch_of)
    # fsum: exact, so the same in every process (a set's order is not)
    total = {b: math.fsum(_idf(n, df.get((b, t), 0)) for t in known) for b, n in sizes.items()}
    terms: dict[str, list[float]] = defaultdict(list)
    for term, node_id, tf in postings:
        b = branch_of.get(node_id)
        if b is None:
            continue
        norm = tf + _BM25_K1 * (1 - _BM25_B + _BM25_B * length[node_id] / max(avg[b], 1.0))
        terms[node_id].append(_idf(sizes[b], df[(b, term)]) * tf * (_BM25_K1 + 1) / norm / total[b])
    # fsum: the same score whatever order a node's postings were read in
    return {i: min(math.fsum(v), 1.0) for i, v in terms.items()}


class _Shown:
    """Which passage of each long memory a context shows: the one that best answers
    the query, among those stored (``held``); the first where there is no query or
    none is stored. A memory of at most ``size`` tokens is shown whole (None)."""

    def __init__(self, size: int, held: Mapping[str, Passages] | None = None, qvec: np.ndarray[Any, Any] | None = None,
                 idf: Mapping[str, float] | None = None, dense_mix: float = 1.0) -> None:
        self.size, self.held, self.qvec, self.idf, self.dense_mix = size, held or {}, qvec, idf or {}, dense_mix
        self._spans: dict[str, tuple[int, int] | None] = {}

    def span(self, node: Node) -> tuple[int, int] | None:
        if node.id not in self._spans:
            content = node.content
            span: tuple[int, int] | None = None
            if len(content) > self.size and text.count_tokens(content) > self.size:
                held = self.held.get(node.id)
                if held is not None and self.qvec is not None:
                    span = held.spans[passages.choose(content, held, self.qvec, self.idf, self.dense_mix)[0]]
                else:
                    span = passages.cut(content, self.size)[0]
            self._spans[node.id] = span
        return self._spans[node.id]


def _line(node: Node, span: tuple[int, int] | None = None) -> str:
    return _TAG[node.type] + passages.render(node.content, span)


#: The line's lead of each node type (an Enum's ``value`` is a property: slow per line).
_TAG = {t: f"[{t.value}] " for t in NodeType}


# A query counts a few dozen lines, most of them counted by the queries before it
# (the located branch's memories, their ancestors): each line's count is kept.
_count_line = functools.lru_cache(maxsize=1 << 14)(text.count_tokens)


def _clip(text_: str, n: int = 60) -> str:
    text_ = " ".join(text_.split())
    return text_ if len(text_) <= n else text_[: n - 1] + "…"


__all__ = ["Retriever", "branch_factor", "rank_key"]
