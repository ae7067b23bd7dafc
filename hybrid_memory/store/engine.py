"""The database under the store: the SQLAlchemy engine, its transactions and
SQLite's configuration.

Every mutation runs in one short write transaction (:meth:`Database.write`) that
the caller fills with the node change, its operation-log row and its index-outbox
rows, so that the vector index can always be healed from it. On SQLite: WAL, a busy
timeout, ``BEGIN IMMEDIATE`` for writers and a retry with backoff when another
process holds the lock. On PostgreSQL: READ COMMITTED writers that take row locks
(``SELECT ... FOR UPDATE``) on what a write depends on, a REPEATABLE READ snapshot
for readers, and the same retry for serialization failures and deadlocks.
"""

from __future__ import annotations

import functools
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from ..crypto import Keyring
from ..errors import StorageError

T = TypeVar("T")

#: PostgreSQL SQLSTATEs after which the whole transaction is simply run again:
#: serialization_failure, deadlock_detected, lock_not_available.
_PG_RETRY = frozenset({"40001", "40P01", "55P03"})


class Database:
    """An engine over any SQLAlchemy URL (SQLite by default) and its transactions.

    ``keyring`` seals the text columns (:class:`~hybrid_memory.store.schema.SealedText`):
    it is set on the engine's dialect, so an engine serves one keyring only."""

    def __init__(self, url: str | Engine, *, busy_timeout_ms: int = 30_000, keyring: Keyring | None = None) -> None:
        try:
            self.engine = url if isinstance(url, Engine) else create_engine(url)
        except (SQLAlchemyError, ValueError) as exc:
            raise StorageError(f"cannot open relational store {url!r}: {exc}") from None
        except ImportError as exc:
            raise StorageError(f"cannot open relational store {url!r}: its driver is not installed ({exc})") from None
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        self.is_postgres = self.engine.dialect.name == "postgresql"
        if self.engine.dialect.__dict__.get("hm_keyring", keyring) is not keyring:
            raise StorageError("an engine shared by two stores must carry one keyring: create one engine per store")
        #: The keyring that seals contents, or None. Set on the dialect before the first
        #: statement: SQLAlchemy keeps each column type's processors per dialect.
        self.keyring: Keyring | None = keyring
        self.engine.dialect.hm_keyring = keyring  # type: ignore[attr-defined]
        if self.is_sqlite:
            _configure_sqlite(self.engine, busy_timeout_ms)

    @property
    def file(self) -> Path | None:
        db = self.engine.url.database
        return Path(db) if self.is_sqlite and db and db != ":memory:" else None

    def close(self) -> None:
        self.engine.dispose()

    def write(self, fn: Callable[[Connection], T], *, attempts: int = 12, synced: bool = True) -> T:
        """Run ``fn`` in one write transaction, retrying with backoff while the
        database is locked by another writer. ``fn`` must be safe to re-run.

        ``synced=False`` is for derived data only (a vector computed from a committed
        content): the commit does not wait for the disk (SQLite ``synchronous=NORMAL``,
        PostgreSQL ``synchronous_commit = off``). It survives a crash of the process;
        a power cut may take it back, never the writes committed before it."""
        delay = 0.01
        for attempt in range(attempts):
            try:
                with self.engine.connect() as conn:
                    conn.execution_options(hm_write=True, hm_synced=synced)
                    with conn.begin():
                        if not synced and self.is_postgres:
                            conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
                        return fn(conn)
            except OperationalError as exc:
                if not _is_locked(exc) or attempt == attempts - 1:
                    raise StorageError(f"write failed: {exc.orig}") from exc
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
            except SQLAlchemyError as exc:
                raise StorageError(f"write failed: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read transaction: a consistent snapshot (SQLite WAL; REPEATABLE READ on PostgreSQL)."""
        try:
            with self.engine.connect() as conn, conn.begin():
                if self.is_postgres:
                    conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                yield conn
        except SQLAlchemyError as exc:
            raise StorageError(f"read failed: {exc}") from exc

    def plain_connection(self, conn: Connection) -> sqlite3.Connection | None:
        """SQLite's own connection under ``conn`` when no column needs SQLAlchemy's
        processing on the way out (no keyring seals the text); None otherwise. A
        query reads a few hundred rows in some ten statements, and SQLAlchemy's
        execution and row building cost more than SQLite's answer (retrieve at 100k:
        about 1 ms of 6)."""
        if self.is_sqlite and self.keyring is None:
            return cast("sqlite3.Connection", conn.connection.driver_connection)
        return None


@functools.cache
def _sqlite_form(stmt: Any) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """A prebuilt statement (a repository's ``Statements``) as SQLite's driver takes
    it: its SQL, the names of its positional parameters in order, and the values
    bound in it."""
    from sqlalchemy.dialects.sqlite import dialect  # (loaded by then: the store is SQLite)

    compiled = stmt.compile(dialect=dialect())
    return compiled.string, tuple(compiled.positiontup or ()), dict(compiled.params)


def driver_execute(raw: sqlite3.Connection, stmt: Any, params: Mapping[str, Any]) -> sqlite3.Cursor:
    """Run a prebuilt statement (no expanding parameters) through SQLite's own cursor."""
    sql, names, bound = _sqlite_form(stmt)
    return raw.execute(sql, [params[n] if n in params else bound[n] for n in names])


def chunks(items: list[T], n: int) -> Iterator[list[T]]:
    """``items`` in lists of at most ``n`` (an ``IN`` list stays under the drivers' limits)."""
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _is_locked(exc: BaseException) -> bool:
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) in _PG_RETRY:
        return True
    return isinstance(orig, sqlite3.OperationalError) and (
        "locked" in str(orig) or "busy" in str(orig)
    )


def _configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        # Let SQLAlchemy's begin event issue BEGIN itself (pysqlite's own is deferred).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        # FULL: a commit is on disk before the call returns (survives power loss, not only a crash).
        cur.execute("PRAGMA synchronous=FULL")
        cur.close()
        record.info["hm_synchronous"] = "FULL"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if not options.get("hm_write"):
            # (SQLite's own cursor: a read transaction begins at every query, and
            # SQLAlchemy's execution of the statement costs ten times SQLite's)
            conn.connection.driver_connection.execute("BEGIN")  # type: ignore[union-attr]
            return
        # The level is a property of the connection and cannot change inside a
        # transaction: set before BEGIN, when this write wants another than the last.
        level = "FULL" if options.get("hm_synced", True) else "NORMAL"
        info = conn.connection.info
        if info.get("hm_synchronous") != level:
            conn.exec_driver_sql(f"PRAGMA synchronous={level}")
            info["hm_synchronous"] = level
        # Writers take the lock up front so two writers never deadlock upgrading a read lock.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
