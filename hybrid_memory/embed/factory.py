"""The ``[embedding]`` settings made into an embedder."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

from ..config import EmbeddingConfig
from ..errors import ConfigError
from .base import DEFAULT_MODEL, Embedder, default_model
from .combined import SEPARATOR, STAND_IN, CombinedEmbedder
from .e5 import E5_SMALL, E5Embedder
from .onnx_model import OnnxEmbedder
from .sentence import SentenceTransformerEmbedder
from .use import USE_MULTILINGUAL, UniversalSentenceEncoderEmbedder


def make_embedder(settings: EmbeddingConfig) -> Embedder:
    """The embedder the ``[embedding]`` settings name; nothing is loaded until first use.

    The default (:data:`DEFAULT_MODEL`) is made as :func:`default_model` says: without
    multilingual-e5-small where its package is not installed.

    ``model = "use-multilingual"`` is the multilingual Universal Sentence Encoder;
    ``"e5-small"`` is multilingual-e5-small (:mod:`.e5`);
    ``"a+b"`` combines two or more of these, ``"a|b"`` makes ``b`` a stand-in for
    ``a`` where ``a`` cannot read the text (:mod:`.combined`);
    ``"bundled"`` or any other value is a sentence-transformers model name or path,
    run as ``backend`` says: ``"torch"`` by sentence-transformers, ``"onnx"`` by
    onnxruntime (:mod:`.onnx_model`), ``"auto"`` by onnxruntime when it
    is installed and can reproduce the model on the CPU, else by sentence-transformers.
    """
    if settings.model == DEFAULT_MODEL:
        settings = replace(settings, model=default_model())
    if SEPARATOR in settings.model or STAND_IN in settings.model:
        groups = [g.split(STAND_IN) for g in settings.model.split(SEPARATOR)]
        if not all(all(g) and len(g) <= 2 for g in groups):
            raise ConfigError(f"embedding.model combines models as 'a{SEPARATOR}b{SEPARATOR}...', each "
                              f"model with at most one stand-in as 'a{STAND_IN}b', got {settings.model!r}")
        names: list[str] = []
        stands_in: dict[int, int] = {}
        for group in groups:
            if len(group) == 2:
                stands_in[len(names) + 1] = len(names)
            names += group
        return CombinedEmbedder(*(make_embedder(replace(settings, model=n)) for n in names), stands_in=stands_in)
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
