"""Test hooks: what a test hands a :class:`~hybrid_memory.MemoryTree` to make it fail at
a chosen point, or to look at its retriever, without touching its private attributes.

Give a :class:`Faults` to ``MemoryTree.open(..., faults=faults)`` (or the constructor's
``faults=``). Invariant: a tree opened without one behaves exactly as one opened with
a ``Faults`` whose ``hook`` is None; nothing here is read at import time.
:func:`abandon_graphs` leaves a vector index's in-process graphs as a killed process
would (their counters are read through :attr:`ChromaIndex.graphs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .retrieval import Retriever
from .store.vectors import ChromaIndex, collection_name

#: The named points of the write path, in the order a write reaches them:
#: ``"add_many_item"`` after each new node a batch gathers (inside its transaction),
#: ``"before_vector"`` between a single add's commit and its vector's commit,
#: ``"before_index"`` and ``"after_index"`` around the outbox's index write.
POINTS: Final = ("add_many_item", "before_vector", "before_index", "after_index")


class Faults:
    """Fault injection for one memory handle.

    The tree calls the object with a point's name (:data:`POINTS`) each time a write
    reaches it; ``hook``, when set, is called then and raises to simulate the process
    dying there. ``hook`` may be set, changed or cleared (None) at any time::

        faults = Faults()
        mem = MemoryTree.open(folder, faults=faults)
        faults.hook = crash_at("before_index")
    """

    def __init__(self, hook: Callable[[str], None] | None = None) -> None:
        #: Called with each point's name (None: nothing happens there).
        self.hook = hook
        self._retriever: Retriever | None = None

    def __call__(self, point: str) -> None:
        if self.hook is not None:
            self.hook(point)

    def attach(self, retriever: Retriever) -> None:
        """Called by the tree these faults are given to, with the retriever it made."""
        self._retriever = retriever

    @property
    def retriever(self) -> Retriever | None:
        """The retriever of the tree opened with these faults (None before one is; read
        only): its row cache (``rows``), its query thread (``query_thread``)."""
        return self._retriever


def abandon_graphs(index: ChromaIndex) -> None:
    """Leave ``index``'s in-process graphs as a process killed now would: their threads
    stop and no copy of theirs is saved, now or when the index closes (a saved copy
    from before stays, at the generation it was saved at). The index itself still
    works, Chroma answering its queries. Nothing happens when its graphs are off."""
    graphs = index.graphs
    if graphs is not None:
        graphs.close(collection_name, save=False)
