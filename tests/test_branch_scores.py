"""Stage-1 branch scoring arithmetic (retrieval.locate.branch_scores), on hand-made scores.

The candidates carry made-up dense and lexical scores, so these tests check the
arithmetic only; the behaviour with the real model is in test_retrieval.py.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import pytest

from hybrid_memory.retrieval.locate import branch_scores, family_rarity, idf_share
from hybrid_memory.retrieval.query import term_idf

MIX = 0.7  # dense share of the blend


class Row(NamedTuple):
    branch_id: str
    path: str


def blend(d: float, lex: float) -> float:
    return MIX * d + (1 - MIX) * lex


# A family: task P (an expense claim) and its subtask S (collecting receipts). P's
# status lines name the claim and the claimant, as the question does; S's memory
# holds the question's own word ("folio"). Another family, Q, is a distractor of
# the same kind with one memory.
ROWS = {
    "p_state": Row("P", "P/p_state/"),
    "p_event": Row("P", "P/p_event/"),
    "s_folio": Row("S", "P/S/s_folio/"),
    "q_state": Row("Q", "Q/q_state/"),
}
DENSE = {"p_state": 0.75, "p_event": 0.70, "s_folio": 0.62, "q_state": 0.74}
# Postings (term, node, tf): "3187" and "jessica" are in every memory of the family;
# "folio" only in S's.
POSTINGS = [
    ("3187", "p_state", 1), ("jessica", "p_state", 1),
    ("3187", "p_event", 1), ("jessica", "p_event", 1),
    ("3187", "s_folio", 1), ("jessica", "s_folio", 1), ("folio", "s_folio", 1),
    ("jessica", "q_state", 1),
]
# Global lexical shares (what the whole memory says): the claim id is rare, "folio" rarer.
LEXICAL = {"p_state": 0.55, "p_event": 0.55, "s_folio": 0.80, "q_state": 0.15}


def scores() -> dict[str, float]:
    return {b: s for s, b, _ in branch_scores(ROWS, POSTINGS, DENSE, LEXICAL, MIX)}


def test_a_family_is_scored_as_one_and_its_branches_by_the_words_they_do_not_share() -> None:
    got = scores()
    # The family's score: all its candidates together, on the global blend.
    best, second, third = sorted([blend(0.75, 0.55), blend(0.70, 0.55), blend(0.62, 0.80)], reverse=True)
    family = best + 0.15 * second + 0.05 * third
    assert max(got["P"], got["S"]) == pytest.approx(family)
    # Inside the family the claim id and the name weigh almost nothing, "folio" all:
    # the subtask holding the question's own word comes first.
    assert got["S"] > got["P"]
    assert got["S"] == pytest.approx(family)
    # The other family is untouched.
    assert got["Q"] == pytest.approx(blend(0.74, 0.15))


def test_order_is_best_first_and_counts_candidates() -> None:
    ranked = branch_scores(ROWS, POSTINGS, DENSE, LEXICAL, MIX)
    assert [s for s, _, _ in ranked] == sorted((s for s, _, _ in ranked), reverse=True)
    assert {b: n for _, b, n in ranked} == {"P": 2, "S": 1, "Q": 1}


def test_a_family_with_no_similarity_keeps_its_score() -> None:
    rows = {"a": Row("A", "A/a/"), "b": Row("B", "A/B/b/")}
    ranked = branch_scores(rows, [], {}, {}, MIX)
    assert {b: s for s, b, _ in ranked} == {"A": 0.0, "B": 0.0}


def test_inside_a_family_the_dense_share_shrinks_by_family_dense() -> None:
    """P's status line reads closer to the question (dense), S's memory holds the
    question's own word: with the family's dense share halved, S's lead grows."""
    rows = {"p": Row("P", "P/p/"), "s": Row("S", "P/S/s/")}
    dense = {"p": 0.80, "s": 0.60}
    postings = [("3187", "p", 1), ("3187", "s", 1), ("folio", "s", 1)]
    lexical = {"p": 0.5, "s": 0.7}
    local = idf_share(postings, 2)  # inside the family: "3187" in both (idf ~0), "folio" in S alone
    ratio = {}
    for mix in (1.0, 0.5):
        got = {b: s for s, b, _ in branch_scores(rows, postings, dense, lexical, MIX, family_dense=mix)}
        share = MIX * mix
        p = share * 0.80 + (1 - share) * local.get("p", 0.0)
        s = share * 0.60 + (1 - share) * local["s"]
        assert s > p
        ratio[mix] = got["P"] / got["S"]
        assert ratio[mix] == pytest.approx(p / s)
    assert ratio[0.5] < ratio[1.0]


def test_inside_a_family_a_word_common_in_the_whole_memory_weighs_less() -> None:
    """"Who signed off the offer on REQ-4009? I need it": among the family's three
    candidates "need" (a parent's status line) and "offer" (the subtask's memory) are
    each held once, so the candidates alone weigh them alike and the parent's breadth
    wins. In the whole memory "need" is common and "offer" rare: weighed by that
    rarity too, the subtask that holds the question's telling word comes first."""
    rows = {"p_state": Row("P", "P/p_state/"), "p_event": Row("P", "P/p_event/"), "s_offer": Row("S", "P/S/s_offer/")}
    dense = {"p_state": 0.6, "p_event": 0.5, "s_offer": 0.6}
    postings = [("4009", "p_state", 1), ("need", "p_state", 1), ("4009", "p_event", 1),
                ("4009", "s_offer", 1), ("offer", "s_offer", 1)]
    lexical = {"p_state": 0.5, "p_event": 0.4, "s_offer": 0.6}
    rarity = {"4009": 6.0, "need": 0.4, "offer": 3.0}  # idf in the whole memory

    def located(scale: dict[str, float] | None) -> str:
        return branch_scores(rows, postings, dense, lexical, MIX, family_dense=0.5, rarity=scale)[0][1]

    plain = idf_share(postings, 3)
    assert plain["p_state"] == pytest.approx(plain["s_offer"])  # alike in the sample
    assert located(None) == "P"
    weighed = idf_share(postings, 3, rarity)
    assert weighed["s_offer"] > weighed["p_state"]
    # The factor is a weight, not a score: the shares still sum the held terms' part.
    total = sum(term_idf(3, n) * rarity[t] for t, n in (("4009", 3), ("need", 1), ("offer", 1)))
    assert weighed["s_offer"] == pytest.approx((term_idf(3, 3) * 6.0 + term_idf(3, 1) * 3.0) / total)
    assert located(rarity) == "S"
    # A family's own score, and a one-branch family, do not move.
    alone = {"p_state": rows["p_state"], "p_event": rows["p_event"]}
    assert branch_scores(alone, postings, dense, lexical, MIX, rarity=rarity) == \
        branch_scores(alone, postings, dense, lexical, MIX)


def test_idf_shares_do_not_depend_on_the_order_postings_come_in() -> None:
    # Four words held by 9, 37, 5 and 17 of the candidates: a plain float sum of their
    # idfs differs in its last bit between orders, so the same memory would score a
    # hair apart in two processes (or two reads) and a tie could break either way.
    held = {"w0": 9, "w1": 37, "w2": 5, "w3": 17}
    shares = set()
    for order in itertools.permutations(held):
        postings = [(t, f"n{i}", 1) for t in order for i in range(held[t])]
        shares.add(idf_share(postings, 50)["n0"])
    assert len(shares) == 1
    assert shares.pop() == pytest.approx(1.0)  # n0 holds all four words


def test_the_rarity_factor_leaves_chinese_terms_alone() -> None:
    """family_rarity: a word's factor is its memory-wide idf to the power; a CJK term
    (a character pair such as "艳的", across a word boundary) keeps factor 1."""
    idf = {"offer": 3.0, "need": 0.5, "4009": 6.0, "艳的": 5.6, "签证": 2.0}
    assert family_rarity(idf, 0.0) is None
    assert family_rarity(idf, 1.0) == {"offer": 3.0, "need": 0.5, "4009": 6.0}
    assert family_rarity(idf, 2.0) == pytest.approx({"offer": 9.0, "need": 0.25, "4009": 36.0})
    # Shares over a family: the CJK pair weighs as it did without the factor.
    postings = [("艳的", "a", 1), ("签证", "b", 1), ("offer", "b", 1)]
    plain, weighed = idf_share(postings, 2), idf_share(postings, 2, family_rarity(idf, 1.0))
    assert plain["a"] == pytest.approx(1 / 3) and weighed["a"] == pytest.approx(1 / 5)  # offer now weighs 3
    only_cjk = [("艳的", "a", 1), ("签证", "b", 1)]
    assert idf_share(only_cjk, 2, family_rarity(idf, 1.0)) == idf_share(only_cjk, 2)


