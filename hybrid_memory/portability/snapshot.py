"""Export and import: a namespace as a portable JSON Lines file, and back."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from sqlalchemy import func, insert, select
from sqlalchemy import text as sql_text
from sqlalchemy.engine import Connection

from .. import _validate as check
from .. import context, text
from ..errors import (
    ConflictError,
    InvalidInputError,
    InvalidTypeError,
    StorageError,
)
from ..model import Status
from ..progress import progress_bar
from ..store.schema import checkpoints, cursors, nodes, oplog, to_blob
from .checks import Snapshot, read_snapshot
from .format import CHUNK, FORMAT, VERSION
from .host import Host
from .oplog import lock_log, parse_payload
from .replay import State, regroup


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


def _not_the_memorys_own(mem: Host, target: Path) -> None:
    """Refuse to write over the memory's own files: its database (and WAL) or its index."""
    where = target.resolve()
    db = mem.store.file
    own = [] if db is None else [db.resolve().with_name(db.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    chroma = None if mem.folder is None else (mem.folder / "chroma").resolve()
    if where in own or (chroma is not None and (where == chroma or chroma in where.parents)):
        raise InvalidInputError(f"{target} is one of the memory's own files; export elsewhere")


def export(mem: Host, path: str | os.PathLike[str], *, include_log: bool = False) -> Transfer:
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
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InvalidInputError(f"cannot write {target}: a part of its folder path is a file") from None
    except OSError as exc:
        raise StorageError(f"cannot write {target}: {exc}") from exc
    try:
        with open(tmp, "x", encoding="utf-8", newline="\n") as fh, mem.store.reading() as conn:
            counts = _write_export(mem, conn, fh, include_log)
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


def _write_export(mem: Host, conn: Connection, fh: TextIO, include_log: bool) -> dict[str, int]:
    """The header line, then a line per node, cursor, checkpoint and (with
    ``include_log``) log entry of the namespace; how many lines of each kind."""
    ns, ring = mem.namespace, mem.store.keyring
    counts = {"node": 0, "cursor": 0, "checkpoint": 0, "op": 0}

    def line(obj: Mapping[str, Any]) -> str:
        # An encrypted memory exports encrypted: each line sealed whole.
        return _dumps(obj) if ring is None else _dumps({"sealed": ring.seal(json.dumps(obj, ensure_ascii=False, allow_nan=False), "export")})

    total = int(conn.execute(select(func.count()).where(nodes.c.namespace == ns)).scalar_one())
    if include_log:
        total += int(conn.execute(select(func.count()).where(oplog.c.namespace == ns)).scalar_one())
    fh.write(_dumps(_export_header(mem, conn, include_log)))
    bar = progress_bar(total, "export")
    try:
        q = select(nodes).where(nodes.c.namespace == ns).order_by(nodes.c.depth, nodes.c.created_at, nodes.c.id)
        for row in conn.execute(q):
            fh.write(line(node_line(dict(row._mapping))))
            counts["node"] += 1
            bar.update(1)
        for c in conn.execute(select(cursors).where(cursors.c.namespace == ns).order_by(cursors.c.session)):
            fh.write(line({"kind": "cursor", "session": c.session, "active_id": c.active_id,
                             "updated_at": c.updated_at, "focused": bool(c.focused)}))
            counts["cursor"] += 1
        q = select(checkpoints).where(checkpoints.c.namespace == ns).order_by(checkpoints.c.id)
        for cp in conn.execute(q):
            fh.write(line({"kind": "checkpoint", "id": cp.id, "session": cp.session,
                             "active_id": cp.active_id, "log_seq": cp.log_seq, "ts": cp.ts, "note": cp.note}))
            counts["checkpoint"] += 1
        if include_log:
            for o in conn.execute(select(oplog).where(oplog.c.namespace == ns).order_by(oplog.c.seq)):
                payload = parse_payload(o.payload)
                fh.write(line({"kind": "op", "seq": o.seq, "session": o.session, "ts": o.ts, "op": o.op,
                                 "node_id": o.node_id, "payload": payload if payload is not None else {"corrupt": True}}))
                counts["op"] += 1
                bar.update(1)
    finally:
        bar.close()
    return counts


def _export_header(mem: Host, conn: Connection, include_log: bool) -> dict[str, Any]:
    ring = mem.store.keyring
    blob = conn.execute(select(nodes.c.embedding).where(nodes.c.namespace == mem.namespace,
                                                        func.length(nodes.c.embedding) > 0)
                        .limit(1)).scalar()
    header = {
        "format": FORMAT, "version": VERSION, "namespace": mem.namespace, "embed_model": mem.embedder.name,
        "dim": len(blob) // 4 if blob is not None else None,
        "exported_at": mem.clock(), "include_log": include_log, "vectors": context.VECTORS_VERSION,
    }
    if ring is not None:
        header["sealed"] = ring.primary
    return header


def node_line(m: Mapping[str, Any]) -> dict[str, Any]:
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


def import_(mem: Host, path: str | os.PathLike[str]) -> Transfer:
    """Load a file written by :func:`export` into ``mem``'s namespace, which must be
    empty. Every line is checked first; then one transaction writes nodes, terms,
    cursors, checkpoints and the log, and queues the vectors for the index."""
    source = _path_arg(path)
    snap = read_snapshot(source, mem.config.write.max_content_chars, mem.store.keyring, mem.store.content_hash)
    name = mem.embedder.name
    redo = [n["id"] for n in snap.nodes if snap.vectors[n["id"]] is None or snap.models.get(n["id"]) != name]
    blobs: dict[str, bytes] = {}
    if redo:
        by_id = {n["id"]: n for n in snap.nodes}
        bar = progress_bar(len(redo), "embed")
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
    now = mem.clock()

    def run(conn: Connection) -> Transfer:
        return _write_snapshot(mem, conn, snap, blobs, redo, now, str(source))

    result = mem.store.write(run)
    mem.drain()
    return result


def _write_snapshot(
    mem: Host, conn: Connection, snap: Snapshot, blobs: Mapping[str, bytes],
    redo: Sequence[str], now: float, source: str,
) -> Transfer:
    store, ns, name = mem.store, mem.namespace, mem.embedder.name
    lock_log(mem.store, conn)
    _refuse_unless_empty(mem, conn, snap)
    top = int(conn.execute(select(func.max(oplog.c.seq))).scalar() or 0)
    # Log positions: the file's own when they are all past this store's log, else shifted.
    offset = 0
    if snap.ops and snap.ops[0]["seq"] <= top:
        offset = top - snap.ops[0]["seq"] + 1
    shift = _shifter(offset)
    bar = progress_bar(len(snap.nodes) + len(snap.ops), "import")
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
        regroup(State(nodes={r["id"]: r for r in rows}), mode)
        regrouped = any(r["branch_id"] != h for r, h in zip(rows, heads, strict=True))
        _insert_nodes(mem, conn, snap, rows, again, bar)
        if snap.cursors:
            conn.execute(insert(cursors), [dict(c, namespace=ns) for c in snap.cursors])
        if snap.checkpoints:
            _insert_checkpoints(conn, ns, snap.checkpoints, shift)
        if snap.ops:
            n_ops = _insert_ops(conn, ns, snap.ops, offset, shift, bar)
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
        store.log.append(conn, ns, mem.session, now, "branch_mode", None, {"mode": mode})
        n_ops += 1
    return Transfer(source, len(rows), len(snap.cursors), len(snap.checkpoints), n_ops, len(redo))


def _refuse_unless_empty(mem: Host, conn: Connection, snap: Snapshot) -> None:
    """An import goes into an empty namespace, and takes no id another node holds."""
    ns = mem.namespace
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
    for i in range(0, len(ids), CHUNK):
        clash = conn.execute(select(nodes.c.id, nodes.c.namespace).where(nodes.c.id.in_(ids[i : i + CHUNK]))).first()
        if clash is not None:
            where = "this namespace" if clash.namespace == mem.namespace else "another namespace of this store"
            raise ConflictError(f"node {clash.id} already exists in {where}")


def _shifter(offset: int) -> Callable[[Any], Any]:
    """Moves a log position of the file by ``offset`` (leaves anything else alone)."""

    def shift(v: Any) -> Any:
        return v + offset if isinstance(v, int) and not isinstance(v, bool) else v

    return shift


def _insert_nodes(
    mem: Host, conn: Connection, snap: Snapshot, rows: Sequence[Mapping[str, Any]], again: set[str], bar: Any,
) -> None:
    """The node rows, the terms of the live ones, and their index work."""
    store, ns = mem.store, mem.namespace
    for i in range(0, len(rows), CHUNK):
        conn.execute(insert(nodes), rows[i : i + CHUNK])
        bar.update(len(rows[i : i + CHUNK]))
    live = [r for r in rows if r["status"] == Status.LIVE.value]
    for r in live:
        store.terms.index(conn, ns, r["id"], text.term_counts(r["content"]))
    store.outbox.enqueue(conn, ns, [r["id"] for r in live], "upsert")
    # Vectors embedded here, or made by a version that read no path, are read again
    # with their path (hybrid_memory.context) once this transaction commits.
    made_here = snap.header.get("vectors") == context.VECTORS_VERSION
    context.mark(store, conn, ns, [r["id"] for r in rows if r["depth"] > 0 and (r["id"] in again or not made_here)])


def _insert_checkpoints(
    conn: Connection, ns: str, rows: Sequence[Mapping[str, Any]], shift: Callable[[Any], Any],
) -> None:
    """The file's checkpoints, with their own ids when all are free, else new ones."""
    cp_ids = [c["id"] for c in rows if c.get("id") is not None]
    keep = len(cp_ids) == len(rows) and not conn.execute(
        select(func.count()).where(checkpoints.c.id.in_(cp_ids))).scalar_one()
    for c in rows:
        values = dict(c, namespace=ns, log_seq=shift(c["log_seq"]))
        if not keep:
            values.pop("id", None)
        conn.execute(insert(checkpoints).values(**values))


def _insert_ops(
    conn: Connection, ns: str, ops: Sequence[Mapping[str, Any]], offset: int, shift: Callable[[Any], Any], bar: Any,
) -> int:
    """The file's log, moved by ``offset``; how many entries it holds."""
    entries = []
    for o in ops:
        payload = _shift_payload(o["op"], o["payload"], shift)
        entries.append({"seq": o["seq"] + offset, "namespace": ns, "session": o["session"], "ts": o["ts"],
                        "op": o["op"], "node_id": o["node_id"],
                        "payload": json.dumps(payload, ensure_ascii=False, sort_keys=True)})
    for i in range(0, len(entries), CHUNK):
        conn.execute(insert(oplog), entries[i : i + CHUNK])
        bar.update(len(entries[i : i + CHUNK]))
    return len(entries)


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
    mem: Host, conn: Connection, rows: Sequence[Mapping[str, Any]], cursor_rows: Sequence[Mapping[str, Any]],
    now: float, top: int, snap: Snapshot,
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
        payload = {"session": c["session"], "active_id": c["active_id"], "updated_at": c["updated_at"],
                   "focused": c["focused"]}
        entries.append({"seq": seq, "namespace": mem.namespace, "session": mem.session, "ts": now,
                        "op": "import_cursor", "node_id": None,
                        "payload": json.dumps(payload, ensure_ascii=False, sort_keys=True)})
        seq += 1
    for i in range(0, len(entries), CHUNK):
        conn.execute(insert(oplog), entries[i : i + CHUNK])
    return len(entries)
