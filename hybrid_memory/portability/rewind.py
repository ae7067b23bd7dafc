"""Time travel: a namespace brought back to a position of its log in one transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import delete as sql_delete
from sqlalchemy import insert, select
from sqlalchemy.engine import Connection

from .. import _validate as check
from .. import context, text
from ..errors import (
    ConflictError,
    InvalidInputError,
    InvalidTypeError,
    StorageError,
)
from ..model import Status, path_ids
from ..store.schema import cursors, nodes, to_blob
from ..store.sql import SqlStore
from .format import CHUNK, STATE_FIELDS
from .host import Host
from .oplog import Op, lock_log, read_ops
from .replay import State, erased_ids, replay, travel_state


@dataclass(frozen=True)
class TimeTravel:
    """What ``rewind(seq=...)`` / ``rewind(as_of=...)`` did."""

    #: The log position the memory was brought back to.
    seq: int
    #: Where the log stood before: ``rewind(seq=previous_seq)`` undoes this.
    previous_seq: int
    #: The ``time_travel`` entry this wrote.
    op_seq: int
    #: Nodes whose fields changed back.
    changed: tuple[str, ...]
    #: Nodes that did not exist now and were brought back.
    added: tuple[str, ...]
    #: Nodes that did not exist at ``seq`` and were taken out.
    removed: tuple[str, ...]
    #: Nodes that existed at ``seq`` but were erased since (or hung under one then):
    #: erasure wins, they stay gone.
    erased: tuple[str, ...]


class _Moved(Exception):
    """The log moved on between reading it and writing the restored state."""


_LIVE = Status.LIVE.value


def time_travel(mem: Host, *, seq: int | None = None, as_of: float | None = None) -> TimeTravel:
    """Bring ``mem``'s namespace back to log position ``seq`` (or to where the log
    stood at time ``as_of``): one transaction, one ``time_travel`` entry."""
    at = _check_request(seq, as_of)
    mem.flush()
    for _attempt in range(5):
        plan = _plan(mem, seq, at)
        try:
            result = mem.store.write(partial(_apply, mem, plan))
        except _Moved:
            continue
        mem.drain()
        return result
    raise ConflictError("the memory kept changing while restoring it; try again")


def _check_request(seq: int | None, as_of: float | None) -> float | None:
    """Refuse anything but exactly one of ``seq`` and ``as_of``; ``as_of`` as checked."""
    if (seq is None) == (as_of is None):
        raise InvalidInputError("time travel: give exactly one of seq or as_of")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
        raise InvalidTypeError(f"seq must be an integer log position, got {check.show(seq)}")
    if seq is not None and seq < 0:
        raise InvalidInputError(f"seq must be >= 0, got {seq}")
    return None if as_of is None else check.timestamp(as_of, "as_of")


@dataclass(frozen=True)
class _Plan:
    """The state at ``target``, computed from the log as it stood at ``last``, with
    what writing it needs: valid while the log has not moved past ``last``."""

    target: int
    last: int
    state: State
    #: The namespace's rows now (their STATE_FIELDS), by id.
    rows: dict[str, Any]
    erased: list[str]
    #: Embeddings of the nodes that come back or whose content changes back.
    blobs: dict[str, bytes]
    payload: dict[str, Any]
    now: float


def _plan(mem: Host, seq: int | None, at: float | None) -> _Plan:
    store, ns = mem.store, mem.namespace
    with store.reading() as conn:
        ops = read_ops(conn, ns)
        last = ops[-1].seq if ops else 0
        cols = [nodes.c[f] for f in STATE_FIELDS]
        rows = {r.id: r for r in conn.execute(select(*cols).where(nodes.c.namespace == ns))}
    target = _target(ops, last, seq, at, ns)
    state = replay(ops, upto=target, hasher=mem.store.content_hash)
    bad = sorted({s for s, why in state.skipped if why == "unreadable"})
    if bad:
        shown = ", ".join(f"#{s}" for s in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise StorageError(f"cannot compute the state at #{target}: log entries {shown} are unreadable")
    erased = erased_ids(state)
    now = mem.clock()
    mode = mem.config.write.branch_by
    travel_state(state, erased, now, mode)
    need = [i for i, n in state.nodes.items() if i not in rows or rows[i].content != n["content"]]
    blobs: dict[str, bytes] = {}
    if need:
        vectors = mem.embedder.embed([state.nodes[i]["content"] for i in need])
        blobs = {i: to_blob(v) for i, v in zip(need, vectors, strict=True)}
    payload: dict[str, Any] = {"seq": target, "from": last, "dropped": erased, "branch_by": mode}
    if at is not None:
        payload["as_of"] = at
    return _Plan(target, last, state, rows, erased, blobs, payload, now)


def _target(ops: Sequence[Op], last: int, seq: int | None, at: float | None, ns: str) -> int:
    """The log position to go back to: ``seq``, or the last entry stamped by ``at``."""
    if at is not None:
        target = 0
        for o in ops:
            if o.ts > at:
                break
            target = o.seq
        return target
    assert seq is not None
    if seq > last:
        raise InvalidInputError(f"seq {seq} is past the end of the log of namespace {ns!r} (#{last})")
    return seq


def _apply(mem: Host, plan: _Plan, conn: Connection) -> TimeTravel:
    """Inside the write transaction: log the time travel and write its state, unless
    the log moved on since ``plan`` was computed."""
    store, ns = mem.store, mem.namespace
    lock_log(mem.store, conn)
    if store.log.last_seq(conn, ns) != plan.last:
        raise _Moved
    op_seq = store.log.append(conn, ns, mem.session, plan.now, "time_travel", None, plan.payload)
    return _write_state(mem, conn, plan.state, plan.rows, plan.blobs, plan.target, plan.last, op_seq, plan.erased)


def _write_state(
    mem: Host, conn: Connection, state: State, rows: Mapping[str, Any], blobs: Mapping[str, bytes],
    target: int, last: int, op_seq: int, erased: Sequence[str],
) -> TimeTravel:
    """Rewrite the namespace's rows (nodes, terms, cursors, index outbox) to ``state``."""
    store, ns = mem.store, mem.namespace
    _refuse_taken_ids(conn, [i for i in state.nodes if i not in rows])
    removed = [i for i in rows if i not in state.nodes]
    store.nodes.delete(conn, removed)
    store.outbox.enqueue(conn, ns, removed, "delete")
    # Made here, not in the caller: the store may run this transaction again.
    writer = _NodeWriter(store, conn, ns, mem.embedder.name, blobs)
    for i, n in state.nodes.items():
        cur = rows.get(i)
        if cur is None:
            writer.add(i, n)
        else:
            writer.change(i, n, cur._mapping)
    store.outbox.enqueue(conn, ns, writer.upserts, "upsert")
    store.outbox.enqueue(conn, ns, writer.deletes, "delete")
    # The vectors embedded here, and those below a node whose content or place changed,
    # are read again with their path (hybrid_memory.context) once this commits.
    context.mark(store, conn, ns, [i for i, n in state.nodes.items()
                                   if n["depth"] > 0 and writer.moved.intersection(path_ids(n["path"]))])
    conn.execute(sql_delete(cursors).where(cursors.c.namespace == ns))
    if state.cursors:
        conn.execute(insert(cursors), [
            {"namespace": ns, "session": s, "active_id": a, "updated_at": t, "focused": f}
            for s, (a, t, f) in state.cursors.items()
        ])
    return TimeTravel(target, last, op_seq, tuple(writer.changed), tuple(writer.added), tuple(removed), tuple(erased))


def _refuse_taken_ids(conn: Connection, new: Sequence[str]) -> None:
    for at in range(0, len(new), CHUNK):
        # An id the log names can since have been imported into another namespace
        # (after this one travelled away from it): that node is not this one's to take.
        if conn.execute(select(nodes.c.id).where(nodes.c.id.in_(new[at : at + CHUNK]))).first() is not None:
            raise ConflictError("the state at that position holds a node whose id another namespace of this "
                                "store now uses; it cannot come back here")


@dataclass
class _NodeWriter:
    """Writes the nodes of a state over the namespace's rows, one node at a time,
    noting what the index and the :class:`TimeTravel` report must hear of it."""

    store: SqlStore
    conn: Connection
    ns: str
    model: str
    blobs: Mapping[str, bytes]
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    upserts: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    #: Nodes whose content or place changed: the paths below them did.
    moved: set[str] = field(default_factory=set)

    def add(self, i: str, n: Mapping[str, Any]) -> None:
        """A node that has no row now."""
        self.store.nodes.insert(self.conn, dict(n, namespace=self.ns, embedding=self.blobs[i], embed_model=self.model))
        if n["status"] == _LIVE:
            self.store.terms.index(self.conn, self.ns, i, text.term_counts(n["content"]))
            self.upserts.append(i)
        self.added.append(i)
        self.moved.add(i)

    def change(self, i: str, n: Mapping[str, Any], m: Mapping[str, Any]) -> None:
        """A node whose row ``m`` may differ from it."""
        changes = {f: n[f] for f in STATE_FIELDS if f != "id" and m[f] != n[f]}
        if not changes:
            return
        if "content" in changes:
            changes.update(embedding=self.blobs[i], embed_model=self.model)
        if "content" in changes or "path" in changes:
            self.moved.add(i)
        self.store.nodes.update(self.conn, i, **changes)
        was_live, is_live = m["status"] == _LIVE, n["status"] == _LIVE
        if "content" in changes or was_live != is_live:
            self.store.terms.unindex(self.conn, [i])
            if is_live:
                self.store.terms.index(self.conn, self.ns, i, text.term_counts(n["content"]))
        if is_live and ("content" in changes or not was_live):
            self.upserts.append(i)
        elif was_live and not is_live:
            self.deletes.append(i)
        self.changed.append(i)

