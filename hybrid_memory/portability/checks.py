"""Reading and checking an export file, line by line, before anything is written."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import _validate as check
from .. import text
from ..crypto import Keyring
from ..errors import (
    EncryptionKeyError,
    HybridMemoryError,
    InvalidInputError,
    StorageError,
)
from ..model import NodeType, Status, path_ids
from ..progress import progress_bar
from ..weights import check_unit
from ..writing import content_hash, to_json
from .format import FORMAT, ID_PATTERN, VERSION, BadSnapshotError


@dataclass
class Snapshot:
    header: dict[str, Any]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    vectors: dict[str, np.ndarray[Any, Any] | None] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    cursors: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)


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


def read_snapshot(source: Path, max_chars: int, ring: Keyring | None = None,
                  hasher: Callable[[str], str] = content_hash) -> Snapshot:
    snap: Snapshot | None = None
    seen = _Seen()
    bar = progress_bar(None, "read")
    try:
        for lineno, line in _lines(source):
            bar.update(1)
            if not line.strip():
                continue
            obj = _parse_line(line, lineno)
            if snap is None:
                snap = _start(obj, lineno, ring)
                continue
            if snap.header.get("sealed") is not None:
                obj = _unseal_line(obj, ring, lineno)
            try:
                _take(snap, seen, obj, lineno, max_chars, hasher)
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
    _check_tree(snap, seen.cursor_lines)
    return snap


@dataclass
class _Seen:
    """What a line is checked against besides itself: the sessions that have a cursor
    already, the last log position, and each cursor's line (for :func:`_check_tree`)."""

    sessions: set[str] = field(default_factory=set)
    last_seq: int = 0
    cursor_lines: list[int] = field(default_factory=list)


def _parse_line(line: str, lineno: int) -> dict[str, Any]:
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
    return obj


def _start(obj: Mapping[str, Any], lineno: int, ring: Keyring | None) -> Snapshot:
    """The snapshot its header line begins."""
    snap = Snapshot(header=_check_header(obj, lineno))
    if snap.header.get("sealed") is not None and ring is None:
        raise EncryptionKeyError(f"the export is encrypted (key {snap.header['sealed']}): "
                                 "open the memory with its key to import it")
    return snap


def _take(snap: Snapshot, seen: _Seen, obj: Mapping[str, Any], lineno: int, max_chars: int,
          hasher: Callable[[str], str]) -> None:
    """Check one line after the header and add it to ``snap``."""
    kind = obj.get("kind")
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
        if c["session"] in seen.sessions:
            raise BadSnapshotError(f"a second cursor for session {c['session']!r}")
        seen.sessions.add(c["session"])
        snap.cursors.append(c)
        seen.cursor_lines.append(lineno)
    elif kind == "checkpoint":
        snap.checkpoints.append(_check_checkpoint(obj))
    elif kind == "op":
        o = _check_op(obj)
        if o["seq"] <= seen.last_seq:
            raise BadSnapshotError(f"log entries must be in increasing seq order ({o['seq']} after {seen.last_seq})")
        seen.last_seq = o["seq"]
        snap.ops.append(o)
    else:
        raise BadSnapshotError(f"unknown kind {check.show(kind)} (expected node, cursor, checkpoint or op)")


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
    if v is not None and not ID_PATTERN.match(v):
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


def _flag(obj: Mapping[str, Any], key: str, *, optional: bool = False) -> bool:
    """A true/false field; an optional one reads as false when missing."""
    v = obj.get(key, False) if optional else _get(obj, key)
    if not isinstance(v, bool):
        raise BadSnapshotError(f"{key} must be true or false, got {check.show(v)}")
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
    node = {
        "id": node_id,
        "parent_id": _id(obj, "parent_id", optional=True),
        "type": ntype,
        "content": content,
        "meta": to_json(check.meta(meta)),
        "importance": check_unit(_get(obj, "importance"), "importance"),
        "confidence": check_unit(_get(obj, "confidence"), "confidence"),
        "access_count": _int(obj, "access_count", 0),
        "pinned": _flag(obj, "pinned"),
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
        # (files written before the flag was kept lack it: their cursors were not chosen)
        "focused": _flag(obj, "focused", optional=True),
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


def _check_tree(snap: Snapshot, cursor_lines: Sequence[int]) -> None:
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
