"""Rank: score every memory in question and pick the k hits and the standing ones.

Each memory scores ``lambda*similarity + (1-lambda)*weight(now)``, times what its
branch pays for falling behind the located one (:func:`branch_factor`); the dense
scores are levelled between the memories written in CJK and the others first
(:func:`.candidates.level_scripts`). A state that a later state of its branch
supersedes, and a fact, preference or decision that a later one of its branch
restates (:func:`..dedup.restated`), is matched at a share of its similarity
(:data:`SUPERSEDED_SIMILARITY`): the task has moved on, and what it says now comes
first. Where the
query locates the family of the node the agent chose to work on, the weight part of
each of that family's memories counts more the later it was written
(:data:`NEWEST_GAIN`): what the agent wrote last on the work in hand is what it
most likely asks about. The k best
are the hits, each opened branch first reserving a few places when several are
open; the high-weight state, preferences and decisions of the opened branches
stand beside them, the query aside.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from .. import text
from ..config import RetrievalConfig
from ..dedup import restated
from ..forgetting import superseded_states
from ..model import Node, NodeType, root_of
from ..weights import blend
from .candidates import level_scripts
from .expand import Expanded, Opened

# Fixed, not settings: the values and what they did are in eval/CHANGES.md.
#: What a stage-1 candidate of a branch not opened pays, times its branch's shortfall.
OUTSIDE_WEIGHT = 1.0
#: A candidate of a branch not opened that holds at least this share of the query's
#: informative words the best node of the opened branches holds pays nothing for its branch.
LEXICAL_PEER = 1.0
#: What a node of an opened branch pays, times its branch's shortfall, when the
#: question spreads over a small memory (``retrieval.branch_weight`` otherwise).
SPREAD_WEIGHT = 0.2
#: With several branches open, the best nodes each first places among the k.
BRANCH_QUOTA = 2
#: ... of those whose similarity is at least this share of the best similarity found.
QUOTA_SIMILARITY = 0.5
#: The types whose high-weight nodes of the opened branches stand beside the hits, whatever the query.
STANDING_TYPES: frozenset[NodeType] = frozenset({NodeType.STATE, NodeType.PREFERENCE, NodeType.DECISION})
#: The least weight of a standing node (see eval/CHANGES.md).
STANDING_MIN_WEIGHT = 0.55
#: A state that a later state of its branch supersedes, or a memory a later one
#: restates, is matched at this share of its similarity (see eval/CHANGES.md): found
#: when the question reads clearly closer to it, else giving its place to what the
#: task says now.
SUPERSEDED_SIMILARITY = 0.5
#: In the focused family, the weight part of the memory written n-th from last
#: counts ``1 + NEWEST_GAIN / (1 + n)`` (see eval/CHANGES.md).
NEWEST_GAIN = 2.0


@dataclass(slots=True)
class Scored:
    node: Node
    similarity: float = 0.0
    dense: float = 0.0
    lexical: float = 0.0
    weight: float = 0.0
    score: float = 0.0
    branch_score: float = 0.0
    branch_factor: float = 1.0
    newest_factor: float = 1.0
    superseded_factor: float = 1.0


class _Ranked(Protocol):
    @property
    def node(self) -> Node: ...

    @property
    def score(self) -> float: ...


def rank_key(s: _Ranked) -> tuple[float, float, str]:
    """The sort key of retrieved memories, largest best: by score; ties go to the
    newer memory, then by content, never by id (random), so the same memories
    always give the same answer, in any copy."""
    return (s.score, s.node.created_at, s.node.content)


def branch_factor(branch_score: float, best: float, branch_weight: float) -> float:
    """What a node's score is multiplied by for its branch: 1 in the located (best)
    branch, less the further its branch's score falls behind."""
    if best <= 0.0:
        return 1.0
    return 1.0 - branch_weight * (1.0 - min(branch_score / best, 1.0))


class Picks(NamedTuple):
    """What ranking chose: each pick with its reason ("hit" or "standing"), in the
    order the budget takes them."""

    picked: list[tuple[Scored, str]]
    #: Every memory scored, by id.
    scored: dict[str, Scored]
    note: str


def rank(r: RetrievalConfig, grown: Expanded, cand_rows: Mapping[str, Any], opened: Opened,
         lexical: Mapping[str, float], dense_mix: float, weigh: Callable[[Node], float], k: int,
         focused_root: str | None = None, restates: float | None = None) -> Picks:
    """Score what ``grown`` holds (``lexical``: each candidate's share of the query's
    words, ``dense_mix``: the dense share of the similarity, ``weigh``: a node's
    weight now, ``focused_root``: the top-level task of the node the session chose
    to work on and still does, ``restates``: the share of an earlier memory's words
    a later one holds to restate it, ``dedup.supersede_words``, None when writing
    supersedes nothing) and pick the k hits and the standing memories of the
    opened branches."""
    scored, peers = _score(r, grown, cand_rows, opened, lexical, dense_mix, weigh, restates)
    newest = _prefer_newest(r, scored, opened, focused_root)
    # Who may be one of the k: not a branch's own task node (it is the context
    # of every hit below it, rendered as their ancestor) unless it stands alone;
    # a node of an unopened branch only as a match nearly as strong as the best
    # of the opened ones (within branch_ratio of it).
    branch_score, ids = opened.branch_score, opened.ids
    top_sim = max((s.similarity for s in scored.values() if s.node.branch_id in branch_score), default=0.0)
    with_members = {s.node.branch_id for s in scored.values() if s.node.id != s.node.branch_id}
    pool = [s for s in scored.values() if s.similarity >= r.min_similarity
            and not (s.node.type is NodeType.TASK and s.node.id in with_members)
            and (s.node.branch_id in ids or s.node.id in peers
                 or s.similarity >= opened.ratio * top_sim)]
    # The k best-scored memories, and the standing ones of the opened branches
    # besides; their ancestors come with them as context.
    groups: dict[str, list[Scored]] = {b: [] for b in branch_score}
    for s in pool:
        if s.node.branch_id in groups:
            groups[s.node.branch_id].append(s)
    reserved, rest = _pick(pool, list(groups.values()) if not opened.spread else [], k,
                           QUOTA_SIMILARITY * top_sim)
    hits = reserved + rest
    standing = _standing(r, [s for s in pool if s.node.branch_id in branch_score], {s.node.id for s in hits})
    # The budget takes the picks in this order: each opened branch's reserved
    # places first, then the rest by score.
    picked = [(s, "hit") for s in reserved] + sorted(
        [(s, "standing") for s in standing] + [(s, "hit") for s in rest], key=lambda p: rank_key(p[0]), reverse=True)
    superseded = sum(s.superseded_factor < 1.0 for s in scored.values())
    note = (f"hits {len(hits)} (reserved by branch quotas {len(reserved)}), standing {len(standing)}, "
            f"pool {len(pool)}; superseded memories matched at {SUPERSEDED_SIMILARITY:g}: {superseded}; "
            f"focused family's newest first: {newest}")
    return Picks(picked, scored, note)


def _score(r: RetrievalConfig, grown: Expanded, cand_rows: Mapping[str, Any], opened: Opened,
           lexical: Mapping[str, float], dense_mix: float,
           weigh: Callable[[Node], float], restates: float | None) -> tuple[dict[str, Scored], set[str]]:
    """Every entry scored, by id, and the peers (see below)."""
    # A node of an unopened branch that holds the query's informative words as
    # fully as the best node of the opened branches is about the same thing
    # (the same subject, written down in another session): it pays nothing
    # for its branch.
    branch_score = opened.branch_score
    top_lex = max((lexical.get(n.id, 0.0) for n in grown.nodes), default=0.0)
    peers = {i for i, row in cand_rows.items() if row.branch_id not in branch_score
             and lexical.get(i, 0.0) >= max(LEXICAL_PEER * top_lex, 1e-9)}
    scored: dict[str, Scored] = {}
    lam, opened_weight = r.lambda_, (SPREAD_WEIGHT if opened.spread else r.branch_weight)
    dense_of = level_scripts({n.id: d for n, d, _ in grown.entries},
                             {n.id: text.mostly_cjk(n.content) for n, _, _ in grown.entries})
    # (every memory of an opened branch is an entry: what supersedes one is among them)
    superseded = superseded_states([n for n, _, _ in grown.entries])
    if restates is not None:
        superseded |= restated((n for n, _, _ in grown.entries), restates)
    for node, _, lex in grown.entries:
        b, dense = node.branch_id, dense_of[node.id]
        sf = SUPERSEDED_SIMILARITY if node.id in superseded else 1.0
        similarity, w, bs = blend(dense, lex, dense_mix) * sf, weigh(node), opened.every_branch[b]
        # Opened branches pay branch_weight (SPREAD_WEIGHT for a spreading
        # question) of their shortfall, other branches OUTSIDE_WEIGHT, peers nothing.
        bw = opened_weight if b in branch_score else \
            0.0 if node.id in peers or b in opened.family else OUTSIDE_WEIGHT
        bf = branch_factor(bs, opened.best, bw)
        scored[node.id] = Scored(node, similarity, dense, lex, w, combine(lam, similarity, w, bf), bs, bf,
                                 superseded_factor=sf)
    return scored, peers


def combine(lam: float, similarity: float, weight: float, branch_factor: float) -> float:
    """A memory's score: similarity and weight mixed by ``lam``, times its branch factor."""
    return (lam * similarity + (1 - lam) * weight) * branch_factor


def _prefer_newest(r: RetrievalConfig, scored: Mapping[str, Scored], opened: Opened, root: str | None) -> str:
    """Rescore the focused family's memories, newest first, when the query located
    that family (``root``: its top-level task); what was done, for the rank note.
    Only the weight part grows: a memory that matches the query better still leads."""
    if r.active_prior <= 0.0:
        return "off"
    if root is None:
        return "no focused node"
    if opened.root != root:
        return "located elsewhere"
    family = [s for s in scored.values() if s.node.type is not NodeType.TASK and root_of(s.node.path) == root]
    family.sort(key=lambda s: (s.node.created_at, s.node.content), reverse=True)
    lam = r.lambda_
    for n, s in enumerate(family):
        s.newest_factor = 1.0 + NEWEST_GAIN / (1 + n)
        s.score = combine(lam, s.similarity, s.weight * s.newest_factor, s.branch_factor)
    return f"applied to {len(family)}"


def _pick(pool: Sequence[Scored], groups: Sequence[Sequence[Scored]], k: int,
          floor: float) -> tuple[list[Scored], list[Scored]]:
    """The k hits, as (reserved, rest), each best first. When more than one branch
    is open, each (in the order located) first reserves its best ``BRANCH_QUOTA``
    nodes whose similarity reaches ``floor``: a question that opened two sessions
    gets an answer from each, not ten from the stronger one. The rest of the k go
    by score."""
    quota = BRANCH_QUOTA if len(groups) > 1 else 0
    reserved: dict[str, Scored] = {}
    for group in groups if quota else ():
        for s in heapq.nlargest(quota, (s for s in group if s.similarity >= floor), key=rank_key):
            if len(reserved) < k:
                reserved[s.node.id] = s
    rest = heapq.nlargest(k - len(reserved), (s for s in pool if s.node.id not in reserved), key=rank_key)
    return sorted(reserved.values(), key=rank_key, reverse=True), rest


def _standing(r: RetrievalConfig, scored: Iterable[Scored], taken: set[str]) -> list[Scored]:
    """The branch's high-weight state, preferences and decisions, the query aside.
    Of ``state`` nodes only the latest per branch stands: it supersedes the rest."""
    pool = [s for s in scored if s.node.type in STANDING_TYPES and s.weight >= STANDING_MIN_WEIGHT]
    gone = superseded_states([s.node for s in pool]) | taken
    return heapq.nlargest(r.standing_max, (s for s in pool if s.node.id not in gone),
                          key=lambda s: (s.weight, s.node.created_at, s.node.content))
