"""Two-stage retrieval: locate the task branch by meaning, then rank inside it.

Stage 1 takes the nearest nodes from the vector index and from the lexical index
(both unfiltered within the namespace), scores each by a similarity that blends
the two, and groups them by branch. Stage 2 scores every live node of the chosen
branches with ``lambda*similarity + (1-lambda)*weight(now)`` using embeddings kept
in the relational store (no filtered vector query), adds the branch's standing
memories, adds each chosen node's ancestors, and cuts to the token budget.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy.engine import Connection

from . import text
from .config import Config
from .embed import Embedder
from .model import BranchScore, Node, NodeType, Recall, ScoredNode, tree_order
from .store.sql import SqlStore, from_blob, node_from_row
from .store.vectors import VectorIndex
from .weights import blend, weight

log = logging.getLogger("hybrid_memory")

# Branch score: the best hit, plus a little for breadth (a second and third hit).
_BREADTH = (1.0, 0.15, 0.05)


@dataclass
class _Scored:
    node: Node
    similarity: float = 0.0
    dense: float = 0.0
    lexical: float = 0.0
    weight: float = 0.0
    score: float = 0.0
    branch_score: float = 0.0


class Retriever:
    def __init__(self, store: SqlStore, index: VectorIndex, embedder: Embedder, config: Config, namespace: str) -> None:
        self.store = store
        self.index = index
        self.embedder = embedder
        self.config = config
        self.namespace = namespace

    # -- with a query ------------------------------------------------------------

    def search(self, query: str, *, k: int, budget: int, branches: int, now: float) -> Recall:
        r = self.config.retrieval
        qvec = self.embedder.embed([query])[0]
        dense_mix = r.dense_share * self.embedder.coverage(query)
        try:
            dense_hits = dict(self.index.query(self.namespace, qvec[None, :], r.candidates)[0])
        except Exception as exc:  # the index is derived; lexical search still answers
            log.warning("vector index unavailable, lexical retrieval only: %s", exc)
            dense_hits = {}
        with self.store.reading() as conn:
            lexical = self._lexical(conn, query)
            lex_top = heapq.nlargest(r.candidates, lexical.items(), key=lambda kv: kv[1])
            cand_rows = self.store.get_many(conn, list(dense_hits) + [i for i, _ in lex_top], live_only=True)
            missing = [i for i in cand_rows if i not in dense_hits]
            for node_id, vec in self.store.embeddings(conn, missing).items():
                dense_hits[node_id] = float(np.dot(vec, qvec))

            def sim(node_id: str) -> float:
                return blend(dense_hits.get(node_id, 0.0), lexical.get(node_id, 0.0), dense_mix)

            per_branch: dict[str, list[float]] = defaultdict(list)
            for node_id, row in cand_rows.items():
                per_branch[row.branch_id].append(sim(node_id))
            scored_branches = sorted(
                ((sum(w * s for w, s in zip(_BREADTH, sorted(sims, reverse=True), strict=False)), b, len(sims)) for b, sims in per_branch.items()),
                reverse=True,
            )
            if not scored_branches:
                return Recall(query, (), "", 0, (), budget)
            best = scored_branches[0][0]
            chosen = [sb for sb in scored_branches[:branches] if sb[0] >= r.branch_ratio * best]
            branch_score = {b: s for s, b, _ in chosen}

            rows = self.store.branch_rows(conn, self.namespace, list(branch_score))
            scored: dict[str, _Scored] = {}
            if rows:
                matrix = np.stack([from_blob(row.embedding) for row in rows])
                dense_all = matrix @ qvec
                for row, d in zip(rows, dense_all, strict=True):
                    node = node_from_row(row)
                    s = _Scored(node, dense=float(d), lexical=lexical.get(node.id, 0.0))
                    s.similarity = blend(s.dense, s.lexical, dense_mix)
                    s.weight = self._weight(node, now)
                    s.score = r.lambda_ * s.similarity + (1 - r.lambda_) * s.weight
                    s.branch_score = branch_score[node.branch_id]
                    scored[node.id] = s
            hits = heapq.nlargest(
                k, (s for s in scored.values() if s.similarity >= r.min_similarity), key=lambda s: s.score
            )
            standing = self._standing(scored.values(), {s.node.id for s in hits})
            titles = {b: scored[b].node.content if b in scored else "" for b in branch_score}
            picked = [(s, "hit") for s in hits] + [(s, "standing") for s in standing]
            recall = self._assemble(conn, query, picked, scored, budget, now)
        return Recall(
            query=query,
            nodes=recall[0],
            context=recall[1],
            tokens=recall[2],
            branches=tuple(BranchScore(b, s, n, _clip(titles[b])) for s, b, n in chosen),
            budget_tokens=budget,
            dropped=recall[3],
        )

    def _lexical(self, conn: Connection, query: str) -> dict[str, float]:
        """Per node: the share of the query's informative (idf-weighted) terms it holds."""
        qterms = list(dict.fromkeys(text.terms(query)))
        postings = self.store.postings(conn, self.namespace, qterms)
        if not postings:
            return {}
        n_live = self.store.live_count(conn, self.namespace)
        df = Counter(term for term, _ in postings)
        idf = {t: math.log(1.0 + (n_live - n + 0.5) / (n + 0.5)) for t, n in df.items()}
        total = sum(idf.values())
        out: dict[str, float] = defaultdict(float)
        for term, node_id in postings:
            out[node_id] += idf[term] / total
        return out

    def _standing(self, scored: Iterable[_Scored], taken: set[str]) -> list[_Scored]:
        """The branch's high-weight state, preferences and decisions, the query aside.
        Of ``state`` nodes only the latest per branch stands: it supersedes the rest."""
        r = self.config.retrieval
        pool = [s for s in scored if s.node.type.value in r.standing_types and s.weight >= r.standing_min_weight]
        latest_state: dict[str, _Scored] = {}
        others = []
        for s in pool:
            if s.node.type is NodeType.STATE:
                cur = latest_state.get(s.node.branch_id)
                if cur is None or (s.node.created_at, s.node.id) > (cur.node.created_at, cur.node.id):
                    latest_state[s.node.branch_id] = s
            else:
                others.append(s)
        pool = list(latest_state.values()) + others
        pool = [s for s in pool if s.node.id not in taken]
        return heapq.nlargest(r.standing_max, pool, key=lambda s: s.weight)

    def _weight(self, node: Node, now: float) -> float:
        return weight(
            importance=node.importance, confidence=node.confidence, access_count=node.access_count,
            touched_at=node.touched_at, now=now, cfg=self.config.weights,
        )

    # -- without a query -----------------------------------------------------------

    def active_context(self, active_id: str | None, *, k: int, budget: int, now: float) -> Recall:
        """The active task's ancestors and its top-k memories by weight."""
        with self.store.reading() as conn:
            row = self.store.get(conn, active_id) if active_id else None
            if row is None or row.status != "live":
                return Recall(None, (), "", 0, (), budget)
            anchor = self.store.get(conn, row.branch_id) or row
            path_ids = set(row.path.rstrip("/").split("/"))
            scored: dict[str, _Scored] = {}
            for r in self.store.subtree(conn, self.namespace, anchor.path, status=None):
                if r.status != "live":
                    continue
                node = node_from_row(r)
                s = _Scored(node, weight=self._weight(node, now))
                s.score = s.weight
                scored[node.id] = s
            top = heapq.nlargest(k, (s for s in scored.values() if s.node.id not in path_ids), key=lambda s: s.score)
            active = scored.get(row.id) or _Scored(node_from_row(row))
            picked = [(active, "active")] + [(s, "top") for s in top]
            nodes, context, tokens, dropped = self._assemble(conn, None, picked, scored, budget, now)
        branch = BranchScore(anchor.id, 1.0, len(top), _clip(anchor.content))
        return Recall(None, nodes, context, tokens, (branch,), budget, dropped)

    # -- shared: ancestors, budget, rendering -----------------------------------------

    def _assemble(
        self,
        conn: Connection,
        query: str | None,
        picked: Sequence[tuple[_Scored, str]],
        scored: Mapping[str, _Scored],
        budget: int,
        now: float,
    ) -> tuple[tuple[ScoredNode, ...], str, int, int]:
        ancestor_ids = {a for s, _ in picked for a in s.node.ancestor_ids}
        known: dict[str, _Scored] = dict(scored)
        unknown = [a for a in ancestor_ids if a not in known]
        for node_id, arow in self.store.get_many(conn, unknown).items():
            node = node_from_row(arow)
            known[node_id] = _Scored(node, weight=self._weight(node, now))
        chosen: dict[str, tuple[_Scored, str]] = {}
        used = dropped = 0
        for s, reason in picked:
            if s.node.id in chosen:
                # Already in as an earlier pick's ancestor: it was picked on its own
                # merit too, so say so (and let retrieve() count the read).
                if chosen[s.node.id][1] == "ancestor":
                    chosen[s.node.id] = (s, reason)
                continue
            need = [a for a in s.node.ancestor_ids if a not in chosen and a in known] + [s.node.id]
            cost = sum(_line_tokens(known[i].node if i != s.node.id else s.node) for i in need)
            if used + cost > budget:
                dropped += 1
                continue
            used += cost
            for i in need[:-1]:
                chosen[i] = (known[i], "ancestor")
            chosen[s.node.id] = (s, reason)
        order = tree_order([c[0].node for c in chosen.values()])
        out = []
        lines = []
        for node in order:
            s, reason = chosen[node.id]
            line = _line(node)
            lines.append("  " * node.depth + line)
            out.append(
                ScoredNode(
                    node=node, reason=reason, similarity=s.similarity, dense=s.dense, lexical=s.lexical,
                    weight=s.weight, branch_score=s.branch_score, score=s.score, tokens=text.count_tokens(line),
                )
            )
        context = "\n".join(lines)
        return tuple(out), context, text.count_tokens(context), dropped


def _line(node: Node) -> str:
    return f"[{node.type.value}] {node.content}"


def _line_tokens(node: Node) -> int:
    return text.count_tokens(_line(node))


def _clip(text_: str, n: int = 60) -> str:
    text_ = " ".join(text_.split())
    return text_ if len(text_) <= n else text_[: n - 1] + "…"


__all__ = ["Retriever"]
