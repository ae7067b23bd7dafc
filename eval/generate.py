"""Synthetic evaluation traces: the project's default evaluation data.

    generate(10_000, lang="zh", seed=1)          # a list of trace events
    python -m eval.generate --nodes 10000 --lang zh --seed 1 --out trace.jsonl
    generate(10_000, lang="zh", seed=1, split="test")   # the held-out test split

The trace simulates an agent at work for weeks to months (three weeks at 1k
nodes, two months at 10k, five at 100k; 09:00-18:00 on weekdays). It keeps several tasks open
at once, from six domains (expense claims, support tickets, bug fixes, business
trips, purchase orders, hiring), works a few steps on one, switches to another
(``focus``), returns later, and now and then parks a task for weeks. Each task
has subtasks (``task`` nodes under it), facts, events, decisions, preferences,
states that move it along, routine log lines and, when it ends, a summary.
Dozens of tasks of one domain share their wording ("invoice", "approver"), so a
question is answered by its entity (EXP-2291, a person, a date), not by the
domain's words. The process ``restart``s now and then (between two sessions),
and the user confirms what matters (``feedback``).

Exactly ``nodes`` add events are generated, deterministic for a seed, with no
global random state. Queries: by default one per 35 nodes (at most 2,000);
``queries`` overrides it, up to one per 5 nodes.

Query categories (``category``):

- ``single-fact``: one fact or event.
- ``latest-update``: a fact that a later one superseded ("changed the hotel to
  ..."); gold is the latest, the superseded nodes are listed in ``stale``.
- ``state``: where a task stands; gold is its latest state, earlier ones stale.
- ``preference`` and ``decision``: one node of that type.
- ``multi-fact``: two gold nodes under the same task (or subtask).
- ``after-return``: asked right when the agent comes back to a task, about
  something written there before it switched away.
- ``current-task``: asked about the task the agent is working on now, about
  something written a few steps before.

A query names the task by its id and paraphrases the gold content; it is asked
after its gold, often long after (``lag``: adds written since the newest gold). ``task``
lists the nearest ``task`` ancestor of the gold nodes (one per query).

Near-duplicates: the agent re-records some memories in the same task, as an
exact repeat, a light rewording that keeps nearly every term (what a dedup
merges), or a reworded sentence carrying the same information. They carry
``dup_of`` (the original's id) and ``dup`` (``repeat``/``light``/``reword``).
A memory that has a near-duplicate is never gold, and gold is never a node
whose wording nearly matches another node of its type in its task, so every
query has one unambiguous answer whether or not a system merges duplicates.
Updates and states carry ``supersedes``; a root task carries ``domain``; in a
``lang="mixed"`` trace a root task and a query carry ``lang`` ("en" or "zh": the
language it is written or asked in). These
extra fields are ignored by a replay.

Splits: ``split="dev"`` (the default) is the trace above, the one retrieval is tuned on.
``split="test"`` asks its questions in other, held-out phrasings and adds domains of its
own (:mod:`eval.generate_heldout`); it is for testing only, never for tuning, and its
figures are reported separately. A test trace draws from its own random stream, so it
is not the dev trace of the same seed reworded.
"""

from __future__ import annotations

import argparse
import random
import re
import string
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from hybrid_memory.evaluation.trace import write_trace

from . import generate_heldout as heldout
from . import generate_templates as tables
from .generate_templates import Domain, Entities, Line, Slots, Sub, domains

Event = dict[str, Any]

LANGS = ("en", "zh", "mixed")
#: In a "mixed" trace, the share of a task's people and named things (companies,
#: products, hotels ...) drawn from the other language: Chinese notes naming
#: "Thomas Thompson", English ones naming 张伟, as bilingual teams write.
SWITCH_SHARE = 0.35
#: ... and the share of its questions asked in the other language, about the same
#: memory ("How much did 马婷 spend on EXP-8964?"; multi-fact questions aside).
CROSS_SHARE = 0.25
_SWITCHED = frozenset({"name", "company", "product", "vendor", "hotel", "conference", "platform", "feature"})
SPLITS = ("dev", "test")
CATEGORIES = (
    "single-fact",
    "latest-update",
    "state",
    "preference",
    "decision",
    "multi-fact",
    "after-return",
    "current-task",
)
# How often each category is drawn for a query slot.
_CATEGORY_WEIGHTS = (30, 15, 14, 8, 10, 11, 8, 4)
_GENERAL = ("single-fact", "latest-update", "state", "preference", "decision", "multi-fact")
# Where the first of a two-fact question's golds is drawn from (its mate: any in its task).
_MULTI_FROM = ("single-fact", "single-fact", "decision", "preference", "latest-update")
MIN_NODES = 50
MAX_DEFAULT_QUERIES = 2000

_START = 1_709_542_800.0  # Monday 2024-03-04 09:00 UTC
_DAY, _OPEN, _CLOSE = 86_400, 9 * 3600, 18 * 3600
_NODE_TYPE = {"fact": "fact", "event": "event", "decision": "decision", "pref": "preference"}
_CATEGORY_OF = {
    "fact": "single-fact",
    "event": "single-fact",
    "decision": "decision",
    "pref": "preference",
}
_IMPORTANCE = {
    "task": 0.8,
    "state": 0.7,
    "decision": 0.8,
    "preference": 0.75,
    "fact": 0.6,
    "event": 0.45,
    "summary": 0.5,
    "routine": 0.2,
}
# A gold node must not read like another node of its type in its task (term Jaccard).
_AMBIGUOUS = 0.7


# ---------------------------------------------------------------- terms


_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_PIECES = re.compile(rf"[{_CJK}]+|(?:(?![{_CJK}])[^\W_])+")
_STOP = frozenset(
    "a an and are as at be been but by did do does for from had has have he her him his how i "
    "in is it its me my of on or our she so than that the their them then there they this to "
    "us was we were what when where which who why will with would you your".split()
)
_CJK_RUN = re.compile(rf"[{_CJK}]")
_PAD_AFTER = re.compile(rf"([A-Za-z][A-Za-z0-9_\-#./%]*)(?=[{_CJK}])")
_PAD_BEFORE = re.compile(rf"(?<=[{_CJK}])(?=[A-Za-z]|\d+ )")


def terms(text: str) -> set[str]:
    """Lexical terms as the library's dedup and lexical index see them: lower-cased
    Latin words and numbers (stopwords dropped), CJK as overlapping character bigrams."""
    out: set[str] = set()
    for piece in _PIECES.findall(text.lower()):
        if _CJK_RUN.match(piece):
            out.update(piece[i : i + 2] for i in range(max(1, len(piece) - 1)))
        elif piece not in _STOP:
            out.add(piece)
    return out


def overlap(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' terms."""
    ta, tb = terms(a), terms(b)
    return len(ta & tb) / len(ta | tb) if ta or tb else 1.0


def _figures(text: str) -> set[str]:
    return {t for t in terms(text) if any(ch.isdigit() for ch in t)}


@cache
def _slot_names(template: str) -> frozenset[str]:
    return frozenset(name for _, name, _, _ in string.Formatter().parse(template) if name)


def _pad_zh(text: str) -> str:
    """A space between Chinese and a Latin word or id ("报销单 EXP-2291 的"), as Chinese
    technical writing has it ("采购 27 英寸显示器"); a date ("5月14日") stays as it is."""
    return _PAD_BEFORE.sub(" ", _PAD_AFTER.sub(r"\1 ", text))


_LOOSE = re.compile(r"(?<=[：，。；、（“])\s+|\s+(?=[：，。；、）”？！])|^\s+|\s+$")
_SPACES = re.compile(r"\s{2,}")


def _other(lang: str) -> str:
    """The other language of a mixed trace."""
    return "zh" if lang == "en" else "en"


def _written(text: str, lang: str) -> str:
    """``text`` as a trace of ``lang`` writes it: Chinese padded (:func:`_pad_zh`); in a
    mixed trace also one space at most, none beside full-width punctuation."""
    if lang == "en":
        return text
    if lang == "mixed":
        text = _LOOSE.sub("", _SPACES.sub(" ", text))
    return _pad_zh(text)


# ---------------------------------------------------------------- time and entities


class _Clock:
    """Simulated time: gaps between writes, working hours only (09:00-18:00, Mon-Fri)."""

    def __init__(self, rng: random.Random, mean_gap: float) -> None:
        self.rng, self.mean, self.now = rng, mean_gap, _START

    def tick(self, scale: float = 1.0) -> float:
        mean = self.mean * scale
        gap = min(max(self.rng.expovariate(1.0 / mean), 3.0), 8.0 * mean)
        t = self.now + gap
        day, sec = divmod(t, _DAY)
        if (int(day) + 3) % 7 >= 5 or not _OPEN <= sec < _CLOSE:  # 1970-01-01 was a Thursday
            d = int(day) + (sec >= _OPEN)
            while (d + 3) % 7 >= 5:
                d += 1
            t = d * _DAY + _OPEN + self.rng.uniform(0, 1800)
        self.now = round(t, 1)
        return self.now


class _Switching(Entities):
    """A task's entities in a mixed trace: its own language's, but a person or a
    named thing is drawn from the other language's pools now and then
    (:data:`SWITCH_SHARE`). Ids are drawn from the pools both languages share."""

    def __init__(self, own: Entities, other: Entities) -> None:
        super().__init__(own.rng, own.lang, own.now, own.used)
        self.other = other

    def draw(self, kind: str) -> str:
        if kind in _SWITCHED and self.rng.random() < SWITCH_SHARE:
            value = self.other.draw(kind)
            # a Latin name in Chinese text stands between spaces ("请 John Taylor 4月8日 ...")
            return f" {value} " if self.lang == "zh" else value
        return super().draw(kind)


# ---------------------------------------------------------------- tasks


@dataclass(eq=False)
class _Step:
    kind: str  # state, item, update, sub, dup, routine, summary
    text: str = ""
    line: Line | None = None
    sub: Sub | None = None  # the subtask the step belongs to (or creates, for "sub")
    target: _Step | None = None  # the original of a "dup"
    node: str = ""
    content: str = ""
    record: _Record | None = None
    copied: bool = False  # a later "dup" step re-records it


@dataclass(eq=False)
class _Record:
    """Something a question can be asked about, while it is still the right answer."""

    category: str
    gold: str
    nearest: str  # nearest task ancestor of the gold node
    task: _Task
    sub: Sub | None
    line: Line | None  # None for a state
    type: str
    content: str
    added: int
    stale: tuple[str, ...] = ()
    valid: bool = True
    asked: bool = False


@dataclass(eq=False)
class _Task:
    id: str
    domain: Domain
    slots: Slots
    script: deque[_Step]
    sub_nodes: dict[str, str] = field(default_factory=dict)
    records: list[_Record] = field(default_factory=list)
    current: dict[str, _Record] = field(default_factory=dict)  # by slot key, "state"
    # (id, type, parent, content) of every node written so far
    nodes: list[tuple[str, str, str, str]] = field(default_factory=list)
    last_state: str | None = None
    wake: int = 0  # session number a parked task comes back at
    lang: str = "en"  # the language it is written in


def _script(rng: random.Random, dom: Domain) -> deque[_Step]:
    """The steps of one task, in the order the agent will write them."""

    def some(seq: Sequence[Line], least: int) -> list[Line]:
        return rng.sample(list(seq), rng.randint(min(least, len(seq)), len(seq)))

    by_kind = {k: [i for i in dom.items if i.kind == k] for k in _NODE_TYPE}
    facts = some(by_kind["fact"], 2)
    lines = (
        facts[1:]
        + some(by_kind["event"], 1)
        + some(by_kind["decision"], 0)
        + some(by_kind["pref"], 0)
    )
    body = [_Step("item", line=x) for x in lines]
    body += [_Step("routine", text=rng.choice(dom.routines)) for _ in range(rng.randint(0, 5))]
    subs = rng.sample(list(dom.subs), rng.choice((0, 1, 1, 2)))
    body += [_Step("sub", text=s.title, sub=s) for s in subs]
    rng.shuffle(body)
    first = _Step("item", line=facts[0])
    body.insert(0, first)
    for s in subs:  # a subtask's items follow it, mostly close by
        at = body.index(next(b for b in body if b.sub is s and b.kind == "sub"))
        for line in some(s.items, 1):
            at = at + 1 if rng.random() < 0.7 else rng.randint(at + 1, len(body))
            body.insert(at, _Step("item", line=line, sub=s))
    updated = {f.key for f in facts if f.key in dom.updates and rng.random() < 0.7}
    for fact in (f for f in facts if f.key in updated):
        at = body.index(next(b for b in body if b.line is fact))
        body.insert(rng.randint(at + 1, len(body)), _Step("update", line=dom.updates[fact.key]))
    originals = [
        b
        for b in body
        if b.kind == "routine" or (b.kind == "item" and b.line and b.line.key not in updated)
    ]
    for target in rng.sample(originals, min(len(originals), rng.choice((0, 1, 1, 2)))):
        target.copied = True
        body.insert(
            rng.randint(body.index(target) + 1, len(body)),
            _Step("dup", target=target, sub=target.sub),
        )
    reach = rng.randint(1, len(dom.states) - 1)
    done = reach == len(dom.states) - 1
    middle = dom.states[1 : reach + (not done)]
    for i in range(len(middle), 0, -1):  # spread the states along the body, in order
        body.insert(round(i * len(body) / (len(middle) + 1)), _Step("state", text=middle[i - 1]))
    if done:
        body.append(_Step("state", text=dom.states[-1]))
        if rng.random() < 0.7:
            body.append(_Step("summary", text=rng.choice(dom.summaries)))
    return deque([_Step("state", text=dom.states[0]), *body])


# ---------------------------------------------------------------- the simulation


class _Simulation:
    def __init__(
        self, nodes: int, lang: str, seed: int, queries: int, restarts: bool, split: str = "dev"
    ) -> None:
        stream = f"hybrid-memory-trace/{lang}/{seed}" + ("" if split == "dev" else f"/{split}")
        self.rng = random.Random(stream)
        self.nodes, self.lang = nodes, lang
        self.langs = ("en", "zh") if lang == "mixed" else (lang,)
        span = 15 * (nodes / 1000) ** 0.4 * (_CLOSE - _OPEN)  # working seconds of the whole trace
        self.clock = _Clock(self.rng, span / (nodes * 1.4))
        used: dict[str, set[int]] = {}  # ids stay unique across the languages
        own = {lg: Entities(self.rng, lg, lambda: self.clock.now, used) for lg in self.langs}
        self.entities: dict[str, Entities] = (
            {lg: _Switching(own[lg], own[_other(lg)]) for lg in own}
            if lang == "mixed" else own
        )  # fmt: skip
        self.domains = {lg: domains(lg, split) for lg in self.langs}
        self.multi = {lg: tables.MULTI[lg] if split == "dev" else heldout.MULTI[lg] for lg in self.langs}
        self.events: list[Event] = []
        self.adds = 0
        self.open: list[_Task] = []
        self.parked: list[_Task] = []
        self.current: _Task | None = None
        self.resume: _Task | None = None
        self.focused: str | None = None
        self.session = 0
        self.pools: dict[str, list[_Record]] = {c: [] for c in _GENERAL}
        warm = max(10, nodes // 30)
        self.query_at = deque(sorted(self.rng.sample(range(warm, nodes), queries)))
        self.due: list[str] = []  # categories of queries whose time has come
        self.pending_returns = 0
        self.asked = 0
        n_restarts = min(60, max(2, nodes // 400)) if restarts else 0
        self.restart_at = deque(sorted(self.rng.sample(range(nodes // 10, nodes), n_restarts)))

    # -- the agent's day

    def run(self) -> list[Event]:
        while self.adds < self.nodes:
            self._session()
        self.due.extend("single-fact" for _ in range(self.pending_returns))
        self._ask_due(final=True)
        return self.events

    def _session(self) -> None:
        self.session += 1
        if self.restart_at and self.adds >= self.restart_at[0]:
            self.restart_at.popleft()
            self.events.append({"op": "restart"})
            self.focused = None
            self.clock.tick(20)
            self.resume = self.current if self.rng.random() < 0.6 else None
        previous = self.current
        task, returning = self._pick_task()
        self.current = task
        if returning:
            self.clock.tick(3)
            self._focus(task.id)
            came_back = task is not previous  # not merely resumed after a restart
            if came_back and self.pending_returns and self._ask_about(task, "after-return"):
                self.pending_returns -= 1
        for _ in range(self.rng.randint(2, 9)):
            if self.adds >= self.nodes or not task.script:
                break
            self._step(task, task.script.popleft())
            self._ask_due()
        if not task.script:
            self.open.remove(task)
            self.events.append({"op": "finish", "id": task.id})  # (the agent is done with it)
        elif self.rng.random() < 0.04:  # parked: back in weeks, not in minutes
            self.open.remove(task)
            task.wake = self.session + self.rng.randint(40, 400)
            self.parked.append(task)

    def _pick_task(self) -> tuple[_Task, bool]:
        if self.resume is not None and self.resume in self.open:
            task, self.resume = self.resume, None
            return task, True
        woken = next((t for t in self.parked if t.wake <= self.session), None)
        if woken is not None:
            self.parked.remove(woken)
            self.open.append(woken)
            return woken, True
        others = [t for t in self.open if t is not self.current]
        if not others or len(self.open) < 3 or (len(self.open) < 10 and self.rng.random() < 0.3):
            return self._new_task(), False
        return self.rng.choice(others), True

    def _new_task(self) -> _Task:
        lang = self.rng.choice(self.langs) if len(self.langs) > 1 else self.lang
        dom = self.rng.choice(self.domains[lang])
        self.clock.tick(3)
        slots = Slots(self.entities[lang], dom.kinds)
        title = self._fill(self.rng.choice(dom.titles), slots)
        task = _Task("", dom, slots, _script(self.rng, dom), lang=lang)
        extra = {"lang": lang} if self.lang == "mixed" else {}
        task.id = self._add(None, "task", title, domain=dom.name, **extra)
        task.nodes.append((task.id, "task", task.id, title))
        self._focus(task.id)
        self.open.append(task)
        return task

    def _focus(self, node: str) -> None:
        if node != self.focused:
            self.events.append({"op": "focus", "id": node})
            self.focused = node

    # -- writing

    def _fill(self, template: str, slots: Slots, **extra: str) -> str:
        text = template.format_map(_Overlay(slots, extra)) if extra else template.format_map(slots)
        return _written(text, self.lang)

    def _add(
        self, parent: str | None, typ: str, content: str, importance: str = "", **extra: Any
    ) -> str:
        self.adds += 1
        node = f"n{self.adds}"
        base = _IMPORTANCE[importance or typ]
        event: Event = {
            "op": "add",
            "id": node,
            "parent": parent,
            "type": typ,
            "content": content,
            "ts": self.clock.now,
            "importance": round(min(1.0, max(0.05, base + self.rng.uniform(-0.1, 0.1))), 2),
        }
        event.update(extra)
        self.events.append(event)
        return node

    def _step(self, task: _Task, step: _Step) -> None:
        self.clock.tick()  # before the content is written: "{time}" reads this moment
        parent = task.sub_nodes[step.sub.key] if step.sub and step.kind != "sub" else task.id
        self._focus(parent)
        if step.kind == "state":
            self._write_state(task, step)
        elif step.kind == "sub":
            assert step.sub is not None
            self._write(task, step, parent, "task", self._fill(step.text, task.slots))
            task.sub_nodes[step.sub.key] = step.node
        elif step.kind in ("item", "update"):
            self._write_item(task, step, parent)
        elif step.kind == "dup":
            self._write_dup(task, step, parent)
        else:
            typ = "summary" if step.kind == "summary" else "event"
            self._write(
                task, step, parent, typ, self._fill(step.text, task.slots), importance=step.kind
            )
            if step.kind == "routine" and self.rng.random() < 0.04:  # "that does not matter"
                self._feedback(step.node, 0.1)

    def _feedback(self, node: str, importance: float) -> None:
        self.events.append({"op": "feedback", "id": node, "importance": round(importance, 2)})

    def _write(
        self, task: _Task, step: _Step, parent: str, typ: str, content: str, **extra: Any
    ) -> None:
        step.node, step.content = self._add(parent, typ, content, **extra), content
        task.nodes.append((step.node, typ, parent, content))

    def _write_state(self, task: _Task, step: _Step) -> None:
        extra = {"supersedes": task.last_state} if task.last_state else {}
        self._write(task, step, task.id, "state", self._fill(step.text, task.slots), **extra)
        task.last_state = step.node
        self._record(task, step, "state", "state", None)

    def _write_item(self, task: _Task, step: _Step, parent: str) -> None:
        line = step.line
        assert line is not None
        if step.kind == "update":
            old, _ = task.slots.redraw(line.key)
            prev = task.current[line.key]
            self._write(
                task,
                step,
                parent,
                "fact",
                self._fill(line.contents[0], task.slots, old=old),
                supersedes=prev.gold,
            )
            self._record(
                task, step, line.key, "latest-update", line, stale=(*prev.stale, prev.gold)
            )
            return
        typ = _NODE_TYPE[line.kind]
        self._write(task, step, parent, typ, self._fill(line.contents[0], task.slots))
        self._record(task, step, line.key, _CATEGORY_OF[line.kind], line)
        if typ in ("decision", "preference") and self.rng.random() < 0.15:  # "this matters"
            self._feedback(step.node, self.rng.uniform(0.9, 1.0))

    def _write_dup(self, task: _Task, step: _Step, parent: str) -> None:
        target = step.target
        assert target is not None and target.node
        kind, content = self._reword(task, target)
        typ = next(t for n, t, _, _ in task.nodes if n == target.node)
        importance = "routine" if target.kind == "routine" else typ
        self._write(
            task, step, parent, typ, content, importance=importance, dup_of=target.node, dup=kind
        )

    def _reword(self, task: _Task, target: _Step) -> tuple[str, str]:
        kind = self.rng.choices(("repeat", "light", "reword"), (3, 4, 3))[0]
        line = target.line
        if kind == "reword" and line is not None and len(line.contents) > 1:
            return kind, self._fill(self.rng.choice(line.contents[1:]), task.slots)
        if kind != "repeat":
            wraps = list(tables.DUP_WRAPS[task.lang])
            self.rng.shuffle(wraps)
            for wrap in wraps:
                text = wrap.format(c=target.content.rstrip("。."))
                if (
                    text != target.content
                    and overlap(text, target.content) >= 0.85
                    and _figures(text) == _figures(target.content)
                ):
                    return "light", text
        return "repeat", target.content

    def _record(
        self,
        task: _Task,
        step: _Step,
        key: str,
        category: str,
        line: Line | None,
        stale: tuple[str, ...] = (),
    ) -> None:
        prev = task.current.get(key)
        if prev is not None:
            prev.valid = False
            if category == "state":
                stale = (*prev.stale, prev.gold)
        nearest = task.sub_nodes[step.sub.key] if step.sub else task.id
        typ = task.nodes[-1][1]
        rec = _Record(
            category, step.node, nearest, task, step.sub, line, typ, step.content, self.adds, stale,
            valid=not step.copied,  # re-recorded later: its answer would sit in two nodes
        )  # fmt: skip
        step.record = rec
        task.current[key] = rec
        task.records.append(rec)
        self.pools[category].append(rec)

    # -- asking

    def _ask_due(self, final: bool = False) -> None:
        if not (final or self.due or (self.query_at and self.query_at[0] <= self.adds)):
            return
        while self.query_at and self.query_at[0] <= self.adds:
            self.query_at.popleft()
            category = self.rng.choices(CATEGORIES, _CATEGORY_WEIGHTS)[0]
            if category == "after-return":
                self.pending_returns += 1
            else:
                self.due.append(category)
        self.due = [c for c in self.due if not self._ask_one(c, final)]
        if final:  # what could not be asked in its own category is asked in another
            for category in self.due:
                others = [c for c in _GENERAL if c != category]
                self.rng.shuffle(others)
                any(self._ask_general(c, True) for c in others)
            self.due = []

    def _ask_one(self, category: str, reuse: bool) -> bool:
        if category == "current-task":
            task = self.current
            working = task is not None and self.focused in (task.id, *task.sub_nodes.values())
            if working and task is not None and self._ask_about(task, category):
                return True
            category = "single-fact"  # no task at hand: ask about any
        return self._ask_general(category, reuse)

    def _clear(self, rec: _Record) -> bool:
        """Whether ``rec`` still has one unambiguous answer; an ambiguous one stays so."""
        if not rec.valid:
            return False
        mine = terms(rec.content)
        for node, typ, parent, content in rec.task.nodes:
            if node != rec.gold and typ == rec.type and parent == rec.nearest:
                other = terms(content)
                if len(mine & other) >= _AMBIGUOUS * len(mine | other):
                    rec.valid = False
                    return False
        return True

    def _pick(self, pool: Sequence[_Record], reuse: bool) -> _Record | None:
        for attempt in range(30):
            if not pool:
                return None
            if self.rng.random() < 0.35:  # recent work ...
                rec = pool[len(pool) - 1 - self.rng.randrange(min(len(pool), 40))]
            else:  # ... or anything since the start
                rec = pool[self.rng.randrange(len(pool))]
            if (not rec.asked or (reuse and attempt > 20)) and self._clear(rec):
                return rec
        return None

    def _ask_general(self, category: str, reuse: bool) -> bool:
        if category == "multi-fact":
            return self._ask_multi(reuse)
        rec = self._pick(self.pools[category], reuse)
        if rec is None:
            return False
        self._query(category, [rec], *self._question(rec))
        return True

    def _ask_multi(self, reuse: bool) -> bool:
        for _ in range(10):
            first = self._pick(self.pools[self.rng.choice(_MULTI_FROM)], reuse)
            if first is None:
                continue
            mates = [
                r
                for r in first.task.records
                if r.nearest == first.nearest and r is not first and r.line is not None and r.valid
            ]
            self.rng.shuffle(mates)
            second = next((r for r in mates if self._clear(r)), None)
            if second is None:
                continue
            pair = sorted((first, second), key=lambda r: r.added)
            a, b = (r.line.np for r in pair if r.line is not None)
            ref = first.sub.ref if first.sub else self.rng.choice(first.task.domain.refs)
            text = self.rng.choice(self.multi[first.task.lang]).format(ref=ref, a=a, b=b)
            self._query("multi-fact", pair, self._fill(text, first.task.slots), first.task.lang)
            return True
        return False

    def _ask_about(self, task: _Task, category: str) -> bool:
        """A question about ``task`` (returned to, or being worked on) from what it holds."""
        recent = task.records[-6:] if category == "current-task" else task.records
        candidates = [r for r in recent if r.valid and not r.asked]
        self.rng.shuffle(candidates)
        rec = next((r for r in candidates if self._clear(r)), None)
        if rec is None:
            return False
        self._query(category, [rec], *self._question(rec))
        return True

    def _question(self, rec: _Record) -> tuple[str, str]:
        """A question about ``rec``, and the language it is asked in."""
        dom, line, lang = rec.task.domain, rec.line, rec.task.lang
        if len(self.langs) > 1 and self.rng.random() < CROSS_SHARE:
            crossed = self._crossed(rec)
            if crossed is not None:
                (dom, line), lang = crossed, _other(lang)
        template = self.rng.choice(dom.asks if line is None else line.questions)
        # A ref that names what the question already names reads badly ("Zhang Wei's claim" in
        # "How should Zhang Wei hear about ...?"): take one that does not, when there is one.
        named = _slot_names(template)
        refs = [r for r in dom.refs if not _slot_names(r) & named] or list(dom.refs)
        slots = {**rec.task.slots}  # a plain dict: a question draws nothing new
        slots["ref"] = self.rng.choice(refs).format_map(slots)
        return _written(template.format_map(slots), self.lang), lang

    def _crossed(self, rec: _Record) -> tuple[Domain, Line | None] | None:
        """The other language's domain and line asking about what ``rec`` holds, when
        the other language has that line and the task has every slot it names."""
        dom = next((d for d in self.domains[_other(rec.task.lang)] if d.name == rec.task.domain.name), None)
        if dom is None:
            return None
        line = None
        if rec.line is not None:
            lines = (*dom.items, *(i for sub in dom.subs for i in sub.items), *dom.updates.values())
            line = next((x for x in lines if (x.kind, x.key) == (rec.line.kind, rec.line.key)), None)
            if line is None:
                return None
        asked = dom.asks if line is None else line.questions
        named = {n for t in (*asked, *dom.refs) for n in _slot_names(t)} - {"ref"}
        return (dom, line) if named <= rec.task.slots.keys() else None

    def _query(self, category: str, recs: Sequence[_Record], text: str, lang: str) -> None:
        self.asked += 1
        event: Event = {
            "op": "query",
            "id": f"q{self.asked}",
            "text": text,
            "gold": [r.gold for r in recs],
            "task": [recs[0].nearest],
            "ts": self.clock.tick(0.5),
            "category": category,
            "lag": self.adds - max(r.added for r in recs),
        }
        stale = [s for r in recs for s in r.stale]
        if stale:
            event["stale"] = stale
        if self.lang == "mixed":
            event["lang"] = lang
        self.events.append(event)
        for r in recs:
            r.asked = True


class _Overlay(dict[str, str]):
    """Extra values over a task's slots while filling one template."""

    def __init__(self, slots: Slots, extra: dict[str, str]) -> None:
        super().__init__(extra)
        self.slots = slots

    def __missing__(self, key: str) -> str:
        return self.slots[key]


# ---------------------------------------------------------------- public API


def default_queries(nodes: int) -> int:
    """The default number of queries for a trace of ``nodes`` nodes: one per 35, 2 to 2,000."""
    return min(MAX_DEFAULT_QUERIES, max(2, round(nodes / 35)))


def generate(
    nodes: int = 1000,
    *,
    lang: str = "en",
    seed: int = 0,
    queries: int | None = None,
    restarts: bool = True,
    split: str = "dev",
) -> list[dict[str, Any]]:
    """A synthetic trace of exactly ``nodes`` add events with its queries, in ``lang``
    ("en", "zh", or "mixed": each task in one of the two, its people and named
    things now and then from the other); the same arguments give the same trace.

    ``queries`` defaults to :func:`default_queries` and may be at most ``nodes // 5``.
    ``split`` is "dev" (tuned on) or "test" (held-out phrasings and domains, never tuned on).
    Raises ValueError for fewer than 50 nodes, an unknown language or split, or a bad query
    count."""
    if lang not in LANGS:
        raise ValueError(f"unknown lang {lang!r}; expected one of {', '.join(LANGS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < MIN_NODES:
        raise ValueError(f"nodes must be an integer >= {MIN_NODES}, got {nodes!r}")
    n_queries = default_queries(nodes) if queries is None else queries
    if (
        isinstance(n_queries, bool)
        or not isinstance(n_queries, int)
        or not 0 <= n_queries <= nodes // 5
    ):
        raise ValueError(
            f"queries must be an integer from 0 to nodes // 5 = {nodes // 5}, got {queries!r}"
        )
    return _Simulation(nodes, lang, seed, n_queries, restarts, split).run()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m eval.generate``: write a generated trace as JSON Lines."""
    p = argparse.ArgumentParser(
        prog="python -m eval.generate", description="Write a synthetic evaluation trace."
    )
    p.add_argument(
        "--nodes", type=int, default=10_000, help="add events in the trace (default 10000)"
    )
    p.add_argument(
        "--lang", default="en", choices=LANGS, help="language of the content (default en)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--split",
        default="dev",
        choices=SPLITS,
        help="dev (tuned on) or test (held-out phrasings and domains; default dev)",
    )
    p.add_argument(
        "--queries",
        type=int,
        default=None,
        help="number of queries (default: one per 35 nodes, at most 2000)",
    )
    p.add_argument("--no-restarts", action="store_true", help="leave restart events out")
    p.add_argument("--out", required=True, help="the JSON Lines file to write")
    args = p.parse_args(argv)
    started = time.perf_counter()
    try:
        events = generate(
            args.nodes,
            lang=args.lang,
            seed=args.seed,
            queries=args.queries,
            restarts=not args.no_restarts,
            split=args.split,
        )
    except ValueError as exc:
        p.error(str(exc))
    write_trace(events, Path(args.out))
    counts: dict[str, int] = {}
    for e in events:
        counts[e["op"]] = counts.get(e["op"], 0) + 1
    summary = ", ".join(f"{op} {n}" for op, n in sorted(counts.items()))
    print(f"{args.out}: {summary} ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
