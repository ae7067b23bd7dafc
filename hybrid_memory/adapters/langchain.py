"""A LangChain retriever over a memory tree: ``HybridMemoryRetriever(memory=mem)``.

``invoke(query)`` runs :meth:`MemoryTree.retrieve` and returns one
``langchain_core.documents.Document`` per node of the recall: ``page_content`` is the
node's content, ``id`` its id, and ``metadata`` holds ``id``, ``type``, ``reason``
(``hit``, ``standing``, ``ancestor`` or ``top``), ``score``, ``similarity``,
``weight``, ``branch_id``, ``parent_id``, ``created_at`` (seconds since the epoch)
and the node's own ``meta``.

``k`` counts the memories that matched the query (hits), as in ``retrieve``. Two
kinds of context come on top by default, so a recall can hold more documents than
``k``: the standing memories of the located branches (their latest state, weighty
preferences and decisions; ``include_standing``) and every returned memory's
ancestors (its task chain; ``include_ancestors``). With both off the retriever
returns the hits alone, at most ``k``. ``k``, ``budget_tokens`` and ``branches``
may also be given per call:
``retriever.invoke(query, k=3)``. A blank query returns the active task's context
(``retrieve()`` without a query).

This module needs the ``langchain`` extra (``pip install 'hybrid-memory[langchain]'``).
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, PrivateAttr

from ..errors import InvalidInputError
from ..model import Recall, ScoredNode
from ..tree import MemoryTree

__all__ = ["HybridMemoryRetriever", "to_document"]

_PER_CALL = ("k", "budget_tokens", "branches")


class HybridMemoryRetriever(BaseRetriever):
    """Retrieve from a :class:`MemoryTree` as LangChain documents."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: MemoryTree
    """The memory to retrieve from (one namespace, one session)."""
    k: int | None = None
    """Memories chosen per query; ``None``: the memory's ``retrieval.k``."""
    budget_tokens: int | None = None
    """Token budget of a recall; ``None``: the memory's ``retrieval.budget_tokens``."""
    branches: int | None = None
    """Branches opened at most; ``None``: the memory's ``retrieval.branches``."""
    include_standing: bool = True
    """Return the located branches' standing memories (state, preferences, decisions) too."""
    include_ancestors: bool = True
    """Return the returned memories' ancestors (their task chain) too."""
    order: Literal["score", "tree"] = "score"
    """``score``: best first; ``tree``: the rendered context's order (parents first)."""
    reinforce: bool = True
    """Count what is returned as used (raises its weight), as ``retrieve`` does."""

    # A MemoryTree is not made for concurrent calls; ainvoke runs in a thread pool.
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        unknown = set(kwargs) - set(_PER_CALL)
        if unknown:
            raise InvalidInputError(f"unknown retriever argument(s): {sorted(unknown)}; "
                                    f"per call only {', '.join(_PER_CALL)}")
        options = {name: kwargs.get(name, getattr(self, name)) for name in _PER_CALL}
        with self._lock:
            blank = isinstance(query, str) and not query.strip()
            recall = self.memory.retrieve(None if blank else query,
                                          reinforce=self.reinforce, **options)
        return self._documents(recall)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        # BaseRetriever's default drops the per-call arguments (k=...): pass them on.
        return await run_in_executor(
            None, self._get_relevant_documents, query, run_manager=run_manager.get_sync(), **kwargs
        )

    def _documents(self, recall: Recall) -> list[Document]:
        left_out = {"ancestor"} if not self.include_ancestors else set()
        if not self.include_standing:
            left_out.add("standing")
        chosen = [s for s in recall.nodes if s.reason not in left_out]
        if self.order == "score":
            chosen.sort(key=lambda s: -s.score)  # stable: ties keep the tree order
        return [to_document(s) for s in chosen]


def to_document(scored: ScoredNode) -> Document:
    """One node of a recall as a LangChain document."""
    node = scored.node
    metadata: dict[str, Any] = {
        "id": node.id,
        "type": node.type.value,
        "reason": scored.reason,
        "score": scored.score,
        "similarity": scored.similarity,
        "weight": scored.weight,
        "branch_id": node.branch_id,
        "parent_id": node.parent_id,
        "created_at": node.created_at,
        "meta": dict(node.meta),
    }
    return Document(id=node.id, page_content=node.content, metadata=metadata)
