"""The operation log read back, and the payload pieces the write path logs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy import text as sql_text
from sqlalchemy.engine import Connection

from .. import _validate as check
from ..ids import short_id
from ..store.schema import oplog
from ..store.sql import SqlStore
from .format import CHUNK, WORDS
from .host import HasLog


@dataclass(frozen=True)
class Op:
    """One operation-log entry."""

    seq: int
    session: str
    ts: float
    op: str
    node_id: str | None
    #: The payload as logged; ``None`` when it cannot be read.
    payload: Mapping[str, Any] | None

    @property
    def unreadable(self) -> bool:
        return self.payload is None or self.payload.get("corrupt") is True

    @property
    def purged(self) -> bool:
        return self.payload is not None and self.payload.get("purged") is True

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> Op:
        payload = m["payload"]
        if isinstance(payload, str):
            payload = parse_payload(payload)
        return cls(int(m["seq"]), m["session"], float(m["ts"]), m["op"], m.get("node_id"), payload)


def parse_payload(raw: object) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_ops(conn: Connection, namespace: str, *, last: int | None = None) -> list[Op]:
    """The namespace's log in order (only its ``last`` entries when given)."""
    q = select(oplog).where(oplog.c.namespace == namespace)
    if last is not None:
        rows = list(conn.execute(q.order_by(oplog.c.seq.desc()).limit(max(0, last))))[::-1]
    else:
        rows = list(conn.execute(q.order_by(oplog.c.seq)))
    return [Op(r.seq, r.session, r.ts, r.op, r.node_id, parse_payload(r.payload)) for r in rows]


def recent_ops(mem: HasLog, n: int = 20) -> list[Op]:
    """The last ``n`` operations of the memory's namespace, oldest first."""
    n = check.positive_int(n, "n")
    with mem.store.reading() as conn:
        return read_ops(conn, mem.namespace, last=n)


def describe(op: Op) -> str:
    """A one-line human-readable summary of an entry's payload."""
    p = op.payload
    if op.unreadable or p is None:
        return "(unreadable entry)"
    if op.purged:
        return "(erased)"
    k = op.op
    if k in ("add", "import"):
        return f"[{p.get('type')}] {_clip(str(p.get('content', '')))}" + (" (now active)" if p.get("focus") else "")
    if k == "merge":
        return f"reinforced by: {_clip(str(p.get('content', '')))}"
    if k == "update":
        parts = [f'content "{_clip(str(p["content"]), 50)}"'] if "content" in p else []
        parts += [f"{w}={p[w]:.2f}" for w in ("importance", "confidence") if isinstance(p.get(w), (int, float))]
        parts += ["meta"] if "meta" in p else []
        return ", ".join(parts) + f" (v{p.get('version')})"
    if k == "feedback":
        return f"importance={p.get('importance', 0):.2f} confidence={p.get('confidence', 0):.2f}"
    if k == "supersede":
        return f"superseded by {short_id(str(p.get('by', '')))}: importance={p.get('importance', 0):.2f}"
    if k == "pin":
        return "pinned" if p.get("pinned") else "unpinned"
    if k == "move":
        return f"under {short_id(str(p['parent']))}" if p.get("parent") else "to a new root"
    if k == "focus":
        return "made active"
    if k == "checkpoint":
        return _clip(str(p["note"])) if p.get("note") else "-"
    if k in ("archive", "forget", "restore", "delete"):
        n = len(p.get("ids") or ())
        verb = {"archive": "archived", "forget": "forgotten", "restore": "restored", "delete": "erased"}[k]
        return f"{n} node{'s' if n != 1 else ''} {verb}"
    if k == "access":
        counts = p.get("counts") or {}
        reads = sum(int(v[0]) for v in counts.values() if isinstance(v, list) and v)
        return f"{reads} read{'s' if reads != 1 else ''} of {len(counts)} node{'s' if len(counts) != 1 else ''}"
    if k == "time_travel":
        dropped = len(p.get("dropped") or ())
        out = f"back to #{p.get('seq')} (from #{p.get('from')})"
        return out + (f"; {dropped} erased node{'s' if dropped != 1 else ''} stay gone" if dropped else "")
    if k == "branch_mode":
        return f"branches regrouped by {p.get('mode')}"
    if k == "import_cursor":
        return f"session {p.get('session')} at {short_id(str(p.get('active_id') or '-'))}"
    return _clip(json.dumps(p, ensure_ascii=False))


def _clip(s: str, n: int = 60) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


# -- payload pieces the write path logs -------------------------------------------------------


def skeletons(conn: Connection, namespace: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """What replay needs of the entries about to be purged for erasing ``ids``: each
    payload without what was said (content, meta, hashes, notes), by sequence number.
    ``delete`` keeps them in its own entry."""
    out: dict[str, dict[str, Any]] = {}
    ids = list(ids)
    for i in range(0, len(ids), CHUNK):
        q = select(oplog.c.seq, oplog.c.payload).where(
            oplog.c.namespace == namespace, oplog.c.node_id.in_(ids[i : i + CHUNK])
        )
        for row in conn.execute(q):
            p = parse_payload(row.payload)
            if p is None or p.get("purged") is True or p.get("corrupt") is True:
                continue
            out[str(row.seq)] = {k: v for k, v in p.items() if k not in WORDS}
    return out


def access_payload(counts: Mapping[str, tuple[int, float]]) -> dict[str, Any]:
    """The payload of an ``access`` entry: the read counts a flush adds, by node."""
    return {"counts": {i: [n, ts] for i, (n, ts) in counts.items()}}


def lock_log(store: SqlStore, conn: Connection) -> None:
    """Time travel and import rewrite a namespace from what they read: no other
    writer may log meanwhile. SQLite's writers are serialised already (BEGIN
    IMMEDIATE); on PostgreSQL, every writer logs, so locking the log against
    writes (not reads) until commit is enough."""
    if store.is_postgres:
        conn.execute(sql_text(f"LOCK TABLE {oplog.name} IN EXCLUSIVE MODE"))
