"""The relational store: the source of truth, opened as one object.

A :class:`SqlStore` is a database (:mod:`.engine`: the engine, its transactions,
SQLite's configuration) and one repository per concern, each over its own tables
(:mod:`.schema`), held as attributes:

- ``store.nodes`` (:mod:`.nodes`): node rows by id, their vectors, access counts;
- ``store.tree`` (:mod:`.tree`): paths, subtrees, branches, the live set, path locks;
- ``store.terms`` (:mod:`.terms`): the lexical index (postings, term counts, tie keys);
- ``store.changes`` (:mod:`.changes`): which postings and rows changed (SQLite);
- ``store.log`` (:mod:`.log`): the operation log;
- ``store.audit`` (:mod:`.audit`): the audit trail;
- ``store.outbox`` (:mod:`.outbox`): what the vector index still has to do;
- ``store.sessions`` (:mod:`.sessions`): cursors and checkpoints;
- ``store.settings`` (:mod:`.settings`): settings, and the keys the data needs.

Every mutation runs in one short write transaction (``store.write``) that the
caller fills with the node change, its operation-log row and its index-outbox rows,
so that the vector index can always be healed from it. The repositories' methods
take that transaction's connection and never open one themselves.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from ..crypto import Keyring
from ..errors import StorageError
from ..text import content_hash as text_content_hash
from . import schema
from .audit import AuditTrail
from .changes import ChangeFeed
from .engine import Database
from .log import OperationLog
from .nodes import NodeRepository
from .outbox import Outbox
from .sessions import SessionRepository
from .settings import SettingsRepository
from .terms import TermRepository
from .tree import TreeRepository


class SqlStore(Database):
    """The relational store, over any SQLAlchemy URL (SQLite by default).

    ``check_keys=False`` opens it whatever the keys (store-wide work that reads no
    sealed column, or rotate_key, which checks them itself)."""

    def __init__(self, url: str | Engine, *, busy_timeout_ms: int = 30_000, keyring: Keyring | None = None,
                 check_keys: bool = True) -> None:
        super().__init__(url, busy_timeout_ms=busy_timeout_ms, keyring=keyring)
        self.settings = SettingsRepository(self)
        self.audit = AuditTrail(self, self.settings)
        self.changes = ChangeFeed(self)
        self.terms = TermRepository(self, self.changes)
        self.nodes = NodeRepository(self, self.terms)
        self.tree = TreeRepository(self, self.nodes)
        self.log = OperationLog(self, self.audit)
        self.outbox = Outbox(self)
        self.sessions = SessionRepository(self)

        def prepare(conn: Connection) -> None:
            schema.prepare(conn)
            if check_keys:
                self.settings.check_keys(conn)
            self.audit.on = self.settings.get(conn, "audit_head") is not None

        try:
            self.write(prepare)
        except SQLAlchemyError as exc:
            self.engine.dispose()
            raise StorageError(f"cannot prepare relational store: {exc}") from None
        except BaseException:
            self.engine.dispose()
            raise

    @classmethod
    def sqlite(cls, path: str | Path) -> SqlStore:
        return cls(f"sqlite:///{Path(path).resolve()}")

    def content_hash(self, content: str) -> str:
        """The hash that finds exact twins: SHA-256 of the whitespace-normalised content,
        keyed by the keyring when the store has one (a plain hash could be checked
        against guessed contents)."""
        if self.keyring is not None:
            return self.keyring.content_hash(content)
        return text_content_hash(content)

    def content_hashes(self, content: str) -> list[str]:
        """The content's hash under every key of the keyring (one while no rotation runs)."""
        if self.keyring is not None:
            return self.keyring.content_hashes(content)
        return [self.content_hash(content)]


__all__ = ["SqlStore"]
