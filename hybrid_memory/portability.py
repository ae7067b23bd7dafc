"""Time travel and portability: replaying the operation log, ``rewind(seq=...)``,
and JSON Lines export / import.

The operation log (``hm_oplog``) is the history of a namespace: every mutation logs
what it did, completely enough that :func:`replay` rebuilds the tree (every node
field but the embedding, and the session cursors) from the log alone. On top of it:

* **Time travel** (:func:`time_travel`, ``MemoryTree.rewind(seq=N)`` or
  ``rewind(as_of=ts)``) computes the state at log position ``N`` by replay and
  rewrites the namespace to it in one transaction. It logs a ``time_travel`` entry
  whose replay re-applies the same computation, so the log stays the truth, and a
  time travel is undone by another one to the position it started from.

* **Erasure wins over time travel.** ``delete`` purges the payloads of every log
  entry about the erased nodes (``{"purged": true}``), keeping in its own entry a
  *skeleton* of each (the same payload without content, meta, hashes or notes), so
  that replay still knows the structure: which ancestor a write touched, which node
  a restore brought back. An erased node is a *ghost* in replay: it has a place in
  the tree but no words, so it can never come back; a time travel to a position
  where it existed leaves it out, together with whatever hung under it then.

* **Export / import** (:func:`export`, :func:`import_`): a portable JSON Lines file,
  a header line then one object per line (``node``, ``cursor``, ``checkpoint``, and
  with ``include_log`` ``op``). Embeddings travel as base64 float32 little-endian, so
  an import re-embeds nothing (unless the model differs). An import goes into an
  empty namespace, id for id, in one transaction, after every line was checked.

Details worth knowing:

* A log *position* is a ``seq`` of ``hm_oplog`` (one counter for the whole store);
  the state at ``N`` is the state after every entry of the namespace with
  ``seq <= N``. ``as_of`` picks the position just before the first entry stamped
  later than ``as_of`` (entries in log order; a write given an explicit earlier
  ``ts`` does not move the position back). Position 0 is the empty memory.
* A time travel rewrites nodes (all their fields, versions included), terms and
  every session's cursor; it keeps checkpoints (they are history, and a
  checkpoint's ``log_seq`` is a natural target) and groups branches by the
  ``branch_by`` configured now.
* An import with the file's log keeps its positions when they are all past this
  store's log, else shifts them all (and archive positions, checkpoints, time
  travel targets with them). An import without it logs one ``import`` entry per
  node and cursor, so the log still explains the memory; positions before the
  import then hold nothing. An imported log is not checked against the nodes.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import math
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import delete as sql_delete
from sqlalchemy import func, insert, select
from sqlalchemy import text as sql_text
from sqlalchemy.engine import Connection

from . import _validate as check
from . import text
from .crypto import Keyring
from .errors import (
    ConflictError,
    EncryptionKeyError,
    HybridMemoryError,
    InvalidInputError,
    InvalidTypeError,
    StorageError,
)
from .ids import short_id
from .model import NodeType, Status, path_ids
from .store.sql import checkpoints, cursors, nodes, oplog, to_blob
from .weights import check_unit
from .writing import branch_info_for, content_hash, to_json

if TYPE_CHECKING:
    from .tree import MemoryTree

FORMAT = "hybrid-memory"
VERSION = 1

#: The node fields replay rebuilds (every ``hm_nodes`` column but the namespace,
#: the embedding and its model name, which travel with the content).
STATE_FIELDS = (
    "id", "parent_id", "type", "content", "meta", "importance", "confidence",
    "access_count", "pinned", "status", "version", "depth", "path", "branch_id",
    "created_at", "updated_at", "accessed_at", "active_at", "archived_op",
    "content_hash", "tokens",
)
#: What a skeleton of a purged payload leaves out: everything that was said.
_WORDS = frozenset({"content", "meta", "content_hash", "tokens", "note"})
_ID = re.compile(r"^[0-9A-Za-z_]{1,32}$")
_CHUNK = 500


class BadSnapshotError(InvalidInputError):
    """An export file that cannot be imported; ``line`` is its 1-based line number
    (``None`` when the problem is the file as a whole). Nothing was written."""

    code = "invalid_snapshot"

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


# -- the operation log, read back ---------------------------------------------------------


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
            payload = _parse_payload(payload)
        return cls(int(m["seq"]), m["session"], float(m["ts"]), m["op"], m.get("node_id"), payload)


def _parse_payload(raw: object) -> dict[str, Any] | None:
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
    return [Op(r.seq, r.session, r.ts, r.op, r.node_id, _parse_payload(r.payload)) for r in rows]


def recent_ops(mem: MemoryTree, n: int = 20) -> list[Op]:
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
    for i in range(0, len(ids), _CHUNK):
        q = select(oplog.c.seq, oplog.c.payload).where(
            oplog.c.namespace == namespace, oplog.c.node_id.in_(ids[i : i + _CHUNK])
        )
        for row in conn.execute(q):
            p = _parse_payload(row.payload)
            if p is None or p.get("purged") is True or p.get("corrupt") is True:
                continue
            out[str(row.seq)] = {k: v for k, v in p.items() if k not in _WORDS}
    return out


def access_payload(counts: Mapping[str, tuple[int, float]]) -> dict[str, Any]:
    """The payload of an ``access`` entry: the read counts a flush adds, by node."""
    return {"counts": {i: [n, ts] for i, (n, ts) in counts.items()}}


# -- replay -----------------------------------------------------------------------------------


@dataclass
class State:
    """A namespace as the log says it is: node fields by id, and session cursors."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: session -> (active node id, updated_at)
    cursors: dict[str, tuple[str | None, float]] = field(default_factory=dict)
    #: The log position this is the state at.
    seq: int = 0
    #: Nodes known only from skeletons (erased later): their place, not their words.
    ghosts: set[str] = field(default_factory=set)
    #: Entries replay could not apply: (seq, "unreadable" | "erased" | "unknown op").
    skipped: list[tuple[int, str]] = field(default_factory=list)

    def copy(self) -> State:
        return State(
            {k: dict(v) for k, v in self.nodes.items()}, dict(self.cursors), self.seq,
            set(self.ghosts), list(self.skipped),
        )


def live_state(mem: MemoryTree) -> State:
    """The memory's namespace as stored now, in the shape :func:`replay` returns."""
    with mem.store.reading() as conn:
        return _stored_state(conn, mem.namespace)


def _stored_state(conn: Connection, namespace: str) -> State:
    cols = [nodes.c[f] for f in STATE_FIELDS]
    state = State()
    for row in conn.execute(select(*cols).where(nodes.c.namespace == namespace)):
        state.nodes[row.id] = dict(row._mapping)
    for c in conn.execute(select(cursors).where(cursors.c.namespace == namespace)):
        state.cursors[c.session] = (c.active_id, c.updated_at)
    state.seq = int(conn.execute(select(func.max(oplog.c.seq)).where(oplog.c.namespace == namespace)).scalar() or 0)
    return state


def replay(ops: Iterable[Op | Mapping[str, Any]], *, upto: int | None = None,
           hasher: Callable[[str], str] = content_hash) -> State:
    """Rebuild a namespace from its operation log: the state after every entry with
    ``seq <= upto`` (all of them by default).

    ``ops`` is the whole log of one namespace, in order (``Op`` objects, or mappings
    with ``seq, session, ts, op, node_id, payload`` as in an export): later
    ``delete`` entries hold the skeletons of the entries they purged. ``hasher``
    computes content hashes (the store's, keyed when it is encrypted).
    """
    log = sorted((o if isinstance(o, Op) else Op.from_mapping(o) for o in ops), key=lambda o: o.seq)
    bones: dict[int, Mapping[str, Any]] = {}
    for o in log:
        if o.op == "delete" and not o.unreadable and o.payload is not None:
            for k, v in (o.payload.get("skeletons") or {}).items():
                bones[int(k)] = v
    chosen = [o for o in log if upto is None or o.seq <= upto]
    targets = sorted({
        int(o.payload["seq"]) for o in chosen
        if o.op == "time_travel" and not o.unreadable and o.payload is not None
        and isinstance(o.payload.get("seq"), int)
    })
    r = _Replay(bones, hasher)
    t = 0
    for o in chosen:
        while t < len(targets) and targets[t] < o.seq:
            r.snapshots[targets[t]] = r.s.copy()
            t += 1
        r.apply(o)
    r.s.seq = upto if upto is not None else (chosen[-1].seq if chosen else 0)
    return r.s


class _Replay:
    def __init__(self, bones: Mapping[int, Mapping[str, Any]], hasher: Callable[[str], str]) -> None:
        self.s = State()
        self.bones = bones
        self.hasher = hasher
        self.snapshots: dict[int, State] = {}
        self.kids: dict[str, set[str]] = {}

    def apply(self, o: Op) -> None:
        payload = o.payload
        ghost = False
        if o.unreadable or payload is None:
            self.s.skipped.append((o.seq, "unreadable"))
            return
        if payload.get("purged") is True:
            bone = self.bones.get(o.seq)
            if bone is not None:
                payload, ghost = bone, True
            elif o.op in ("focus", "checkpoint"):
                payload = {}
            else:  # purged by a delete that kept no skeletons (an older log)
                self.s.skipped.append((o.seq, "erased"))
                return
        handler = _HANDLERS.get(o.op)
        if handler is None:
            self.s.skipped.append((o.seq, "unknown op"))
            return
        try:
            handler(self, o, payload, ghost)
        except (KeyError, TypeError, ValueError, AttributeError):
            self.s.skipped.append((o.seq, "unreadable"))

    # -- helpers --

    def _node(self, node_id: str | None) -> dict[str, Any] | None:
        return self.s.nodes.get(node_id) if node_id is not None else None

    def _put(self, node: dict[str, Any], ghost: bool) -> None:
        self._unlink(node["id"])
        self.s.nodes[node["id"]] = node
        if node["parent_id"] is not None:
            self.kids.setdefault(node["parent_id"], set()).add(node["id"])
        if ghost:
            self.s.ghosts.add(node["id"])
        else:
            self.s.ghosts.discard(node["id"])

    def _unlink(self, node_id: str) -> None:
        old = self.s.nodes.get(node_id)
        if old is not None and old["parent_id"] is not None:
            self.kids.get(old["parent_id"], set()).discard(node_id)

    def _touch(self, ids: Iterable[str], column: str, ts: float) -> None:
        for i in ids:
            n = self.s.nodes.get(i)
            if n is not None and n[column] < ts:
                n[column] = ts

    def _repoint(self, gone: Iterable[str], to: str | None, ts: float) -> None:
        gone = set(gone)
        for session, (active, _) in list(self.s.cursors.items()):
            if active is not None and active in gone:
                self.s.cursors[session] = (to, ts)

    def _subtree(self, node_id: str) -> list[str]:
        out, i = [node_id], 0
        while i < len(out):
            out.extend(self.kids.get(out[i], ()))
            i += 1
        return out

    def _rebuild_kids(self) -> None:
        self.kids = {}
        for n in self.s.nodes.values():
            if n["parent_id"] is not None:
                self.kids.setdefault(n["parent_id"], set()).add(n["id"])

    def _branch_info(self, parent: Mapping[str, Any]) -> tuple[str, bool]:
        head = parent["branch_id"]
        if head == parent["id"]:
            return head, parent["type"] == NodeType.TASK.value
        row = self.s.nodes.get(head)
        return head, row is not None and row["type"] == NodeType.TASK.value

    # -- one handler per operation --

    def op_add(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        node = _node_values(p, o.node_id, ghost)
        self._put(node, ghost)
        if o.op == "add":
            self._touch(path_ids(node["path"])[:-1], "active_at", o.ts)
            if p.get("focus"):
                self.s.cursors[o.session] = (node["id"], o.ts)

    def op_import_cursor(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        self.s.cursors[p["session"]] = (p.get("active_id"), float(p["updated_at"]))

    def op_merge(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        n = self._node(o.node_id)
        if n is None:
            return
        for k in ("importance", "confidence", "accessed_at", "version"):
            if k in p:
                n[k] = p[k]
        n["updated_at"] = max(n["updated_at"], o.ts)  # a twin written again (logs before this field too)
        self._touch(path_ids(n["path"])[:-1], "active_at", o.ts)

    def op_update(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        n = self._node(o.node_id)
        if n is None:
            return
        for k in ("content", "importance", "confidence", "meta"):
            if k in p:
                n[k] = p[k]
        if "content" in p:
            n["content_hash"] = self.hasher(p["content"])
            n["tokens"] = text.count_tokens(p["content"])
        n["version"] = p.get("version", n["version"] + 1)
        n["updated_at"] = o.ts

    def op_feedback(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        n = self._node(o.node_id)
        if n is None:
            return
        n["importance"], n["confidence"] = p["importance"], p["confidence"]
        n["version"] += 1
        n["accessed_at"] = max(n["accessed_at"], o.ts)
        n["updated_at"] = max(n["updated_at"], o.ts)

    def op_supersede(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        n = self._node(o.node_id)
        if n is None:
            return
        n["importance"] = p["importance"]

    def op_pin(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        n = self._node(o.node_id)
        if n is None:
            return
        n["pinned"] = bool(p["pinned"])
        n["version"] += 1

    def op_move(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        row = self._node(o.node_id)
        parent = self._node(p.get("parent"))
        if row is None or (p.get("parent") is not None and parent is None):
            return
        mode = p.get("branch_by", "nearest_task")
        sub = sorted((self.s.nodes[i] for i in self._subtree(row["id"])), key=lambda r: r["depth"])
        new_path = f"{row['id']}/" if parent is None else f"{parent['path']}{row['id']}/"
        info: dict[str, tuple[str, bool]] = {}
        if parent is not None:
            info[parent["id"]] = self._branch_info(parent)
        old_prefix = row["path"]
        for r in sub:
            path = new_path + r["path"][len(old_prefix):]
            if r["id"] == row["id"]:
                pinfo = info.get(parent["id"]) if parent is not None else None
            else:
                pinfo = info.get(r["parent_id"])
            branch, is_task = branch_info_for(r["id"], NodeType(r["type"]), pinfo, mode)
            info[r["id"]] = (branch, is_task)
            r["path"], r["depth"], r["branch_id"] = path, path.count("/") - 1, branch
        self._unlink(row["id"])
        row["parent_id"] = None if parent is None else parent["id"]
        if parent is not None:
            self.kids.setdefault(parent["id"], set()).add(row["id"])
        row["version"] += 1
        row["updated_at"] = o.ts
        if parent is not None:
            self._touch(path_ids(parent["path"]), "active_at", o.ts)

    def op_focus(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        if o.node_id is not None:
            self.s.cursors[o.session] = (o.node_id, o.ts)

    def op_checkpoint(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        return None  # checkpoints are history, not state

    def op_archive(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        ids = list(p.get("ids") or ())
        head = self._node(o.node_id) if o.op == "archive" else None
        fallback = head["parent_id"] if head is not None else None
        for i in ids:
            n = self.s.nodes.get(i)
            if n is not None:
                n["status"], n["archived_op"] = Status.ARCHIVED.value, o.seq
        self._repoint(ids, fallback, o.ts)

    def op_restore(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        for i in p.get("ids") or ():
            n = self.s.nodes.get(i)
            if n is not None:
                n["status"], n["archived_op"] = Status.LIVE.value, None

    def op_delete(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        ids = list(p.get("ids") or ())
        head = self._node(o.node_id)
        fallback = head["parent_id"] if head is not None else None
        for i in ids:
            if i in self.s.nodes:
                self._unlink(i)
                del self.s.nodes[i]
            self.kids.pop(i, None)
            self.s.ghosts.discard(i)
        self._repoint(ids, fallback, o.ts)

    def op_access(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        for i, (n, ts) in (p.get("counts") or {}).items():
            node = self.s.nodes.get(i)
            if node is not None:
                node["access_count"] += int(n)
                node["accessed_at"] = max(node["accessed_at"], ts)

    def op_branch_mode(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        _regroup(self.s, p["mode"])

    def op_time_travel(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        target = p["seq"]
        snap = self.snapshots.get(target)
        if snap is None:
            raise ValueError("time travel to an unknown position")
        state = snap.copy()
        travel_state(state, p.get("dropped") or (), o.ts, p.get("branch_by"))
        state.skipped = self.s.skipped
        self.s = state
        self._rebuild_kids()


_HANDLERS: dict[str, Any] = {
    "add": _Replay.op_add,
    "import": _Replay.op_add,
    "import_cursor": _Replay.op_import_cursor,
    "merge": _Replay.op_merge,
    "update": _Replay.op_update,
    "feedback": _Replay.op_feedback,
    "supersede": _Replay.op_supersede,
    "pin": _Replay.op_pin,
    "move": _Replay.op_move,
    "focus": _Replay.op_focus,
    "checkpoint": _Replay.op_checkpoint,
    "archive": _Replay.op_archive,
    "forget": _Replay.op_archive,
    "restore": _Replay.op_restore,
    "delete": _Replay.op_delete,
    "access": _Replay.op_access,
    "branch_mode": _Replay.op_branch_mode,
    "time_travel": _Replay.op_time_travel,
}


def _node_values(p: Mapping[str, Any], node_id: str | None, ghost: bool) -> dict[str, Any]:
    node = {f: p.get(f) for f in STATE_FIELDS}
    node["id"] = p.get("id") or node_id
    if not isinstance(node["id"], str) or not isinstance(node["path"], str):
        raise ValueError("an add without id or path")
    node["pinned"] = bool(node["pinned"])
    if ghost:
        for f in ("content", "meta", "content_hash", "tokens"):
            node[f] = None
    return node


def erased_ids(state: State) -> list[str]:
    """Nodes of ``state`` that cannot be brought back: ghosts (erased since), and
    whatever hung under one (or under a node the log no longer knows)."""
    out: dict[str, None] = {}
    for n in sorted(state.nodes.values(), key=lambda n: (n["depth"], n["id"])):
        pid = n["parent_id"]
        if n["id"] in state.ghosts or (pid is not None and (pid in out or pid not in state.nodes)):
            out[n["id"]] = None
    return list(out)


def _regroup(state: State, mode: str) -> None:
    """Branch heads recomputed from the tree, as ``MemoryTree`` does when ``branch_by`` changes."""
    info: dict[str, tuple[str, bool]] = {}
    for r in sorted(state.nodes.values(), key=lambda r: r["depth"]):
        pinfo = info.get(r["parent_id"]) if r["parent_id"] else None
        b = branch_info_for(r["id"], NodeType(r["type"]), pinfo, mode)
        info[r["id"]] = b
        r["branch_id"] = b[0]


def travel_state(state: State, dropped: Iterable[str], ts: float, branch_by: str | None) -> None:
    """What a time travel makes of the replayed state at its target: without the
    nodes that cannot come back (``dropped``), with branches grouped by the
    ``branch_by`` in force now (when given)."""
    _travel(state, dropped, ts)
    if branch_by is not None:
        _regroup(state, branch_by)


def _travel(state: State, dropped: Iterable[str], ts: float) -> None:
    """Take ``dropped`` out of ``state``; a cursor on one moves to its nearest
    ancestor that stays (or to nothing), stamped ``ts``."""
    parents = {}
    for i in dropped:
        n = state.nodes.pop(i, None)
        if n is not None:
            parents[i] = n["parent_id"]
        state.ghosts.discard(i)
    for session, (active, _) in list(state.cursors.items()):
        if active is not None and active not in state.nodes:
            to = parents.get(active)
            while to is not None and to not in state.nodes:
                to = parents.get(to)
            state.cursors[session] = (to, ts)


# -- time travel ------------------------------------------------------------------------------


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


def time_travel(mem: MemoryTree, *, seq: int | None = None, as_of: float | None = None) -> TimeTravel:
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
        now = mem._clock()
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
            _exclusive(mem, conn)
            if store.last_seq(conn, ns) != last:
                raise _Moved
            op_seq = store.log(conn, ns, mem.session, now, "time_travel", None, payload)
            return _write_state(mem, conn, state, rows, blobs, target, last, op_seq, erased)

        try:
            result = store.write(run)
        except _Moved:
            continue
        mem._drain()
        return result
    raise ConflictError("the memory kept changing while restoring it; try again")


def _write_state(
    mem: MemoryTree, conn: Connection, state: State, rows: Mapping[str, Any], blobs: Mapping[str, bytes],
    target: int, last: int, op_seq: int, erased: Sequence[str],
) -> TimeTravel:
    """Rewrite the namespace's rows (nodes, terms, cursors, index outbox) to ``state``."""
    store, ns, model = mem.store, mem.namespace, mem.embedder.name
    live = Status.LIVE.value
    new = [i for i in state.nodes if i not in rows]
    for at in range(0, len(new), _CHUNK):
        # An id the log names can since have been imported into another namespace
        # (after this one travelled away from it): that node is not this one's to take.
        if conn.execute(select(nodes.c.id).where(nodes.c.id.in_(new[at : at + _CHUNK]))).first() is not None:
            raise ConflictError("the state at that position holds a node whose id another namespace of this "
                                "store now uses; it cannot come back here")
    removed = [i for i in rows if i not in state.nodes]
    store.delete_nodes(conn, removed)
    store.enqueue(conn, ns, removed, "delete")
    added: list[str] = []
    changed: list[str] = []
    upserts: list[str] = []
    deletes: list[str] = []
    for i, n in state.nodes.items():
        cur = rows.get(i)
        if cur is None:
            store.insert_node(conn, dict(n, namespace=ns, embedding=blobs[i], embed_model=model))
            if n["status"] == live:
                store.index_terms(conn, ns, i, text.term_counts(n["content"]))
                upserts.append(i)
            added.append(i)
            continue
        m = cur._mapping
        changes = {f: n[f] for f in STATE_FIELDS if f != "id" and m[f] != n[f]}
        if not changes:
            continue
        if "content" in changes:
            changes.update(embedding=blobs[i], embed_model=model)
        store.update_node(conn, i, **changes)
        was_live, is_live = m["status"] == live, n["status"] == live
        if "content" in changes or was_live != is_live:
            store.unindex_terms(conn, [i])
            if is_live:
                store.index_terms(conn, ns, i, text.term_counts(n["content"]))
        if is_live and ("content" in changes or not was_live):
            upserts.append(i)
        elif was_live and not is_live:
            deletes.append(i)
        changed.append(i)
    store.enqueue(conn, ns, upserts, "upsert")
    store.enqueue(conn, ns, deletes, "delete")
    conn.execute(sql_delete(cursors).where(cursors.c.namespace == ns))
    if state.cursors:
        conn.execute(insert(cursors), [
            {"namespace": ns, "session": s, "active_id": a, "updated_at": t} for s, (a, t) in state.cursors.items()
        ])
    return TimeTravel(target, last, op_seq, tuple(changed), tuple(added), tuple(removed), tuple(erased))


# -- export -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transfer:
    """What an export wrote or an import read."""

    path: str
    nodes: int
    cursors: int
    checkpoints: int
    ops: int
    #: Nodes whose embedding was computed again on import (no vector in the file,
    #: or one from another model).
    reembedded: int = 0


class _NoBar:
    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None


def _progress(total: int | None, desc: str) -> Any:
    """A tqdm bar on stderr when tqdm is installed (drawn only on a terminal)."""
    try:
        tqdm = importlib.import_module("tqdm").tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=" rows", leave=False, disable=not sys.stderr.isatty())


def _dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n"


def _path_arg(path: object) -> Path:
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise InvalidTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    text_path = str(os.fspath(path))
    if not text_path.strip() or "\x00" in text_path:
        raise InvalidInputError("path must be a non-empty file path without NUL characters")
    check.utf8(text_path, "path")
    return Path(text_path)


def _not_the_memorys_own(mem: MemoryTree, target: Path) -> None:
    """Refuse to write over the memory's own files: its database (and WAL) or its index."""
    where = target.resolve()
    db = mem.store.file
    own = [] if db is None else [db.resolve().with_name(db.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    chroma = None if mem.folder is None else (mem.folder / "chroma").resolve()
    if where in own or (chroma is not None and (where == chroma or chroma in where.parents)):
        raise InvalidInputError(f"{target} is one of the memory's own files; export elsewhere")


def export(mem: MemoryTree, path: str | os.PathLike[str], *, include_log: bool = False) -> Transfer:
    """Write ``mem``'s namespace to ``path`` as JSON Lines (atomically: a temporary
    file renamed over it). One read transaction: the file is a consistent snapshot."""
    target = _path_arg(path)
    check.flag(include_log, "include_log")
    try:
        if target.is_dir():
            raise InvalidInputError(f"{target} is a folder; give a file path")
        _not_the_memorys_own(mem, target)
    except OSError as exc:  # a name too long, a parent that is a file...
        raise InvalidInputError(f"cannot write {target}: {exc}") from None
    mem.flush()
    store, ns = mem.store, mem.namespace
    ring = store.keyring
    counts = {"node": 0, "cursor": 0, "checkpoint": 0, "op": 0}

    def line(obj: Mapping[str, Any]) -> str:
        # An encrypted memory exports encrypted: each line sealed whole.
        return _dumps(obj) if ring is None else _dumps({"sealed": ring.seal(json.dumps(obj, ensure_ascii=False, allow_nan=False), "export")})

    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InvalidInputError(f"cannot write {target}: a part of its folder path is a file") from None
    except OSError as exc:
        raise StorageError(f"cannot write {target}: {exc}") from exc
    try:
        with open(tmp, "x", encoding="utf-8", newline="\n") as fh, store.reading() as conn:
            where = nodes.c.namespace == ns
            total = int(conn.execute(select(func.count()).where(where)).scalar_one())
            if include_log:
                total += int(conn.execute(select(func.count()).where(oplog.c.namespace == ns)).scalar_one())
            blob = conn.execute(select(nodes.c.embedding).where(where, func.length(nodes.c.embedding) > 0)
                                .limit(1)).scalar()
            header = {
                "format": FORMAT, "version": VERSION, "namespace": ns, "embed_model": mem.embedder.name,
                "dim": len(blob) // 4 if blob is not None else None,
                "exported_at": mem._clock(), "include_log": include_log,
            }
            if ring is not None:
                header["sealed"] = ring.primary
            fh.write(_dumps(header))
            bar = _progress(total, "export")
            try:
                q = select(nodes).where(where).order_by(nodes.c.depth, nodes.c.created_at, nodes.c.id)
                for row in conn.execute(q):
                    fh.write(line(_node_line(dict(row._mapping))))
                    counts["node"] += 1
                    bar.update(1)
                for c in conn.execute(select(cursors).where(cursors.c.namespace == ns).order_by(cursors.c.session)):
                    fh.write(line({"kind": "cursor", "session": c.session, "active_id": c.active_id,
                                     "updated_at": c.updated_at}))
                    counts["cursor"] += 1
                q = select(checkpoints).where(checkpoints.c.namespace == ns).order_by(checkpoints.c.id)
                for cp in conn.execute(q):
                    fh.write(line({"kind": "checkpoint", "id": cp.id, "session": cp.session,
                                     "active_id": cp.active_id, "log_seq": cp.log_seq, "ts": cp.ts, "note": cp.note}))
                    counts["checkpoint"] += 1
                if include_log:
                    for o in conn.execute(select(oplog).where(oplog.c.namespace == ns).order_by(oplog.c.seq)):
                        payload = _parse_payload(o.payload)
                        fh.write(line({"kind": "op", "seq": o.seq, "session": o.session, "ts": o.ts, "op": o.op,
                                         "node_id": o.node_id, "payload": payload if payload is not None else {"corrupt": True}}))
                        counts["op"] += 1
                        bar.update(1)
            finally:
                bar.close()
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except OSError as exc:
        raise StorageError(f"cannot write {target}: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):  # nothing was made (its folder could not be)
            tmp.unlink(missing_ok=True)
    return Transfer(str(target), counts["node"], counts["cursor"], counts["checkpoint"], counts["op"])


def _node_line(m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "node"}
    for c in nodes.c:
        if c.name == "embedding":
            continue
        out[c.name] = m[c.name]
    out["pinned"] = bool(m["pinned"])
    out["meta"] = json.loads(m["meta"])
    # null for a node whose vector is still being computed: an import embeds it.
    vec = np.frombuffer(m["embedding"], dtype=np.float32).astype("<f4")
    out["embedding"] = base64.b64encode(vec.tobytes()).decode("ascii") if len(vec) else None
    return out


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- import -----------------------------------------------------------------------------------


@dataclass
class _Snapshot:
    header: dict[str, Any]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    vectors: dict[str, np.ndarray[Any, Any] | None] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    cursors: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)


def import_(mem: MemoryTree, path: str | os.PathLike[str]) -> Transfer:
    """Load a file written by :func:`export` into ``mem``'s namespace, which must be
    empty. Every line is checked first; then one transaction writes nodes, terms,
    cursors, checkpoints and the log, and queues the vectors for the index."""
    source = _path_arg(path)
    snap = _read_snapshot(source, mem.config.write.max_content_chars, mem.store.keyring, mem.store.content_hash)
    name = mem.embedder.name
    redo = [n["id"] for n in snap.nodes if snap.vectors[n["id"]] is None or snap.models.get(n["id"]) != name]
    blobs: dict[str, bytes] = {}
    if redo:
        by_id = {n["id"]: n for n in snap.nodes}
        bar = _progress(len(redo), "embed")
        try:
            for i in range(0, len(redo), 256):
                chunk = redo[i : i + 256]
                for j, v in zip(chunk, mem.embedder.embed([by_id[j]["content"] for j in chunk]), strict=True):
                    blobs[j] = to_blob(v)
                bar.update(len(chunk))
        finally:
            bar.close()
    for n in snap.nodes:
        if n["id"] not in blobs:
            vec = snap.vectors[n["id"]]
            assert vec is not None
            blobs[n["id"]] = to_blob(vec)
    now = mem._clock()

    def run(conn: Connection) -> Transfer:
        return _write_snapshot(mem, conn, snap, blobs, redo, now, str(source))

    result = mem.store.write(run)
    mem._drain()
    return result


def _write_snapshot(
    mem: MemoryTree, conn: Connection, snap: _Snapshot, blobs: Mapping[str, bytes],
    redo: Sequence[str], now: float, source: str,
) -> Transfer:
    store, ns, name = mem.store, mem.namespace, mem.embedder.name
    _exclusive(mem, conn)
    used = {
        "nodes": conn.execute(select(func.count()).where(nodes.c.namespace == ns)).scalar_one(),
        "log entries": conn.execute(select(func.count()).where(oplog.c.namespace == ns)).scalar_one(),
        "cursors": conn.execute(select(func.count()).where(cursors.c.namespace == ns)).scalar_one(),
        "checkpoints": conn.execute(select(func.count()).where(checkpoints.c.namespace == ns)).scalar_one(),
    }
    if any(used.values()):
        have = ", ".join(f"{v} {k}" for k, v in used.items() if v)
        raise ConflictError(f"namespace {ns!r} is not empty ({have}); import needs an empty memory")
    ids = [n["id"] for n in snap.nodes]
    for i in range(0, len(ids), _CHUNK):
        clash = conn.execute(select(nodes.c.id, nodes.c.namespace).where(nodes.c.id.in_(ids[i : i + _CHUNK]))).first()
        if clash is not None:
            where = "this namespace" if clash.namespace == mem.namespace else "another namespace of this store"
            raise ConflictError(f"node {clash.id} already exists in {where}")
    top = int(conn.execute(select(func.max(oplog.c.seq))).scalar() or 0)
    # Log positions: the file's own when they are all past this store's log, else shifted.
    offset = 0
    if snap.ops and snap.ops[0]["seq"] <= top:
        offset = top - snap.ops[0]["seq"] + 1

    def shift(v: Any) -> Any:
        return v + offset if isinstance(v, int) and not isinstance(v, bool) else v

    bar = _progress(len(snap.nodes) + len(snap.ops), "import")
    try:
        again = set(redo)
        rows = [
            dict(n, namespace=ns, archived_op=shift(n["archived_op"]), embedding=blobs[n["id"]],
                 embed_model=name if n["id"] in again else snap.models[n["id"]])
            for n in snap.nodes
        ]
        # Branch heads as this memory groups them (the file may come from another branch_by).
        mode = mem.config.write.branch_by
        heads = [r["branch_id"] for r in rows]
        _regroup(State(nodes={r["id"]: r for r in rows}), mode)
        regrouped = any(r["branch_id"] != h for r, h in zip(rows, heads, strict=True))
        for i in range(0, len(rows), _CHUNK):
            conn.execute(insert(nodes), rows[i : i + _CHUNK])
            bar.update(len(rows[i : i + _CHUNK]))
        live = [r for r in rows if r["status"] == Status.LIVE.value]
        for r in live:
            store.index_terms(conn, ns, r["id"], text.term_counts(r["content"]))
        store.enqueue(conn, ns, [r["id"] for r in live], "upsert")
        if snap.cursors:
            conn.execute(insert(cursors), [dict(c, namespace=ns) for c in snap.cursors])
        if snap.checkpoints:
            cp_ids = [c["id"] for c in snap.checkpoints if c.get("id") is not None]
            keep = len(cp_ids) == len(snap.checkpoints) and not conn.execute(
                select(func.count()).where(checkpoints.c.id.in_(cp_ids))).scalar_one()
            for c in snap.checkpoints:
                values = dict(c, namespace=ns, log_seq=shift(c["log_seq"]))
                if not keep:
                    values.pop("id", None)
                conn.execute(insert(checkpoints).values(**values))
        if snap.ops:
            entries = []
            for o in snap.ops:
                payload = _shift_payload(o["op"], o["payload"], shift)
                entries.append({"seq": o["seq"] + offset, "namespace": ns, "session": o["session"], "ts": o["ts"],
                                "op": o["op"], "node_id": o["node_id"],
                                "payload": json.dumps(payload, ensure_ascii=False, sort_keys=True)})
            for i in range(0, len(entries), _CHUNK):
                conn.execute(insert(oplog), entries[i : i + _CHUNK])
                bar.update(len(entries[i : i + _CHUNK]))
            n_ops = len(entries)
        else:
            n_ops = _log_import(mem, conn, rows, snap.cursors, now, top, snap)
    finally:
        bar.close()
    if store.is_postgres:  # explicit keys do not move PostgreSQL's sequences: move them past
        for table, col in ((oplog, "seq"), (checkpoints, "id")):
            conn.execute(sql_text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', '{col}'), "
                f"(SELECT COALESCE(MAX({col}), 0) + 1 FROM {table.name}), false)"
            ))
    if regrouped:  # so that replaying the imported log regroups the same way
        store.log(conn, ns, mem.session, now, "branch_mode", None, {"mode": mode})
        n_ops += 1
    return Transfer(source, len(rows), len(snap.cursors), len(snap.checkpoints), n_ops, len(redo))


def _exclusive(mem: MemoryTree, conn: Connection) -> None:
    """Time travel and import rewrite a namespace from what they read: no other
    writer may log meanwhile. SQLite's writers are serialised already (BEGIN
    IMMEDIATE); on PostgreSQL, every writer logs, so locking the log against
    writes (not reads) until commit is enough."""
    if mem.store.is_postgres:
        conn.execute(sql_text(f"LOCK TABLE {oplog.name} IN EXCLUSIVE MODE"))


def _shift_payload(op: str, payload: Mapping[str, Any], shift: Any) -> dict[str, Any]:
    """A payload with its log positions moved along with the entries."""
    p = dict(payload)
    if "archived_op" in p:
        p["archived_op"] = shift(p["archived_op"])
    if op == "time_travel":
        for k in ("seq", "from"):
            if k in p:
                p[k] = shift(p[k])
    if op == "delete" and isinstance(p.get("skeletons"), dict):
        p["skeletons"] = {str(shift(int(k))): _shift_payload("", v, shift) for k, v in p["skeletons"].items()}
    return p


def _log_import(
    mem: MemoryTree, conn: Connection, rows: Sequence[Mapping[str, Any]], cursor_rows: Sequence[Mapping[str, Any]],
    now: float, top: int, snap: _Snapshot,
) -> int:
    """An import without the file's log writes its own: one ``import`` entry per node
    (and per cursor), so that the log still explains the memory. Its positions come
    after every position the file names (archive positions, checkpoints)."""
    named = [r["archived_op"] for r in rows if r["archived_op"] is not None]
    named += [c["log_seq"] for c in snap.checkpoints]
    seq = max([top, *named]) + 1
    entries = []
    for r in rows:
        payload = {k: v for k, v in r.items() if k != "embedding"}
        entries.append({"seq": seq, "namespace": mem.namespace, "session": mem.session, "ts": now, "op": "import",
                        "node_id": r["id"], "payload": json.dumps(payload, ensure_ascii=False, sort_keys=True)})
        seq += 1
    for c in cursor_rows:
        payload = {"session": c["session"], "active_id": c["active_id"], "updated_at": c["updated_at"]}
        entries.append({"seq": seq, "namespace": mem.namespace, "session": mem.session, "ts": now,
                        "op": "import_cursor", "node_id": None,
                        "payload": json.dumps(payload, ensure_ascii=False, sort_keys=True)})
        seq += 1
    for i in range(0, len(entries), _CHUNK):
        conn.execute(insert(oplog), entries[i : i + _CHUNK])
    return len(entries)


# -- reading and checking an export file --------------------------------------------------------


def _lines(source: Path) -> Iterator[tuple[int, str]]:
    try:
        with open(source, encoding="utf-8", newline="\n") as fh:
            yield from enumerate(fh, 1)
    except FileNotFoundError:
        raise InvalidInputError(f"no such file: {source}") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{source} is a folder, not an export file") from None
    except UnicodeDecodeError as exc:
        raise BadSnapshotError(f"the file is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {source}: {exc}") from None


def _read_snapshot(source: Path, max_chars: int, ring: Keyring | None = None,
                   hasher: Callable[[str], str] = content_hash) -> _Snapshot:
    snap: _Snapshot | None = None
    seen_sessions: set[str] = set()
    last_seq = 0
    cursor_lines: list[int] = []
    bar = _progress(None, "read")
    try:
        for lineno, line in _lines(source):
            bar.update(1)
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadSnapshotError(f"not valid JSON ({exc.msg})", lineno) from None
            except RecursionError:
                raise BadSnapshotError("a value is nested too deeply", lineno) from None
            except ValueError as exc:
                raise BadSnapshotError(f"not valid JSON ({exc})", lineno) from None
            if not isinstance(obj, dict):
                raise BadSnapshotError("expected a JSON object", lineno)
            if snap is None:
                snap = _Snapshot(header=_check_header(obj, lineno))
                if snap.header.get("sealed") is not None and ring is None:
                    raise EncryptionKeyError(f"the export is encrypted (key {snap.header['sealed']}): "
                                             "open the memory with its key to import it")
                continue
            if snap.header.get("sealed") is not None:
                obj = _unseal_line(obj, ring, lineno)
            kind = obj.get("kind")
            try:
                if kind == "node":
                    node, vec, model = _check_node(obj, max_chars, snap.header.get("dim"), hasher)
                    if node["id"] in snap.lines:
                        raise BadSnapshotError(f"node {node['id']} appears twice (first on line {snap.lines[node['id']]})")
                    snap.nodes.append(node)
                    snap.vectors[node["id"]] = vec
                    snap.models[node["id"]] = model
                    snap.lines[node["id"]] = lineno
                elif kind == "cursor":
                    c = _check_cursor(obj)
                    if c["session"] in seen_sessions:
                        raise BadSnapshotError(f"a second cursor for session {c['session']!r}")
                    seen_sessions.add(c["session"])
                    snap.cursors.append(c)
                    cursor_lines.append(lineno)
                elif kind == "checkpoint":
                    snap.checkpoints.append(_check_checkpoint(obj))
                elif kind == "op":
                    o = _check_op(obj)
                    if o["seq"] <= last_seq:
                        raise BadSnapshotError(f"log entries must be in increasing seq order ({o['seq']} after {last_seq})")
                    last_seq = o["seq"]
                    snap.ops.append(o)
                else:
                    raise BadSnapshotError(f"unknown kind {check.show(kind)} (expected node, cursor, checkpoint or op)")
            except BadSnapshotError as exc:
                if exc.line is None:
                    raise BadSnapshotError(str(exc), lineno) from None
                raise
            except HybridMemoryError as exc:
                raise BadSnapshotError(str(exc), lineno) from None
    finally:
        bar.close()
    if snap is None:
        raise BadSnapshotError("the file is empty (no header line)")
    _check_tree(snap, cursor_lines)
    return snap


def _check_header(obj: Mapping[str, Any], lineno: int) -> dict[str, Any]:
    if obj.get("format") != FORMAT:
        raise BadSnapshotError(f"not a hybrid-memory export (the first line must be a header with format {FORMAT!r})", lineno)
    if obj.get("version") != VERSION:
        raise BadSnapshotError(f"unsupported export version {check.show(obj.get('version'))} (this library reads {VERSION})", lineno)
    dim = obj.get("dim")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise BadSnapshotError(f"header dim must be a positive integer or null, got {check.show(dim)}", lineno)
    return dict(obj)


def _get(obj: Mapping[str, Any], key: str) -> Any:
    if key not in obj:
        raise BadSnapshotError(f"missing field {key!r}")
    return obj[key]


def _str(obj: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    v = obj.get(key) if optional else _get(obj, key)
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise BadSnapshotError(f"{key} must be a string, got {check.show(v)}")
    return v


def _id(obj: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    v = _str(obj, key, optional=optional)
    if v is not None and not _ID.match(v):
        raise BadSnapshotError(f"{key} {check.show(v)} is not a node id (1-32 letters, digits or _)")
    return v


def _num(obj: Mapping[str, Any], key: str) -> float:
    v = _get(obj, key)
    try:
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    except OverflowError:  # an integer past any float
        ok = False
    if not ok:
        raise BadSnapshotError(f"{key} must be a finite number, got {check.show(v)}")
    return float(v)


def _int(obj: Mapping[str, Any], key: str, minimum: int, *, optional: bool = False) -> Any:
    v = obj.get(key) if optional else _get(obj, key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v < 2**63:
        raise BadSnapshotError(f"{key} must be an integer from {minimum} to 2**63-1, got {check.show(v)}")
    return v


def _unseal_line(obj: Mapping[str, Any], ring: Keyring | None, lineno: int) -> dict[str, Any]:
    sealed = obj.get("sealed")
    if ring is None or not isinstance(sealed, str) or set(obj) != {"sealed"}:
        raise BadSnapshotError("an encrypted export holds only sealed lines", lineno)
    try:
        inner = json.loads(ring.unseal(sealed, "export"))
    except RecursionError:
        raise BadSnapshotError("a value is nested too deeply", lineno) from None
    except StorageError as exc:
        raise BadSnapshotError(str(exc), lineno) from None
    except ValueError as exc:
        raise BadSnapshotError(f"a sealed line is not valid JSON ({exc})", lineno) from None
    if not isinstance(inner, dict):
        raise BadSnapshotError("expected a JSON object", lineno)
    return inner


def _check_node(
    obj: Mapping[str, Any], max_chars: int, dim: int | None, hasher: Callable[[str], str] = content_hash,
) -> tuple[dict[str, Any], np.ndarray[Any, Any] | None, str]:
    node_id = _id(obj, "id")
    ntype = _str(obj, "type")
    if ntype not in {t.value for t in NodeType}:
        raise BadSnapshotError(f"unknown node type {ntype!r}")
    status = _str(obj, "status")
    if status not in {s.value for s in Status}:
        raise BadSnapshotError(f"unknown status {status!r}")
    content = check.content(_get(obj, "content"), max_chars)
    meta = _get(obj, "meta")
    if not isinstance(meta, dict):
        raise BadSnapshotError(f"meta must be a JSON object, got {check.show(meta)}")
    pinned = _get(obj, "pinned")
    if not isinstance(pinned, bool):
        raise BadSnapshotError(f"pinned must be true or false, got {check.show(pinned)}")
    node = {
        "id": node_id,
        "parent_id": _id(obj, "parent_id", optional=True),
        "type": ntype,
        "content": content,
        "meta": to_json(check.meta(meta)),
        "importance": check_unit(_get(obj, "importance"), "importance"),
        "confidence": check_unit(_get(obj, "confidence"), "confidence"),
        "access_count": _int(obj, "access_count", 0),
        "pinned": pinned,
        "status": status,
        "version": _int(obj, "version", 1),
        "depth": _int(obj, "depth", 0),
        "path": _str(obj, "path"),
        "branch_id": _id(obj, "branch_id"),
        "created_at": _num(obj, "created_at"),
        "updated_at": _num(obj, "updated_at"),
        "accessed_at": _num(obj, "accessed_at"),
        "active_at": _num(obj, "active_at"),
        "archived_op": _int(obj, "archived_op", 0, optional=True),
        # Derived from the content: computed again rather than trusted.
        "content_hash": hasher(content),
        "tokens": text.count_tokens(content),
    }
    model = _str(obj, "embed_model", optional=True) or ""
    raw = obj.get("embedding")
    vec = None
    if raw is not None:
        if not isinstance(raw, str):
            raise BadSnapshotError("embedding must be base64 text or null")
        try:
            data = base64.b64decode(raw, validate=True)
        except ValueError:
            raise BadSnapshotError("embedding is not valid base64") from None
        if not data or len(data) % 4:
            raise BadSnapshotError(f"embedding has {len(data)} bytes, not a whole number of float32")
        vec = np.frombuffer(data, dtype="<f4").astype(np.float32)
        if dim is not None and len(vec) != dim:
            raise BadSnapshotError(f"embedding has {len(vec)} dimensions, the header says {dim}")
        if not np.all(np.isfinite(vec)):
            raise BadSnapshotError("embedding holds a NaN or an infinity")
    return node, vec, model


def _check_cursor(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "session": check.namespace(_get(obj, "session")),
        "active_id": _id(obj, "active_id", optional=True),
        "updated_at": _num(obj, "updated_at"),
    }


def _check_checkpoint(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": _int(obj, "id", 1, optional=True),
        "session": check.namespace(_get(obj, "session")),
        "active_id": _str(obj, "active_id", optional=True),
        "log_seq": _int(obj, "log_seq", 0),
        "ts": _num(obj, "ts"),
        "note": _str(obj, "note", optional=True),
    }


def _check_op(obj: Mapping[str, Any]) -> dict[str, Any]:
    op = _str(obj, "op")
    if not op or len(op) > 16:
        raise BadSnapshotError(f"op must be a name of 1-16 characters, got {check.show(op)}")
    payload = _get(obj, "payload")
    if not isinstance(payload, dict):
        raise BadSnapshotError("payload must be a JSON object")
    return {
        "seq": _int(obj, "seq", 1),
        "session": check.namespace(_get(obj, "session")),
        "ts": _num(obj, "ts"),
        "op": op,
        "node_id": _str(obj, "node_id", optional=True),
        "payload": payload,
    }


def _check_tree(snap: _Snapshot, cursor_lines: Sequence[int]) -> None:
    """Every parent is in the file, every path and depth agrees with the parents,
    every branch head is on the node's path, every cursor names a node of the file."""
    by_id = {n["id"]: n for n in snap.nodes}
    for n in snap.nodes:
        line = snap.lines[n["id"]]
        pid = n["parent_id"]
        if pid is not None and pid not in by_id:
            raise BadSnapshotError(f"node {n['id']}: parent {pid} is not in the file", line)
        expected = f"{n['id']}/" if pid is None else f"{by_id[pid]['path']}{n['id']}/"
        if n["path"] != expected:
            raise BadSnapshotError(f"node {n['id']}: path {n['path']!r} does not match its parents ({expected!r})", line)
        if n["depth"] != n["path"].count("/") - 1:
            raise BadSnapshotError(f"node {n['id']}: depth {n['depth']} does not match its path", line)
        if n["branch_id"] not in path_ids(n["path"]):
            raise BadSnapshotError(f"node {n['id']}: branch head {n['branch_id']} is not on its path", line)
    for c, line in zip(snap.cursors, cursor_lines, strict=True):
        if c["active_id"] is not None and c["active_id"] not in by_id:
            raise BadSnapshotError(f"cursor of session {c['session']!r} names node {c['active_id']}, not in the file", line)


__all__ = [
    "FORMAT",
    "STATE_FIELDS",
    "VERSION",
    "BadSnapshotError",
    "Op",
    "State",
    "TimeTravel",
    "Transfer",
    "access_payload",
    "describe",
    "erased_ids",
    "export",
    "import_",
    "live_state",
    "read_ops",
    "recent_ops",
    "replay",
    "skeletons",
    "time_travel",
    "travel_state",
]
