"""Traces on disk: JSON Lines of events, one JSON object a line, UTF-8.

A trace is what the harness replays into a memory (the format is in the design
notes, "The trace format"). Reading checks the shape of every line, so that a
truncated or hand-edited file fails at load time with its line number rather
than halfway through a replay. Only the op and the fields the replay cannot do
without are checked; any other field is kept as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

OPS = frozenset({"namespace", "add", "focus", "feedback", "restart", "query", "update", "finish"})

# The fields an op cannot be replayed without; other ops are checked for "op" only.
REQUIRED: dict[str, tuple[str, ...]] = {
    "namespace": ("name",),
    "add": ("id", "content"),
    "query": ("id", "text", "gold"),
    "finish": ("id",),
}


class TraceError(ValueError):
    """A trace line (or an event about to be written) is not a valid event."""


def write_trace(events: Iterable[Mapping[str, Any]], path: str | Path) -> None:
    """Write ``events`` to ``path`` as JSON Lines, non-ASCII text kept readable.

    Each event is checked first, so a trace that could not be read back is never
    written."""
    lines = []
    for index, event in enumerate(events):
        _check(event, f"event {index}")
        lines.append(json.dumps(event, ensure_ascii=False) + "\n")
    Path(path).write_text("".join(lines), encoding="utf-8")


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """The events of the trace at ``path``, in order. Blank lines are ignored.

    Raises TraceError naming the file and line of the first bad line."""
    events = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                event = json.loads(line)
            except json.JSONDecodeError as error:
                raise TraceError(f"{where}: not JSON ({error.msg})") from error
            _check(event, where)
            events.append(event)
    return events


def _check(event: object, where: str) -> None:
    """Raise TraceError unless ``event`` is an object with a known op and its required fields."""
    if not isinstance(event, Mapping):
        raise TraceError(f"{where}: expected a JSON object, got {type(event).__name__}")
    op = event.get("op")
    if op not in OPS:
        raise TraceError(f"{where}: unknown op {op!r}; expected one of {sorted(OPS)}")
    missing = [name for name in REQUIRED.get(op, ()) if name not in event]
    if missing:
        raise TraceError(f"{where}: {op} event lacks {', '.join(missing)}")


def finish_sessions(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``events`` with a ``finish`` of each top-level task once the next top-level
    task of its namespace is added: for traces of sessions one after the other
    (LoCoMo, LongMemEval, MemDaily), where a session is over when the next begins.
    A trace that finishes tasks itself is returned as it is."""
    out = [dict(e) for e in events]
    if any(e.get("op") == "finish" for e in out):
        return out
    result: list[dict[str, Any]] = []
    last: str | None = None
    for e in out:
        if e.get("op") == "namespace":
            last = None
        elif e.get("op") == "add" and e.get("type") == "task" and e.get("parent") is None:
            if last is not None:
                result.append({"op": "finish", "id": last})
            last = e["id"]
        result.append(e)
    return result
