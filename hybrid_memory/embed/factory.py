"""The ``[embedding]`` settings made into an embedder."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

from ..config import EmbeddingConfig
from ..errors import ConfigError
from .base import Embedder
from .combined import SEPARATOR, CombinedEmbedder
from .e5 import E5_SMALL, E5Embedder
from .onnx_model import OnnxEmbedder
from .sentence import SentenceTransformerEmbedder
from .use import USE_MULTILINGUAL, UniversalSentenceEncoderEmbedder


def make_embedder(settings: EmbeddingConfig) -> Embedder:
    """The embedder the ``[embedding]`` settings name; nothing is loaded until first use.

    ``model = "use-multilingual"`` is the multilingual Universal Sentence Encoder;
    ``"e5-small"`` is multilingual-e5-small (:mod:`.e5`);
    ``"a+b"`` combines two or more of these (:mod:`.combined`);
    ``"bundled"`` or any other value is a sentence-transformers model name or path,
    run as ``backend`` says: ``"torch"`` by sentence-transformers, ``"onnx"`` by
    onnxruntime (:mod:`.onnx_model`), ``"auto"`` by onnxruntime when it
    is installed and can reproduce the model on the CPU, else by sentence-transformers.
    """
    if SEPARATOR in settings.model:
        names = settings.model.split(SEPARATOR)
        if not all(names):
            raise ConfigError(f"embedding.model combines models as 'a{SEPARATOR}b{SEPARATOR}...', "
                              f"got {settings.model!r}")
        return CombinedEmbedder(*(make_embedder(replace(settings, model=n)) for n in names))
    if settings.model == E5_SMALL:
        return E5Embedder(device=settings.device, batch_size=settings.batch_size)
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
