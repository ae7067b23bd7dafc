"""The evaluation's metrics: one definition each, in one place.

Every ranking metric takes the ids a system returned, best first, and the set of
gold ids a question needs; a returned id may stand for several trace ids (a
near-duplicate merged into an earlier memory answers for both).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

DEFINITIONS = {
    "recall_all@k": "1 if every gold memory of the question is among the first k returned, else 0; averaged over questions.",
    "recall_any@k": "1 if at least one gold memory is among the first k returned, else 0; averaged over questions.",
    "ndcg@k": "binary-relevance nDCG: sum over gold memories at rank r <= k of 1/log2(r+1), divided by the same sum for an ideal ranking of min(k, #gold) gold memories.",
    "branch_acc@1": "1 if the first task branch the system locates (hybrid: its best-scored branch; a flat baseline: the branch of its top memory) is one of the question's gold branches.",
    "tokens_mean": "mean estimated LLM tokens of the context a system returns for a question (hybrid_memory.text.count_tokens over the rendered lines), within the shared token budget.",
    "compression": "tokens of the full history at the question's time divided by the tokens returned (mean over questions).",
    "latency_ms_p50/p95": "wall time of one retrieval call, query embedding excluded (every system reads the same precomputed vectors).",
    "recall_all@hybrid_tokens": "the 'at no more tokens' comparison: per question, a system's ranking (its top 20) is cut to the tokens hybrid returned for that question (memories taken in rank order while they fit, so fewer or more than k), then recall_all is computed on what is left; averaged over questions. hybrid's own figure is its recall_all@k.",
    "ndcg@hybrid_tokens": "nDCG on the same token-matched cut of n memories (ideal: min(max(k, n), #gold) gold memories); hybrid's own figure is its ndcg@k.",
    "recovery_acc": "share of restarts after which recover(), in a fresh process, names the active task the trace had set.",
    "answers_equal": "share of questions asked after a restart whose returned memories equal those of an uninterrupted replay of the same trace.",
    "wrongly_forgotten": "share of gold memories that forgetting (a live-node cap) had archived or deleted before their question was asked.",
}



def recall_all(ranked: Sequence[frozenset[str]], gold: frozenset[str], k: int) -> float:
    found: set[str] = set()
    for ids in ranked[:k]:
        found |= ids & gold
    return 1.0 if gold and found == gold else 0.0


def recall_any(ranked: Sequence[frozenset[str]], gold: frozenset[str], k: int) -> float:
    return 1.0 if any(ids & gold for ids in ranked[:k]) else 0.0


def ndcg(ranked: Sequence[frozenset[str]], gold: frozenset[str], k: int) -> float:
    if not gold:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for rank, ids in enumerate(ranked[:k], start=1):
        new = (ids & gold) - seen
        if new:
            dcg += 1.0 / math.log2(rank + 1)  # one gain per rank, even when it answers for two
            seen |= new
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(k, len(gold)) + 1))
    return dcg / ideal


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: Iterable[float]) -> float:
    xs = list(values)
    return sum(xs) / len(xs) if xs else 0.0


def within_tokens(ranked: Sequence[frozenset[str]], costs: Sequence[int], tokens: float) -> list[frozenset[str]]:
    """The returned memories a system could have given in ``tokens``: taken in rank
    order, each that still fits (a long one is skipped, as a token budget does)."""
    out: list[frozenset[str]] = []
    used = 0
    for ids, cost in zip(ranked, costs, strict=True):
        if used + cost <= tokens:
            out.append(ids)
            used += cost
    return out
