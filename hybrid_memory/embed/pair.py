"""Two embedders as one: ``embedding.model = "bundled+use-multilingual"``.

Each text's vector is the two models' unit vectors side by side, each weighed by
how much of the text that model's vocabulary knows (its ``coverage``), the whole
scaled to unit length. The cosine of two such vectors is then a weighted mean of
the two models' cosines, and a model that maps a text to unknown tokens (an
English model reading Chinese) has little say in it, without anything naming a
language: the weights come from the models' own vocabularies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .base import Embedder, Vectors

#: What joins the two model names in ``embedding.model``.
SEPARATOR = "+"


class PairedEmbedder:
    """Concatenates two embedders' vectors, each part weighed by its coverage."""

    def __init__(self, first: Embedder, second: Embedder) -> None:
        self.first, self.second = first, second

    @property
    def name(self) -> str:
        return f"{self.first.name}{SEPARATOR}{self.second.name}"

    @property
    def dim(self) -> int:
        return self.first.dim + self.second.dim

    @property
    def releases_gil(self) -> bool:
        return bool(getattr(self.first, "releases_gil", True) and getattr(self.second, "releases_gil", True))

    def shares(self, text: str) -> tuple[float, float]:
        """The two parts' weights for ``text``: each model's coverage, as a unit pair."""
        a, b = self.first.coverage(text), self.second.coverage(text)
        norm = math.hypot(a, b)
        return (a / norm, b / norm) if norm > 0 else (math.sqrt(0.5), math.sqrt(0.5))

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        shares = np.array([self.shares(t) for t in texts], dtype=np.float32)
        out = np.hstack([self.first.embed(texts) * shares[:, :1], self.second.embed(texts) * shares[:, 1:]])
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
        return out.astype(np.float32, copy=False)

    def coverage(self, text: str) -> float:
        """The better of the two: a text either model reads is read."""
        return max(self.first.coverage(text), self.second.coverage(text))


__all__ = ["SEPARATOR", "PairedEmbedder"]
