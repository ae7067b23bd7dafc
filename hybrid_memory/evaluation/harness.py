"""Replay a trace into every system under test and measure them (:func:`evaluate`).

Each system sees the same events and reads the same precomputed embeddings;
``hybrid`` is hybrid_memory itself. Besides the systems' answers, the harness
replays hybrid_memory twice more: once without the trace's restarts (do the
answers after a restart equal those of an uninterrupted run?) and once with
forgetting on at a live-node cap (were gold memories forgotten before their
question came?).
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .. import Config, passages
from ..embed import make_embedder
from ..embed.combined import STAND_IN, CombinedEmbedder
from . import metrics
from .events import Prepared, Query, prepare
from .systems import (
    BASELINES,
    BM25,
    HYBRIDS,
    Answer,
    ArticleMinimal,
    CachedEmbedder,
    FlatVector,
    FullHistory,
    HybridSystem,
    Recent,
    System,
    line_tokens,
    timed,
)
from .trace import TraceError

CURVE_K = 20
TOKEN_POINTS = (1, 3, 5, 10, 20)


# -- replaying into one system -------------------------------------------------------


@dataclass
class Reply:
    """One system's answer to one question, in trace ids."""

    ranked: list[frozenset[str]]
    tokens: int
    branch: frozenset[str] | None
    latency_ms: float
    everything: bool = False
    curve: list[frozenset[str]] = field(default_factory=list)
    tokens_at: dict[int, int] = field(default_factory=dict)
    recall_at: dict[int, float] = field(default_factory=dict)


@dataclass
class Run:
    name: str
    replies: dict[int, Reply] = field(default_factory=dict)
    recoveries: list[bool] = field(default_factory=list)
    gold_checked: int = 0
    gold_forgotten: int = 0
    #: Gold memories forgotten before their question, by memory type.
    forgotten_types: dict[str, int] = field(default_factory=dict)
    #: The trace ids of those gold memories.
    forgotten_gold: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Replayer:
    """Feeds one system the prepared events, maps its ids back to trace ids."""

    def __init__(self, system: System, vectors: CachedEmbedder, clock: list[float], k: int, budget: int,
                 *, skip_restarts: bool = False, check_forgotten: bool = False) -> None:
        self.system = system
        self.vectors = vectors
        self.clock = clock
        self.k = k
        self.budget = budget
        self.skip_restarts = skip_restarts
        self.check_forgotten = check_forgotten
        self.to_sys: dict[str, str] = {}
        self.from_sys: dict[str, set[str]] = {}

    def run(self, prepared: Prepared, progress: bool) -> Run:
        out = Run(self.system.name)
        t0 = time.perf_counter()
        pending: list[dict[str, Any]] = []
        started = False
        bar = tqdm(total=len(prepared.events), desc=f"{self.system.name:<16}", unit="ev", disable=not progress,
                   leave=False, file=sys.stderr)
        for e in prepared.events:
            op = e["op"]
            if not started or op == "namespace":
                self._flush(pending)
                self.system.start(e["_ns"])
                self.to_sys, self.from_sys, started = {}, {}, True
            self.clock[0] = e["ts"]
            if op == "add":
                pending.append(e)
                if len(pending) >= 256:
                    self._flush(pending)
            else:
                self._flush(pending)
                self._event(e, prepared, out)
            bar.update(1)
        self._flush(pending)
        bar.close()
        self.system.close()
        out.seconds = time.perf_counter() - t0
        return out

    def _flush(self, pending: list[dict[str, Any]]) -> None:
        if not pending:
            return
        items = [{**e, "_key": e["id"], "parent": self.to_sys.get(e["parent"], e["parent"])} for e in pending]
        for e, sys_id in zip(pending, self.system.add(items), strict=True):
            self.to_sys[e["id"]] = sys_id
            self.from_sys.setdefault(sys_id, set()).add(e["id"])
        pending.clear()

    def _event(self, e: dict[str, Any], prepared: Prepared, out: Run) -> None:
        op = e["op"]
        if op == "focus":
            self.system.focus(self.to_sys[e["id"]])
        elif op == "feedback" and e.get("importance") is not None:
            self.system.feedback(self.to_sys[e["id"]], float(e["importance"]))
        elif op == "restart" and not self.skip_restarts:
            recovered = self.system.restart()
            expected = e.get("expected_active")
            out.recoveries.append(
                expected is None if recovered is None else expected in self.from_sys.get(recovered, set())
            )
        elif op == "finish":
            finish = getattr(self.system, "finish", None)  # (a baseline has nothing to summarize)
            if finish is not None:
                finish(self.to_sys[e["id"]])
        elif op == "query":
            q = prepared.queries[e["_q"]]
            if self.check_forgotten:
                self._count_forgotten(q, out)
            out.replies[e["_q"]] = self._ask(q)

    def _count_forgotten(self, q: Query, out: Run) -> None:
        system = self.system
        assert isinstance(system, HybridSystem)
        for gold in q.gold:
            out.gold_checked += 1
            if not system.is_live(self.to_sys[gold]):
                out.gold_forgotten += 1
                typ = system.type_of(self.to_sys[gold])
                out.forgotten_types[typ] = out.forgotten_types.get(typ, 0) + 1
                out.forgotten_gold.append(gold)

    def _ask(self, q: Query) -> Reply:
        vector = self.vectors.embed([q.text])[0]

        def ask(k: int, official: bool) -> Answer:
            return self.system.query(q.text, vector, k=k, budget=self.budget, now=q.ts, official=official)

        ans, ms = timed(lambda: ask(self.k, True))
        reply = Reply(self._trace_ids(ans), ans.tokens, self._branch(ans.branch), ms, ans.everything)
        curve = ans if self.k == CURVE_K else ask(CURVE_K, False)
        reply.curve = self._trace_ids(curve)
        for point in TOKEN_POINTS:
            at = ans if point == self.k else curve if point == CURVE_K else ask(point, False)
            reply.tokens_at[point] = at.tokens
            reply.recall_at[point] = 1.0 if at.everything else metrics.recall_all(self._trace_ids(at), q.gold, point)
        return reply

    def _trace_ids(self, ans: Answer) -> list[frozenset[str]]:
        """The trace ids of each answer, with those it shows for others (a summary's)."""
        return [frozenset(self.from_sys.get(i, ())).union(*(self.from_sys.get(j, ()) for j in ans.shows.get(i, ())))
                for i in ans.ranked]

    def _branch(self, sys_id: str | None) -> frozenset[str] | None:
        return None if sys_id is None else frozenset(self.from_sys.get(sys_id, ()))


# -- running the whole evaluation ------------------------------------------------------


@dataclass
class Options:
    k: int = 10
    budget: int = 1000
    systems: Sequence[str] = ("hybrid", *BASELINES)
    forget_cap: float | None = 0.5
    control: bool = True
    config: Config | None = None
    #: The TOML file ``config`` was read from, handed to the fresh process that
    #: recovers after a restart (it must open the memory as the replay did).
    config_file: Path | None = None
    model: str | None = None
    progress: bool = True
    workdir: Path | None = None
    #: Keep the replays' memory folders here (hybrid/, control/, forget/) instead of
    #: deleting them: ``python -m eval.forget_replay`` reads the forgetting run's.
    keep: Path | None = None
    #: A folder keeping embeddings between runs (per model); None: embed every time.
    cache: Path | None = None


def _cache_file(folder: Path, model: str) -> Path:
    return folder / (re.sub(r"[^A-Za-z0-9_.-]+", "_", model.replace(STAND_IN, "-or-")).strip("_") + ".npz")


def _cached(made: Any, folder: Path | None) -> tuple[CachedEmbedder, list[tuple[CachedEmbedder, Path]]]:
    """``made`` behind a text -> vector cache, and each cache with the file it is
    kept in (none without a ``folder``), loaded. A combination of models is cached
    model by model too: another combination of the same models embeds nothing again."""
    if folder is None:
        return CachedEmbedder(made), []
    caches: list[tuple[CachedEmbedder, Path]] = []
    if isinstance(made, CombinedEmbedder):
        parts = [CachedEmbedder(p) for p in made.parts]
        caches = [(c, _cache_file(folder, c.name)) for c in parts]
        made = made.with_parts(*parts)
    vectors = CachedEmbedder(made)
    caches.append((vectors, _cache_file(folder, vectors.name)))
    for c, f in caches:
        c.load(f)
    return vectors, caches


def evaluate(raw: Iterable[Mapping[str, Any]], options: Options, *, source: str = "trace",
             embedder: Any = None) -> dict[str, Any]:
    """Replay the trace into every system and return the results document."""
    t_start = time.perf_counter()
    prepared = prepare(raw)
    if not prepared.queries:
        raise TraceError("the trace holds no query: nothing to measure")
    config = options.config or Config.load(options.config_file)
    if options.model:
        config = replace(config, embedding=replace(config.embedding, model=options.model))
    recover_args = (["--config", str(options.config_file)] if options.config_file else []) + (
        ["--model", options.model] if options.model else [])
    vectors = _warmed(prepared, options, config, embedder)
    workdir = _workdir(options)
    clock = [0.0]

    def now() -> float:
        return clock[0]

    def replay(system: System, **kw: Any) -> Run:
        return Replayer(system, vectors, clock, options.k, options.budget, **kw).run(prepared, options.progress)

    runs: dict[str, Run] = {}
    extra: dict[str, Any] = {}
    try:
        for name in options.systems:
            system = _make(name, workdir, vectors, now, config, recover_args)
            runs[name] = replay(system)
            if isinstance(system, HybridSystem) and system.place:
                extra["placement"] = system.placement()
            if isinstance(system, HybridSystem) and system.finishing:
                extra["finished"] = dict(system.finished)
        if "hybrid" in runs and options.control and prepared.restarts:
            control = replay(HybridSystem("hybrid_control", workdir / "control", vectors, now, config=config),
                             skip_restarts=True)
            extra["recovery"] = _recovery(prepared, runs["hybrid"], control)
        if options.forget_cap:
            cap = max(1, int(prepared.nodes / prepared.namespaces * options.forget_cap))
            forgetting = replay(HybridSystem("hybrid_forget", workdir / "forget", vectors, now, config=config,
                                             forget_cap=cap, recover_in_subprocess=False), check_forgotten=True)
            runs["hybrid_forget"] = forgetting
            extra["forgetting"] = _forgetting(forgetting, cap, options.forget_cap)
    finally:
        if options.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    results = _results(prepared, runs, options)
    results.update(extra)
    results["source"] = source
    results["embedder"] = vectors.name
    results["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    return results


def _warmed(prepared: Prepared, options: Options, config: Config, embedder: Any) -> CachedEmbedder:
    """The embedder every system reads, every text of the trace (and every passage of
    a long one, embedded when written) already embedded, and the cache files saved."""
    vectors, caches = _cached(embedder or make_embedder(config.embedding), options.cache)
    texts = [*prepared.texts, *(c[a:b] for c in set(prepared.texts)
                                for a, b in passages.cut(c, config.write.passage_tokens))]
    with tqdm(total=len(set(texts)), desc="embedding", unit="text", disable=not options.progress,
              leave=False, file=sys.stderr) as bar:
        vectors.warm(texts, bar.update)
    for c, f in caches:
        c.save(f)
    return vectors


def _workdir(options: Options) -> Path:
    """Where the replays' memories go: ``options.keep`` (new or empty), else a temporary folder."""
    if options.keep is None:
        return Path(tempfile.mkdtemp(prefix="hm-eval-", dir=options.workdir))
    if options.keep.exists() and any(options.keep.iterdir()):
        raise ValueError(f"--keep-memories folder {options.keep} is not empty")
    options.keep.mkdir(parents=True, exist_ok=True)
    return options.keep


def _forgetting(run: Run, cap: int, share: float) -> dict[str, Any]:
    """The forgetting replay's figures: how many gold memories were gone before their question."""
    return {
        "cap_live_nodes": cap,
        "cap_share": share,
        "gold_checked": run.gold_checked,
        "gold_forgotten": run.gold_forgotten,
        "forgotten_by_type": dict(sorted(run.forgotten_types.items())),
        "forgotten_gold": run.forgotten_gold,
        "wrongly_forgotten": run.gold_forgotten / run.gold_checked if run.gold_checked else 0.0,
    }


def _make(name: str, workdir: Path, vectors: CachedEmbedder, now: Callable[[], float], config: Config,
          recover_args: Sequence[str] = ()) -> System:
    if name in HYBRIDS:
        return HybridSystem(name, workdir / name, vectors, now, config=config, recover_args=recover_args,
                            place=name == "hybrid_auto", finish=name == "hybrid_finished")
    if name == "flat_vector":
        return FlatVector(config, workdir / "flat", vectors)
    makers: dict[str, Callable[[Config], System]] = {
        "bm25": BM25, "recent": Recent, "full_history": FullHistory, "article_minimal": ArticleMinimal,
    }
    if name not in makers:
        raise ValueError(f"unknown system {name!r}; choose from {', '.join((*HYBRIDS, *BASELINES))}")
    return makers[name](config)


def _recovery(prepared: Prepared, hybrid: Run, control: Run) -> dict[str, Any]:
    after = [i for i, q in enumerate(prepared.queries) if q.after_restart]
    equal = [hybrid.replies[i].ranked == control.replies[i].ranked for i in after]
    return {
        "restarts": len(hybrid.recoveries),
        "recovery_acc": metrics.mean(float(ok) for ok in hybrid.recoveries),
        "queries_after_restart": len(after),
        "answers_equal": metrics.mean(float(x) for x in equal) if equal else 1.0,
    }


def _score(q: Query, r: Reply, k: int) -> dict[str, float]:
    if r.everything:
        return {"recall_all": 1.0, "recall_any": 1.0, "ndcg": 1.0}
    return {
        "recall_all": metrics.recall_all(r.ranked, q.gold, k),
        "recall_any": metrics.recall_any(r.ranked, q.gold, k),
        "ndcg": metrics.ndcg(r.ranked, q.gold, k),
    }


#: How questions are grouped by their number of gold memories (``by_gold``): recall_all
#: asks for all of them, so a question with several is harder than one with one.
GOLD_GROUPS = ("1", "2", "3", "4+")


def gold_group(n: int) -> str:
    """The ``by_gold`` group of a question with ``n`` gold memories."""
    return GOLD_GROUPS[min(max(n, 1), len(GOLD_GROUPS)) - 1]


def _summary(queries: Sequence[Query], replies: Sequence[Reply], k: int) -> dict[str, Any]:
    scores = [_score(q, r, k) for q, r in zip(queries, replies, strict=True)]
    branch = [bool(r.branch & q.task) for q, r in zip(queries, replies, strict=True) if r.branch is not None and q.task]
    out: dict[str, Any] = {
        f"recall_all@{k}": metrics.mean(s["recall_all"] for s in scores),
        f"recall_any@{k}": metrics.mean(s["recall_any"] for s in scores),
        f"ndcg@{k}": metrics.mean(s["ndcg"] for s in scores),
        "branch_acc@1": metrics.mean(float(b) for b in branch) if branch else None,
        "tokens_mean": metrics.mean(r.tokens for r in replies),
        "compression": metrics.mean(q.full_tokens / max(r.tokens, 1) for q, r in zip(queries, replies, strict=True)),
        "n": len(replies),
    }
    return out


def _line_costs(prepared: Prepared) -> dict[str, int]:
    """Trace id -> tokens of the memory's rendered line (as every system counts it)."""
    return {e["id"]: line_tokens(e.get("type", "event"), e["content"]) for e in prepared.events if e["op"] == "add"}


def _ndcg_cut(cut: Sequence[frozenset[str]], gold: frozenset[str], k: int) -> float:
    """nDCG of a token-matched cut (any length n): ideal of min(max(k, n), #gold)."""
    return metrics.ndcg(cut, gold, max(k, len(cut)))


def _results(prepared: Prepared, runs: Mapping[str, Run], options: Options) -> dict[str, Any]:
    k = options.k
    systems = {name: _figures(prepared, run, k) for name, run in runs.items()}
    if "hybrid" in runs:
        for name, figures in _at_hybrid_tokens(prepared, runs, k).items():
            systems[name].update(figures)
    per_question = [
        {"id": q.id, "namespace": q.namespace, "category": q.category, "text": q.text, "gold": sorted(q.gold),
         "task": sorted(q.task),
         "systems": {name: {"ranked": [sorted(ids) for ids in run.replies[i].ranked[:k]],
                            "branch": sorted(run.replies[i].branch or ()),
                            "recall_all": _score(q, run.replies[i], k)["recall_all"],
                            "tokens": run.replies[i].tokens}
                     for name, run in runs.items() if i in run.replies}}
        for i, q in enumerate(prepared.queries)
    ]
    return {
        "systems": systems,
        "per_question": per_question,
        "queries": len(prepared.queries),
        "k": k,
        "budget_tokens": options.budget,
        "trace": {"nodes": prepared.nodes, "namespaces": prepared.namespaces, "restarts": prepared.restarts},
        "definitions": metrics.DEFINITIONS,
    }


def _figures(prepared: Prepared, run: Run, k: int) -> dict[str, Any]:
    """One system's figures: the summary, latency, the recall curves, tokens against
    recall, the summary by category."""
    qs = [prepared.queries[i] for i in sorted(run.replies)]
    replies = [run.replies[i] for i in sorted(run.replies)]
    s = _summary(qs, replies, k)
    lat = [r.latency_ms for r in replies]
    s["latency_ms_p50"] = metrics.percentile(lat, 50)
    s["latency_ms_p95"] = metrics.percentile(lat, 95)
    s["recall_all@k"] = [
        metrics.mean(1.0 if r.everything else metrics.recall_all(r.curve, q.gold, kk) for q, r in zip(qs, replies, strict=True))
        for kk in range(1, CURVE_K + 1)
    ]
    s["recall_any@k"] = [
        metrics.mean(1.0 if r.everything else metrics.recall_any(r.curve, q.gold, kk) for q, r in zip(qs, replies, strict=True))
        for kk in range(1, CURVE_K + 1)
    ]
    s["tokens_vs_recall"] = [
        {"k": p, "tokens_mean": metrics.mean(r.tokens_at[p] for r in replies),
         "recall_all": metrics.mean(r.recall_at[p] for r in replies)}
        for p in TOKEN_POINTS
    ]
    s["by_category"] = _grouped(qs, replies, k, lambda q: q.category, sorted)
    s["by_gold"] = _grouped(qs, replies, k, lambda q: gold_group(len(q.gold)),
                            lambda found: [g for g in GOLD_GROUPS if g in found])
    s["replay_s"] = round(run.seconds, 2)
    return s


def _grouped(qs: Sequence[Query], replies: Sequence[Reply], k: int, group_of: Callable[[Query], str],
             order: Callable[[Iterable[str]], Iterable[str]]) -> dict[str, dict[str, Any]]:
    """The summary of each group of questions (``group_of`` names a question's group),
    the groups in ``order``."""
    groups: dict[str, list[int]] = {}
    for idx, q in enumerate(qs):
        groups.setdefault(group_of(q), []).append(idx)
    return {g: _summary([qs[i] for i in groups[g]], [replies[i] for i in groups[g]], k) for g in order(groups)}


def _at_hybrid_tokens(prepared: Prepared, runs: Mapping[str, Run], k: int) -> dict[str, dict[str, float]]:
    """Each system's recall_all and nDCG with its ranking cut at the tokens hybrid
    returned for the same question."""
    cost = _line_costs(prepared)
    hybrid = runs["hybrid"].replies
    out: dict[str, dict[str, float]] = {}
    for name, run in runs.items():
        rs, ns = [], []
        for i, r in run.replies.items():
            q = prepared.queries[i]
            if name == "hybrid" or i not in hybrid:
                scores = _score(q, r, k)
                rs.append(scores["recall_all"])
                ns.append(scores["ndcg"])
                continue
            ranking = r.ranked if r.everything else r.curve
            cut = metrics.within_tokens(ranking, [max((cost.get(t, 0) for t in ids), default=0) for ids in ranking],
                                        hybrid[i].tokens)
            rs.append(metrics.recall_all(cut, q.gold, len(cut)))
            ns.append(_ndcg_cut(cut, q.gold, k))
        out[name] = {"recall_all@hybrid_tokens": metrics.mean(rs), "ndcg@hybrid_tokens": metrics.mean(ns)}
    return out
