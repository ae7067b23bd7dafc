"""What a sentence-transformers model folder declares, and its tokenizer: the part of
the ONNX backend (:mod:`.onnx_model`) that reads files and needs neither torch nor
onnxruntime.

:func:`read_pipeline` reduces the folder's ``modules.json`` and configs to a
:class:`Pipeline` (transformer, mean or CLS pooling, normalisation), or refuses it with
:class:`~hybrid_memory.errors.ConfigError`; :class:`Tokenizer` is the folder's fast
tokenizer with sentence-transformers' truncation and padding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

_TRANSFORMER = {"sentence_transformers.models.Transformer", "sentence_transformers.base.modules.transformer.Transformer"}
_POOLING = {"sentence_transformers.models.Pooling", "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}
_NORMALIZE = {"sentence_transformers.models.Normalize", "sentence_transformers.base.modules.normalize.Normalize"}
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class Pipeline:
    """What a sentence-transformers folder declares, reduced to what the ONNX backend runs."""

    folder: Path  # the transformer's folder: config.json, tokenizer.json, the weights
    max_seq_length: int
    do_lower_case: bool
    pooling: str  # "mean" or "cls"
    dim: int


def read_pipeline(folder: str | Path) -> Pipeline:
    """The pipeline of a sentence-transformers model folder, or ConfigError when this
    module cannot reproduce it exactly."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"the ONNX backend needs a local model folder; {str(folder)!r} is not one")
    modules = _json(root / "modules.json")
    if not isinstance(modules, list) or not modules:
        raise ConfigError(f"{root}: modules.json lists no modules")
    kinds = [str(m.get("type", "")) for m in modules]
    first, rest = modules[0], modules[1:]
    if kinds[0] not in _TRANSFORMER or len(rest) < 1 or kinds[1] not in _POOLING:
        raise ConfigError(f"{root}: the ONNX backend runs Transformer + Pooling (+ Normalize), not {kinds}")
    if any(k not in _NORMALIZE for k in kinds[2:]):
        raise ConfigError(f"{root}: the ONNX backend cannot run the modules {kinds[2:]} (only Normalize)")
    folder_ = root / str(first.get("path", ""))
    st_config = _json(folder_ / "sentence_bert_config.json", default={})
    extra = {
        k: v for k, v in st_config.items()
        if k not in ("max_seq_length", "do_lower_case") and v not in (None, {}, [], "feature-extraction")
    }
    if extra:
        raise ConfigError(f"{folder_}: sentence_bert_config.json sets {sorted(extra)}, which the ONNX backend does not reproduce")
    model_config = _json(folder_ / "config.json")
    max_len = st_config.get("max_seq_length")
    if max_len is None:
        tok_config = _json(folder_ / "tokenizer_config.json", default={})
        limits = [v for v in (tok_config.get("model_max_length"), model_config.get("max_position_embeddings")) if isinstance(v, int) and v > 0]
        if not limits:
            raise ConfigError(f"{folder_}: no max_seq_length, model_max_length or max_position_embeddings")
        max_len = min(limits)
    st_root = _json(root / "config_sentence_transformers.json", default={})
    if st_root.get("default_prompt_name"):
        raise ConfigError(f"{root}: a default prompt is not reproduced by the ONNX backend")
    pooling_config = _json(root / str(rest[0].get("path", "")) / "config.json")
    mode = pooling_config.get("pooling_mode")
    if mode is None:
        modes = [m for k, m in _LEGACY_POOLING.items() if pooling_config.get(k)] or ["mean"]
    else:
        modes = [mode] if isinstance(mode, str) else list(mode)
    if len(modes) != 1 or modes[0] not in ("mean", "cls"):
        raise ConfigError(f"{root}: the ONNX backend pools by mean or CLS, not {modes}")
    dim = pooling_config.get("embedding_dimension", pooling_config.get("word_embedding_dimension"))
    if not isinstance(dim, int) or dim != model_config.get("hidden_size", dim):
        raise ConfigError(f"{root}: cannot tell the embedding dimension from 1_Pooling/config.json")
    if not (folder_ / "tokenizer.json").is_file():
        raise ConfigError(f"{folder_}: the ONNX backend needs tokenizer.json (a fast tokenizer)")
    if not any((folder_ / w).is_file() for w in WEIGHTS):
        raise ConfigError(f"{folder_}: no weights ({', '.join(WEIGHTS)})")
    return Pipeline(
        folder=folder_, max_seq_length=int(max_len), do_lower_case=bool(st_config.get("do_lower_case", False)),
        pooling=modes[0], dim=dim,
    )

# -- the tokenizer ---------------------------------------------------------------------


class Tokenizer:
    """The model's fast tokenizer with sentence-transformers' settings: truncated to
    max_seq_length (special tokens included), padded on the right per batch."""

    def __init__(self, pipeline: Pipeline) -> None:
        from tokenizers import Tokenizer, normalizers

        folder = pipeline.folder
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        padding = tok.padding or {}
        # tokenizer.json may carry its own truncation and padding (MiniLM's: fixed 128);
        # sentence-transformers overrides both, and so do we (truncation by hand below,
        # so that coverage() sees the whole text through the same object).
        tok.no_truncation()
        tok.no_padding()
        normalizer = json.loads(tok.normalizer.__getstate__()) if tok.normalizer is not None else None
        config = {**_json(folder / "special_tokens_map.json", default={}), **_json(folder / "tokenizer_config.json", default={})}
        for side in ("truncation_side", "padding_side"):
            if config.get(side, "right") != "right":
                raise ConfigError(f"{folder}: {side} = {config[side]!r}; the ONNX backend pads and truncates on the right")
        if pipeline.do_lower_case and not _lowercases(normalizer):
            tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), *([tok.normalizer] if tok.normalizer else [])])
        self._tok = tok
        self._content = pipeline.max_seq_length - tok.num_special_tokens_to_add(False)
        if self._content < 1:
            raise ConfigError(f"{folder}: max_seq_length {pipeline.max_seq_length} leaves no room for text")
        self.unk_id = _token_id(tok, config.get("unk_token"))
        pad_id = _token_id(tok, config.get("pad_token"))
        if pad_id is None:
            pad_id = padding.get("pad_id")
        if pad_id is None:
            raise ConfigError(f"{folder}: the tokenizer has no padding token")
        self.pad_id = int(pad_id)

    def pieces(self, text: str) -> list[int]:
        """The ids of the text without special tokens and without truncation."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode(self, texts: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """(ids, type ids) of each text as the model sees it: truncated, with special tokens."""
        out = []
        for enc in self._tok.encode_batch(list(texts), add_special_tokens=False):
            if len(enc.ids) > self._content:
                enc.truncate(self._content)
            full = self._tok.post_process(enc)
            out.append((full.ids, full.type_ids))
        return out


def _lowercases(normalizer: Any) -> bool:
    if not isinstance(normalizer, dict):
        return False
    kind = normalizer.get("type")
    if kind == "Lowercase" or (kind == "BertNormalizer" and normalizer.get("lowercase")):
        return True
    return kind == "Sequence" and any(_lowercases(n) for n in normalizer.get("normalizers", []))


def _token_id(tok: Any, token: Any) -> int | None:
    if isinstance(token, dict):
        token = token.get("content")
    if not isinstance(token, str):
        return None
    found = tok.token_to_id(token)
    return None if found is None else int(found)


def _json(path: Path, *, default: dict[str, Any] | None = None) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        if default is not None:
            return default
        raise ConfigError(f"{path} is missing") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
