"""The ``[embedding]`` settings made into an embedder."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

from ..config import EmbeddingConfig
from ..errors import ConfigError
from .base import Embedder
from .onnx_model import OnnxEmbedder
from .pair import SEPARATOR, PairedEmbedder
from .sentence import SentenceTransformerEmbedder
from .use import USE_MULTILINGUAL, UniversalSentenceEncoderEmbedder


def make_embedder(settings: EmbeddingConfig) -> Embedder:
    """The embedder the ``[embedding]`` settings name; nothing is loaded until first use.

    ``model = "use-multilingual"`` is the multilingual Universal Sentence Encoder;
    ``"a+b"`` pairs two of these (:mod:`.pair`);
    ``"bundled"`` or any other value is a sentence-transformers model name or path,
    run as ``backend`` says: ``"torch"`` by sentence-transformers, ``"onnx"`` by
    onnxruntime (:mod:`.onnx_model`), ``"auto"`` by onnxruntime when it
    is installed and can reproduce the model on the CPU, else by sentence-transformers.
    """
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
