"""What portability needs of a memory handle, so that it never reaches into one.

:class:`Host` is built by :class:`~hybrid_memory.MemoryTree` for each time travel,
export or import; :class:`HasLog` is all that reading the log back needs (a
MemoryTree is one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..config import Config
from ..embed import Embedder
from ..store.sql import SqlStore


class HasLog(Protocol):
    """A store and the namespace whose log is read."""

    @property
    def store(self) -> SqlStore: ...

    @property
    def namespace(self) -> str: ...


@dataclass(frozen=True)
class Host:
    """One memory handle, as time travel, export and import use it."""

    store: SqlStore
    namespace: str
    session: str
    config: Config
    embedder: Embedder
    #: The memory's folder (None: no folder of its own).
    folder: Path | None
    #: The handle's clock.
    clock: Callable[[], float]
    #: Writes what the handle buffers (reads) and applies the index writes that wait.
    flush: Callable[[], None]
    #: Applies the index work a write just queued in the outbox.
    drain: Callable[[], None]
