"""Several embedders as one: ``embedding.model = "a+b+..."``, and a stand-in
``"a|b"``; the default is ``"bundled|e5-small+use-multilingual"``.

Each text's vector is the models' unit vectors side by side, each weighed by how
much of the text that model's vocabulary knows (its ``coverage``), the whole
scaled to unit length. The cosine of two such vectors is then a weighted mean of
the models' cosines, and a model that maps a text to unknown tokens (an English
model reading Chinese) has little say in it, without anything naming a language:
the weights come from the models' own vocabularies.

``"a|b"`` makes ``b`` a stand-in for ``a``: ``b`` weighs what ``a`` leaves unread
(``1 - a's coverage``, times ``b``'s own), so it is asked only about the texts ``a``
cannot read whole. ``"bundled|e5-small+use-multilingual"`` embeds English text
with the pair alone, and Chinese with the multilingual USE and multilingual-e5-small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from .base import Embedder, Vectors

#: What joins the model names in ``embedding.model``.
SEPARATOR = "+"
#: What joins a model and its stand-in in ``embedding.model``.
STAND_IN = "|"


class CombinedEmbedder:
    """Concatenates the ``parts``' vectors, each part weighed by its coverage;
    ``stands_in`` maps a part's index to the index of the part it stands in for,
    which comes right before it (as ``"a|b"`` writes it)."""

    def __init__(self, *parts: Embedder, stands_in: Mapping[int, int] | None = None) -> None:
        if len(parts) < 2:
            raise ValueError("a combination needs two models or more")
        self.parts = parts
        self.stands_in = dict(stands_in or {})
        # Only what the name can write: each stand-in right after a part that is not one.
        if any(not 1 <= i < len(parts) or j != i - 1 or j in self.stands_in for i, j in self.stands_in.items()):
            raise ValueError(f"a stand-in follows the part it stands in for, which is not one itself, "
                             f"got {self.stands_in}")

    def with_parts(self, *parts: Embedder) -> CombinedEmbedder:
        """The same combination of other parts (each in the place of the one it wraps)."""
        return CombinedEmbedder(*parts, stands_in=self.stands_in)

    @property
    def name(self) -> str:
        out = self.parts[0].name
        for i, p in enumerate(self.parts[1:], 1):
            out += (STAND_IN if self.stands_in.get(i) == i - 1 else SEPARATOR) + p.name
        return out

    @property
    def dim(self) -> int:
        return sum(p.dim for p in self.parts)

    @property
    def releases_gil(self) -> bool:
        return all(bool(getattr(p, "releases_gil", True)) for p in self.parts)

    def shares(self, text: str) -> tuple[float, ...]:
        """The parts' weights for ``text``: each model's coverage (a stand-in's, times
        what the model it stands in for leaves unread), as a unit vector."""
        c = [p.coverage(text) for p in self.parts]
        c = [x * (1.0 - c[self.stands_in[i]]) if i in self.stands_in else x for i, x in enumerate(c)]
        norm = math.sqrt(math.fsum(x * x for x in c))
        return tuple(x / norm for x in c) if norm > 0 else tuple(math.sqrt(1 / len(c)) for _ in c)

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        shares = np.array([self.shares(t) for t in texts], dtype=np.float32)
        blocks = []
        for j, p in enumerate(self.parts):
            # A part weighed 0 for a text adds nothing to it: it is not asked.
            asked = np.flatnonzero(shares[:, j])
            block = np.zeros((len(texts), p.dim), dtype=np.float32)
            if len(asked):
                block[asked] = p.embed([texts[int(i)] for i in asked]) * shares[asked, j : j + 1]
            blocks.append(block)
        out = np.hstack(blocks)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
        return out.astype(np.float32, copy=False)

    def coverage(self, text: str) -> float:
        """The best of the parts': a text any of the models reads is read."""
        return max(p.coverage(text) for p in self.parts)


__all__ = ["SEPARATOR", "STAND_IN", "CombinedEmbedder"]
