"""The embedding worker: the one thread of a memory handle that embeds small writes
and queries while their transaction reads.

Invariants: a handle's first embedding runs in the caller, so a model's load never
happens inside a transaction; only a batch of at most :data:`READ_AHEAD_ITEMS`
texts, of an embedder that leaves the interpreter lock free while it computes, goes
to the worker; once the worker is shut down a new embedding raises
:class:`~hybrid_memory.errors.ClosedError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from .config import Config
from .embed import Embedder
from .errors import ClosedError

#: A write of at most this many memories is embedded on a worker thread while its
#: transaction reads what needs no vector (parents, twins' candidates, child
#: counts); a single ``add`` then costs about its embedding plus the commit.
READ_AHEAD_ITEMS = 8

#: How long a write waits for the worker to start its embedding (see EmbeddingWorker.vectors).
HANDOFF_S = 0.002

Vectors = np.ndarray[Any, Any]


def same(vectors: Vectors) -> Vectors:
    return vectors


class Embedding:
    """The vectors of a batch's texts, being embedded on another thread: iterating
    (or :meth:`all`) waits for them."""

    def __init__(self, future: Future[Vectors]) -> None:
        self._future = future

    def __iter__(self) -> Iterator[Vectors]:
        return iter(self.all())

    def all(self) -> Vectors:
        return self._future.result()


class EmbeddingWorker:
    """Embeds for one handle, on its worker thread when that overlaps a transaction
    (the thread starts with the first task)."""

    def __init__(self, embedder: Embedder, config: Config) -> None:
        self.embedder = embedder
        self.config = config
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybrid-memory-embed")
        #: Whether this handle has embedded once (in the caller): the model is loaded.
        self.embedded = False

    def vectors(self, texts: list[str], then: Callable[[Vectors], Vectors] = same,
                items: int | None = None) -> Vectors | Embedding:
        """The vectors of ``texts``. A batch of at most :data:`READ_AHEAD_ITEMS` is
        embedded on this handle's worker thread while the write transaction reads
        what needs no vector (the embedders release the interpreter lock while they
        compute), and a single add that its words settle is written meanwhile
        (``write.overlap_embedding``). A larger batch is embedded here, before its
        transaction: its embedding is long enough that holding the write lock
        through it would stall other writers, and its reads are a small share of
        it. So is the handle's first embedding, which may load the model, and every
        embedding of an embedder that keeps the interpreter lock while it computes
        (``releases_gil = False``: sentence-transformers on torch). ``then`` maps the
        embeddings to the vectors wanted (see :func:`context.plan`), ``items`` of them
        (as many as the texts when not given)."""
        known = getattr(self.embedder, "known", None)
        if known is not None and (held := known(texts)) is not None:
            return then(np.asarray(held))
        if (len(texts) if items is None else items) > READ_AHEAD_ITEMS or not self.config.write.overlap_embedding \
                or not self.embedded or not self._overlaps:
            vectors = self.embedder.embed(texts)
            self.embedded = True
            return then(vectors)
        started = threading.Event()

        def run() -> Vectors:
            started.set()
            return then(self.embedder.embed(texts))

        try:
            future = self._pool.submit(run)
        except RuntimeError:  # the worker was shut down: close() ran meanwhile
            raise ClosedError("this MemoryTree is closed") from None
        # The worker takes the interpreter lock first: the tokenizer holds it for a
        # moment before the model runs without it. Started behind the transaction's
        # reads instead, it waited ~1 ms for the lock (a single add 1.28x one
        # embedding call instead of 1.21x). Bounded, for a worker busy elsewhere.
        started.wait(HANDOFF_S)
        return Embedding(future)

    @property
    def _overlaps(self) -> bool:
        """Whether the embedder leaves the interpreter lock free while it computes
        (its ``releases_gil``; absent: yes)."""
        return bool(getattr(self.embedder, "releases_gil", True))

    def later(self, texts: list[str]) -> Callable[[], Vectors]:
        """Start embedding ``texts`` (on the worker thread when they are few) and
        return what waits for their vectors."""
        vectors = self.vectors(texts)
        if isinstance(vectors, Embedding):
            return vectors.all
        return lambda: vectors

    def close(self) -> None:
        """Wait for the embedding running, if any, and stop the thread."""
        self._pool.shutdown(wait=True)
