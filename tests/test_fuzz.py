"""Fuzzing the public API and the command line with hypothesis.

The contract checked: every call either works or raises a typed error (a subclass of
``HybridMemoryError``); it never raises anything else, never hangs, and a refused call
leaves the store exactly as it was. Inputs: huge and deeply nested values, control
characters, NUL, lone surrogates (what invalid UTF-8 becomes in a Python string),
bytes, SQL-looking and path-looking strings, NaN, infinities, -0.0, 1e308, integers
past 64 bits, negative or enormous k and budgets, arguments of the wrong type. Then
the limits: a chain of 10,000 levels and a node with 10,000 children either work or
stop at ``write.max_depth`` / ``write.max_children`` with a typed error and nothing
of the refused batch written.

Everything is real: SQLite files (and PostgreSQL when ``HYBRID_MEMORY_TEST_PG_URL``
is set), an embedded Chroma, the bundled model. Most examples give a call valid
arguments but one, so that each bad value reaches the check meant for it. A fuzz
test does not stop at its first failure: it collects every distinct one (the
exception type and the library line it came from; a refused call that changed the
store; a call that never returns ends the run with every thread's stack, after
``KILL_AFTER_S``: tests do not time things otherwise) with the shortest call that showed it,
and fails once at the end listing them all: shrinking through real writes would take
minutes per bug, and one run should show every bug. Examples are derandomized (the
same every run); ``HYBRID_MEMORY_FUZZ_RANDOM=1`` explores new ones and
``HYBRID_MEMORY_FUZZ_EXAMPLES`` sets how many per operation (default 40).
"""

from __future__ import annotations

import collections
import dataclasses
import faulthandler
import functools
import io
import json
import math
import os
import reprlib
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.strategies import SearchStrategy

from hybrid_memory import (
    ROOT,
    HybridMemoryError,
    InvalidInputError,
    MemoryTree,
    Node,
    NodeType,
    SqlStore,
    errors,
)
from hybrid_memory.batch_reads import SCAN_LIMIT
from hybrid_memory.cli import main as cli_main
from hybrid_memory.dedup import is_twin

NOW = 1_750_000_000.0
EXAMPLES = int(os.environ.get("HYBRID_MEMORY_FUZZ_EXAMPLES", "40"))
#: A call still running after this is a real hang: every stack is dumped and the run ends.
KILL_AFTER_S = 600.0
DEEP = 10_000
#: Children under one hub: past batch_reads.SCAN_LIMIT (a branch's memories of a type that
#: dedup scores exactly; wider, it asks the vector index) and past the 500 ids a
#: statement binds at once, which are the widths where the paths change.
WIDE = 3_000
#: Levels or children written per add_many while building the deep and wide trees.
BATCH = 1_000

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("HYBRID_MEMORY_FUZZ_RANDOM"),
    # Failures are collected, not raised: there is nothing to replay or shrink.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)

#: The exit codes the command line may return: 0, 1 (verify found drift, or the root
#: error), 2 (argparse's usage error) and each error class's own.
EXIT_CODES = {0, 1, 2} | {getattr(errors, name).exit_code for name in errors.__all__}


# -- findings ------------------------------------------------------------------------


@dataclass
class Finding:
    kind: str  # crash, partial write, hang, unreadable store, exit code, traceback, limit not enforced
    call: str
    detail: str


@dataclass
class Findings:
    """The distinct failures of a run, each kept with the shortest call that showed it,
    and how the calls went."""

    by_key: dict[tuple[str, ...], Finding] = field(default_factory=dict)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    last_call: str = "(opening)"

    def add(self, key: tuple[str, ...], finding: Finding) -> None:
        old = self.by_key.get(key)
        if old is None or len(finding.call) < len(old.call):
            self.by_key[key] = finding

    def crash(self, call: str, exc: BaseException, group: str | None = None) -> None:
        """A crash, one per (``group``, exception type, where it came from); ``group``
        is the call's name unless given."""
        where, frames = _origin(exc)
        detail = f"{type(exc).__name__}: {_clip(str(exc), 300)}\n{frames}"
        key = ("crash", _name(call) if group is None else group, type(exc).__name__, where)
        self.add(key, Finding("crash", call, detail))

    def report(self) -> str:
        seen = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        out = [f"{len(self.by_key)} distinct failure(s) (calls: {seen}):"]
        for i, f in enumerate(self.by_key.values(), 1):
            out.append(f"\n[{i}] {f.kind}: {f.call}\n    " + f.detail.replace("\n", "\n    "))
        return "\n".join(out)

    def check(self) -> None:
        if self.by_key:
            pytest.fail(self.report(), pytrace=False)


def _name(call: str) -> str:
    return call.split("(")[0]


def _origin(exc: BaseException) -> tuple[str, str]:
    """Where a crash came from (its key: the last frame in hybrid_memory, or for a
    RecursionError the frame that recursed) and the frames worth reading."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}hybrid_memory{os.sep}" in f.filename]
    picked = ours[-3:] + ([frames[-1]] if frames and (not ours or frames[-1] is not ours[-1]) else [])
    where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "outside hybrid_memory"
    lines = [f"{Path(f.filename).name}:{f.lineno} in {f.name}: {f.line}" for f in picked]
    if isinstance(exc, RecursionError) and frames:
        (file, line, name), n = collections.Counter((f.filename, f.lineno, f.name) for f in frames).most_common(1)[0]
        if n > 20:
            where = f"{Path(file).name}:{line}"
            lines.insert(0, f"recursing at {where} in {name} ({n} frames)")
    return where, "\n".join(lines)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


class _Show(reprlib.Repr):
    """Short, recursion-safe reprs for reports: long strings by length, nodes by id."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict, self.maxtuple, self.maxother = 4, 6, 6, 6, 60

    def repr_str(self, x: str, level: int) -> str:
        return repr(x) if len(x) <= 40 else f"<str of {len(x)} chars {x[:12]!r}…{x[-20:]!r}>"

    def repr_Node(self, x: Node, level: int) -> str:  # noqa: N802 (reprlib's naming)
        return f"<Node {x.id} {x.status.value} in {x.namespace!r}>"


show = _Show().repr


def call_text(name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> str:
    parts = [show(a) for a in args] + [f"{k}={show(v)}" for k, v in (kwargs or {}).items()]
    return f"{name}({', '.join(parts)})"


# -- snapshots and the probe --------------------------------------------------------------


def snapshot(mem: MemoryTree) -> dict[str, str]:
    """What a refused call must leave as it was in ``mem``'s namespace: every node (its
    fields, version, status and usage), the log position, the active node and the ids
    in the vector index. As reprs, so that a stored NaN would still equal itself."""
    nodes = sorted(
        (n.id, n.parent_id, n.path, n.type.value, n.content, n.meta, n.importance, n.confidence,
         n.status.value, n.version, n.pinned, n.access_count, n.created_at)
        for n in mem.nodes(include_archived=True)
    )
    with mem.store.reading() as conn:
        seq = mem.store.log.last_seq(conn, mem.namespace)
        cursor = mem.store.sessions.get_cursor(conn, mem.namespace, mem.session)
    return {
        "nodes": repr(nodes),
        "log": repr(seq),
        "active": repr(cursor),
        "index": repr(sorted(mem.index.ids(mem.namespace))),
    }


def _changed(before: dict[str, str], after: dict[str, str]) -> str:
    return ", ".join(k for k in before if before[k] != after.get(k)) or "?"


def probe(findings: Findings, mems: Sequence[MemoryTree], call: str, fn: Callable[[], object]) -> str:
    """Run ``fn`` and record what breaks the contract. Returns "works", "refused", "crash",
    or "skipped" when a memory could not even be read before it."""
    before = []
    for m in mems:
        try:
            before.append(snapshot(m))
        except Exception as exc:  # a store the previous call left unreadable
            findings.add(("unreadable store", _name(findings.last_call)), Finding(
                "unreadable store", findings.last_call, f"after it, {type(exc).__name__}: {_clip(str(exc), 300)}"))
            return "skipped"
    findings.last_call = call
    faulthandler.dump_traceback_later(KILL_AFTER_S, exit=True)
    try:
        fn()
        outcome = "works"
    except HybridMemoryError:
        outcome = "refused"
    except Exception as exc:  # anything else is what this file looks for
        outcome = "crash"
        findings.crash(call, exc)
    finally:
        faulthandler.cancel_dump_traceback_later()
    if outcome != "works":
        for m, b in zip(mems, before, strict=True):
            try:
                after = snapshot(m)
            except Exception as exc:
                findings.add(("unreadable store", _name(call)),
                             Finding("unreadable store", call, f"{type(exc).__name__}: {_clip(str(exc), 300)}"))
                continue
            if after != b:
                findings.add(("partial write", outcome, _name(call), _changed(b, after)),
                             Finding("partial write", call, f"a {outcome} call changed: {_changed(b, after)}"))
    findings.outcomes[outcome] += 1
    if currently_in_test_context():
        event(outcome)
    return outcome


def chance(data: st.DataObject, percent: int, label: str) -> bool:
    """True ``percent`` times in a hundred. Not ``integers(0, 99) < percent``: hypothesis
    favours the bounds, so a rare choice would come up far too often."""
    return bool(data.draw(st.sampled_from([False] * (100 - percent) + [True] * percent), label=label))


# -- values ------------------------------------------------------------------------------


def _encodable(path: str) -> bool:
    """Whether os.fsencode takes it (lone surrogates outside its escape range do not)."""
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        return False
    return True


def nested_list(depth: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(depth):
        out = [out]
    return out


def nested_dict(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(depth):
        out = {"a": out}
    return out


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque object>"


NASTY_TEXT = [
    "", " ", "\t\n\r ", "\x00", "a\x00b", "\x07\x08\x1b[31mred", "\x7f\x85\u2028\u2029",
    "\u202eevil", "\ufeffbom", "\u200b", "\ud800", "\udfff", "a\udc80b\udcff",
    "\U0001f642" * 5, "中文的记忆：报销单", "'; DROP TABLE hm_nodes; --", '" OR 1=1 --',
    "') OR ('1'='1", "%", "_", "%_%", "\\", "../", "../../etc/passwd", "/", "a/b/",
    "*", "NULL", "null", "None", "NaN", "ROOT", "0123456789abcdef", "ffffffffffffffff",
]
HUGE_TEXT = ["x" * 8_001, "word " * 200_000, "\x00" * 1_000, "字" * 1_000_000, "\ud800" * 10_000]

texts: SearchStrategy[str] = st.one_of(
    st.sampled_from(NASTY_TEXT),
    st.text(max_size=40),
    st.text(st.characters(exclude_categories=()), max_size=20),  # controls and surrogates too
    st.binary(max_size=30).map(lambda b: b.decode("utf-8", "surrogateescape")),  # invalid UTF-8
)
huge_texts = st.sampled_from(HUGE_TEXT)
good_texts: SearchStrategy[str] = st.sampled_from([
    "The hotel near Alfama is booked from May 3 to May 7",
    "Finance returned the claim: the invoice is unreadable",
    "The user prefers window seats on flights",
    "报销单被退回：发票看不清",
]) | st.text(st.characters(categories=("L", "N")), min_size=1, max_size=40)

ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**63, -(2**63), 2**64, 10**400, -(10**400), 0.5, -0.0,
    1e308, -1e308, 5e-324, math.nan, -math.nan, math.inf, -math.inf, "", "0.5", "5", b"bytes",
    b"\xff\xfe\x00", bytearray(b"x"), [], {}, (), set(), frozenset({1}), _Opaque(), ROOT,
    Decimal("0.5"), Decimal("NaN"), Fraction(1, 2), complex(1, 2), np.float32(0.5),
    np.float64(math.nan), np.int64(5), np.bool_(True), np.array([0.5]), range(3),
]
odd: SearchStrategy[Any] = st.one_of(
    st.sampled_from(ODD_VALUES),
    st.integers(),
    st.floats(),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from([1_000, 100_000]).map(nested_list),
    texts,
)
#: Odd values that are not paths: a str would be a path relative to the working folder.
odd_not_paths = odd.filter(lambda v: not isinstance(v, (str, os.PathLike)))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
good_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | good_texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(good_texts, inner, max_size=3),
    max_leaves=6,
)
bad_metas: SearchStrategy[Any] = st.one_of(
    st.dictionaries(texts, json_values, min_size=1, max_size=3),
    st.sampled_from([1_000, 100_000]).map(lambda d: {"deep": nested_list(d)}),
    st.sampled_from([1_000, 100_000]).map(nested_dict),
    st.sampled_from([{"big": "x" * 1_000_000}, {"x": math.nan}, {1: "int key"}, {"k": b"bytes"},
                     {"k": {1, 2}}, {"k": 10**400}, {"\ud800": "surrogate key"}, {"v": "\udcff"},
                     {"v": "a\x00b"}, {"\x00": 1}]),
    odd,
)
valid_types = st.sampled_from(list(NodeType) + [t.value for t in NodeType])
bad_types = st.sampled_from([" TASK ", "Fact\n", "task\x00", "tasks", "\ud800"]) | texts | odd
unit = st.floats(0, 1)
bad_weights = st.floats() | odd
near_now = st.floats(NOW - 1e6, NOW + 1e6)
bad_times = st.floats() | st.integers() | st.sampled_from([1e308, -1e308, 2**63, 10**400]) | odd
small_counts = st.integers(1, 50)
bad_counts = st.integers(max_value=0) | st.sampled_from([2**31, 2**63, 2**64, 10**400]) | st.floats() | odd
bad_flags = odd.filter(lambda v: not isinstance(v, bool))
bad_contents = st.one_of(texts, huge_texts, odd)
bad_queries = st.one_of(texts, huge_texts, odd.filter(lambda v: v is not None))


# -- the shared memory ----------------------------------------------------------------------


def populate(mem: MemoryTree) -> None:
    """Two trees, a nested task, meta, a pinned node and an archived one."""
    made = mem.add_many([
        {"key": "trip", "content": "Plan the Lisbon trip in May", "type": "task", "parent": ROOT},
        {"content": "The hotel near Alfama is booked from May 3 to May 7", "type": "fact", "parent": "trip",
         "meta": {"source": "email"}},
        {"content": "The user prefers window seats on flights", "type": "preference", "parent": "trip", "pinned": True},
        {"key": "porto", "content": "Compare train and flight options to Porto", "type": "task", "parent": "trip"},
        {"content": "The morning train to Porto takes about three hours", "type": "fact", "parent": "porto"},
        {"key": "billing", "content": "Refactor the billing service", "type": "task", "parent": ROOT},
        {"content": "An outdated note about the old invoice format", "type": "event", "parent": "billing"},
    ])
    if not made[-1].merged:
        mem.archive(made[-1])


@dataclass
class World:
    mem: MemoryTree
    foreign: list[Node]  # nodes of another namespace in the same folder
    open_namespace: Callable[[str], MemoryTree]
    scratch: Path
    export_lines: list[str]  # a real export of a populated memory, for mutated imports
    findings: Findings = field(default_factory=Findings)
    empty: MemoryTree | None = None
    empties: int = 0
    generation: int = 0

    def start_over(self) -> None:
        """Fuzz a fresh namespace from now on (the last one was left broken)."""
        self.generation += 1
        self.mem = self.open_namespace(f"fuzz{self.generation}")
        populate(self.mem)

    def reset_shape(self) -> None:
        """Put back what random deletes and forgets took: live nodes and an archived one."""
        nodes = self.mem.nodes(include_archived=True)
        if sum(n.live for n in nodes) < 4 or all(n.live for n in nodes):
            populate(self.mem)

    def empty_memory(self) -> MemoryTree:
        """A namespace with nothing in it, for import_ (a new one once an import filled it)."""
        if self.empty is None or self.empty.nodes(include_archived=True):
            if self.empty is not None:
                self.empty.close()
            self.empties += 1
            self.empty = self.open_namespace(f"empty{self.empties}")
        return self.empty


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, embedder: Any, module_stores: Any) -> Iterator[World]:
    root = tmp_path_factory.mktemp("fuzz")
    folder = root / "mem"
    opened: list[MemoryTree] = []

    def open_namespace(ns: str) -> MemoryTree:
        mem: MemoryTree = module_stores.open(folder, namespace=ns, embedder=embedder, clock=lambda: NOW)
        opened.append(mem)
        return mem

    mem = open_namespace("fuzz")
    other = open_namespace("other")
    populate(mem)
    populate(other)
    scratch = root / "files"
    (scratch / "folder").mkdir(parents=True)
    (scratch / "file.txt").write_text("not a folder\n")
    mem.admin.export(scratch / "good.jsonl", include_log=True)
    lines = (scratch / "good.jsonl").read_text(encoding="utf-8").splitlines()
    w = World(mem=mem, foreign=other.nodes(include_archived=True), open_namespace=open_namespace,
              scratch=scratch, export_lines=lines)
    yield w
    for m in opened:
        m.close()


# -- node references -------------------------------------------------------------------------


def pick(nodes: Callable[[], Sequence[Node]]) -> SearchStrategy[Node]:
    """One of ``nodes()`` as they are when drawn. By index, not ``sampled_from``: the
    list changes between examples, and hypothesis wants the same draws to have the same
    bounds every time."""
    return st.integers(0, 2**16).map(lambda i: (ns := nodes())[i % len(ns)])


def live_refs(w: World) -> SearchStrategy[Any]:
    nodes = pick(w.mem.nodes)
    return nodes | nodes.map(lambda n: n.id)


def archived_refs(w: World) -> SearchStrategy[Any]:
    nodes = pick(lambda: [n for n in w.mem.nodes(include_archived=True) if not n.live])
    return nodes | nodes.map(lambda n: n.id)


def bad_refs(w: World) -> SearchStrategy[Any]:
    """References callers get wrong: archived nodes, near misses of an id, a node of
    another namespace, a forged Node, or anything else."""
    mine = pick(lambda: w.mem.nodes(include_archived=True))
    theirs = pick(lambda: w.foreign)
    return st.one_of(
        archived_refs(w),
        mine.map(lambda n: n.id[:8]),
        mine.map(lambda n: n.id.upper()),
        mine.map(lambda n: f" {n.id}"),
        mine.map(lambda n: n.id + "%"),
        mine.map(lambda n: n.id + "\x00"),
        mine.map(lambda n: dataclasses.replace(n, id="0123456789abcdef")),
        mine.map(lambda n: dataclasses.replace(n, namespace="elsewhere")),
        theirs,
        theirs.map(lambda n: n.id),
        texts,
        odd,
    )


# -- the operations --------------------------------------------------------------------------

Strategy = Callable[["World"], SearchStrategy[Any]]


def const(s: SearchStrategy[Any]) -> Strategy:
    return lambda w: s


@dataclass(frozen=True)
class Arg:
    """One argument of a call: values a caller means, and values to refuse or survive."""

    name: str
    valid: Strategy
    bad: Strategy
    required: bool = False
    positional: bool = False


def flag(name: str) -> Arg:
    return Arg(name, const(st.booleans()), const(bad_flags))


def weight(name: str) -> Arg:
    return Arg(name, const(unit), const(bad_weights))


NODE = Arg("node", live_refs, bad_refs, required=True, positional=True)
CONTENT = Arg("content", const(good_texts), const(bad_contents))
META = Arg("meta", const(st.dictionaries(good_texts, good_json, max_size=3)), const(bad_metas))
TS = Arg("ts", const(near_now), const(bad_times))
NOW_ARG = Arg("now", const(near_now), const(bad_times))
PARENT = Arg("parent", lambda w: live_refs(w) | st.just(ROOT), bad_refs)
ADD_ARGS = (
    dataclasses.replace(CONTENT, required=True, positional=True),
    Arg("type", const(valid_types), const(bad_types), required=True),
    PARENT, weight("importance"), weight("confidence"), META, TS, flag("pinned"),
)


@st.composite
def batches(draw: Any, w: World, bad: bool) -> list[dict[str, Any]]:
    """add_many items: each valid (keys, parents by key), or with one field of one item bad."""
    items: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 4))):
        item: dict[str, Any] = {"content": draw(good_texts), "type": draw(valid_types)}
        if draw(st.booleans()):
            item["key"] = f"k{i}"
        keys = [it["key"] for it in items if "key" in it]
        if draw(st.booleans()):
            item["parent"] = draw(st.sampled_from(keys) if keys and draw(st.booleans()) else PARENT.valid(w))
        for a in ADD_ARGS[3:]:
            if draw(st.booleans()):
                item[a.name] = draw(a.valid(w))
        items.append(item)
    if bad:
        item = draw(st.sampled_from(items))
        name = draw(st.sampled_from([a.name for a in ADD_ARGS] + ["key", "colour", "drop content", "drop type"]))
        if name.startswith("drop "):
            item.pop(name[5:])
        else:
            by_name = {a.name: a.bad(w) for a in ADD_ARGS}
            item[name] = draw(by_name.get(name, st.sampled_from(["k0", "k1"]) | odd))
    return items


ITEMS = Arg(
    "items",
    lambda w: batches(w, False),
    lambda w: st.one_of(
        batches(w, True),
        batches(w, False).map(lambda items: [*items, "not a mapping"]),
        batches(w, False).map(iter),
        st.sampled_from(["a string", b"bytes", {"content": "x", "type": "fact"}]),
        odd,
    ),
    required=True, positional=True,
)


def export_paths(w: World) -> SearchStrategy[Any]:
    names = st.text(st.characters(categories=("L", "N")), min_size=1, max_size=20)
    return names.map(lambda t: w.scratch / "out" / f"{t}.jsonl") | names.map(lambda t: str(w.scratch / f"{t}.jsonl"))


def bad_paths(w: World) -> SearchStrategy[Any]:
    """Paths to refuse, all inside the test's scratch folder, or not paths at all."""
    s = w.scratch
    inside = texts.map(lambda t: s / "bad" / t.replace("/", "_")[:100])
    return st.one_of(
        inside,
        inside.filter(lambda p: _encodable(str(p))).map(os.fsencode),
        st.sampled_from([s / "folder", s / "file.txt" / "x.jsonl", s / "no" / "such" / "x.jsonl",
                         str(s / "a\x00b.jsonl"), s / ("x" * 300), str(s) + "/", ""]),
        odd_not_paths,
    )


@dataclass(frozen=True)
class Op:
    method: str
    args: tuple[Arg, ...]
    #: The call of a memory (None: its method named ``method``).
    of: Callable[[MemoryTree], Callable[..., object]] | None = None

    def bound(self, mem: MemoryTree) -> Callable[..., object]:
        return getattr(mem, self.method) if self.of is None else self.of(mem)


OPS: dict[str, Op] = {
    "add": Op("add", ADD_ARGS),
    "add_many": Op("add_many", (ITEMS,)),
    "update": Op("update", (NODE, CONTENT, weight("importance"), weight("confidence"), META,
                            Arg("expected_version", const(st.integers(1, 5)), const(odd)), TS)),
    "feedback": Op("feedback", (NODE, flag("important"), flag("confirmed"), weight("importance"),
                                weight("confidence"))),
    "pin": Op("pin", (NODE, flag("pinned"))),
    "move": Op("move", (NODE, Arg("new_parent", lambda w: live_refs(w) | st.just(ROOT),
                                  lambda w: bad_refs(w) | st.none(), required=True, positional=True))),
    "focus": Op("focus", (NODE,)),
    "retrieve": Op("retrieve", (Arg("query", const(good_texts | st.none()), const(bad_queries), positional=True),
                                Arg("k", const(small_counts), const(bad_counts)),
                                Arg("budget_tokens", const(st.integers(1, 2000)), const(bad_counts)),
                                Arg("branches", const(small_counts), const(bad_counts)),
                                NOW_ARG, flag("reinforce"))),
    "forget": Op("forget", (weight("threshold"), Arg("max_nodes", const(st.integers(0, 50)), const(bad_counts)),
                            flag("delete"), flag("dry_run"), NOW_ARG)),
    "archive": Op("archive", (NODE,)),
    "delete": Op("delete", (NODE,)),
    "erase": Op("erase", (NODE, flag("compact")), of=lambda mem: mem.admin.erase),
    "restore": Op("restore", (Arg("node", archived_refs, bad_refs, positional=True),
                              Arg("seq", const(st.integers(0, 50)), const(bad_counts)),
                              Arg("as_of", const(st.floats(NOW - 10, NOW + 10)), const(bad_times)))),
    "get": Op("get", (NODE,)),
    "children": Op("children", (NODE, flag("include_archived"))),
    "path": Op("path", (NODE,)),
    "weight": Op("weight", (Arg("node", lambda w: pick(w.mem.nodes), bad_refs, required=True,
                                positional=True), NOW_ARG)),
    "checkpoint": Op("checkpoint", (Arg("note", const(good_texts), const(texts | huge_texts | odd), positional=True),)),
    "is_twin": Op("is_twin", (Arg("a", const(good_texts), const(bad_contents), required=True, positional=True),
                              Arg("b", const(good_texts), const(bad_contents), required=True, positional=True),
                              Arg("cosine", const(st.floats(-1, 1)), const(bad_weights), required=True,
                                  positional=True)),
                 of=lambda mem: functools.partial(is_twin, config=mem.config, embedder=mem.embedder)),
    "export": Op("export", (Arg("path", export_paths, bad_paths, required=True, positional=True),
                            flag("include_log")), of=lambda mem: mem.admin.export),
}


def draw_call(w: World, data: st.DataObject, op: Op) -> tuple[list[Any], dict[str, Any]]:
    """Valid arguments but one (most often), or any mix of valid and bad ones."""
    names = [a.name for a in op.args]
    bad = data.draw(st.sampled_from([*names, *names, "(none)", "(any)"]), label="bad argument")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for a in op.args:
        is_bad = a.name == bad or (bad == "(any)" and data.draw(st.booleans(), label=f"{a.name} bad?"))
        if not (is_bad or a.required or data.draw(st.booleans(), label=f"{a.name} given?")):
            continue
        value = data.draw((a.bad if is_bad else a.valid)(w), label=a.name)
        if a.positional:
            args.append(value)
        else:
            kwargs[a.name] = value
    return args, kwargs


def mutated_export(w: World, data: st.DataObject) -> tuple[bytes, str]:
    """A real export file, broken in one of the ways a file gets broken, and how."""
    lines = list(w.export_lines)
    how = data.draw(st.sampled_from(["field", "field", "field", "drop", "duplicate", "swap", "bytes", "truncate",
                                     "deep", "huge line", "empty", "garbage", "crlf", "bom"]), label="mutation")
    if how == "field":
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        obj = json.loads(lines[i])
        key = data.draw(st.sampled_from([*sorted(obj), "extra"]), label="key")
        obj[key] = data.draw(json_values | st.sampled_from([10**400, -1, 2**63, "", "\ud800", [], {}]), label="value")
        lines[i] = json.dumps(obj, ensure_ascii=data.draw(st.booleans(), label="ascii"), allow_nan=True)
        how = f"line {i} {key}={show(obj[key])}"
    elif how == "drop" and len(lines) > 1:
        del lines[data.draw(st.integers(0, len(lines) - 1), label="line")]
    elif how == "duplicate":
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines.insert(i, lines[i])
    elif how == "swap" and len(lines) > 1:
        i = data.draw(st.integers(0, len(lines) - 2), label="line")
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif how == "deep":
        lines.append(data.draw(st.sampled_from(["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000]),
                               label="deep line"))
    elif how == "huge line":
        lines.append(json.dumps({"kind": "node", "content": "x" * 5_000_000}))
    elif how == "empty":
        lines = []
    elif how == "garbage":
        return bytes(data.draw(st.binary(max_size=200), label="bytes")), how
    raw = ("\r\n" if how == "crlf" else "\n").join(lines).encode("utf-8", "surrogatepass")
    if how == "bytes":
        at = data.draw(st.integers(0, len(raw)), label="offset")
        raw = raw[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\n\n"]), label="insert") + raw[at:]
    elif how == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw)), label="length")]
    elif how == "bom":
        raw = b"\xef\xbb\xbf" + raw
    return raw, how


def import_call(w: World, data: st.DataObject) -> tuple[str, Callable[[], object], list[MemoryTree]]:
    """import_ of a broken export or a bad path into an empty namespace, or of a good
    file into the full one."""
    into = data.draw(st.sampled_from(["empty", "empty", "empty", "full"]), label="into")
    mem = w.empty_memory() if into == "empty" else w.mem
    if chance(data, 70, "a file"):
        raw, how = mutated_export(w, data)
        path: Any = w.scratch / "in.jsonl"
        path.write_bytes(raw)
        shown = f"import_(<an export, {how}>) into {into}"
    else:
        path = data.draw(bad_paths(w), label="path")
        shown = f"{call_text('import_', [path])} into {into}"
    return shown, lambda: mem.admin.import_(path), [mem] if mem is w.mem else [mem, w.mem]


@pytest.mark.parametrize("op", [*OPS, "import_"])
def test_api_call_works_or_raises_a_typed_error_and_changes_nothing(world: World, op: str) -> None:
    """Random arguments to one public method: every call works or raises a
    HybridMemoryError, and a refused call leaves the nodes, the
    log, the active node and the vector index as they were. Afterwards the memory is
    still whole: the index matches the store and it exports."""
    w = world
    w.findings = Findings()

    @FUZZ
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        w.reset_shape()
        if op == "import_":
            shown, fn, mems = import_call(w, data)
        else:
            args, kwargs = draw_call(w, data, OPS[op])
            method = OPS[op].bound(w.mem)
            shown, mems = call_text(op, args, kwargs), [w.mem]
            fn = lambda: method(*args, **kwargs)  # noqa: E731
        probe(w.findings, mems, shown, fn)

    run()

    def whole() -> None:
        drift = w.mem.admin.verify()
        assert drift.clean, f"the vector index drifted from the store: {drift}"
        w.mem.admin.export(w.scratch / "after.jsonl", include_log=True)
        w.mem.retrieve("hotel")

    shown = f"verify(), export(), retrieve() after fuzzing {op}"
    if probe(w.findings, [], shown, whole) != "works":
        w.findings.add(("not whole", op), Finding("memory left broken", shown, "see the crash above, or a typed error"))
        w.start_over()  # the next operation's test starts on a memory that works
    w.findings.check()


# -- opening ---------------------------------------------------------------------------------


def test_open_works_or_raises_a_typed_error(world: World, embedder: Any) -> None:
    """MemoryTree.open with random folders, namespaces, sessions, roles and store or
    index URLs works or raises a HybridMemoryError, and leaves the existing memory alone."""
    w = world
    findings = Findings()
    s = w.scratch
    opens = Op("MemoryTree.open", (
        Arg("path", const(st.just(s / "opened")),
            const(st.sampled_from([s / "file.txt", str(s / "a\x00b"), s / "file.txt" / "x"])
                  | texts.map(lambda t: s / "opened" / t.replace("/", "_")[:100]) | odd_not_paths),
            required=True, positional=True),
        Arg("namespace", const(good_texts.filter(lambda t: len(t) <= 128)), const(texts | huge_texts | odd)),
        Arg("session", const(st.just("main")), const(texts | odd)),
        Arg("role", const(st.sampled_from(["read", "write", "admin"])), const(texts | odd)),
        Arg("store", const(st.just("sqlite://")),
            const(st.sampled_from(["", "garbage", "sqlite:////nonexistent/dir/x.db", "mysql://u@h/db",
                                   "postgresql+psycopg://nobody@127.0.0.1:1/x", "'; DROP TABLE hm_nodes; --"])
                  | odd.filter(lambda v: v is not None))),
        Arg("chroma_url", const(st.just("http://127.0.0.1:1")),
            const(st.sampled_from(["", "garbage", "http://", "ftp://x", "http://[::1", "http://h:99999"])
                  | odd.filter(lambda v: v is not None))),
    ))

    @FUZZ
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        args, kwargs = draw_call(w, data, opens)
        opened: list[MemoryTree] = []

        def open_and_use() -> None:
            mem = MemoryTree.open(*args, embedder=embedder, clock=lambda: NOW, **kwargs)
            opened.append(mem)
            mem.admin.stats()

        probe(findings, [w.mem], call_text("MemoryTree.open", args, kwargs), open_and_use)
        for m in opened:
            m.close()

    run()
    findings.check()


# -- the command line ---------------------------------------------------------------------------


COMMANDS = ("add", "retrieve", "tree", "stats", "recover", "forget", "focus", "checkpoint", "export", "import",
            "restore", "log", "verify", "repair", "reindex", "erase", "audit", "compact", "keygen", "rotate-key")


@dataclass
class CliWorld:
    folder: Path
    files: Path
    config: Path
    embedder: Any
    ids: list[str] = field(default_factory=list)

    def refill(self) -> None:
        """Populate the "cli" namespace again once random commands emptied it."""
        store = SqlStore.sqlite(self.folder / "memory.db")
        try:
            with store.reading() as conn:
                live = store.tree.live_count(conn, "cli")
        finally:
            store.close()
        if live < 4:
            with MemoryTree.open(self.folder, namespace="cli", embedder=self.embedder, config=self.config) as mem:
                populate(mem)
                self.ids = [n.id for n in mem.nodes(include_archived=True)]


@pytest.fixture(scope="module")
def cli_world(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> CliWorld:
    root = tmp_path_factory.mktemp("cli-fuzz")
    files = root / "files"
    files.mkdir()
    # torch: the command line's embedder is then the model this process has loaded already.
    config = root / "torch.toml"
    config.write_text('[embedding]\nbackend = "torch"\n')
    (files / "bad.toml").write_text("[retrieval\nk = 0\n")
    (files / "k0.toml").write_text("[retrieval]\nk = 0\n")
    (files / "garbage.jsonl").write_bytes(b"\xff\xfe not json\n")
    (files / "empty").write_bytes(b"")
    (files / "folder").mkdir()
    cw = CliWorld(folder=root / "mem", files=files, config=config, embedder=embedder)
    with MemoryTree.open(cw.folder, namespace="cli", embedder=embedder, config=config) as mem:
        populate(mem)
        cw.ids = [n.id for n in mem.nodes(include_archived=True)]
        mem.admin.export(files / "good.jsonl", include_log=True)
    return cw


def store_snapshot(folder: Path, namespace: str = "cli") -> str:
    """The relational truth of one namespace: its rows, log position and cursor."""
    store = SqlStore.sqlite(folder / "memory.db")
    try:
        with store.reading() as conn:
            rows = sorted(tuple(r) for r in store.tree.subtree_all(conn, namespace))
            return repr((rows, store.log.last_seq(conn, namespace), store.sessions.get_cursor(conn, namespace, "main")))
    finally:
        store.close()


def run_cli(argv: list[str]) -> tuple[int | None, str, str, BaseException | None]:
    """``main(argv)`` in-process with a strict UTF-8 stdout, as on a UTF-8 terminal.
    Returns (exit code, stdout, stderr, the exception that escaped main, if any)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
    code: int | None = None
    escaped: BaseException | None = None
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli_main(argv)
        except SystemExit as exc:  # argparse: usage errors and --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception as exc:  # would reach the interpreter: a traceback
            escaped = exc
    printed = []
    for stream in (out, err):
        stream.flush()
        printed.append(stream.buffer.getvalue().decode("utf-8", "replace"))
    return code, printed[0], printed[1], escaped


cli_texts = st.one_of(
    st.sampled_from([t for t in NASTY_TEXT if "\x00" not in t and "\ud800" not in t and "\udfff" not in t]),
    st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=30),
    st.text(st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), min_size=1, max_size=4),  # invalid UTF-8
    st.binary(min_size=1, max_size=20).filter(lambda b: b"\x00" not in b).map(os.fsdecode),
    st.sampled_from(["-", "--", "-x", "--json", "--help", "x" * 9_000, "word " * 20_000]),
)
cli_numbers = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "1e999", "-1e999", "99999999999999999999999999", "-5", "0",
                     "0x10", "1_000", " 5", "٣", "１２", "", "1.5", "2e-400", str(2**63), str(2**64)]),
    st.integers().map(str),
    st.floats().map(repr),
    cli_texts,
)


def cli_argv(cw: CliWorld, data: st.DataObject) -> list[str]:
    """A command line: global options (mostly good), a command, and its options, each
    value good or bad; now and then random tokens after the command."""
    d, f = data.draw, cw.files

    def value(label: str, good: SearchStrategy[str], bad: SearchStrategy[str], p_bad: int = 30) -> str:
        return str(d(bad if chance(data, p_bad, f"{label} bad?") else good, label=label))

    def opt(name: str, good: SearchStrategy[str], bad: SearchStrategy[str]) -> list[str]:
        return [name, value(name, good, bad)] if d(st.booleans(), label=f"{name}?") else []

    def flag(name: str) -> list[str]:
        return [name] if d(st.booleans(), label=name) else []

    bad_files = st.sampled_from([str(f / n) for n in ("bad.toml", "k0.toml", "missing", "folder", "garbage.jsonl", "empty")])
    argv = ["--path", str(cw.folder)]
    argv += ["--config", value("--config", st.just(str(cw.config)), bad_files, 10)]
    argv += ["--namespace", value("--namespace", st.just("cli"), st.just("fresh") | cli_texts, 15)]
    argv += flag("--json")
    for name, bad in (("--session", cli_texts), ("--key-file", bad_files), ("--model", st.sampled_from(["", "no/such/model"])),
                      ("--db-url", st.sampled_from(["", "garbage", "sqlite://", "mysql://u@h/db", "sqlite:////nonexistent/dir/x.db",
                                                    "postgresql+psycopg://nobody@127.0.0.1:1/x"])),
                      ("--chroma-url", st.sampled_from(["", "garbage", "http://", "ftp://x", "http://[::1", "http://127.0.0.1:1"]))):
        if chance(data, 4, f"{name}?"):
            argv += [name, d(bad, label=name)]
    ids = st.integers(0, 2**16).map(lambda i: cw.ids[i % len(cw.ids)])
    node_good, node_bad = ids | ids.map(lambda i: i[:6]), cli_texts | st.just("")
    count, unit_str = st.integers(1, 50).map(str), st.floats(0, 1).map(repr)
    out_path = st.text(st.characters(categories=("L", "N")), min_size=1, max_size=20).map(lambda t: str(f / "out" / f"{t}.jsonl"))
    bad_path = st.one_of(
        cli_texts.map(lambda t: str(f / "out" / t.replace("/", "_")[:100])),
        st.sampled_from([str(f / "garbage.jsonl"), str(f / "folder"), str(f), str(cw.folder / "memory.db"),
                         str(f / "bad.toml" / "x"), str(f / "empty"), ""]),
    )
    text_good = good_texts.filter(lambda t: not t.startswith("-"))
    meta_bad = cli_texts | st.sampled_from(["[" * 100_000, '{"a": NaN}', '{"a": 1e999}', "[1, 2]", '"text"']) \
        | json_values.map(lambda v: json.dumps(v, allow_nan=True))
    command = d(st.sampled_from(COMMANDS), label="command")
    arguments: dict[str, Callable[[], list[str]]] = {
        "add": lambda: [value("content", text_good, cli_texts),
                        "--type", value("--type", st.sampled_from([t.value for t in NodeType]), cli_texts)]
        + d(st.sampled_from([[], ["--root"]]) | st.tuples(st.just("--parent"), node_good | node_bad).map(list), label="parent")
        + opt("--importance", unit_str, cli_numbers) + opt("--confidence", unit_str, cli_numbers)
        + opt("--meta", st.dictionaries(good_texts, good_json, max_size=3).map(json.dumps), meta_bad) + flag("--pin"),
        "retrieve": lambda: ([value("query", text_good, cli_texts)] if d(st.booleans(), label="query?") else [])
        + opt("-k", count, cli_numbers) + opt("--budget", count, cli_numbers) + opt("--branches", count, cli_numbers)
        + flag("--explain"),
        "tree": lambda: flag("--all"),
        "stats": lambda: [],
        "recover": lambda: [],
        "forget": lambda: opt("--threshold", unit_str, cli_numbers) + opt("--max-nodes", count, cli_numbers)
        + flag("--delete") + flag("--dry-run"),
        "focus": lambda: [value("node", node_good, node_bad)],
        "checkpoint": lambda: opt("--note", text_good, cli_texts),
        "export": lambda: [value("file", out_path, bad_path)] + flag("--include-log"),
        "import": lambda: [value("file", st.just(str(f / "good.jsonl")), bad_path)],
        "restore": lambda: ([value("node", node_good, node_bad)] if d(st.booleans(), label="node?") else [])
        + opt("--seq", count, cli_numbers)
        + opt("--as-of", st.sampled_from([str(NOW), "2025-05-03", "2025-05-03T10:00:00+02:00"]),
              cli_numbers | st.sampled_from(["0001-01-01", "9999-12-31T23:59:59", "2025-13-45", "yesterday"])),
        "log": lambda: opt("-n", count, cli_numbers),
        "verify": lambda: [],
        "repair": lambda: [],
        "reindex": lambda: [],
        "erase": lambda: d(st.sampled_from([["--all"], []]) | node_good.map(lambda n: [n]) | node_bad.map(lambda n: [n]),
                           label="what") + flag("--no-compact"),
        "audit": lambda: [value("action", st.sampled_from(["verify", "show"]), cli_texts)] + opt("-n", count, cli_numbers),
        "compact": lambda: [],
        "keygen": lambda: [],
        "rotate-key": lambda: ["--new-key-file", d(bad_files, label="--new-key-file")],  # never a real key
    }
    args = arguments[command]()
    argv += [command, *args]
    if chance(data, 5, "junk?"):
        at = d(st.integers(argv.index(command) + 1, len(argv)), label="at")
        argv[at:at] = d(st.lists(cli_texts, min_size=1, max_size=3), label="junk")
    return argv


def test_cli_exits_with_a_documented_code_and_no_traceback(cli_world: CliWorld) -> None:
    """Random command lines, run in-process: each exits with a documented code (0, 1, 2
    or an error class's), nothing escapes ``main`` (it would print a traceback), stderr
    holds no traceback, and a command that fails
    (other than verify, repair and audit, whose exit 1 reports a finding) leaves the
    memory's rows, log and cursor as they were."""
    cw = cli_world
    findings = Findings()

    @settings(FUZZ, max_examples=EXAMPLES * 5)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        cw.refill()
        argv = cli_argv(cw, data)
        command = next(a for a in argv[2:] if a in COMMANDS)
        tmp = str(cw.folder.parent)
        shown = "hybrid-memory " + " ".join(show(a.replace(tmp, "$TMP")) for a in argv[2:])
        before = store_snapshot(cw.folder)
        faulthandler.dump_traceback_later(KILL_AFTER_S, exit=True)
        try:
            code, _, err, escaped = run_cli(argv)
        finally:
            faulthandler.cancel_dump_traceback_later()
        if escaped is not None:
            findings.crash(shown, escaped, group="cli")  # one bug often shows under many commands
        elif code not in EXIT_CODES:
            findings.add(("exit code", command, repr(code)), Finding("exit code", shown, f"exit code {code!r}"))
        if "Traceback (most recent call last)" in err:
            findings.add(("traceback", command), Finding("traceback", shown, _clip(err, 1500)))
        if code != 0 and command not in ("verify", "repair", "audit") and store_snapshot(cw.folder) != before:
            findings.add(("partial write", command), Finding("partial write", shown, f"exit {code}, but the store changed"))
        outcome = "crash" if escaped is not None else f"exit {code}"
        findings.outcomes[outcome] += 1
        event(f"{command}: {outcome}")

    run()
    findings.check()


# -- limits: a very deep and a very wide tree -----------------------------------------------------


def shape(mem: MemoryTree) -> tuple[int, int, int, int]:
    s = mem.admin.stats()
    return s.live, s.archived, s.depth, s.log_seq


def cli_on(folder: Path, namespace: str, *args: str) -> None:
    """Run the command line on ``folder`` (with the model this process has loaded);
    anything escaping it is raised, a non-zero exit fails."""
    config = folder.parent / "torch.toml"
    config.write_text('[embedding]\nbackend = "torch"\n')
    code, _, err, escaped = run_cli(["--path", str(folder), "--config", str(config), "--namespace", namespace, *args])
    if escaped is not None:
        raise escaped
    assert code == 0, f"exit {code}: {_clip(err, 300)}"


def build(mem: MemoryTree, total: int, items: Callable[[int, int, Node | None], list[dict[str, Any]]],
          allowed: int, findings: Findings) -> tuple[list[Node], bool]:
    """Write ``total`` nodes in batches of BATCH (``items(lo, hi, last node so far)``).
    A refused batch must be refused with an InvalidInputError, only when it passes the
    configured limit (``allowed`` nodes fit under it), and leave the memory unchanged;
    then the nodes exactly up to the limit are accepted and one more is refused. What
    goes otherwise is recorded in ``findings``. Returns the nodes written and whether
    the limit stopped them."""
    made: list[Node] = []

    def refusal(what: str, lo: int, hi: int, exc: BaseException | None, before: tuple[int, ...]) -> bool:
        """Record what is wrong with a refusal of nodes lo..hi-1; True when it is right."""
        call = f"add_many(nodes {lo}..{hi - 1}) {what}"
        if exc is None:
            findings.add(("limit", what), Finding("limit not enforced", call, f"{len(made)} nodes written, {allowed} allowed"))
        elif not isinstance(exc, InvalidInputError):
            findings.add(("limit", what), Finding("refused with the wrong error", call, f"{type(exc).__name__}: {_clip(str(exc), 300)}"))
        elif hi <= allowed:
            findings.add(("limit", what), Finding("refused below the limit", call, f"{allowed} allowed: {exc}"))
        if shape(mem) != before:
            findings.add(("limit", what, "write"), Finding("partial write", call, "the refused batch wrote something"))
        return isinstance(exc, InvalidInputError) and hi > allowed and shape(mem) == before

    while len(made) < total:
        start, stop = len(made), min(len(made) + BATCH, total)
        before = shape(mem)
        try:
            made += mem.add_many(items(start, stop, made[-1] if made else None))
        except HybridMemoryError as exc:
            if not refusal("past the limit", start, stop, exc, before):
                return made, False
            if start < allowed:
                made += mem.add_many(items(start, allowed, made[-1] if made else None))  # exactly up to it
            before, error = shape(mem), None
            try:
                made += mem.add_many(items(len(made), len(made) + 1, made[-1]))
            except HybridMemoryError as exc:
                error = exc
            return made, refusal("one past the limit", len(made), len(made) + 1, error, before)
    return made, False


def _expect(ok: bool) -> None:
    assert ok


def test_a_chain_of_ten_thousand_levels_works_or_stops_at_max_depth(open_memory: Any, stores: Any, tmp_path: Path) -> None:
    """A chain of 10,000 levels written with add_many either is written whole or stops
    with an InvalidInputError exactly at ``write.max_depth`` (the levels up to it are
    accepted; nothing of a refused batch is written). Then on the
    deepest node get, path, children, retrieve, focus, recover, stats, nodes, forget,
    move, archive and restore, export and import, delete and the command line's tree,
    log and stats all work: nothing recurses once per level."""
    mem = open_memory(namespace="t")
    limit = mem.config.write.max_depth

    def chain(lo: int, hi: int, parent: Node | None) -> list[dict[str, Any]]:
        return [{"key": f"k{i}", "content": f"level {i}", "type": "task" if i == 0 else "fact",
                 "parent": (ROOT if parent is None else parent) if i == lo else f"k{i - 1}"} for i in range(lo, hi)]

    findings = Findings()
    made, stopped = build(mem, DEEP, chain, limit + 1, findings)  # depths 0..limit
    if len(made) < 2:
        findings.check()
        pytest.fail("not even one batch of the chain was written")
    deepest, depth, middle = made[-1], len(made) - 1, made[len(made) // 2]

    def check(name: str, fn: Callable[[], object]) -> None:
        probe(findings, [], name, fn)

    check("get", lambda: _expect(mem.get(deepest).depth == depth))
    check("path", lambda: _expect([n.id for n in mem.path(deepest)] == [n.id for n in made]))
    check("children", lambda: _expect([n.id for n in mem.children(made[-2])] == [deepest.id]))
    check("retrieve", lambda: _expect(mem.retrieve(deepest.content, k=5).tokens <= mem.config.retrieval.budget_tokens))
    check("focus", lambda: mem.focus(deepest))
    check("retrieve-active", lambda: mem.retrieve())
    check("recover", lambda: _expect(len(mem.recover().path) == depth + 1))
    check("stats", lambda: _expect(mem.admin.stats().depth == depth))
    check("nodes", lambda: _expect(len(mem.nodes()) == len(made)))
    check("forget-dry-run", lambda: mem.forget(threshold=1.0, dry_run=True))
    check("move-to-root", lambda: _expect(mem.move(made[1], ROOT).depth == 0))
    check("move-back", lambda: _expect(mem.move(made[1], made[0]).depth == 1))
    check("archive-middle", lambda: _expect(len(mem.archive(middle)) == len(made) - len(made) // 2))
    check("restore-middle", lambda: mem.unarchive(middle))
    check("export", lambda: _expect(mem.admin.export(tmp_path / "deep.jsonl").nodes == len(made)))
    if stores.is_sqlite:
        for args in (("tree",), ("tree", "--all"), ("stats",), ("log", "-n", "5"), ("recover",)):
            check(f"cli {' '.join(args)}", functools.partial(cli_on, tmp_path / "mem", "t", *args))
    copy = open_memory(namespace="copy", folder=tmp_path / "mem")
    check("import", lambda: _expect(copy.admin.import_(tmp_path / "deep.jsonl").nodes == len(made)))
    check("forget", lambda: mem.forget(threshold=1.0))
    check("delete", lambda: _expect(len(mem.delete(made[0])) == len(made)))
    check("verify", lambda: _expect(mem.admin.verify().clean))
    if len(made) < DEEP and not stopped:
        findings.add(("depth",), Finding("stopped short", f"{len(made)} levels",
                                         f"neither {DEEP} levels nor write.max_depth = {limit} was reached"))
    findings.check()


def test_a_node_with_thousands_of_children_works_or_stops_at_max_children(open_memory: Any, stores: Any, tmp_path: Path) -> None:
    """WIDE children under one node are written (in batches) or stop with an
    InvalidInputError exactly at ``write.max_children``; then children, retrieve (with a
    query and without), forget (dry run and with a cap), export, the command line's
    tree and stats, and deleting the hub with its children all work."""
    assert WIDE > SCAN_LIMIT  # the hub's facts go past what dedup scores exactly
    mem = open_memory(namespace="t")
    limit = mem.config.write.max_children
    hub = mem.add("The hub", type="task", parent=ROOT)

    def children(lo: int, hi: int, _last: Node | None) -> list[dict[str, Any]]:
        return [{"content": f"child {i}", "type": "fact", "parent": hub} for i in range(lo, hi)]

    findings = Findings()
    made, stopped = build(mem, WIDE, children, limit, findings)
    n = len(made)

    def check(name: str, fn: Callable[[], object]) -> None:
        probe(findings, [], name, fn)

    budget = mem.config.retrieval.budget_tokens
    check("children", lambda: _expect({c.id for c in mem.children(hub)} == {m.id for m in made}))
    check("retrieve", lambda: _expect(mem.retrieve(f"child {n // 2}").tokens <= budget))
    check("retrieve-active", lambda: _expect(mem.retrieve().tokens <= budget))
    check("stats", lambda: _expect(mem.admin.stats().live == n + 1))
    check("forget-dry-run", lambda: _expect(len(mem.forget(threshold=1.0, dry_run=True).details) == n))
    check("export", lambda: _expect(mem.admin.export(tmp_path / "wide.jsonl").nodes == n + 1))
    if stores.is_sqlite:
        for args in (("tree",), ("stats",)):
            check(f"cli {' '.join(args)}", functools.partial(cli_on, tmp_path / "mem", "t", *args))
    check("forget-cap", lambda: _expect(mem.forget(max_nodes=n // 2).live_after == n // 2))
    check("delete", lambda: _expect(len(mem.delete(hub)) == n + 1))
    check("verify", lambda: _expect(mem.admin.verify().clean))
    if n < WIDE and not stopped:
        findings.add(("width",), Finding("stopped short", f"{n} children", f"write.max_children = {limit}"))
    findings.check()


# -- configured limits -----------------------------------------------------------------------------


def test_configured_limits_refuse_the_write_that_passes_them(open_memory: Any) -> None:
    """``write.max_depth``, ``write.max_children`` and ``write.max_content_chars`` set low:
    a write up to each limit works, the write past it raises InvalidInputError and
    changes nothing, and neither a batch nor a move gets round them."""
    mem = open_memory(write={"max_depth": 3, "max_children": 3, "max_content_chars": 60})
    findings = Findings()

    def refused(name: str, fn: Callable[[], object]) -> None:
        if probe(findings, [mem], name, fn) == "works":
            findings.add(("accepted", name), Finding("limit not enforced", name, "the call worked"))

    top, a, b, c = mem.add_many([
        {"key": "0", "content": "depth zero", "type": "task", "parent": ROOT},
        {"key": "1", "content": "depth one", "type": "fact", "parent": "0"},
        {"key": "2", "content": "depth two", "type": "fact", "parent": "1"},
        {"content": "depth three", "type": "fact", "parent": "2"},
    ])
    refused("add past max_depth", lambda: mem.add("depth four", type="fact", parent=c))
    refused("add_many past max_depth", lambda: mem.add_many([
        {"content": "a fine sibling", "type": "fact", "parent": top},
        {"key": "x", "content": "depth three again", "type": "fact", "parent": b},
        {"content": "depth four again", "type": "fact", "parent": "x"},
    ]))
    other = mem.add("another root task", type="task", parent=ROOT)
    under = mem.add("under the other root", type="fact", parent=other)
    refused("move past max_depth", lambda: mem.move(a, under))  # a's subtree would reach depth 4

    hub = mem.add("a hub task", type="task", parent=ROOT)
    mem.add_many([{"content": f"child {i}", "type": "fact", "parent": hub} for i in range(3)])
    refused("add past max_children", lambda: mem.add("child 4", type="fact", parent=hub))
    refused("add_many past max_children", lambda: mem.add_many(
        [{"content": f"more child {i}", "type": "fact", "parent": other} for i in range(3)]))
    refused("move past max_children", lambda: mem.move(under, hub))

    refused("add past max_content_chars", lambda: mem.add("x" * 61, type="fact", parent=top))
    refused("update past max_content_chars", lambda: mem.update(a, content="y" * 61))
    refused("meta past max_content_chars", lambda: mem.add("short", type="fact", parent=top, meta={"m": "z" * 80}))
    findings.check()
    assert mem.add("x" * 60, type="fact", parent=top).content == "x" * 60
