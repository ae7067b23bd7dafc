"""The vector index: a small protocol and its Chroma implementation.

The index is derived from the relational store and can always be rebuilt from it.
Each namespace gets its own collection, so every query is scoped to one tenant
without a metadata filter (a filtered Chroma query is ~20x slower at 100k vectors).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import numpy as np

from ..accel.graph import Graphs
from ..accel.graph import available as graphs_available
from ..errors import InvalidInputError, StorageError

# HNSW search and build breadth of a new collection (Chroma's defaults: 100, 100).
# Retrieval takes a few dozen candidates from the index; with a wider search a
# memory reopened after a restart (its graph reloaded from disk) proposes the same
# ones as the process that wrote it: on a generated 10k-node trace, 2 of 236
# answers after a restart differed from an uninterrupted run at the defaults,
# none at these, for no measurable retrieval time.
EF_SEARCH = 400
EF_CONSTRUCTION = 200
#: Where an embedded folder keeps its namespaces' generations and saved graphs.
GRAPH_FOLDER = "hybrid-memory-graphs"


@runtime_checkable
class VectorIndex(Protocol):
    def upsert(self, namespace: str, ids: Sequence[str], vectors: np.ndarray[Any, Any]) -> None: ...

    def delete(self, namespace: str, ids: Sequence[str]) -> None: ...

    def query(self, namespace: str, vectors: np.ndarray[Any, Any], n: int) -> list[list[tuple[str, float]]]:
        """For each row of ``vectors``: up to ``n`` (id, cosine similarity) pairs, nearest first."""
        ...

    def ids(self, namespace: str) -> set[str]: ...

    def vectors(self, namespace: str, ids: Sequence[str]) -> dict[str, np.ndarray[Any, Any]]: ...

    def close(self) -> None: ...


def collection_name(namespace: str) -> str:
    return "hm-" + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:24]


# -- Chroma server support (ChromaIndex.server) --------------------------------


def parse_server_url(url: str) -> tuple[str, int, bool]:
    """``http(s)://host[:port]`` -> (host, port, ssl). The port defaults to 8000 for
    http (Chroma's own default) and 443 for https. Paths, queries and credentials are refused."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInputError(f"a Chroma server URL must be a non-empty string, got {type(url).__name__}")
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        raise InvalidInputError(f"bad Chroma server URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidInputError(f"a Chroma server URL must start with http:// or https://, got {url!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise InvalidInputError(f"bad port in Chroma server URL {url!r}") from exc
    if not parts.hostname:
        raise InvalidInputError(f"no host in Chroma server URL {url!r}")
    if parts.path.strip("/") or parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidInputError(f"a Chroma server URL is scheme://host[:port] only, got {url!r}")
    ssl = parts.scheme == "https"
    return parts.hostname, port if port is not None else (443 if ssl else 8000), ssl


def _is_connection_error(exc: BaseException) -> bool:
    """httpx transport errors, and chromadb's ValueError for a server it cannot reach."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        mod = type(cur).__module__
        if mod.startswith(("httpx", "httpcore")) and "Status" not in type(cur).__name__:
            return True
        if isinstance(cur, (ConnectionError, TimeoutError)) or "could not connect" in str(cur).lower():
            return True
        cur = cur.__cause__ or cur.__context__
    return False


# -- end Chroma server support ---------------------------------------------------


class ChromaIndex:
    """Chroma, embedded (a folder), a server (:meth:`server`) or any client (pass ``client``).

    Chroma's embedded client is not safe for several processes writing one folder,
    so every access to a folder goes through an inter-process file lock. A client
    also keeps serving the HNSW graph it loaded after another process wrote: every
    write bumps a generation number in the folder, and a reader that sees a
    generation it did not write reopens its client before it queries.

    A server serialises writers itself: no lock is taken for it. Every failure of
    the index (an unreachable server included) is raised as ``StorageError``.

    ``graphs`` (a folder only): keep each namespace's vectors in an HNSW graph in
    this process as well, built on a thread from the namespace's second query on, and
    answer queries from it (see :mod:`hybrid_memory.accel.graph`). Every write to a
    folder bumps its namespace's own generation too, so a copy knows when another
    process wrote.
    """

    def __init__(
        self, path: str | Path | None = None, *, client: Any = None, url: str | None = None,
        timeout: float = 30.0, graphs: bool = False,
    ) -> None:
        if sum(x is not None for x in (path, client, url)) != 1:
            raise InvalidInputError("give exactly one of path, client or url")
        self._server = parse_server_url(url) if url is not None else None  # Chroma server
        self._url = url
        self._timeout = timeout
        self._path = Path(path) if path is not None else None
        self._client = client
        self._owns_client = client is None
        self._collections: dict[str, Any] = {}
        self._lock_fd: int | None = None
        self._seen_generation = -1
        # The build of a graph reads Chroma on a thread of its own: one caller at a time.
        self._mutex = threading.RLock()
        self._graphs: Graphs | None = None
        if graphs and self._path is not None and graphs_available():
            self._graphs = Graphs(self._path / GRAPH_FOLDER, ef=EF_SEARCH, snapshot=self._snapshot,
                                  generation=self._namespace_generation)

    # -- Chroma server support ------------------------------------------------------

    @classmethod
    def server(cls, url: str, *, timeout: float = 30.0) -> ChromaIndex:
        """An index on a Chroma server, e.g. ``ChromaIndex.server("http://127.0.0.1:8000")``.

        The connection is made on first use; each request waits at most ``timeout``
        seconds. Nothing is locked locally: the server serialises writers.
        """
        return cls(url=url, timeout=timeout)

    @property
    def _where(self) -> str:
        if self._server is not None:
            return f"the Chroma server at {self._url}"
        return f"the Chroma index at {self._path}" if self._path is not None else "the Chroma index"

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Any failure inside becomes a StorageError naming the index and the operation."""
        try:
            yield
        except StorageError:
            self._collections.clear()
            raise
        except Exception as exc:  # chromadb and httpx raise many unrelated types
            self._collections.clear()  # a restarted server may hold other collection ids
            detail = str(exc) or type(exc).__name__
            if self._server is not None and _is_connection_error(exc):
                detail = f"cannot reach the server ({type(exc).__name__}: {detail})"
            raise StorageError(f"{what} failed on {self._where}: {detail}") from exc

    def _connect_server(self) -> Any:
        assert self._server is not None
        host, port, ssl = self._server
        os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
        import chromadb
        from chromadb.config import Settings

        with self._guard("connecting"):
            client = chromadb.HttpClient(
                host=host, port=port, ssl=ssl, settings=Settings(anonymized_telemetry=False)
            )
            # chromadb's HTTP session never times out by itself: bound every request.
            session = getattr(getattr(client, "_server", None), "_session", None)
            if session is not None and hasattr(session, "timeout"):
                import httpx

                session.timeout = httpx.Timeout(self._timeout)
        return client

    # -- end Chroma server support --------------------------------------------------

    def _ensure(self) -> Any:
        if self._client is None and self._server is not None:
            self._client = self._connect_server()
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
        with self._mutex:
            self._ensure()
            if self._lock_fd is None:
                yield
                return
            with self._flocked(exclusive):
                yield

    @contextmanager
    def _flocked(self, exclusive: bool) -> Iterator[None]:
        assert self._lock_fd is not None
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            generation = self._generation()
            if generation != self._seen_generation:
                if self._seen_generation >= 0:
                    self._reopen()  # another process wrote: drop the stale in-memory graph
                self._seen_generation = generation
            yield
            if exclusive:
                self._seen_generation = generation + 1
                (self._path / "hybrid-memory.gen").write_text(str(self._seen_generation))  # type: ignore[operator]
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _namespace_generation(self, namespace: str) -> int:
        """How many writes the folder's copy of ``namespace`` has had (0 for a server)."""
        if self._path is None:
            return 0
        # (read at every query: os.open and os.read, not a text file object, which
        # costs several times as much for these few bytes)
        try:
            fd = os.open(self._path / GRAPH_FOLDER / f"{collection_name(namespace)}.gen", os.O_RDONLY)
        except FileNotFoundError:
            return 0
        try:
            return int(os.read(fd, 64) or 0)
        except ValueError:
            return 0
        finally:
            os.close(fd)

    def _wrote(self, namespace: str, kind: str, ids: Sequence[str], vectors: np.ndarray[Any, Any] | None) -> None:
        """Count a write of ``namespace`` to a folder (inside its exclusive lock), and
        show it to the namespace's graph."""
        if self._path is None or self._server is not None or not self._owns_client:
            return
        before = self._namespace_generation(namespace)
        folder = self._path / GRAPH_FOLDER
        folder.mkdir(exist_ok=True)
        (folder / f"{collection_name(namespace)}.gen").write_text(str(before + 1))
        if self._graphs is not None:
            self._graphs.written(namespace, collection_name(namespace), before, before + 1, kind, ids, vectors)

    def _snapshot(self, namespace: str) -> Iterator[tuple[int, list[str], np.ndarray[Any, Any]]]:
        """The namespace's vectors for a graph (see :class:`Graphs`): its ids read at
        one generation, then their vectors in chunks, the lock released between them."""
        with self._guard("listing ids"), self._locked(False):
            generation = self._namespace_generation(namespace)
            col = self._collection(namespace)
            ids: list[str] = []
            for offset in range(0, col.count(), 5000):
                ids += col.get(include=[], limit=5000, offset=offset)["ids"]
        yield generation, [], np.zeros((0, 0), dtype=np.float32)
        for i in range(0, len(ids), 4000):
            with self._guard("reading vectors"), self._locked(False):
                generation = self._namespace_generation(namespace)
                res = self._collection(namespace).get(ids=ids[i : i + 4000], include=["embeddings"])
            if len(res["ids"]):
                yield generation, list(res["ids"]), np.asarray(res["embeddings"], dtype=np.float32)

    @property
    def graphs(self) -> Graphs | None:
        """The in-process graphs (None when they are off: ``graphs=False``, a server, a
        given client, or no ``hnswlib``). Read only, for tests and benchmarks: their
        counters ``loads`` and ``builds``, :meth:`Graphs.ready`, :meth:`Graphs.pending`."""
        return self._graphs

    def wait_for_graph(self, namespace: str, timeout: float | None = None) -> bool:
        """Wait while the namespace's in-process graph is loaded or built; whether it
        answers queries now (False when graphs are off)."""
        return self._graphs is not None and self._graphs.wait(namespace, timeout)

    def _generation(self) -> int:
        try:
            return int((self._path / "hybrid-memory.gen").read_text() or 0)  # type: ignore[operator]
        except (FileNotFoundError, ValueError):
            return 0

    def _reopen(self) -> None:
        self._collections.clear()
        close = getattr(self._client, "close", None)
        if close is not None:
            close()
        import chromadb
        from chromadb.config import Settings

        try:
            self._client = chromadb.PersistentClient(path=str(self._path), settings=Settings(anonymized_telemetry=False))
        except Exception as exc:  # chromadb raises several unrelated types here
            raise StorageError(f"cannot reopen the Chroma index at {self._path}: {exc}") from exc

    def folder_lost(self) -> bool | None:
        """For an embedded index: whether its folder (Chroma's database file) is gone,
        read off the disk without loading chromadb. None for a server or a given client:
        only a query can tell."""
        if self._path is None or self._server is not None or not self._owns_client:
            return None
        return not (self._path / "chroma.sqlite3").is_file()

    def _collection(self, namespace: str) -> Any:
        """The namespace's collection, made on first use."""
        col = self._collections.get(namespace)
        if col is None:
            col = self._ensure().get_or_create_collection(
                collection_name(namespace),
                embedding_function=None,
                configuration={"hnsw": {"space": "cosine", "ef_search": EF_SEARCH, "ef_construction": EF_CONSTRUCTION}},
                metadata={"namespace": namespace},
            )
            self._collections[namespace] = col
        return col

    def upsert(self, namespace: str, ids: Sequence[str], vectors: np.ndarray[Any, Any]) -> None:
        if not len(ids):
            return
        with self._guard("upsert"), self._locked(True):
            try:
                self._upsert(namespace, ids, vectors)
            except Exception as exc:  # chromadb raises several unrelated types
                if not self._empty_of_other_dimension(namespace, exc):
                    raise
                # Nothing to lose: start the collection again at the new dimension.
                self._ensure().delete_collection(collection_name(namespace))
                self._collections.pop(namespace, None)
                if self._graphs is not None:
                    self._graphs.dropped(namespace, collection_name(namespace))
                self._upsert(namespace, ids, vectors)
            self._wrote(namespace, "upsert", ids, vectors)

    def _upsert(self, namespace: str, ids: Sequence[str], vectors: np.ndarray[Any, Any]) -> None:
        col = self._collection(namespace)
        step = 4000
        for i in range(0, len(ids), step):
            col.upsert(
                ids=list(ids[i : i + step]),
                embeddings=np.asarray(vectors[i : i + step], dtype=np.float32),
                metadatas=[{"namespace": namespace}] * len(ids[i : i + step]),
            )

    def _empty_of_other_dimension(self, namespace: str, exc: Exception) -> bool:
        """Whether ``exc`` is an empty collection refusing vectors of another length.

        Chroma keeps the dimension of a collection's first vectors even after every
        vector is deleted; a namespace whose nodes were all deleted may then be
        filled again through another embedder (the tree checks the stored nodes).
        """
        return "dimension" in str(exc) and self._collection(namespace).count() == 0

    def delete(self, namespace: str, ids: Sequence[str]) -> None:
        if not len(ids):
            return
        with self._guard("delete"), self._locked(True):
            col = self._collection(namespace)
            for i in range(0, len(ids), 4000):
                col.delete(ids=list(ids[i : i + 4000]))
            self._wrote(namespace, "delete", ids, None)

    def drop(self, namespace: str) -> None:
        """Delete the namespace's collection, its segment files with it (erasure of a
        whole namespace). A later write makes a new, empty one."""
        with self._guard("drop"), self._locked(True):
            self._collections.pop(namespace, None)
            if self._graphs is not None:
                self._graphs.dropped(namespace, collection_name(namespace))
            self._wrote(namespace, "drop", (), None)
            try:
                self._ensure().delete_collection(collection_name(namespace))
            except Exception as exc:  # chromadb: NotFoundError / ValueError for a missing one
                if "does not exist" not in str(exc) and "not found" not in str(exc).lower():
                    raise

    def query(self, namespace: str, vectors: np.ndarray[Any, Any], n: int) -> list[list[tuple[str, float]]]:
        return self._query(namespace, vectors, n, self._graphs is not None)

    def searcher(self, namespace: str, n: int) -> Callable[[np.ndarray[Any, Any]], list[list[tuple[str, float]]]]:
        """:meth:`query` of ``n`` in two steps, for a search run while another thread
        runs Python: what gives up the interpreter lock before the search (the
        namespace's generation, read off the disk) is done here, before that thread
        starts; the callable returned searches. A thread that gives the lock up waits
        to get it back until the other gives it up, which a thread running Python
        may not do for a millisecond."""
        if self._graphs is None:
            return lambda vectors: self._query(namespace, vectors, n, False)
        generation = self._namespace_generation(namespace)
        return lambda vectors: self._query(namespace, vectors, n, True, generation)

    def chroma_query(self, namespace: str, vectors: np.ndarray[Any, Any], n: int) -> list[list[tuple[str, float]]]:
        """:meth:`query` asked of Chroma itself, never of an in-process graph (the
        benchmark's bare vector search)."""
        return self._query(namespace, vectors, n, False)

    def _query(self, namespace: str, vectors: np.ndarray[Any, Any], n: int,
               graph: bool, generation: int | None = None) -> list[list[tuple[str, float]]]:
        matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if n <= 0 or not len(matrix):
            return [[] for _ in range(len(matrix))]
        if graph and self._graphs is not None:
            # Without the folder's lock: a writer bumps the generation after its write,
            # inside its lock, so a graph at the generation read here (or given, read
            # when the query began) holds every write finished before this query began.
            if generation is None:
                generation = self._namespace_generation(namespace)
            with self._mutex:
                found = self._graphs.search(namespace, collection_name(namespace), matrix, n, generation)
            if found is not None:
                return found
        with self._guard("query"), self._locked(False):
            col = self._collection(namespace)
            try:
                res = col.query(query_embeddings=matrix, n_results=n, include=["distances"])
            except Exception as exc:  # chromadb raises several unrelated types
                if not self._empty_of_other_dimension(namespace, exc):
                    raise
                return [[] for _ in range(len(matrix))]  # no vectors: no neighbours
        ids = res["ids"] or [[] for _ in range(len(matrix))]
        dists = res["distances"] or [[] for _ in range(len(matrix))]
        return [
            [(i, 1.0 - float(d)) for i, d in zip(row_ids, row_d, strict=True)]
            for row_ids, row_d in zip(ids, dists, strict=True)
        ]

    def vectors(self, namespace: str, ids: Sequence[str]) -> dict[str, np.ndarray[Any, Any]]:
        """The stored vectors of those ``ids`` that the index holds."""
        out: dict[str, np.ndarray[Any, Any]] = {}
        if not len(ids):
            return out
        with self._guard("reading vectors"), self._locked(False):
            col = self._collection(namespace)
            for i in range(0, len(ids), 4000):
                res = col.get(ids=list(ids[i : i + 4000]), include=["embeddings"])
                for node_id, vec in zip(res["ids"], res["embeddings"], strict=True):
                    out[node_id] = np.asarray(vec, dtype=np.float32)
        return out

    def ids(self, namespace: str) -> set[str]:
        with self._guard("listing ids"), self._locked(False):
            col = self._collection(namespace)
            total = col.count()
            out: set[str] = set()
            for offset in range(0, total, 5000):
                out.update(col.get(include=[], limit=5000, offset=offset)["ids"])
        return out

    def close(self) -> None:
        if self._graphs is not None:
            self._graphs.close(collection_name)  # (before the mutex: a build may wait for it)
        self._collections.clear()
        if self._client is not None and self._owns_client:
            close = getattr(self._client, "close", None)
            if close is not None:
                close()
            self._client = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
