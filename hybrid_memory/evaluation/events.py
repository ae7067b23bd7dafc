"""A trace's events checked and made explicit (:func:`prepare`), so that every
system replays the same, fully specified events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .systems import line_tokens
from .trace import OPS, TraceError


@dataclass
class Query:
    id: str
    namespace: str
    text: str
    gold: frozenset[str]
    task: frozenset[str]
    ts: float
    category: str
    full_tokens: int
    after_restart: bool


@dataclass
class Prepared:
    events: list[dict[str, Any]]
    queries: list[Query]
    nodes: int
    namespaces: int
    restarts: int
    texts: list[str]


def prepare(raw: Iterable[Mapping[str, Any]]) -> Prepared:
    """Check every event and make the implicit explicit: a missing ``parent`` is
    the active node (the last focused or last added task), a missing ``ts`` is the
    previous one. Every system then replays the same, fully specified events."""
    out = Prepared([], [], 0, 0, 0, [])
    at = _Cursor()
    for i, ev in enumerate(raw, start=1):
        if not isinstance(ev, Mapping) or ev.get("op") not in OPS:
            raise TraceError(f"event {i}: not an object with an op in {sorted(OPS)}: {ev!r:.120}")
        e = dict(ev)
        at.stamp(e, i)
        op = e["op"]
        if op == "namespace":
            at.enter(str(e.get("name") or f"ns{i}"))
            out.namespaces += 1
        elif op == "add":
            at.add(e, i)
            out.nodes += 1
            out.texts.append(e["content"])
        elif op in ("focus", "feedback", "finish"):
            _need(e, i, "id")
            if e["id"] not in at.seen:
                raise TraceError(f"event {i}: {op} of {e['id']!r}, which has not been added")
            if op == "focus":
                at.active = e["id"]
        elif op == "restart":
            out.restarts += 1
            at.restarted = True
            e["expected_active"] = at.active
        elif op == "query":
            out.queries.append(at.query(e, i))
            out.texts.append(e["text"])
            e["_q"] = len(out.queries) - 1
        e["_ns"] = at.namespace
        out.events.append(e)
    out.namespaces = max(out.namespaces, 1)
    return out


@dataclass
class _Cursor:
    """Where :func:`prepare` is in a trace: the namespace, its clock, what it holds."""

    namespace: str = "default"
    active: str | None = None
    now: float = 0.0
    full_tokens: int = 0
    restarted: bool = False
    seen: set[str] = field(default_factory=set)

    def stamp(self, e: dict[str, Any], i: int) -> None:
        """Give ``e`` its time: its own ``ts`` (never before the previous event's) or
        the previous one's. Each namespace keeps its own clock from 0."""
        if e["op"] == "namespace":
            self.now = 0.0
        if "ts" in e and e["ts"] is not None:
            try:
                self.now = max(self.now, float(e["ts"]))
            except (TypeError, ValueError):
                raise TraceError(f"event {i}: ts must be a number of seconds") from None
        e["ts"] = self.now

    def enter(self, namespace: str) -> None:
        self.namespace, self.seen, self.active, self.full_tokens, self.restarted = namespace, set(), None, 0, False

    def add(self, e: dict[str, Any], i: int) -> None:
        _need(e, i, "id", "content")
        if e["id"] in self.seen:
            raise TraceError(f"event {i}: id {e['id']!r} was added before")
        if "parent" not in e:
            e["parent"] = self.active
        if e["parent"] is not None and e["parent"] not in self.seen:
            raise TraceError(f"event {i}: parent {e['parent']!r} has not been added")
        e.setdefault("type", "event")
        self.seen.add(e["id"])
        self.full_tokens += line_tokens(e["type"], e["content"])
        if e["type"] == "task":
            self.active = e["id"]

    def query(self, e: dict[str, Any], i: int) -> Query:
        _need(e, i, "id", "text", "gold")
        gold = frozenset(_as_list(e["gold"]))
        missing = sorted(gold - self.seen)
        if not gold or missing:
            raise TraceError(f"event {i}: query {e['id']!r} has no gold, or gold not yet added: {missing}")
        return Query(str(e["id"]), self.namespace, e["text"], gold, frozenset(_as_list(e.get("task"))),
                     self.now, str(e.get("category") or "all"), self.full_tokens, self.restarted)


def _need(e: Mapping[str, Any], i: int, *keys: str) -> None:
    for key in keys:
        if e.get(key) is None:
            raise TraceError(f"event {i} ({e.get('op')}): {key!r} is missing")


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]
