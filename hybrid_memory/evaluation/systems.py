"""The systems under test: hybrid_memory itself and the baselines.

Every system sees the same events with the same precomputed embeddings and
answers a question with its memories best first, within the same token budget.
The baselines keep their nodes in plain Python structures (the flat vector
baseline in a real Chroma collection): they are what a user would build instead.

- ``hybrid``: :class:`hybrid_memory.MemoryTree` (SQLite + embedded Chroma).
- ``hybrid_auto``: the same, every memory that is not a task written with
  ``parent=AUTO`` (placed by meaning): its placement accuracy is reported beside.
- ``hybrid_finished``: the same, and at every ``finish`` event of the trace the task
  is finished (``MemoryTree.finish``: summarized) and the details its summary covers
  are forgotten; a summary in an answer shows the details whose every sentence it
  holds (the compression run).
- ``flat_vector``: Chroma top-k over every node; no tree, no weights.
- ``bm25``: Okapi BM25 top-k over the same terms hybrid_memory indexes (Latin
  words, CJK bigrams).
- ``recent``: the most recent nodes, newest first, as many as fit the budget.
- ``full_history``: everything, unranked: the token ceiling.
- ``article_minimal``: the active node's ancestor chain plus the top-k nodes of
  its task branch by weight, no semantics (the article's minimal retrieval).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from .. import AUTO, ROOT, Config, MemoryTree, NodeType, summaries
from .. import text as hm_text
from ..embed import Embedder, Vectors
from ..errors import InvalidInputError
from ..retrieval import rank_key
from ..store.vectors import ChromaIndex
from ..weights import weight as node_weight

Event = Mapping[str, Any]


class RecoveryError(RuntimeError):
    """A system's recovery, run in a process of its own, failed; the message holds
    what that process wrote to stderr."""


@dataclass
class Answer:
    """One system's answer to one question (ids are the system's own)."""

    ranked: list[str]
    tokens: int
    branch: str | None = None
    #: The system returned everything, unranked (full_history): every gold memory is in.
    everything: bool = False
    #: Ids of ``ranked`` that show others in their text (a summary), and those others.
    shows: Mapping[str, Sequence[str]] = field(default_factory=dict)


class System(Protocol):
    name: str

    def start(self, namespace: str) -> None:
        """Begin a fresh, empty memory for everything that follows."""

    def add(self, items: Sequence[Event]) -> list[str]:
        """Write add events (parents resolved to this system's ids); their ids, in order."""

    def focus(self, node_id: str) -> None: ...

    def feedback(self, node_id: str, importance: float) -> None: ...

    def restart(self) -> str | None:
        """Close and reopen; return the active node a fresh process recovers, if any."""

    def query(self, text: str, vector: np.ndarray[Any, Any], *, k: int, budget: int, now: float,
              official: bool) -> Answer: ...

    def branch_of(self, node_id: str) -> str | None: ...

    def close(self) -> None: ...


class CachedEmbedder:
    """The real embedder behind a text -> vector cache, so that every system (and
    every replay) reads the same vectors and no query pays for its embedding twice."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self._vectors: dict[str, np.ndarray[Any, Any]] = {}
        #: Vectors read from a cache file, by text digest (moved to _vectors when asked for).
        self._stored: dict[str, np.ndarray[Any, Any]] = {}
        self._coverage: dict[str, float] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def load(self, path: Path) -> int:
        """Read vectors saved by :meth:`save` (same model); returns how many."""
        if not path.is_file():
            return 0
        with np.load(path, allow_pickle=False) as data:
            if "keys" not in data or data["vectors"].ndim != 2:
                return 0  # an older or foreign file: embed afresh
            keys, matrix = data["keys"], data["vectors"]
        self._stored.update(zip(keys.tolist(), matrix, strict=True))
        return len(keys)

    def save(self, path: Path) -> None:
        """Keep the vectors for the next run (atomic write), keyed by a digest of
        each text so that long texts cost nothing in the file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        # What another run saved meanwhile is kept (runs in parallel share the file).
        on_disk: dict[str, np.ndarray[Any, Any]] = {}
        if path.is_file():
            with np.load(path, allow_pickle=False) as data:
                if "keys" in data and data["vectors"].ndim == 2 and data["vectors"].shape[1] == self.dim:
                    on_disk = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        stored = {**on_disk, **self._stored, **{_digest(t): v for t, v in self._vectors.items()}}
        keys = list(stored)
        if not keys:
            return  # nothing embedded yet (a stand-in no text needed): no file
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")  # one per process: runs may overlap
        np.savez(tmp, keys=np.array(keys, dtype="U64"), vectors=np.stack([stored[k] for k in keys]))
        tmp.replace(path)

    def warm(self, texts: Sequence[str], progress: Callable[[int], None] | None = None, batch: int = 256) -> None:
        for t in texts:
            if t not in self._vectors and self._stored:
                v = self._stored.get(_digest(t))
                if v is not None:
                    self._vectors[t] = v
        todo = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        for i in range(0, len(todo), batch):
            chunk = todo[i : i + batch]
            for t, v in zip(chunk, self.inner.embed(chunk), strict=True):
                self._vectors[t] = v
            if progress:
                progress(len(chunk))

    def known(self, texts: Sequence[str]) -> Vectors | None:
        """The vectors of ``texts`` when the cache holds them all (read from the
        cache file as :meth:`warm` reads them), None otherwise."""
        if not texts or any(t not in self._vectors for t in texts):
            return None
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.warm(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)

    def coverage(self, text: str) -> float:
        if text not in self._coverage:
            self._coverage[text] = self.inner.coverage(text)
        return self._coverage[text]


# -- hybrid_memory ---------------------------------------------------------------


class HybridSystem:
    """hybrid_memory as a user runs it: a folder with SQLite and embedded Chroma.

    ``forget_cap``: after every write, forget down to that many live nodes (the
    forgetting run). ``recover_in_subprocess``: at a restart, ask a fresh process
    (``hybrid-memory recover --json``) what it recovers. ``place``: write every
    memory that is not a task, and whose parent is already stored, with
    ``parent=AUTO``, and count how many go to the branch the trace puts them in.
    ``finish``: at a ``finish`` event, finish the task and forget what its summary
    covers (a forget at a threshold just above 0 takes only what weighs 0: the
    covered details, ``forgetting.summarized`` = 0).
    """

    def __init__(self, name: str, folder: Path, embedder: CachedEmbedder, clock: Callable[[], float], *,
                 config: Config | None = None, forget_cap: int | None = None,
                 recover_in_subprocess: bool = True, recover_args: Sequence[str] = (), place: bool = False,
                 finish: bool = False) -> None:
        self.name = name
        self.place = place
        self.finishing = finish
        #: Tasks finished, details their summaries cover (and their tokens), the
        #: summaries' tokens, and the details forgotten.
        self.finished = {"tasks": 0, "covered": 0, "covered_tokens": 0, "summary_tokens": 0, "forgotten": 0}
        self._shown: dict[str, list[str]] = {}  # a summary's id -> the details its text holds
        #: Memories written with parent=AUTO, those placed in their true branch, and
        #: those the placement sent to the active node.
        self.placed = {"total": 0, "right": 0, "by_active": 0, "right_by_active": 0}
        self.folder = folder
        self.embedder = embedder
        self.clock = clock
        self.config = config
        self.forget_cap = forget_cap
        self.recover_in_subprocess = recover_in_subprocess
        #: Extra command-line options of the recovering process (--config, --model).
        self.recover_args = list(recover_args)
        self.namespace = ""
        self.mem: MemoryTree | None = None
        self.forgotten = 0

    def _open(self) -> MemoryTree:
        return MemoryTree.open(self.folder, namespace=self.namespace, embedder=self.embedder,
                               clock=self.clock, config=self.config)

    def start(self, namespace: str) -> None:
        self.close()
        self.namespace = namespace
        self.mem = self._open()
        if self.mem.admin.stats().live:
            raise RuntimeError(f"namespace {namespace!r} of {self.folder} is not empty")

    @property
    def _m(self) -> MemoryTree:
        if self.mem is None:
            raise RuntimeError("start() first")
        return self.mem

    def add(self, items: Sequence[Event]) -> list[str]:
        batch = []
        for e in items:
            item: dict[str, Any] = {"key": e["_key"], "content": e["content"], "type": e.get("type", "event"),
                                    "parent": ROOT if e["parent"] is None else e["parent"], "ts": e.get("ts")}
            if e.get("importance") is not None:
                item["importance"] = float(e["importance"])
            batch.append(item)
        for parent in {i["parent"] for i in batch if isinstance(i["parent"], str)} - {i["key"] for i in batch}:
            self._revive(parent)
        truth = self._auto(batch) if self.place else {}
        nodes = self._m.add_many(batch)
        for i, branch in truth.items():
            self._count(nodes[i], branch)
        if self.forget_cap is not None and self._m.admin.stats().live > self.forget_cap:
            self.forgotten += len(self._m.forget(max_nodes=self.forget_cap).details)
        return [n.id for n in nodes]

    def _auto(self, batch: list[dict[str, Any]]) -> dict[int, str]:
        """Turn the batch's memories (not tasks) whose parent is stored into
        ``parent=AUTO`` ones; the branch the trace puts each in, by item index."""
        keys = {i["key"] for i in batch}
        truth: dict[int, str] = {}
        for n, item in enumerate(batch):
            parent = item["parent"]
            if item["type"] == "task" or not isinstance(parent, str) or parent in keys:
                continue
            node = self._m.get(parent)
            truth[n] = node.id if node.type is NodeType.TASK else node.branch_id
            item["parent"] = AUTO
        return truth

    def _count(self, node: Any, branch: str) -> None:
        placed = node.placement
        right = node.branch_id == branch
        self.placed["total"] += 1
        self.placed["right"] += right
        if placed is not None and placed.by == "active":
            self.placed["by_active"] += 1
            self.placed["right_by_active"] += right

    def placement(self) -> dict[str, Any]:
        """The placement figures of a ``place`` run: accuracy, and how many went to the
        active node for want of a close branch."""
        total = self.placed["total"]
        return dict(self.placed, accuracy=round(self.placed["right"] / total, 4) if total else None)

    def _revive(self, node_id: str) -> None:
        """An agent going back to a memory that forgetting archived restores it first."""
        if self.forget_cap is not None and not self._m.get(node_id).live:
            self._m.unarchive(node_id)

    def focus(self, node_id: str) -> None:
        self._revive(node_id)
        self._m.focus(node_id)

    def feedback(self, node_id: str, importance: float) -> None:
        self._revive(node_id)
        self._m.feedback(node_id, importance=importance)

    def restart(self) -> str | None:
        self._m.close()
        self.mem = None
        active: str | None = None
        if self.recover_in_subprocess:
            env = dict(os.environ, HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
            out = subprocess.run(
                [sys.executable, "-m", "hybrid_memory", "--path", str(self.folder), "--namespace", self.namespace,
                 *self.recover_args, "--json", "recover"],
                capture_output=True, text=True, env=env, timeout=300, check=False,
            )
            if out.returncode != 0:
                raise RecoveryError(f"hybrid-memory recover exited {out.returncode} on {self.folder}: "
                                    f"{out.stderr.strip()[-2000:] or '(nothing on stderr)'}")
            state = json.loads(out.stdout)
            active = (state.get("active") or {}).get("id")
        self.mem = self._open()
        if not self.recover_in_subprocess:
            rec = self.mem.recover()
            active = rec.active.id if rec.active else None
        return active

    def finish(self, node_id: str) -> None:
        if not self.finishing:
            return
        try:
            summary = self._m.finish(node_id)
        except InvalidInputError:  # nothing under it to summarize
            return
        covered = summary.meta[summaries.COVERS]
        self.finished["tasks"] += 1
        self.finished["covered"] += len(covered)
        self.finished["covered_tokens"] += sum(hm_text.count_tokens(self._m.get(i).content) for i in covered)
        self.finished["summary_tokens"] += hm_text.count_tokens(summary.content)
        self.finished["forgotten"] += len(self._m.forget(threshold=1e-9).archived)

    def _shows(self, node: Any) -> list[str]:
        """The details a summary's text holds whole: every sentence of theirs is in it."""
        if node.id not in self._shown:
            ids = node.meta.get(summaries.COVERS) or []
            self._shown[node.id] = [i for i in ids if all(
                s in node.content for s in summaries.sentences(self._m.get(i).content))]
        return self._shown[node.id]

    def query(self, text: str, vector: np.ndarray[Any, Any], *, k: int, budget: int, now: float,
              official: bool) -> Answer:
        recall = self._m.retrieve(text, k=k, budget_tokens=budget, now=now, reinforce=official)
        picked = sorted((s for s in recall.nodes if s.reason != "ancestor"), key=rank_key, reverse=True)
        ancestors = [s for s in recall.nodes if s.reason == "ancestor"]
        ranked = [s.node.id for s in picked] + [s.node.id for s in ancestors]
        branch = recall.branches[0].branch_id if recall.branches else None
        shows = {s.node.id: self._shows(s.node) for s in recall.nodes
                 if self.finishing and s.node.type is NodeType.SUMMARY}
        return Answer(ranked, recall.tokens, branch, shows=shows)

    def branch_of(self, node_id: str) -> str | None:
        return self._m.get(node_id).branch_id

    def is_live(self, node_id: str) -> bool:
        return self._m.get(node_id).live

    def type_of(self, node_id: str) -> str:
        return self._m.get(node_id).type.value

    def close(self) -> None:
        if self.mem is not None:
            self.mem.close()
            self.mem = None


# -- baselines -------------------------------------------------------------------


@dataclass
class _Rec:
    id: str
    parent: str | None
    type: str
    content: str
    ts: float
    importance: float
    confidence: float
    line_tokens: int
    branch: str


class _Baseline:
    """What the baselines share: the nodes in memory, the tree links, the budget cut."""

    name = "baseline"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.recs: dict[str, _Rec] = {}
        self.order: list[str] = []
        self.active: str | None = None

    def start(self, namespace: str) -> None:
        self.recs, self.order, self.active = {}, [], None

    def add(self, items: Sequence[Event]) -> list[str]:
        w = self.config.weights
        for e in items:
            node_id, parent, typ = e["_key"], e["parent"], e.get("type", "event")
            if parent is not None and parent not in self.recs:
                raise KeyError(f"unknown parent {parent!r}")
            branch = node_id if typ == "task" or parent is None else self.recs[parent].branch
            imp = e.get("importance")
            self.recs[node_id] = _Rec(
                node_id, parent, typ, e["content"], float(e.get("ts") or 0.0),
                float(imp) if imp is not None else w.importance_by_type.get(typ, 0.5),
                w.confidence_by_type.get(typ, 0.7), line_tokens(typ, e["content"]), branch,
            )
            self.order.append(node_id)
            if typ == "task":
                self.active = node_id
        self._added([self.recs[e["_key"]] for e in items])
        return [e["_key"] for e in items]

    def _added(self, recs: list[_Rec]) -> None:
        """Index new records (for the baselines that index)."""

    def focus(self, node_id: str) -> None:
        self.active = node_id

    def feedback(self, node_id: str, importance: float) -> None:
        self.recs[node_id].importance = importance

    def restart(self) -> str | None:
        return self.active

    def branch_of(self, node_id: str) -> str | None:
        return self.recs[node_id].branch

    def _fit(self, ids: Sequence[str], k: int | None, budget: int) -> Answer:
        """Take ids in order while they fit the budget, at most k of them."""
        taken: list[str] = []
        used = 0
        for node_id in ids:
            cost = self.recs[node_id].line_tokens
            if used + cost > budget:
                continue
            taken.append(node_id)
            used += cost
            if k is not None and len(taken) >= k:
                break
        return Answer(taken, used, self.recs[taken[0]].branch if taken else None)

    def close(self) -> None:
        pass


class FlatVector(_Baseline):
    """Chroma top-k over all nodes with the same embeddings; no tree, no weights."""

    name = "flat_vector"

    def __init__(self, config: Config, folder: Path, embedder: CachedEmbedder) -> None:
        super().__init__(config)
        self.index = ChromaIndex(folder)
        self.embedder = embedder
        self.namespace = ""

    def start(self, namespace: str) -> None:
        super().start(namespace)
        self.namespace = "flat/" + namespace

    def _added(self, recs: list[_Rec]) -> None:
        self.index.upsert(self.namespace, [r.id for r in recs], self.embedder.embed([r.content for r in recs]))

    def query(self, text: str, vector: np.ndarray[Any, Any], *, k: int, budget: int, now: float,
              official: bool) -> Answer:
        hits = self.index.query(self.namespace, vector[None, :], k)[0]
        return self._fit([i for i, _ in hits], k, budget)

    def close(self) -> None:
        self.index.close()


class BM25(_Baseline):
    """Okapi BM25 (k1=1.2, b=0.75) over hybrid_memory's lexical terms."""

    name = "bm25"
    k1, b = 1.2, 0.75

    def start(self, namespace: str) -> None:
        super().start(namespace)
        self.postings: dict[str, dict[str, int]] = defaultdict(dict)
        self.lengths: dict[str, int] = {}

    def _added(self, recs: list[_Rec]) -> None:
        for r in recs:
            counts = hm_text.term_counts(r.content)
            self.lengths[r.id] = sum(counts.values())
            for term, n in counts.items():
                self.postings[term][r.id] = n

    def query(self, text: str, vector: np.ndarray[Any, Any], *, k: int, budget: int, now: float,
              official: bool) -> Answer:
        n_docs = len(self.lengths) or 1
        avg = sum(self.lengths.values()) / n_docs
        scores: dict[str, float] = defaultdict(float)
        for term in set(hm_text.terms(text)):
            docs = self.postings.get(term)
            if not docs:
                continue
            idf = math.log(1.0 + (n_docs - len(docs) + 0.5) / (len(docs) + 0.5))
            for node_id, tf in docs.items():
                norm = tf + self.k1 * (1 - self.b + self.b * self.lengths[node_id] / avg)
                scores[node_id] += idf * tf * (self.k1 + 1) / norm
        ranked = sorted(scores, key=lambda i: (-scores[i], self.order_index(i)))
        return self._fit(ranked, k, budget)

    def order_index(self, node_id: str) -> int:
        return -int(self.recs[node_id].ts)


class Recent(_Baseline):
    """The newest nodes first, as many as fit the budget."""

    name = "recent"

    def query(self, text: str, vector: np.ndarray[Any, Any], *, k: int, budget: int, now: float,
              official: bool) -> Answer:
        ans = self._fit(list(reversed(self.order)), None, budget)
        ans.branch = self.recs[self.order[-1]].branch if self.order else None
        return ans


class FullHistory(_Baseline):
    """Everything, in the order it happened: what stuffing the whole history costs."""

    name = "full_history"

    def query(self, text: str, vector: np.ndarray[Any, Any], *, k: int, budget: int, now: float,
              official: bool) -> Answer:
        return Answer(list(self.order), self.full_tokens(), None, everything=True)

    def full_tokens(self) -> int:
        return sum(r.line_tokens for r in self.recs.values())


class ArticleMinimal(_Baseline):
    """The active node's ancestors plus the top-k nodes of its branch by weight."""

    name = "article_minimal"

    def query(self, text: str, vector: np.ndarray[Any, Any], *, k: int, budget: int, now: float,
              official: bool) -> Answer:
        if self.active is None:
            return Answer([], 0, None)
        chain = []
        node: str | None = self.active
        while node is not None:
            chain.append(node)
            node = self.recs[node].parent
        branch = self.recs[self.active].branch
        members = [r for r in self.recs.values() if r.branch == branch and r.id not in chain]
        w = self.config.weights
        members.sort(key=lambda r: -node_weight(importance=r.importance, confidence=r.confidence, access_count=0,
                                                 touched_at=r.ts, now=now, cfg=w))
        ans = self._fit([m.id for m in members], k, budget - sum(self.recs[c].line_tokens for c in chain))
        ans.ranked += list(reversed(chain))
        ans.tokens += sum(self.recs[c].line_tokens for c in chain)
        ans.branch = branch
        return ans


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def line_tokens(typ: str, content: str) -> int:
    """Tokens of a memory's rendered line, as every system counts them."""
    return hm_text.count_tokens(f"[{typ}] {content}")


T = TypeVar("T")

#: The systems that are hybrid_memory itself.
HYBRIDS = ("hybrid", "hybrid_auto", "hybrid_finished")
BASELINES = ("flat_vector", "bm25", "recent", "full_history", "article_minimal")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """What ``fn()`` returns, and how long it took in milliseconds."""
    t0 = time.perf_counter()
    ans = fn()
    return ans, (time.perf_counter() - t0) * 1000.0
