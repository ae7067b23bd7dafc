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
    "recall_all@hybrid_tokens": "a system's recall_all at the mean tokens hybrid returned, read off its tokens-vs-recall curve (k = 1, 3, 5, 10, 20) by linear interpolation; past its last point, the recall there: the fair 'at no more tokens' comparison.",
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


def at_tokens(points: Sequence[tuple[float, float]], tokens: float) -> float:
    """Recall at ``tokens`` on a curve of (tokens, recall) points: linear between
    points, the first point's recall scaled down below it, the last point's above."""
    pts = sorted(points)
    if not pts:
        return 0.0
    if tokens <= pts[0][0]:
        return pts[0][1] * (tokens / pts[0][0]) if pts[0][0] > 0 else pts[0][1]
    for (t0, r0), (t1, r1) in zip(pts, pts[1:], strict=False):
        if t0 <= tokens <= t1:
            return r0 if t1 == t0 else r0 + (r1 - r0) * (tokens - t0) / (t1 - t0)
    return pts[-1][1]
