"""Stage 1, locate: which task branch the query is about.

The candidates are grouped by family (one top-level task's tree) and each
branch scored by its best candidate's similarity, a blend of the dense and the
lexical scores (the dense scores levelled between memories written in CJK and
the others, :func:`.candidates.level_scripts`), plus a little for breadth, its
family's branches told apart by the words they do not share. Each candidate is
read with its task path as context, and the branches of the agent's active
family may be preferred (``retrieval.active_prior``).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .. import text
from ..config import RetrievalConfig
from ..model import root_of
from ..weights import blend
from .candidates import Candidates, level_scripts
from .query import Posting, QueryWords, term_idf

# Branch score: the best hit, plus a little for breadth (a second and third hit).
_BREADTH = (1.0, 0.15, 0.05)
#: Inside a family the dense share of the blend is multiplied by this (see
#: :func:`branch_scores` and eval/CHANGES.md).
FAMILY_DENSE = 0.5


class Located(NamedTuple):
    """Stage 1's answer: (score, branch id, candidates) of every branch holding a
    candidate, best first."""

    branches: list[tuple[float, str, int]]
    note: str


def locate(r: RetrievalConfig, words: QueryWords, cands: Candidates, dense_mix: float,
           active_root: Callable[[], str | None] | None) -> Located:
    """Stage 1 under the settings ``r``: :func:`branch_scores` of the candidates,
    the query words' in-family factors taken from their idf in the whole memory; then the
    branches of the active family preferred, when there is an ``active_root`` (the
    top-level task of the session's active node, read when asked)."""
    postings = words.held(cands.rows)
    dense = level_scripts(cands.dense, {i: text.mostly_cjk(row.content) for i, row in cands.rows.items()})
    scored = branch_scores(cands.rows, postings, dense, words.lexical, dense_mix,
                           rarity=family_rarity(words.idf, r.family_rarity))
    prior = "off" if r.active_prior <= 0 else "without a session" if active_root is None else ""
    if r.active_prior > 0 and active_root is not None:
        root = active_root()
        scored = _prefer_active(scored, cands.rows, root, r.active_prior)
        applied = root is not None and any(root_of(row.path) == root for row in cands.rows.values())
        prior = "applied" if applied else "not applied"
    if not scored:
        return Located(scored, f"no branch holds a candidate; active prior {prior}")
    return Located(scored, f"located {scored[0][1]} score={scored[0][0]:.3f}, branches scored {len(scored)}; "
                           f"active prior {prior}")


def branch_scores(
    cand_rows: Mapping[str, Any], postings: Sequence[Posting], dense: Mapping[str, float],
    lexical: Mapping[str, float], dense_mix: float, *,
    family_dense: float = FAMILY_DENSE, rarity: Mapping[str, float] | None = None,
) -> list[tuple[float, str, int]]:
    """(score, branch id, candidates) of every branch holding a stage-1 candidate, best
    first. A branch scores its best candidate's similarity plus a little for breadth.

    A task and its subtasks (a family: one top-level task's tree) name the same
    ticket or person, so the family is scored as one, over all its
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
        groups[root_of(row.path)][i] = row
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
        local = idf_share([p for i in members for p in held[i]], len(members), rarity)
        sims: dict[str, list[float]] = defaultdict(list)
        for i, row in members.items():
            sims[row.branch_id].append(blend(dense.get(i, 0.0), local.get(i, 0.0), dense_mix * family_dense))
        inner = {b: _branch_score(v) for b, v in sims.items()}
        top = max(inner.values())
        out += [(score * inner[b] / top if top > 0 else score, b, n) for b, n in count.items()]
    return sorted(out, reverse=True)


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


def family_rarity(idf: Mapping[str, float], power: float) -> dict[str, float] | None:
    """The in-family factor of each query word (``retrieval.family_rarity``): its idf
    in the whole memory to ``power``; None when no word gets a factor. A CJK term is
    a character pair, often one across a word boundary ("高艳的" gives "艳的"): its
    rarity in the memory is the pair's, not a word's, so it is left out (factor 1)."""
    out = {t: v**power for t, v in idf.items() if not text.is_cjk(t)} if power else {}
    return out or None


def _branch_score(sims: Sequence[float]) -> float:
    """The best similarity, plus a little for breadth (a second and third)."""
    return sum(w * s for w, s in zip(_BREADTH, sorted(sims, reverse=True), strict=False))


def idf_share(postings: Sequence[Posting], n_docs: int, scale: Mapping[str, float] | None = None) -> dict[str, float]:
    """Per node: the idf mass of the query terms it holds over the idf mass of all
    the query terms the postings hold (each term's idf multiplied by ``scale``'s
    factor for it, when given)."""
    df = Counter(term for term, _, _ in postings)
    idf = {t: term_idf(n_docs, n) * (scale.get(t, 1.0) if scale is not None else 1.0) for t, n in df.items()}
    # Exact sums (fsum): the same shares whatever order the postings come in.
    total = math.fsum(idf.values())
    if total <= 0.0:  # every term held weighs nothing (a factor of 0)
        return defaultdict(float)
    held: dict[str, list[float]] = defaultdict(list)
    for term, node_id, _ in postings:
        held[node_id].append(idf[term])
    return defaultdict(float, {node_id: math.fsum(v) / total for node_id, v in held.items()})
