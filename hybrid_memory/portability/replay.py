"""Replay: a namespace rebuilt from its operation log (:func:`replay`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from .. import text
from ..model import NodeType, Status, path_ids
from ..store.schema import cursors, nodes, oplog
from ..writing import branch_info_for, content_hash
from .format import STATE_FIELDS
from .host import HasLog
from .oplog import Op


@dataclass
class State:
    """A namespace as the log says it is: node fields by id, and session cursors."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: session -> (active node id, updated_at, whether the session chose it)
    cursors: dict[str, tuple[str | None, float, bool]] = field(default_factory=dict)
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


def live_state(mem: HasLog) -> State:
    """The memory's namespace as stored now, in the shape :func:`replay` returns."""
    with mem.store.reading() as conn:
        return _stored_state(conn, mem.namespace)


def _stored_state(conn: Connection, namespace: str) -> State:
    cols = [nodes.c[f] for f in STATE_FIELDS]
    state = State()
    for row in conn.execute(select(*cols).where(nodes.c.namespace == namespace)):
        state.nodes[row.id] = dict(row._mapping)
    for c in conn.execute(select(cursors).where(cursors.c.namespace == namespace)):
        state.cursors[c.session] = (c.active_id, c.updated_at, bool(c.focused))
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
        for session, (active, _, _) in list(self.s.cursors.items()):
            if active is not None and active in gone:
                self.s.cursors[session] = (to, ts, False)

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
                self.s.cursors[o.session] = (node["id"], o.ts, False)

    def op_import_cursor(self, o: Op, p: Mapping[str, Any], ghost: bool) -> None:
        self.s.cursors[p["session"]] = (p.get("active_id"), float(p["updated_at"]), bool(p.get("focused", False)))

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
            self.s.cursors[o.session] = (o.node_id, o.ts, True)

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
        regroup(self.s, p["mode"])

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


def regroup(state: State, mode: str) -> None:
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
        regroup(state, branch_by)


def _travel(state: State, dropped: Iterable[str], ts: float) -> None:
    """Take ``dropped`` out of ``state``; a cursor on one moves to its nearest
    ancestor that stays (or to nothing), stamped ``ts``."""
    parents = {}
    for i in dropped:
        n = state.nodes.pop(i, None)
        if n is not None:
            parents[i] = n["parent_id"]
        state.ghosts.discard(i)
    for session, (active, _, _) in list(state.cursors.items()):
        if active is not None and active not in state.nodes:
            to = parents.get(active)
            while to is not None and to not in state.nodes:
                to = parents.get(to)
            state.cursors[session] = (to, ts, False)
