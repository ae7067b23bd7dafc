"""A sentence-transformers model, run by torch (``[embedding] backend = "torch"``, or
where onnxruntime cannot reproduce the model; :mod:`.onnx_model` otherwise)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from .base import BUNDLED, Vectors, bundled_model_path

_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str], Any] = {}
#: Held around every call into a loaded sentence-transformers model: its tokenizer
#: sets padding and truncation on itself for each call, so two threads tokenizing at
#: once (a write embedding on its worker while dedup asks for coverage) corrupt each
#: other's batch.
_CALL_LOCK = threading.Lock()


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded on first use and shared within the process."""

    #: A torch forward pass takes the interpreter lock back between its many small
    #: operations, and this class holds one lock around every call into the model
    #: (coverage() included): a write's transaction run beside the embedding slowed
    #: a single add from 1.18x to 1.27x one embedding call (eval/BENCHMARKS.md).
    releases_gil = False

    def __init__(self, model: str = BUNDLED, *, device: str = "cpu", batch_size: int = 64) -> None:
        self._spec = model
        self._device = device
        self._batch_size = batch_size
        self._model: Any = None

    @property
    def name(self) -> str:
        return "all-MiniLM-L6-v2" if self._spec == BUNDLED else self._spec

    def _load(self) -> Any:
        if self._model is None:
            path = bundled_model_path() if self._spec == BUNDLED else self._spec
            key = (path, self._device)
            with _LOCK:
                if key not in _LOADED:
                    # Weights come from disk only; never from a hub at run time.
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                    from sentence_transformers import SentenceTransformer
                    from transformers.utils import logging as hf_logging

                    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no weight-loading bars in a CLI or a log

                    try:
                        _LOADED[key] = SentenceTransformer(path, device=self._device)
                    except OSError as exc:
                        raise ConfigError(f"cannot load embedding model {path!r}: {exc}") from None
                self._model = _LOADED[key]
        return self._model

    @property
    def dim(self) -> int:
        model = self._load()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        with _CALL_LOCK:
            vectors = model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def coverage(self, text: str) -> float:
        tokenizer = getattr(self._load(), "tokenizer", None)
        unk = getattr(tokenizer, "unk_token_id", None)
        if tokenizer is None or unk is None:
            return 1.0
        with _CALL_LOCK:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            return 1.0
        return 1.0 - sum(1 for i in ids if i == unk) / len(ids)
