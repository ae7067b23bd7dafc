"""The real bundled model for the test session, asked once per distinct text.

The ``[sqlite]`` and ``[postgresql]`` variants of a test, and the examples of a
stateful test, write the same contents again and again; after the first time they
get the vectors the model gave then (its own output, not an approximation). A batch
embeds only the texts the session has not seen yet.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from hybrid_memory import SentenceTransformerEmbedder


class SessionEmbedder(SentenceTransformerEmbedder):
    #: Most calls return vectors seen before, without computing: the handles embed on
    #: their worker thread beside the transaction, the path of the default runtime
    #: (onnxruntime), which the tests are there to exercise.
    releases_gil = True

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, np.ndarray] = {}
        self._seen_lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return super().embed(texts)
        with self._seen_lock:
            new = [t for t in dict.fromkeys(texts) if t not in self._seen]
        if new:
            vectors = super().embed(new)
            with self._seen_lock:
                self._seen.update(zip(new, vectors, strict=True))
        with self._seen_lock:
            return np.stack([self._seen[t] for t in texts])


_SHARED: SessionEmbedder | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> SessionEmbedder:
    """The process's one :class:`SessionEmbedder`, loaded and warmed on first use."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = SessionEmbedder()
            _SHARED.embed(["warm up"])
        return _SHARED
