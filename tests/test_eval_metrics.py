"""The evaluation's metric definitions, checked by hand-computed cases."""

from __future__ import annotations

import math

import pytest

from hybrid_memory.evaluation import metrics


def ranks(*groups: str) -> list[frozenset[str]]:
    """One frozenset of trace ids per returned memory ('a|b' = a merged pair)."""
    return [frozenset(g.split("|")) if g else frozenset() for g in groups]


def test_recall_all_needs_every_gold_within_k() -> None:
    ranked = ranks("x", "a", "y", "b")
    gold = frozenset({"a", "b"})
    assert metrics.recall_all(ranked, gold, 3) == 0.0
    assert metrics.recall_all(ranked, gold, 4) == 1.0
    assert metrics.recall_any(ranked, gold, 1) == 0.0
    assert metrics.recall_any(ranked, gold, 2) == 1.0


def test_a_merged_memory_answers_for_both_of_its_trace_ids() -> None:
    gold = frozenset({"a", "a2"})
    assert metrics.recall_all(ranks("a|a2"), gold, 1) == 1.0
    # nDCG gives one gain per rank: a merged pair at rank 1 is not two relevant ranks.
    assert metrics.ndcg(ranks("a|a2"), gold, 10) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_ndcg_by_hand() -> None:
    gold = frozenset({"a", "b"})
    ideal = 1 + 1 / math.log2(3)
    assert metrics.ndcg(ranks("a", "b"), gold, 10) == pytest.approx(1.0)
    assert metrics.ndcg(ranks("x", "a", "b"), gold, 10) == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / ideal)
    assert metrics.ndcg(ranks("x", "a", "b"), gold, 2) == pytest.approx((1 / math.log2(3)) / ideal)
    assert metrics.ndcg(ranks("x", "y"), gold, 10) == 0.0
    # The ideal never asks for more gold than k places hold.
    assert metrics.ndcg(ranks("a"), gold, 1) == pytest.approx(1.0)


def test_no_gold_scores_nothing() -> None:
    assert metrics.recall_all(ranks("a"), frozenset(), 5) == 0.0
    assert metrics.ndcg(ranks("a"), frozenset(), 5) == 0.0


def test_percentile_interpolates() -> None:
    assert metrics.percentile([], 50) == 0.0
    assert metrics.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)
    assert metrics.mean([]) == 0.0


def test_within_tokens_keeps_what_fits_in_rank_order() -> None:
    ranked = ranks("a", "b", "c", "d")
    assert metrics.within_tokens(ranked, [50, 80, 30, 10], 100) == ranks("a", "c", "d")  # b is skipped
    assert metrics.within_tokens(ranked, [50, 80, 30, 10], 0) == []
    assert metrics.within_tokens(ranked, [1, 1, 1, 1], 1000) == ranked
    with pytest.raises(ValueError):
        metrics.within_tokens(ranked, [1, 1], 10)
