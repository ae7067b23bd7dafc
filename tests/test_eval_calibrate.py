"""The arithmetic of ``python -m eval.calibrate`` (the e5 centre's fit)."""

from __future__ import annotations

import numpy as np

from eval.calibrate import evenly, mean_cosine


def test_mean_cosine_is_the_mean_over_distinct_pairs() -> None:
    rng = np.random.default_rng(7)
    v = rng.normal(size=(9, 16)).astype(np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    pairs = [float(v[i] @ v[j]) for i in range(9) for j in range(9) if i != j]
    assert abs(mean_cosine(v) - float(np.mean(pairs))) < 1e-12


def test_evenly_takes_items_spread_over_the_whole_list() -> None:
    items = [str(i) for i in range(100)]
    assert evenly(items, 4) == ["0", "25", "50", "75"]
    assert evenly(items[:3], 10) == ["0", "1", "2"]
