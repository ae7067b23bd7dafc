"""Read reinforcement: the reads a handle counts (what ``retrieve`` returned as a use),
buffered until ``usage.flush_every`` of them wait or a write of the handle carries
them in its own transaction.

Invariants: the buffer is emptied only once the transaction that wrote it has
committed (a refused or retried write keeps the reads); every write of the reads is
logged, so that replay counts them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy.engine import Connection

from . import portability
from .store.sql import SqlStore

T = TypeVar("T")


class Reads:
    """The buffered reads of one handle (namespace and session)."""

    def __init__(self, store: SqlStore, namespace: str, session: str, clock: Callable[[], float],
                 flush_every: int) -> None:
        self._store, self._namespace, self._session, self._clock = store, namespace, session, clock
        self._flush_every = flush_every
        #: Node id -> (reads, last read time), not written yet.
        self.pending: dict[str, tuple[int, float]] = {}

    def note(self, ids: Sequence[str], at: float) -> None:
        """Count a read of each of ``ids`` at ``at``; write them once enough wait."""
        for node_id in ids:
            n, ts = self.pending.get(node_id, (0, at))
            self.pending[node_id] = (n + 1, max(ts, at))
        if len(self.pending) >= self._flush_every:
            self.flush()

    def flush(self) -> None:
        """Write the buffered reads now, in a transaction of their own."""
        if self.pending:
            self.write_with(lambda conn: None)

    def write_with(self, fn: Callable[[Connection], T]) -> T:
        """``store.write(fn)``, writing the buffered reads in the same transaction."""

        def run(conn: Connection) -> T:
            if self.pending:
                self._store.nodes.add_access(conn, self.pending)
                # portability: reads are logged too, so that replay counts them.
                self._store.log.append(conn, self._namespace, self._session, self._clock(), "access", None,
                                       portability.access_payload(self.pending))
            return fn(conn)

        result = self._store.write(run)
        self.pending = {}
        return result

    def drop(self, ids: Sequence[str]) -> None:
        """Forget the reads of ``ids`` (deleted)."""
        for pid in self.pending.copy():
            if pid in ids:
                del self.pending[pid]
