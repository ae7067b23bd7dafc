"""Typed, frozen configuration read from ``configs/default.toml``.

The TOML file is the single source of the defaults: the dataclasses below carry
no default values of their own. A user file (or a mapping of overrides) is merged
over it key by key. Nothing is read at import time.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .errors import ConfigError
from .model import NodeType

T = TypeVar("T")

#: The values of ``[embedding] backend``.
EMBEDDING_BACKENDS = ("auto", "torch", "onnx")

_FIXED = "is no longer a setting (fixed; see eval/CHANGES.md)"
#: Keys that were settings once, and what a file or an override naming one is told.
RETIRED = {
    "retrieval": {
        **{key: f"retrieval.{key} moved to accel.{key}"
           for key in ("common_postings", "in_memory_lexicon", "in_memory_vectors", "row_cache")},
        "branch_by": "retrieval.branch_by moved to write.branch_by",
        **{key: f"retrieval.{key} {_FIXED}"
           for key in ("outside_weight", "lexical_peer", "family_dense", "branch_quota", "quota_similarity",
                       "spread_ratio", "spread_weight", "standing_types", "standing_min_weight")},
        "by_family": "retrieval.by_family is no longer a setting (always on; see eval/CHANGES.md)",
        "small_memory": "retrieval.small_memory: set retrieval.spread_branches = 0 to turn spreading off",
    },
}


@dataclass(frozen=True)
class WeightConfig:
    importance: float
    recency: float
    confidence: float
    usage: float
    half_life_s: float
    usage_scale: float
    importance_by_type: Mapping[str, float]
    confidence_by_type: Mapping[str, float]


@dataclass(frozen=True)
class FeedbackConfig:
    important_step: float
    confirmed_step: float


@dataclass(frozen=True)
class WriteConfig:
    max_content_chars: int
    max_depth: int
    max_children: int
    focus_new_tasks: bool
    checkpoint_on_focus: bool
    index_batch: int
    overlap_embedding: bool
    passage_tokens: int
    branch_by: str
    place_min: float
    summary_tokens: int


@dataclass(frozen=True)
class DedupConfig:
    enabled: bool
    similarity: float
    lexical: float
    candidates: int
    confidence_step: float
    supersede: float
    supersede_words: float


@dataclass(frozen=True)
class RetrievalConfig:
    k: int
    budget_tokens: int
    candidates: int
    family_rarity: float
    family_open: int
    active_prior: float
    branches: int
    branch_ratio: float
    branch_weight: float
    spread_branches: int
    lambda_: float
    rank_reads: bool
    dense_share: float
    min_similarity: float
    standing_max: int


@dataclass(frozen=True)
class AccelConfig:
    """Settings that only make retrieval faster: the store alone gives the same
    answers (``common_postings`` aside, which bounds the cost of a common word)."""

    common_postings: int
    in_memory_lexicon: bool
    in_memory_vectors: bool
    row_cache: int


@dataclass(frozen=True)
class ForgettingConfig:
    threshold: float
    max_nodes: int
    superseded: float
    #: Recency's coefficient and half-life when choosing what to forget (ranking
    #: keeps [weights] recency and half_life_s).
    recency: float
    half_life_s: float
    #: The share of its weight a task with no live memory under it keeps.
    empty_task: float
    #: The share of its weight the one live memory under a task keeps.
    last_in_task: float
    #: The share of its weight a memory a live summary covers keeps.
    summarized: float


@dataclass(frozen=True)
class UsageConfig:
    flush_every: int


@dataclass(frozen=True)
class EmbeddingConfig:
    model: str
    backend: str
    device: str
    batch_size: int


@dataclass(frozen=True)
class SecurityConfig:
    key_file: str
    audit: bool


@dataclass(frozen=True)
class Config:
    weights: WeightConfig
    feedback: FeedbackConfig
    write: WriteConfig
    dedup: DedupConfig
    retrieval: RetrievalConfig
    accel: AccelConfig
    forgetting: ForgettingConfig
    usage: UsageConfig
    embedding: EmbeddingConfig
    security: SecurityConfig

    @classmethod
    def load(
        cls, path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
    ) -> Config:
        """The defaults, with ``path`` (a TOML file) and then ``overrides`` merged over them.

        ``overrides`` is nested like the TOML: ``{"retrieval": {"k": 5}}``.
        """
        data = _read_toml(default_config_path())
        if path is not None:
            data = _merge(data, _retired(_read_toml(Path(path))))
        if overrides:
            data = _merge(data, _retired(dict(overrides)))
        config = _build(cls, data, "")
        _validate(config)
        return config


def default_config_path() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs" / "default.toml", here.parent / "configs" / "default.toml"):
        if candidate.is_file():
            return candidate
    raise ConfigError("configs/default.toml is missing from the installation")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: not a readable TOML file ({type(exc).__name__})") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc}") from None


def _retired(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data``, unless it names a key that is no longer where it was: then the
    ConfigError that says where it went."""
    for section, keys in RETIRED.items():
        table = data.get(section)
        if isinstance(table, Mapping):
            for key in table:
                if key in keys:
                    raise ConfigError(keys[key])
    return data


def _merge(base: dict[str, Any], extra: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if key not in out:
            raise ConfigError(f"unknown configuration key: {where}{key}")
        if isinstance(out[key], dict) and isinstance(value, Mapping):
            out[key] = _merge(out[key], value, f"{where}{key}.")
        else:
            out[key] = value
    return out


def _build(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        key = "lambda" if f.name == "lambda_" else f.name
        name = f"{where}{key}"
        if key not in data:
            raise ConfigError(f"configuration key missing: {name}")
        value = data[key]
        hint = hints[f.name]
        if is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{name} must be a table")
            kwargs[f.name] = _build(hint, value, f"{name}.")  # type: ignore[arg-type]
        else:
            kwargs[f.name] = _coerce(value, hint, name)
    unknown = set(data) - {"lambda" if f.name == "lambda_" else f.name for f in fields(cls)}  # type: ignore[arg-type]
    if unknown:
        raise ConfigError(f"unknown configuration key: {where}{sorted(unknown)[0]}")
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, name: str) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string")
        return value
    if hint == Mapping[str, float]:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name} must be a table")
        return {str(k): _coerce(v, float, f"{name}.{k}") for k, v in value.items()}
    raise ConfigError(f"{name}: unsupported type {hint}")  # pragma: no cover


def _validate(c: Config) -> None:
    """Refuse a configuration out of range, naming the first bad key (in this order)."""
    _check_weights(c.weights)
    _check_feedback_and_forgetting(c)
    _check_dedup(c.dedup)
    _check_retrieval_shares(c.retrieval)
    _check_write(c.write)
    _check_retrieval_sizes(c.retrieval)
    _check_limits(c)


def _unit(value: float, name: str) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value}")


def _check_weights(w: WeightConfig) -> None:
    coefficients = (w.importance, w.recency, w.confidence, w.usage)
    if any(x < 0 for x in coefficients) or sum(coefficients) <= 0:
        raise ConfigError("weights coefficients must be >= 0 with a positive sum")
    if w.half_life_s <= 0 or w.usage_scale <= 0:
        raise ConfigError("weights.half_life_s and weights.usage_scale must be > 0")
    types = {t.value for t in NodeType}
    for table, name in ((w.importance_by_type, "importance_by_type"), (w.confidence_by_type, "confidence_by_type")):
        missing = types - set(table)
        if missing:
            raise ConfigError(f"weights.{name} lacks {sorted(missing)}")
        extra = set(table) - types
        if extra:
            raise ConfigError(f"weights.{name} names unknown types {sorted(extra)}")
        for key, value in table.items():
            _unit(value, f"weights.{name}.{key}")


def _check_feedback_and_forgetting(c: Config) -> None:
    w = c.weights
    _unit(c.feedback.important_step, "feedback.important_step")
    _unit(c.feedback.confirmed_step, "feedback.confirmed_step")
    _unit(c.forgetting.superseded, "forgetting.superseded")
    _unit(c.forgetting.empty_task, "forgetting.empty_task")
    _unit(c.forgetting.last_in_task, "forgetting.last_in_task")
    _unit(c.forgetting.summarized, "forgetting.summarized")
    if c.forgetting.recency < 0 or w.importance + c.forgetting.recency + w.confidence + w.usage <= 0:
        raise ConfigError("forgetting.recency must be >= 0, with a positive sum of the weights coefficients")
    if c.forgetting.half_life_s <= 0:
        raise ConfigError("forgetting.half_life_s must be > 0")


def _check_dedup(d: DedupConfig) -> None:
    _unit(d.similarity, "dedup.similarity")
    _unit(d.lexical, "dedup.lexical")
    _unit(d.confidence_step, "dedup.confidence_step")
    _unit(d.supersede, "dedup.supersede")
    _unit(d.supersede_words, "dedup.supersede_words")


def _check_retrieval_shares(r: RetrievalConfig) -> None:
    for value, name in (
        (r.branch_ratio, "branch_ratio"),
        (r.branch_weight, "branch_weight"),
        (r.lambda_, "lambda"),
        (r.dense_share, "dense_share"),
        (r.min_similarity, "min_similarity"),
    ):
        _unit(value, f"retrieval.{name}")


def _check_write(w: WriteConfig) -> None:
    if w.branch_by not in ("nearest_task", "top_task"):
        raise ConfigError("write.branch_by must be 'nearest_task' or 'top_task'")
    if w.index_batch < 1:
        raise ConfigError("write.index_batch must be >= 1")
    if w.max_depth < 1 or w.max_children < 1:
        raise ConfigError("write.max_depth and write.max_children must be >= 1")
    if w.passage_tokens < 16:
        raise ConfigError("write.passage_tokens must be >= 16")
    if not w.place_min >= 0:
        raise ConfigError(f"write.place_min must be >= 0, got {w.place_min}")
    if w.summary_tokens < 1:
        raise ConfigError("write.summary_tokens must be >= 1")


def _check_retrieval_sizes(r: RetrievalConfig) -> None:
    if not 0.0 <= r.active_prior <= 10.0:
        raise ConfigError("retrieval.active_prior must be from 0 to 10 (0: off)")
    if r.family_open < 0:
        raise ConfigError("retrieval.family_open must be >= 0 (0: open none)")
    if not 0.0 <= r.family_rarity <= 4.0:
        raise ConfigError("retrieval.family_rarity must be from 0 to 4 (0: off)")
    if min(r.k, r.budget_tokens, r.candidates, r.branches) < 1:
        raise ConfigError("retrieval.k, budget_tokens, candidates and branches must be >= 1")
    if r.spread_branches < 0:
        raise ConfigError("retrieval.spread_branches must be >= 0 (0: off)")
    if r.standing_max < 0:
        raise ConfigError("retrieval.standing_max must be >= 0 (0: none)")


def _check_limits(c: Config) -> None:
    if c.accel.common_postings < 0:
        raise ConfigError("accel.common_postings must be >= 0 (0: no limit)")
    if c.accel.row_cache < 0:
        raise ConfigError("accel.row_cache must be >= 0 (0: no cache)")
    _unit(c.forgetting.threshold, "forgetting.threshold")
    if c.forgetting.max_nodes < 0:
        raise ConfigError("forgetting.max_nodes must be >= 0")
    if c.write.max_content_chars < 1 or c.usage.flush_every < 1 or c.embedding.batch_size < 1:
        raise ConfigError("write.max_content_chars, usage.flush_every, embedding.batch_size must be >= 1")
    if c.embedding.backend not in EMBEDDING_BACKENDS:
        raise ConfigError(f"embedding.backend must be one of {', '.join(map(repr, EMBEDDING_BACKENDS))}, got {c.embedding.backend!r}")
    if c.dedup.candidates < 1:
        raise ConfigError("dedup.candidates must be >= 1")
