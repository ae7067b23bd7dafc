"""Weights are computed at query time from stored inputs (no background decay writes)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .config import WeightConfig
from .errors import InvalidWeightError

_LN2 = math.log(2.0)


def check_unit(value: object, name: str) -> float:
    """``value`` as a float in [0, 1], or a clear error. NaN, bools and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidWeightError(f"{name} must be a number in [0, 1], got {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:
        raise InvalidWeightError(f"{name} must be in [0, 1], got a number too large for a float") from None
    if math.isnan(x) or not 0.0 <= x <= 1.0:
        raise InvalidWeightError(f"{name} must be in [0, 1], got {value!r}")
    return x


def recency(age_s: float, half_life_s: float) -> float:
    """1 when just touched, 0.5 one half-life later. A touch in the future counts as now."""
    return math.exp(-_LN2 * (max(0.0, age_s) / half_life_s))  # ratio first: exactly 0.5 at one half-life


def usage(access_count: int, scale: float) -> float:
    """Saturating reinforcement from reads: 0 for never read, towards 1 for often read."""
    return 1.0 - math.exp(-max(0, access_count) / scale)


def blend(dense: float, lexical: float, dense_weight: float) -> float:
    """A similarity in [0, 1] from a dense cosine and a lexical overlap.

    ``dense_weight`` is how far the dense score is trusted: retrieval and dedup
    scale it by the embedder's coverage of the text, so a language the model maps
    to unknown tokens is judged by its words instead. Negative cosines count as 0.
    """
    return dense_weight * max(0.0, dense) + (1.0 - dense_weight) * lexical


def weight(
    *,
    importance: float,
    confidence: float,
    access_count: int,
    touched_at: float,
    now: float,
    cfg: WeightConfig,
) -> float:
    """The combined weight in [0, 1]: a convex mix of importance, recency, confidence, usage."""
    total = cfg.importance + cfg.recency + cfg.confidence + cfg.usage
    value = (
        cfg.importance * importance
        + cfg.recency * recency(now - touched_at, cfg.half_life_s)
        + cfg.confidence * confidence
        + cfg.usage * usage(access_count, cfg.usage_scale)
    ) / total
    return min(1.0, max(0.0, value))


def weight_array(
    *,
    importance: np.ndarray[Any, Any],
    confidence: np.ndarray[Any, Any],
    access_count: np.ndarray[Any, Any],
    touched_at: np.ndarray[Any, Any],
    now: float,
    cfg: WeightConfig,
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """:func:`weight` over columns of nodes at once (forget passes over the whole tree)."""
    total = cfg.importance + cfg.recency + cfg.confidence + cfg.usage
    age = np.maximum(0.0, now - np.asarray(touched_at, dtype=np.float64))
    rec = np.exp(-_LN2 * (age / cfg.half_life_s))
    use = 1.0 - np.exp(-np.maximum(0, np.asarray(access_count, dtype=np.float64)) / cfg.usage_scale)
    value = (
        cfg.importance * np.asarray(importance, dtype=np.float64)
        + cfg.recency * rec
        + cfg.confidence * np.asarray(confidence, dtype=np.float64)
        + cfg.usage * use
    ) / total
    return np.clip(value, 0.0, 1.0)
