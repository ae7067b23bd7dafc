"""Where a new memory belongs: ``parent=AUTO``.

A memory written with ``parent=AUTO`` goes under the task branch its content reads
closest to, found by retrieval's locate stage with the memory's content as the query
(the session's active family preferred, as for a question). It goes under the head
of that branch when the branch scores at least ``write.place_min``; otherwise under
the session's active node, as a memory written without a parent goes (at the top
when there is none). :class:`Placement` says which, and why: the branch's score and
the runner-up's.

Placement reads what is stored before the write: the items of one ``add_many`` are
placed among the memories written before it, not among each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .items import Auto, Prepared
from .model import Placement

#: Stage 1's answer: (score, branch id, candidates) of each branch, best first.
Branches = list[tuple[float, str, int]]


def decide(branches: Sequence[tuple[float, str, int]], active_id: str | None, threshold: float) -> Placement:
    """The placement given the located ``branches`` ((score, branch id, candidates),
    best first), the session's live active node (None: none) and ``write.place_min``."""
    best = branches[0] if branches else None
    second = branches[1] if len(branches) > 1 else None
    taken = best is not None and best[0] >= threshold
    return Placement(
        parent_id=best[1] if best is not None and taken else active_id,
        by="branch" if taken else "active",
        branch_id=best[1] if best is not None else None,
        score=best[0] if best is not None else 0.0,
        runner_up_id=second[1] if second is not None else None,
        runner_up_score=second[0] if second is not None else 0.0,
        threshold=threshold,
    )


class Placer:
    """Places the memories of a handle: ``embed`` makes contents' embeddings,
    ``locate`` is the retriever's stage 1 for a text and its embedding, ``active``
    reads the session's live active node (None: none), ``threshold`` is
    ``write.place_min``."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray[Any, Any]],
                 locate: Callable[[str, np.ndarray[Any, Any]], Branches],
                 active: Callable[[], str | None], threshold: float) -> None:
        self._embed, self._locate, self._active, self._threshold = embed, locate, active, threshold

    def place(self, content: str) -> Placement:
        """Where ``content`` would go."""
        return decide(self._locate(content, self._embed([content])[0]), self._active(), self._threshold)

    def resolve(self, prepared: Sequence[Prepared]
                ) -> tuple[list[Prepared], dict[int, Placement], dict[int, np.ndarray[Any, Any]]]:
        """``prepared`` with each ``parent=AUTO`` replaced by where it goes (a branch's
        head, or None: the active node, by the write's own rule), the placements by item
        index, and the contents' embeddings made to place them (by item index, so that
        the write does not make them again)."""
        auto = [i for i, p in enumerate(prepared) if isinstance(p.parent, Auto)]
        if not auto:
            return list(prepared), {}, {}
        vectors = self._embed([prepared[i].content for i in auto])
        active = self._active()  # (the same for every item: the batch is not written yet)
        out = list(prepared)
        placements: dict[int, Placement] = {}
        for j, i in enumerate(auto):
            placed = decide(self._locate(prepared[i].content, vectors[j]), active, self._threshold)
            placements[i] = placed
            out[i] = replace(prepared[i], parent=placed.parent_id if placed.by == "branch" else None)
        return out, placements, {i: vectors[j] for j, i in enumerate(auto)}


__all__ = ["Branches", "Placer", "decide"]
