"""Time travel: a namespace brought back to a position of its log in one transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
from .format import CHUNK, STATE_FIELDS
from .host import Host
from .oplog import lock_log, read_ops
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


def time_travel(mem: Host, *, seq: int | None = None, as_of: float | None = None) -> TimeTravel:
    """Bring ``mem``'s namespace back to log position ``seq`` (or to where the log
    stood at time ``as_of``): one transaction, one ``time_travel`` entry."""
    if (seq is None) == (as_of is None):
        raise InvalidInputError("time travel: give exactly one of seq or as_of")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
        raise InvalidTypeError(f"seq must be an integer log position, got {check.show(seq)}")
    if seq is not None and seq < 0:
        raise InvalidInputError(f"seq must be >= 0, got {seq}")
    at = None if as_of is None else check.timestamp(as_of, "as_of")
    mem.flush()
    store, ns = mem.store, mem.namespace
    for _attempt in range(5):
        with store.reading() as conn:
            ops = read_ops(conn, ns)
            last = ops[-1].seq if ops else 0
            cols = [nodes.c[f] for f in STATE_FIELDS]
            rows = {r.id: r for r in conn.execute(select(*cols).where(nodes.c.namespace == ns))}
        if at is not None:
            target = 0
            for o in ops:
                if o.ts > at:
                    break
                target = o.seq
        else:
            assert seq is not None
            if seq > last:
                raise InvalidInputError(f"seq {seq} is past the end of the log of namespace {ns!r} (#{last})")
            target = seq
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

        def run(conn: Connection, state: State = state, rows: dict[str, Any] = rows,
                blobs: dict[str, bytes] = blobs, payload: dict[str, Any] = payload, last: int = last,
                now: float = now, target: int = target, erased: list[str] = erased) -> TimeTravel:
            lock_log(mem.store, conn)
            if store.log.last_seq(conn, ns) != last:
                raise _Moved
            op_seq = store.log.append(conn, ns, mem.session, now, "time_travel", None, payload)
            return _write_state(mem, conn, state, rows, blobs, target, last, op_seq, erased)

        try:
            result = store.write(run)
        except _Moved:
            continue
        mem.drain()
        return result
    raise ConflictError("the memory kept changing while restoring it; try again")


def _write_state(
    mem: Host, conn: Connection, state: State, rows: Mapping[str, Any], blobs: Mapping[str, bytes],
    target: int, last: int, op_seq: int, erased: Sequence[str],
) -> TimeTravel:
    """Rewrite the namespace's rows (nodes, terms, cursors, index outbox) to ``state``."""
    store, ns, model = mem.store, mem.namespace, mem.embedder.name
    live = Status.LIVE.value
    new = [i for i in state.nodes if i not in rows]
    for at in range(0, len(new), CHUNK):
        # An id the log names can since have been imported into another namespace
        # (after this one travelled away from it): that node is not this one's to take.
        if conn.execute(select(nodes.c.id).where(nodes.c.id.in_(new[at : at + CHUNK]))).first() is not None:
            raise ConflictError("the state at that position holds a node whose id another namespace of this "
                                "store now uses; it cannot come back here")
    removed = [i for i in rows if i not in state.nodes]
    store.nodes.delete(conn, removed)
    store.outbox.enqueue(conn, ns, removed, "delete")
    added: list[str] = []
    changed: list[str] = []
    upserts: list[str] = []
    deletes: list[str] = []
    moved: set[str] = set()  # nodes whose content or place changed: the paths below them did
    for i, n in state.nodes.items():
        cur = rows.get(i)
        if cur is None:
            store.nodes.insert(conn, dict(n, namespace=ns, embedding=blobs[i], embed_model=model))
            if n["status"] == live:
                store.terms.index(conn, ns, i, text.term_counts(n["content"]))
                upserts.append(i)
            added.append(i)
            moved.add(i)
            continue
        m = cur._mapping
        changes = {f: n[f] for f in STATE_FIELDS if f != "id" and m[f] != n[f]}
        if not changes:
            continue
        if "content" in changes:
            changes.update(embedding=blobs[i], embed_model=model)
        if "content" in changes or "path" in changes:
            moved.add(i)
        store.nodes.update(conn, i, **changes)
        was_live, is_live = m["status"] == live, n["status"] == live
        if "content" in changes or was_live != is_live:
            store.terms.unindex(conn, [i])
            if is_live:
                store.terms.index(conn, ns, i, text.term_counts(n["content"]))
        if is_live and ("content" in changes or not was_live):
            upserts.append(i)
        elif was_live and not is_live:
            deletes.append(i)
        changed.append(i)
    store.outbox.enqueue(conn, ns, upserts, "upsert")
    store.outbox.enqueue(conn, ns, deletes, "delete")
    # The vectors embedded here, and those below a node whose content or place changed,
    # are read again with their path (hybrid_memory.context) once this commits.
    context.mark(store, conn, ns, [i for i, n in state.nodes.items()
                                   if n["depth"] > 0 and moved.intersection(path_ids(n["path"]))])
    conn.execute(sql_delete(cursors).where(cursors.c.namespace == ns))
    if state.cursors:
        conn.execute(insert(cursors), [
            {"namespace": ns, "session": s, "active_id": a, "updated_at": t} for s, (a, t) in state.cursors.items()
        ])
    return TimeTravel(target, last, op_seq, tuple(changed), tuple(added), tuple(removed), tuple(erased))
