"""The vector index: a small protocol and its Chroma implementation.

The index is derived from the relational store and can always be rebuilt from it.
Each namespace gets its own collection, so every query is scoped to one tenant
without a metadata filter (a filtered Chroma query is ~20x slower at 100k vectors).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import StorageError


@runtime_checkable
class VectorIndex(Protocol):
    def upsert(self, namespace: str, ids: Sequence[str], vectors: np.ndarray[Any, Any]) -> None: ...

    def delete(self, namespace: str, ids: Sequence[str]) -> None: ...

    def query(self, namespace: str, vectors: np.ndarray[Any, Any], n: int) -> list[list[tuple[str, float]]]:
        """For each row of ``vectors``: up to ``n`` (id, cosine similarity) pairs, nearest first."""
        ...

    def ids(self, namespace: str) -> set[str]: ...

    def close(self) -> None: ...


def collection_name(namespace: str) -> str:
    return "hm-" + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:24]


class ChromaIndex:
    """Chroma, embedded (a folder) or a server (pass ``client``).

    Chroma's embedded client is not safe for several processes writing one folder,
    so every access to a folder goes through an inter-process file lock.
    """

    def __init__(self, path: str | Path | None = None, *, client: Any = None) -> None:
        if (path is None) == (client is None):
            raise ValueError("give exactly one of path or client")
        self._path = Path(path) if path is not None else None
        self._client = client
        self._owns_client = client is None
        self._collections: dict[str, Any] = {}
        self._lock_fd: int | None = None

    def _ensure(self) -> Any:
        if self._client is None:
            assert self._path is not None
            os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
            import chromadb
            from chromadb.config import Settings

            self._path.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._path / "hybrid-memory.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                self._client = chromadb.PersistentClient(
                    path=str(self._path), settings=Settings(anonymized_telemetry=False)
                )
            except Exception as exc:  # chromadb raises several unrelated types here
                raise StorageError(f"cannot open the Chroma index at {self._path}: {exc}") from exc
        return self._client

    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        self._ensure()
        if self._lock_fd is None:
            yield
            return
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _collection(self, namespace: str) -> Any:
        col = self._collections.get(namespace)
        if col is None:
            col = self._ensure().get_or_create_collection(
                collection_name(namespace),
                embedding_function=None,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"namespace": namespace},
            )
            self._collections[namespace] = col
        return col

    def upsert(self, namespace: str, ids: Sequence[str], vectors: np.ndarray[Any, Any]) -> None:
        if not len(ids):
            return
        with self._locked(True):
            col = self._collection(namespace)
            step = 4000
            for i in range(0, len(ids), step):
                col.upsert(
                    ids=list(ids[i : i + step]),
                    embeddings=np.asarray(vectors[i : i + step], dtype=np.float32),
                    metadatas=[{"namespace": namespace}] * len(ids[i : i + step]),
                )

    def delete(self, namespace: str, ids: Sequence[str]) -> None:
        if not len(ids):
            return
        with self._locked(True):
            col = self._collection(namespace)
            for i in range(0, len(ids), 4000):
                col.delete(ids=list(ids[i : i + 4000]))

    def query(self, namespace: str, vectors: np.ndarray[Any, Any], n: int) -> list[list[tuple[str, float]]]:
        matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if n <= 0 or not len(matrix):
            return [[] for _ in range(len(matrix))]
        with self._locked(False):
            col = self._collection(namespace)
            res = col.query(query_embeddings=matrix, n_results=n, include=["distances"])
        ids = res["ids"] or [[] for _ in range(len(matrix))]
        dists = res["distances"] or [[] for _ in range(len(matrix))]
        return [
            [(i, 1.0 - float(d)) for i, d in zip(row_ids, row_d, strict=True)]
            for row_ids, row_d in zip(ids, dists, strict=True)
        ]

    def ids(self, namespace: str) -> set[str]:
        with self._locked(False):
            col = self._collection(namespace)
            total = col.count()
            out: set[str] = set()
            for offset in range(0, total, 5000):
                out.update(col.get(include=[], limit=5000, offset=offset)["ids"])
        return out

    def close(self) -> None:
        self._collections.clear()
        if self._client is not None and self._owns_client:
            close = getattr(self._client, "close", None)
            if close is not None:
                close()
            self._client = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
