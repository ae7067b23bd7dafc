"""Several embedders as one: ``embedding.model = "a+b+..."``, the default
``"bundled+use-multilingual"``.

Each text's vector is the models' unit vectors side by side, each weighed by how
much of the text that model's vocabulary knows (its ``coverage``), the whole
scaled to unit length. The cosine of two such vectors is then a weighted mean of
the models' cosines, and a model that maps a text to unknown tokens (an English
model reading Chinese) has little say in it, without anything naming a language:
the weights come from the models' own vocabularies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .base import Embedder, Vectors

#: What joins the model names in ``embedding.model``.
SEPARATOR = "+"


class CombinedEmbedder:
    """Concatenates the ``parts``' vectors, each part weighed by its coverage."""

    def __init__(self, *parts: Embedder) -> None:
        if len(parts) < 2:
            raise ValueError("a combination needs two models or more")
        self.parts = parts

    @property
    def name(self) -> str:
        return SEPARATOR.join(p.name for p in self.parts)

    @property
    def dim(self) -> int:
        return sum(p.dim for p in self.parts)

    @property
    def releases_gil(self) -> bool:
        return all(bool(getattr(p, "releases_gil", True)) for p in self.parts)

    def shares(self, text: str) -> tuple[float, ...]:
        """The parts' weights for ``text``: each model's coverage, as a unit vector."""
        c = [p.coverage(text) for p in self.parts]
        norm = math.sqrt(math.fsum(x * x for x in c))
        return tuple(x / norm for x in c) if norm > 0 else tuple(math.sqrt(1 / len(c)) for _ in c)

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        shares = np.array([self.shares(t) for t in texts], dtype=np.float32)
        out = np.hstack([p.embed(texts) * shares[:, j : j + 1] for j, p in enumerate(self.parts)])
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
        return out.astype(np.float32, copy=False)

    def coverage(self, text: str) -> float:
        """The best of the parts': a text any of the models reads is read."""
        return max(p.coverage(text) for p in self.parts)


__all__ = ["SEPARATOR", "CombinedEmbedder"]
