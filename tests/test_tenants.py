"""Tenant isolation, property-tested on the real stores and the real model.

In each example two to four namespaces (tenants) share one store: one SQLite file (or
one PostgreSQL schema) and one Chroma folder, through a Chroma client each or one
shared by all. Tenant "alpha" is always there, with up to three of "Alpha", "alpha "
(a trailing space), "租户乙" and "team:alpha" (a name ending in ":alpha"). Every
tenant writes a random tree of the same English and Chinese sentences, so that a
leak would be visible, plus a few memories holding its own code words ("zz" and four
letters, "暗号" and four characters) that no other tenant ever writes. Hypothesis then
drives calls from every tenant's handle: reads, writes, moves, deletes, erasures,
restores and time travel on its own nodes, retrieval, forget, export and import,
stats and recover, and bursts of calls naming the nodes of other tenants (by id, as
the ``Node`` their tenant sees, and as that ``Node`` relabelled with the caller's
namespace).

Asserted:

- A call naming a node of another namespace raises ``NamespaceError`` (one naming a
  node its tenant deleted: ``NotFoundError``, as for an id that never existed), and
  changes nothing in either tenant.
- Nothing a handle returns (nodes, ids, branch ids, contexts, ``explain()``, forget
  reports, time-travel results, export files) holds an id, a namespace or a code word
  of another tenant; scored nodes are exactly the caller's stored nodes; a branch's
  hit count is at most the caller's live nodes in it; ``stats()``, ``recover()``,
  ``forget()`` and ``erase_namespace()`` count the caller's nodes only.
- Another tenant's calls never change what a tenant sees: its nodes (every field),
  its active node, and, while it makes no call of its own, the recall of the same
  question at the same time (every score), its stats and its recovery state.
- A tenant's vector index holds exactly its live nodes. After the run every tenant,
  reopened with another ``branch_by``, is regrouped (its own stored setting is
  intact) and otherwise exactly as its last own call left it.

The single cases at the end pin what the machine does not reach: the size on disk
that ``stats()`` reports, and node ids shared by two namespaces' histories.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import Clock, Stores
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from hybrid_memory import (
    ROOT,
    ChromaIndex,
    Config,
    ConflictError,
    CycleError,
    HybridMemoryError,
    InvalidInputError,
    MemoryTree,
    NamespaceError,
    Node,
    NodeType,
    NotFoundError,
    Recall,
    SentenceTransformerEmbedder,
)
from hybrid_memory import portability as P

# -- contents: every tenant writes these ------------------------------------------------

POOL = [
    "Expense claim for Zhang San's Berlin trip",
    "Finance returned the claim: the invoice is unreadable",
    "The claim total is 1,240 euros, 860 of it the hotel bill",
    "Zhang San wants the result by SMS",
    "Migrate the order database to the new data centre",
    "The migration window is Saturday 02:00 to 06:00",
    "Rollback scripts must be tested before the cutover",
    "Book flights and a hotel for the Tokyo trip in May",
    "The user always wants an aisle seat",
    "报销张三柏林出差的费用",
    "财务退回了报销单：发票看不清",
    "报销总额一千二百四十欧元，其中酒店八百六十欧元",
    "张三希望通过短信收到结果",
    "把订单数据库迁移到新机房",
    "迁移窗口是周六凌晨两点到六点",
    "切换之前必须测试回滚脚本",
]
# A tenant's own memories: {en} and {zh} are its code words.
SECRETS = [
    "The code word for the safe is {en}",
    "{en} prefers the window seat and no red-eye flights",
    "保险箱的{zh}不能告诉别人",
    "报销单备注：{zh}，发票看不清",
]
QUESTIONS = [
    "Where does the expense claim stand?",
    "What did finance say about the invoice?",
    "When is the database migration window?",
    "What is the code word for the safe?",
    "How many tasks are there in total?",
    "Which came first, the migration or the claim?",
    "报销进度怎么样了？",
    "数据库迁移什么时候开始？",
    "保险箱的暗号是什么？",
    "一共有几个任务？",
]
# Every example opens "alpha" and up to three others: by case, by a trailing space, in
# another script, and a name ending in ":alpha" (per-namespace settings are keyed
# "<what>:<namespace>").
NAMES = ("alpha", "Alpha", "alpha ", "租户乙", "team:alpha")
TYPES = [t.value for t in NodeType]
ZH_DIGITS = "甲乙丙丁戊己庚辛壬癸"
EN_CODE = re.compile(r"\bzz[a-z]{4}\b")
ZH_CODE = re.compile(f"暗号[{ZH_DIGITS}]{{4}}")
NODE_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{24}(?![0-9a-f])")
MISSING_ID = "0123456789abcdef"
# Questions asked again while a tenant makes no call of its own, always at this time
# (so that the weights in two answers are comparable).
PROBES = ["Where does the expense claim stand?", "保险箱的暗号是什么？"]
PROBE_NOW = 1_750_000_000.0 + 30 * 86400
BIG = 10**6

# -- the tenants ----------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    """A namespace as its own handle sees it: every node (every field), and the active node."""

    nodes: dict[str, Node]
    active: str | None


def view_of(mem: MemoryTree) -> View:
    active = mem.active
    return View({n.id: n for n in mem.nodes(include_archived=True)}, None if active is None else active.id)


def difference(before: View, after: View) -> str:
    """The first few differences between two views, readable."""
    out = []
    for i in sorted(set(before.nodes) | set(after.nodes)):
        a, b = before.nodes.get(i), after.nodes.get(i)
        if a is None or b is None:
            out.append(f"{i}: {'appeared' if a is None else 'disappeared'} ({(a or b).content!r})")  # type: ignore[union-attr]
        elif a != b:
            fields = {f.name: (getattr(a, f.name), getattr(b, f.name))
                      for f in dataclasses.fields(Node) if getattr(a, f.name) != getattr(b, f.name)}
            out.append(f"{i}: {fields}")
    if before.active != after.active:
        out.append(f"active: {before.active} -> {after.active}")
    return "; ".join(out[:5]) + (" ..." if len(out) > 5 else "")


def by_top_task(seen: View) -> View:
    """``seen`` with every branch head recomputed as ``write.branch_by = "top_task"``
    groups: the outermost task on the node's path (the root when there is none)."""
    nodes = {}
    for i, n in seen.nodes.items():
        chain = n.path.rstrip("/").split("/")
        tasks = [j for j in chain if seen.nodes[j].type is NodeType.TASK]
        nodes[i] = dataclasses.replace(n, branch_id=tasks[0] if tasks else chain[0])
    return View(nodes, seen.active)


@dataclass
class Tenant:
    ns: str
    mem: MemoryTree
    en: str  # its English code word
    zh: str  # its Chinese code word
    view: View = field(default_factory=lambda: View({}, None))
    #: Every id it ever had, in the order it made them (ids are random: targets are
    #: picked by this order, so that an example replays the same).
    order: list[str] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)  # ids it deleted or erased
    erased: bool = False  # it called erase_namespace()
    #: Bumped by every call of its own handle that may change what it sees.
    epoch: int = 0
    #: Probe -> (epoch, what it was told).
    probes: dict[int, tuple[int, Any]] = field(default_factory=dict)

    def ids(self, status: str = "any") -> list[str]:
        """Its nodes ("live", "archived" or "any"), oldest first."""
        nodes = self.view.nodes
        return [i for i in self.order if i in nodes and (status == "any" or nodes[i].live == (status == "live"))]

    def deleted(self) -> list[str]:
        return [i for i in self.order if i in self.gone and i not in self.view.nodes]


@dataclass
class Run:
    """What outlives one example: the stores, the counts, and every tenant's last view
    (each example has a store of its own, so that a failing one replays the same)."""

    stores: Stores
    root: Path
    embedder: SentenceTransformerEmbedder
    examples: int = 0
    compared: int = 0  # answers compared with an earlier one
    calls: Counter[str] = field(default_factory=Counter)
    #: (folder, namespace) -> its view when its example ended, and whether it erased itself.
    final: dict[tuple[Path, str], tuple[View, bool]] = field(default_factory=dict)


# -- calls that name another tenant's node ---------------------------------------------

# Each is made on handle ``m`` with ``x`` (the foreign node, as an id or a Node),
# ``own`` (a live node of the caller, or None) and a coin ``flag``.
ForeignCall = Callable[[MemoryTree, Any, Any, bool], object]
FOREIGN: dict[str, ForeignCall] = {
    "get": lambda m, x, own, flag: m.get(x),
    "children": lambda m, x, own, flag: m.children(x, include_archived=flag),
    "path": lambda m, x, own, flag: m.path(x),
    "weight": lambda m, x, own, flag: m.weight(x),
    "update": lambda m, x, own, flag: m.update(x, importance=0.5),
    "update-content": lambda m, x, own, flag: m.update(x, content=POOL[1]),
    "update-versioned": lambda m, x, own, flag: m.update(x, confidence=0.3, expected_version=1),
    "feedback": lambda m, x, own, flag: m.feedback(x, important=True, confirmed=flag),
    "pin": lambda m, x, own, flag: m.pin(x, flag),
    "focus": lambda m, x, own, flag: m.focus(x),
    "move": lambda m, x, own, flag: m.move(x, own if own is not None and flag else ROOT),
    "move-under": lambda m, x, own, flag: m.move(own, x) if own is not None else m.move(x, ROOT),
    "archive": lambda m, x, own, flag: m.archive(x),
    "restore": lambda m, x, own, flag: m.unarchive(x),
    "delete": lambda m, x, own, flag: m.delete(x),
    "erase": lambda m, x, own, flag: m.admin.erase(x, compact=False),
    "add-under": lambda m, x, own, flag: m.add(POOL[3], type="fact", parent=x),
    "add_many-under": lambda m, x, own, flag: m.add_many([
        {"content": POOL[8], "type": "preference", "parent": own if own is not None else ROOT},
        {"content": POOL[12], "type": "fact", "parent": x},
    ]),
}
READS = ["get", "children", "path", "weight"]
# Writes that embed before they look at the node are slow: drawn a third as often.
EMBEDDING = {"update-content", "add-under", "add_many-under"}
WRITES = [op for op in FOREIGN if op not in READS for _ in range(1 if op in EMBEDDING else 3)]
# How the foreign node is named: its id, the Node its tenant sees, that Node relabelled
# with the caller's namespace, or an id its tenant deleted.
REFS = ["id", "id", "node", "forged", "gone"]

OWN_EDITS = ["update", "update-content", "update-stale", "feedback", "pin", "focus", "move",
             "move-root", "archive", "archive", "restore", "restore", "delete", "checkpoint",
             "erase", "erase-namespace"]
# What an own call may rightly refuse: never NamespaceError, never StorageError.
OWN_REFUSALS = (NotFoundError, CycleError, ConflictError, InvalidInputError)

idx = st.integers(0, BIG)
# (pool sentence, type, parent: -1 a new root, else one of the items before it)
tree_items = st.tuples(st.integers(0, len(POOL) - 1), st.sampled_from(TYPES), st.integers(-1, BIG))
secret_items = st.tuples(st.integers(0, len(SECRETS) - 1), st.integers(-1, BIG))

F = TypeVar("F", bound=Callable[..., None])
#: The kinds of step the machine takes: name -> (weight, argument strategies).
STEPS: dict[str, tuple[int, dict[str, st.SearchStrategy[Any]]]] = {}


def step(weight: int, **args: st.SearchStrategy[Any]) -> Callable[[F], F]:
    """A kind of step, drawn ``weight`` times as often as one of weight 1, its arguments
    drawn from ``args``. One rule draws them all: Hypothesis switches whole rules off in
    some examples, and a few examples would then make no foreign calls at all."""
    def register(fn: F) -> F:
        STEPS[fn.__name__] = (weight, args)
        return fn
    return register


class TenantMachine(RuleBasedStateMachine):
    run: Run  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.run.examples += 1
        self.folder = self.run.root / f"example-{self.run.examples}"
        self.files = self.run.root / f"example-{self.run.examples}-files"
        self.clock = Clock()
        self.tenants: list[Tenant] = []
        self.owner: dict[str, str] = {}  # node id -> namespace, every id ever made
        self.code_owner: dict[str, str] = {}  # code word -> namespace
        self.imports = 0

    # -- plumbing ------------------------------------------------------------------

    def call(self, kind: str) -> None:
        self.run.calls[kind] += 1

    def pick(self, i: int) -> Tenant:
        return self.tenants[i % len(self.tenants)]

    def refresh(self, t: Tenant) -> None:
        """After a call of ``t``'s own: take its new view, check it holds only its own
        nodes, and check that another tenant is told what it was told before the call."""
        t.epoch += 1
        t.view = view_of(t.mem)
        self.assert_own(t, list(t.view.nodes), f"{t.ns!r}.nodes()")
        assert all(n.namespace == t.ns for n in t.view.nodes.values())
        assert t.view.active is None or t.view.active in t.view.nodes
        self.ask_the_others(t)

    def unchanged(self, t: Tenant, after: str) -> None:
        now = view_of(t.mem)
        assert now == t.view, f"{t.ns!r} changed after {after}: {difference(t.view, now)}"

    def register(self, t: Tenant, nodes: list[Node], what: str) -> None:
        """New nodes of ``t``: their ids must be new to the store (merged ones: ``t``'s)."""
        for n in nodes:
            assert n.namespace == t.ns, f"{what} returned a node of {n.namespace!r}"
            had = self.owner.get(n.id)
            if n.merged:
                assert had == t.ns, f"{what} merged into node {n.id} of {had!r}: {n.content!r}"
            else:
                assert had is None, f"{what} made node {n.id}, an id of {had!r}"
                self.owner[n.id] = t.ns
                t.order.append(n.id)

    def assert_own(self, t: Tenant, ids: list[str], what: str) -> None:
        alien = {i: self.owner.get(i) for i in ids if self.owner.get(i) != t.ns}
        assert not alien, f"{what} returned ids that are not {t.ns!r}'s: {alien}"

    def assert_clean(self, t: Tenant, text: str, what: str) -> None:
        """``text`` names no node and holds no code word of another tenant."""
        words = {w: self.code_owner[w] for w in EN_CODE.findall(text) + ZH_CODE.findall(text)
                 if self.code_owner.get(w, t.ns) != t.ns}
        assert not words, f"{what} from {t.ns!r} holds code words of other tenants: {words}"
        ids = {i: self.owner[i] for i in NODE_ID.findall(text) if self.owner.get(i, t.ns) != t.ns}
        assert not ids, f"{what} from {t.ns!r} names nodes of other tenants: {ids}"

    def content(self, t: Tenant, choice: int) -> str:
        """Mostly a shared sentence (a twin of other tenants' nodes), else one of its secrets."""
        if choice % 5:
            return POOL[choice % len(POOL)]
        return SECRETS[choice % len(SECRETS)].format(en=t.en, zh=t.zh)

    # -- the tenants and their trees ---------------------------------------------------

    @initialize(
        names=st.lists(st.sampled_from(NAMES[1:]), min_size=1, max_size=3, unique=True).map(lambda rest: ["alpha", *rest]),
        common=st.lists(tree_items, min_size=3, max_size=8),
        extras=st.lists(st.lists(tree_items, max_size=4), min_size=4, max_size=4),
        secrets_=st.lists(st.lists(secret_items, min_size=1, max_size=3), min_size=4, max_size=4),
        shared_index=st.booleans(),
        index_batch=st.sampled_from([1, 16]),
    )
    def open_tenants(self, names: list[str], common: list[tuple[int, str, int]],
                     extras: list[list[tuple[int, str, int]]], secrets_: list[list[tuple[int, int]]],
                     shared_index: bool, index_batch: int) -> None:
        """"alpha" and up to three look-alikes open one store; each writes the same tree
        of shared sentences, extra items of its own, and its code words under random
        nodes of it, in one add_many."""
        self.files.mkdir(parents=True)
        config = Config.load(overrides={"write": {"index_batch": index_batch}})
        index = ChromaIndex(self.folder / "chroma") if shared_index else None
        for k, (ns, extra, mine) in enumerate(zip(names, extras, secrets_, strict=False)):
            en = "zz" + "".join(chr(97 + (self.run.examples * 5 + k) // 26**p % 26) for p in range(4))
            zh = "暗号" + "".join(ZH_DIGITS[(self.run.examples * 5 + k) // 10**p % 10] for p in range(4))
            mem = self.run.stores.open(self.folder, namespace=ns, config=config, embedder=self.run.embedder,
                                       clock=self.clock, index=index)
            t = Tenant(ns, mem, en, zh)
            self.tenants.append(t)
            self.code_owner[en] = self.code_owner[zh] = ns
            tree = common + extra
            items: list[dict[str, Any]] = []
            for j, (c, kind, p) in enumerate(tree):
                parent = ROOT if p < 0 or j == 0 else f"i{p % j}"
                items.append({"key": f"i{j}", "content": POOL[c], "type": kind, "parent": parent})
            for s, p in mine:
                parent = ROOT if p < 0 else f"i{p % len(tree)}"
                items.append({"content": SECRETS[s].format(en=en, zh=zh), "type": "fact", "parent": parent})
            self.call("add_many")
            self.register(t, mem.add_many(items), f"{ns!r}.add_many")
            self.refresh(t)
        self.clock.advance(60)
        for t in self.tenants:  # a first answer, for the others' calls to leave alone
            self.ask(t, 0)

    # -- calls naming other tenants' nodes ------------------------------------------------

    @step(3, actor=idx, rnd=st.randoms(use_true_random=True), n=st.integers(20, 60))
    def foreign_reads(self, actor: int, rnd: random.Random, n: int) -> None:
        """Each read naming another tenant's node raises NamespaceError (NotFoundError
        for a deleted id) and changes nothing."""
        self.foreign(actor, READS, rnd, n)

    @step(3, actor=idx, rnd=st.randoms(use_true_random=True), n=st.integers(20, 60))
    def foreign_writes(self, actor: int, rnd: random.Random, n: int) -> None:
        """Each write naming another tenant's node raises NamespaceError (NotFoundError
        for a deleted id) and changes nothing in either tenant."""
        self.foreign(actor, WRITES, rnd, n)

    def foreign(self, actor: int, ops: list[str], rnd: random.Random, n: int) -> None:
        """``n`` calls from one tenant's handle, each drawn by ``rnd``: which call, which
        other tenant, which of its nodes, and how it is named."""
        t = self.pick(actor)
        others = [x for x in self.tenants if x is not t]
        for _ in range(n):
            op, ref, flag = rnd.choice(ops), rnd.choice(REFS), rnd.random() < 0.5
            v = rnd.choice(others)
            pool = v.ids()
            if ref == "gone" or not pool:
                ref, gone = "gone", v.deleted()
                x: Any = rnd.choice(gone) if gone else MISSING_ID
                expected: type[HybridMemoryError] = NotFoundError
            else:
                node = v.view.nodes[rnd.choice(pool)]
                x = {"id": node.id, "node": node, "forged": dataclasses.replace(node, namespace=t.ns)}[ref]
                expected = NamespaceError
            if op == "weight" and ref != "node":
                op = "get"  # weight() reads no row: it takes the Node it is given
            live = t.ids("live")
            own = rnd.choice(live) if live else None
            described = f"{t.ns!r}.{op}({ref} {getattr(x, 'id', x)} of {v.ns!r})"
            self.call(f"foreign {op}")
            try:
                result = FOREIGN[op](t.mem, x, own, flag)
            except expected:
                pass
            except HybridMemoryError as exc:
                raise AssertionError(f"{described} raised {type(exc).__name__}: {exc}; "
                                     f"expected {expected.__name__}") from exc
            else:
                raise AssertionError(f"{described} returned {result!r}; expected {expected.__name__}")
            self.unchanged(t, described)
            self.unchanged(v, described)
        self.ask_the_others(t)

    # -- calls on a tenant's own nodes ---------------------------------------------------

    @step(2, actor=idx, items=st.lists(st.tuples(idx, st.sampled_from(TYPES), st.integers(-2, BIG)),
                                    min_size=1, max_size=3))
    def write(self, actor: int, items: list[tuple[int, str, int]]) -> None:
        """New memories (shared sentences: twins of other tenants' nodes) are the tenant's own."""
        t = self.pick(actor)
        self.unchanged(t, "its last own call")
        live = t.ids("live")
        batch = []
        for c, kind, p in items:
            parent = ROOT if p == -2 else None if p == -1 or not live else live[p % len(live)]
            batch.append({"content": self.content(t, c), "type": kind, "parent": parent})
        self.call("add_many")
        self.register(t, t.mem.add_many(batch), f"{t.ns!r}.add_many")
        self.clock.advance(1)
        self.refresh(t)

    @step(3, actor=idx, op=st.sampled_from(OWN_EDITS), a=idx, b=idx, value=st.floats(0.0, 1.0))
    def edit(self, actor: int, op: str, a: int, b: int, value: float) -> None:
        """Own edits: never a NamespaceError; whatever comes back is the tenant's own."""
        t = self.pick(actor)
        self.unchanged(t, "its last own call")
        live, archived, every = t.ids("live"), t.ids("archived"), t.ids()
        if not every:
            return
        x = live[a % len(live)] if live else every[a % len(every)]
        y = live[b % len(live)] if live else every[b % len(every)]
        calls: dict[str, Callable[[], object]] = {
            "update": lambda: t.mem.update(x, importance=value),
            "update-content": lambda: t.mem.update(x, content=self.content(t, b)),
            "update-stale": lambda: t.mem.update(x, importance=value, expected_version=t.view.nodes[x].version + 1),
            "feedback": lambda: t.mem.feedback(x, confirmed=True),
            "pin": lambda: t.mem.pin(every[a % len(every)], value < 0.5),
            "focus": lambda: t.mem.focus(x),
            "move": lambda: t.mem.move(x, y),
            "move-root": lambda: t.mem.move(x, ROOT),
            "archive": lambda: t.mem.archive(x),
            "restore": lambda: t.mem.unarchive(archived[b % len(archived)] if archived else x),
            "delete": lambda: t.mem.delete(every[a % len(every)]),
            "checkpoint": lambda: t.mem.checkpoint(f"checked {t.en}"),
            "erase": lambda: t.mem.admin.erase(every[a % len(every)], compact=value < 0.5),
            "erase-namespace": lambda: t.mem.admin.erase_namespace(compact=value < 0.5),
        }
        self.call(op)
        try:
            result = calls[op]()
        except OWN_REFUSALS:
            result = None
        self.clock.advance(1)
        if isinstance(result, Node):
            assert result.namespace == t.ns
            self.assert_own(t, [result.id], f"{t.ns!r}.{op}")
        elif isinstance(result, list):
            self.assert_own(t, result, f"{t.ns!r}.{op}")
            if op in ("delete", "erase"):
                t.gone.update(result)
        elif isinstance(result, int):
            assert result == len(t.view.nodes), f"{t.ns!r}.erase_namespace() erased {result} nodes, it had {len(t.view.nodes)}"
            t.gone.update(t.view.nodes)
            t.erased = True
        elif result is not None:
            assert result.namespace == t.ns and (result.active_id is None or self.owner[result.active_id] == t.ns)  # type: ignore[attr-defined]
        self.refresh(t)

    @step(1, actor=idx, a=idx)
    def read(self, actor: int, a: int) -> None:
        """get / children / path of the tenant's own nodes: exactly its stored nodes."""
        t = self.pick(actor)
        every = t.ids()
        if not every:
            return
        x = every[a % len(every)]
        self.call("get")
        assert t.mem.get(x) == t.view.nodes[x]
        self.call("children")
        kids = t.mem.children(x, include_archived=True)
        assert kids == sorted((n for n in t.view.nodes.values() if n.parent_id == x), key=lambda n: (n.created_at, n.id))
        self.call("path")
        path = t.mem.path(x)
        assert [n.id for n in path] == t.view.nodes[x].path.rstrip("/").split("/")
        assert all(n == t.view.nodes[n.id] for n in path)

    @step(1, actor=idx, threshold=st.floats(0.0, 0.7), cap=st.integers(0, 12), delete=st.booleans(),
          dry_run=st.booleans())
    def forget(self, actor: int, threshold: float, cap: int, delete: bool, dry_run: bool) -> None:
        """Forget weighs and takes the tenant's own live nodes only."""
        t = self.pick(actor)
        self.unchanged(t, "its last own call")
        self.call("forget")
        report = t.mem.forget(threshold=threshold, max_nodes=cap, delete=delete, dry_run=dry_run)
        live = len(t.ids("live"))
        assert report.live_before == report.considered == live, f"{t.ns!r}.forget counted {report.live_before}, it has {live} live"
        self.assert_own(t, [*report.archived, *report.deleted, *(i for i, _ in report.details)], f"{t.ns!r}.forget")
        t.gone.update(report.deleted)
        self.refresh(t)

    @step(1, actor=idx, source=idx, which=idx)
    def time_travel(self, actor: int, source: int, which: int) -> None:
        """restore(seq=...) rewrites the tenant's own namespace only, also when the log
        position is one of another tenant's entries (then: refused, or its own state there)."""
        t = self.pick(actor)
        self.unchanged(t, "its last own call")
        s = self.pick(source)
        ops = P.recent_ops(s.mem, 40)
        if not ops:
            return
        seq = ops[which % len(ops)].seq
        self.call("restore(seq=)")
        try:
            result = t.mem.rewind(seq=seq)
        except InvalidInputError:
            assert s is not t, f"{t.ns!r}.rewind(seq={seq}) of its own log position was refused"
            result = None
        if result is not None:
            self.assert_own(t, [*result.changed, *result.added, *result.removed, *result.erased],
                            f"{t.ns!r}.rewind(seq={seq})")
        self.refresh(t)

    # -- retrieval, counts, export --------------------------------------------------------

    def check_recall(self, t: Tenant, recall: Recall, what: str) -> None:
        for s in recall.nodes:
            assert s.node.namespace == t.ns, f"{what} returned a node of {s.node.namespace!r}"
            self.assert_own(t, [s.node.id], what)
            assert s.node == t.view.nodes[s.node.id], f"{what}: {s.node.id} is not as {t.ns!r} stored it"
        for b in recall.branches:
            self.assert_own(t, [b.branch_id], f"{what} (branch)")
            mine = sum(1 for n in t.view.nodes.values() if n.live and n.branch_id == b.branch_id)
            assert b.hits <= mine, f"{what}: branch {b.branch_id} counts {b.hits} hits, {t.ns!r} has {mine} live nodes in it"
        self.assert_clean(t, recall.context, f"{what} context")
        # The query line repeats the question, which may name another tenant's code word.
        self.assert_clean(t, recall.explain().removeprefix(f"query: {recall.query}"), f"{what} explain()")

    def question(self, choice: int) -> str | None:
        """A shared question, another tenant's (or its own) code word, or None (the active context)."""
        kind, i = choice % 3, choice // 3
        if kind == 0:
            return QUESTIONS[i % len(QUESTIONS)]
        codes = sorted(self.code_owner)
        code = codes[i % len(codes)]
        return None if i % 11 == 0 else f"What do we know about {code}?" if code.startswith("zz") else f"{code}是什么？"

    @step(2, actor=idx, query=idx, k=st.integers(1, 10), budget=st.sampled_from([None, 60, 400, 3000]),
          branches=st.integers(1, 3), reinforce=st.booleans())
    def retrieve(self, actor: int, query: int, k: int, budget: int | None, branches: int, reinforce: bool) -> None:
        """Every scored node, branch and line of context is the tenant's own."""
        t = self.pick(actor)
        self.unchanged(t, "its last own call")
        q = self.question(query)
        self.call("retrieve")
        recall = t.mem.retrieve(q, k=k, budget_tokens=budget, branches=branches, reinforce=reinforce)
        self.check_recall(t, recall, f"{t.ns!r}.retrieve({q!r})")
        if reinforce:
            self.refresh(t)

    @step(2, actor=idx, probe=st.integers(0, len(PROBES) - 1))
    def probe(self, actor: int, probe: int) -> None:
        """Ask a tenant a probe question, its stats and its recovery state; if it made no
        call of its own since it was last asked, it is told exactly the same."""
        self.ask(self.pick(actor), probe)

    def ask(self, t: Tenant, probe: int) -> None:
        q = PROBES[probe]
        self.call("retrieve")
        recall = t.mem.retrieve(q, k=5, now=PROBE_NOW, reinforce=False)
        self.check_recall(t, recall, f"{t.ns!r}.retrieve({q!r})")
        self.call("stats")
        stats = t.mem.admin.stats()
        self.call("recover")
        state = t.mem.recover()
        live = [n for n in t.view.nodes.values() if n.live]
        assert stats.namespace == t.ns
        assert (stats.live, stats.archived, state.live_nodes) == (len(live), len(t.view.nodes) - len(live), len(live)), (
            f"{t.ns!r} has {len(live)} live and {len(t.view.nodes) - len(live)} archived nodes, "
            f"stats() says {stats.live} and {stats.archived}, recover() {state.live_nodes} live")
        assert dict(stats.by_type) == dict(Counter(n.type.value for n in live))
        assert stats.depth == max((n.depth for n in live), default=0)
        self.assert_own(t, list(stats.active_path), f"{t.ns!r}.stats() active path")
        recovered = [*state.path, *(n for n in (state.active, state.state) if n is not None)]
        self.assert_own(t, [n.id for n in recovered], f"{t.ns!r}.recover()")
        cp = state.last_checkpoint
        assert cp is None or (cp.namespace == t.ns and (cp.active_id is None or self.owner[cp.active_id] == t.ns))
        # disk_bytes measures the shared folder: test_stats_disk_bytes_* looks at it.
        told = (_scored(recall), dataclasses.replace(stats, disk_bytes=0), state)
        earlier = t.probes.get(probe)
        if earlier is not None and earlier[0] == t.epoch:
            assert _same(told, earlier[1]), (
                f"{t.ns!r} made no call since it was last asked, yet {q!r} / stats() / recover() "
                f"changed: {told} != {earlier[1]}")
            self.run.compared += 1
        t.probes[probe] = (t.epoch, told)

    def ask_the_others(self, t: Tenant) -> None:
        """After a call from ``t``'s handle: the next tenant that was asked a question since
        its own last call is asked again, and must be told the same."""
        i = self.tenants.index(t)
        for other in self.tenants[i + 1:] + self.tenants[:i]:
            for probe, (epoch, _) in sorted(other.probes.items()):
                if epoch == other.epoch:
                    self.ask(other, probe)
                    return

    @step(1, actor=idx, include_log=st.booleans(), import_it=st.booleans())
    def export(self, actor: int, include_log: bool, import_it: bool) -> None:
        """The file holds the tenant's nodes, every one, and nothing of any other tenant.
        Imported into an empty namespace of the same store it is refused (the ids are
        taken), and nothing changes."""
        t = self.pick(actor)
        self.unchanged(t, "its last own call")
        path = self.files / f"{secrets.token_hex(6)}.jsonl"
        self.call("export")
        done = t.mem.admin.export(path, include_log=include_log)
        self.refresh(t)  # export writes the buffered reads first
        raw = path.read_text(encoding="utf-8")
        self.assert_clean(t, raw, f"{t.ns!r}.export()")
        lines = [json.loads(line) for line in raw.splitlines()]
        assert lines[0]["namespace"] == t.ns
        nodes = [x for x in lines[1:] if x["kind"] == "node"]
        assert {x["id"] for x in nodes} == set(t.view.nodes) and done.nodes == len(t.view.nodes)
        assert all(x["namespace"] == t.ns for x in nodes)
        named = [x.get("active_id") for x in lines[1:] if x["kind"] in ("cursor", "checkpoint")]
        named += [x["node_id"] for x in lines[1:] if x["kind"] == "op"]
        self.assert_own(t, [i for i in named if i is not None], f"{t.ns!r}.export()")
        if import_it:
            self.imports += 1
            empty = self.run.stores.open(self.folder, namespace=f"import {self.imports}", embedder=self.run.embedder,
                                         clock=self.clock)
            try:
                self.call("import_")
                if nodes:
                    with pytest.raises((ConflictError, NamespaceError)):
                        empty.admin.import_(path)
                else:  # a tenant that travelled back to before its first node exports none
                    empty.admin.import_(path)
                assert view_of(empty).nodes == {}
            finally:
                empty.close()
            for x in self.tenants:
                self.unchanged(x, f"importing {t.ns!r}'s export elsewhere")
        path.unlink()

    @step(1, actor=idx)
    def verify(self, actor: int) -> None:
        """The tenant's vector index holds exactly its live nodes."""
        t = self.pick(actor)
        self.call("verify")
        drift = t.mem.admin.verify()
        assert drift.clean, f"{t.ns!r}.verify(): {drift}"
        assert t.mem.index.ids(t.ns) == set(t.ids("live"))
        t.epoch += 1  # verify applies the waiting index writes

    @rule(data=st.data())
    def take_step(self, data: st.DataObject) -> None:
        """One step of a kind drawn by weight (see ``step``), with its arguments."""
        kind = data.draw(st.sampled_from([k for k, (w, _) in STEPS.items() for _ in range(w)]), label="step")
        getattr(self, kind)(**data.draw(st.fixed_dictionaries(STEPS[kind][1]), label=kind))

    @invariant()
    def walls_hold(self) -> None:
        """No tenant changed since its own last call, whoever called since."""
        for t in self.tenants:
            self.unchanged(t, "other tenants' calls")

    def teardown(self) -> None:
        for t in self.tenants:
            try:
                t.mem.flush()
                self.run.final[(self.folder, t.ns)] = (view_of(t.mem), t.erased)
            finally:
                t.mem.close()


SETTINGS = settings(
    max_examples=4,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # Shrinking reruns the real model and stores for minutes; every assertion names its call instead.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    report_multiple_bugs=False,
)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    """Most calls embed one short sentence, which gains nothing from intra-op threads;
    on a busy two-core runner they oversubscribe the CPU (10x slower). Restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def run(tmp_path: Path, stores: Stores, embedder: SentenceTransformerEmbedder) -> Run:
    return Run(stores, tmp_path, embedder)


def _scored(recall: Any) -> Any:
    """A recall as nested tuples, its scores kept as floats (compared by ``_same``)."""
    return (recall.query, recall.context, recall.tokens, recall.dropped,
            tuple((s.node, s.reason, s.tokens, (s.similarity, s.dense, s.lexical, s.weight, s.branch_score, s.score))
                  for s in recall.nodes),
            tuple((b.branch_id, b.hits, b.title, (b.score,)) for b in recall.branches))


def _same(a: Any, b: Any) -> bool:
    """Equal, but floats within 1e-6: the same question's query vector can differ in its
    last float bits between calls (the embedding runtime's batching), and that is not
    another tenant's write."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=0.0, abs_tol=1e-6)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_tenants_never_see_or_touch_each_other(run: Run) -> None:
    """The machine's assertions; then every tenant, reopened with ``branch_by =
    "top_task"``, is exactly as its last own call left it, regrouped (its stored
    "nearest_task" was not taken by another tenant's call), and its vector index holds
    exactly its live nodes; and the run made thousands of calls."""
    machine = type("Machine", (TenantMachine,), {"run": run})
    run_state_machine_as_test(machine, settings=SETTINGS)
    top = Config.load(overrides={"write": {"branch_by": "top_task"}})
    for (folder, ns), (seen, _erased) in run.final.items():
        mem = run.stores.open(folder, namespace=ns, config=top, embedder=run.embedder, clock=Clock())
        try:
            now, expected = view_of(mem), by_top_task(seen)
            assert now == expected, f"{ns!r} changed after its example ended: {difference(expected, now)}"
            assert mem.admin.verify().clean
            assert mem.index.ids(ns) == {i for i, n in seen.nodes.items() if n.live}
        finally:
            mem.close()
    total = sum(run.calls.values())
    print(f"\n{total} calls over {run.examples} examples, {run.compared} answers compared: {dict(run.calls)}")
    assert total >= 1500, f"only {total} calls were made: {dict(run.calls)}"


# -- single cases ------------------------------------------------------------------------
#
# What the machine does not reach: stats of the shared folder, and node ids that two
# namespaces' histories share. A tenant's export names its node ids; once the tenant
# has travelled back to before its nodes (restore(seq=0)), those ids are free, and the
# export imports into another namespace of the same store.


def test_stats_of_a_tenant_handle_do_not_count_another_tenants_writes(
        open_memory: Any, tmp_path: Path, stores: Any, embedder: Any) -> None:
    """``stats()`` on a tenant's handle (role read or write) describes its namespace
    alone: nothing in it, the size on disk included, moves when another tenant of the
    same store writes. An admin handle reports the store's size (an operator's figure)."""
    folder = tmp_path / "shared"
    owner = open_memory(namespace="a", folder=folder)
    b = open_memory(namespace="b", folder=folder)
    owner.add(POOL[0], type="task")
    b.add(POOL[0], type="task")
    owner.flush()
    b.flush()
    a = stores.open(folder, namespace="a", role="write", embedder=embedder)
    try:
        before, admin_before = a.admin.stats(), owner.admin.stats()
        b.add_many([{"content": f"{s} ({i})", "type": "fact"} for i in range(5) for s in POOL[1:9]])
        b.flush()
        after = a.admin.stats()
        assert after == before, f"a's stats() changed when only b wrote: {before} -> {after}"
        assert after.disk_bytes is None
        assert admin_before.disk_bytes is not None and owner.admin.stats().disk_bytes > admin_before.disk_bytes
    finally:
        a.close()


def shared_history(open_memory: Any, tmp_path: Path) -> tuple[MemoryTree, MemoryTree, list[Node], int]:
    """Tenant "a" writes a task and two memories, exports itself, and travels back to
    before them; tenant "e" imports the export. Returns a, e, a's nodes, and a's log
    position before its travel."""
    folder = tmp_path / "shared"
    a = open_memory(namespace="a", folder=folder)
    e = open_memory(namespace="e", folder=folder)
    task = a.add(POOL[0], type="task")
    written = [task, a.add(POOL[1], type="event", parent=task), a.add(POOL[2], type="fact", parent=task)]
    last = a.admin.stats().log_seq
    a.admin.export(tmp_path / "a.jsonl", include_log=True)
    a.rewind(seq=0)
    e.admin.import_(tmp_path / "a.jsonl")
    assert set(view_of(e).nodes) == {n.id for n in written} and view_of(a).nodes == {}
    return a, e, written, last


def test_a_delete_leaves_another_tenants_log_alone(open_memory: Any, tmp_path: Path) -> None:
    """Deleting, in one namespace, nodes whose ids another namespace's log names (its
    history, which its time travel and its exports read) leaves that log as it was."""
    a, e, written, _ = shared_history(open_memory, tmp_path)
    log = P.recent_ops(a, 1000)
    assert any(op.node_id == written[0].id and not op.purged for op in log)
    e.delete(written[0].id)
    after = P.recent_ops(a, 1000)
    changed = [(x.seq, x.op, x.node_id, y.payload) for x, y in zip(log, after, strict=True) if x != y]
    assert after == log, f"e's delete rewrote entries of a's log: {changed}"


def test_time_travel_onto_ids_another_tenant_holds_is_a_conflict(open_memory: Any, tmp_path: Path) -> None:
    """A tenant travelling forward again onto nodes whose ids another namespace now holds
    is told so (ConflictError or NamespaceError, not a failing store), and neither
    namespace changes."""
    a, e, _, last = shared_history(open_memory, tmp_path)
    before_a, before_e = view_of(a), view_of(e)
    with pytest.raises(HybridMemoryError) as info:
        a.rewind(seq=last)
    assert view_of(a) == before_a and view_of(e) == before_e
    assert isinstance(info.value, (ConflictError, NamespaceError)), f"{type(info.value).__name__}: {info.value}"


def test_an_import_refused_for_taken_ids_does_not_name_their_tenant(open_memory: Any, tmp_path: Path) -> None:
    """Importing a file whose ids another namespace holds is refused and changes
    nothing; the refusal names no other namespace (NamespaceError does not either)."""
    folder = tmp_path / "shared"
    a = open_memory(namespace="tenant-alpha", folder=folder)
    e = open_memory(namespace="e", folder=folder)
    a.add(POOL[0], type="task")
    a.admin.export(tmp_path / "a.jsonl")
    before = view_of(a)
    with pytest.raises((ConflictError, NamespaceError)) as info:
        e.admin.import_(tmp_path / "a.jsonl")
    assert view_of(e) == View({}, None) and view_of(a) == before
    assert "tenant-alpha" not in str(info.value), f"the refusal names the other tenant: {info.value}"


def test_erasing_a_namespace_leaves_another_namespaces_settings(open_memory: Any, tmp_path: Path) -> None:
    """erase_namespace() of "a" leaves tenant "team:a" whole, its stored grouping
    (``write.branch_by``) included: reopened with another grouping, "team:a" is
    regrouped."""
    folder = tmp_path / "shared"
    team = open_memory(namespace="team:a", folder=folder)
    a = open_memory(namespace="a", folder=folder)
    top = team.add(POOL[4], type="task", parent=ROOT)
    rehearsal = team.add(POOL[5], type="task", parent=top)
    fact = team.add(POOL[6], type="fact", parent=rehearsal)
    assert fact.branch_id == rehearsal.id  # nearest_task, the default
    a.add(POOL[0], type="task")
    before = view_of(team)
    assert a.admin.erase_namespace() == 1
    assert view_of(team) == before
    team.close()
    again = open_memory(namespace="team:a", folder=folder, write={"branch_by": "top_task"})
    assert view_of(again) == by_top_task(before), "team:a was not regrouped: its branch_by setting is gone"
