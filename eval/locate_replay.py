"""Record where retrieval looks first, question by question, and re-score it offline.

    python -m eval.locate_replay record --generate 10000 --lang en --seed 2 --out en2.locate.jsonl
    python -m eval.locate_replay score en2.locate.jsonl                       # the recorded settings
    python -m eval.locate_replay score en2.locate.jsonl --config variant.toml --misses

branch_acc@1 depends almost only on stage 1 of a retrieve: which branch scores first
from the question's candidates (their dense and lexical scores, the query words they
hold, those words' rarity in the memory). The exception is a question asking how long
or how many, which the located family's other memories can move to another branch
of the family (``retrieval._answer_branch``); the recording keeps where it moved
from and to, and ``score`` moves it again when stage 1 locates the same branch.
So is a question asking where a task stands, moved to the one branch of the family
that records a state (``retrieval.status_state``).
``record`` runs the harness's hybrid
system over a trace (no forgetting run, no control run) and keeps, for every
question, those inputs as they were at the moment it was asked, with the trace ids
of every candidate branch and the question's gold branch. ``score`` feeds the kept
inputs to the library's branch scoring under the settings of a configuration file
and counts how often the first branch is the gold one, with the misses by kind: the
parent task located while the answer is in its subtask, the reverse, another family,
or no candidate in the gold branch at all.

With the settings the recording ran with, ``score`` gives the run's branch_acc@1
question for question (``tests/test_locate_replay.py`` checks it). A change to
``retrieval._branch_scores`` or to the ``retrieval`` settings it reads is measured
in seconds on many traces instead of minutes per trace. What it cannot measure is a
change to the candidates themselves (``retrieval.candidates``, the lexical channel):
those need the harness.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from hybrid_memory import retrieval, text
from hybrid_memory.config import Config, RetrievalConfig
from hybrid_memory.errors import HybridMemoryError, NotFoundError

from . import harness

#: Kinds of a miss, in the order ``score`` prints them.
MISS_KINDS = ("parent located, gold in a subtask", "subtask located, gold in the parent",
              "another branch of the family", "another family", "gold branch not a candidate")


@dataclass(frozen=True)
class _Row:
    """What branch scoring reads of a candidate row."""

    branch_id: str
    path: str


@contextmanager
def _recording(sink: list[dict[str, Any]]) -> Iterator[None]:
    """While active, every hybrid retrieve asked by the harness appends its stage-1
    inputs to ``sink``, and the branch its family's answer check moved the question to,
    if any. It wraps three private functions (the retriever's stage 1 and answer check,
    the replayer's question): the test of this module fails when they change shape."""
    state: dict[str, Any] = {}
    ask, locate, answer = harness.Replayer._ask, retrieval._locate, retrieval._answer_branch

    def _ask(self: harness.Replayer, q: harness.Query) -> harness.Reply:
        state.update(replayer=self, query=q, first=True)
        try:
            return ask(self, q)
        finally:
            state.clear()

    def _locate(r: RetrievalConfig, cand_rows: Mapping[str, Any], postings: Sequence[Any], dense: Mapping[str, float],
                lexical: Mapping[str, float], dense_mix: float, named: frozenset[str],
                idf: Mapping[str, float]) -> list[tuple[float, str, int]]:
        out = locate(r, cand_rows, postings, dense, lexical, dense_mix, named, idf)
        state["recorded"] = None
        # Only the harness's official ask of each question (the first retrieve).
        if state.get("first"):
            state["first"] = False
            replayer, q = state["replayer"], state["query"]
            to_trace = replayer.from_sys
            ids = list(cand_rows)
            branches = {row.branch_id for row in cand_rows.values()}
            sink.append({
                "id": q.id, "text": q.text, "category": q.category,
                "gold_branch": sorted(q.task),
                "located": sorted(to_trace.get(out[0][1], ())) if out else [],
                "gold_paths": sorted({_task_path(cand_rows[i].path, cand_rows[i].branch_id) for i in ids
                                      if to_trace.get(cand_rows[i].branch_id, set()) & q.task}),
                "gold_in_memory": sorted(_paths_of(replayer, q.task)),
                "cands": {i: {"branch": cand_rows[i].branch_id, "path": cand_rows[i].path,
                              "trace": sorted(to_trace.get(i, ())),
                              "dense": float(dense.get(i, 0.0)), "lexical": float(lexical.get(i, 0.0))} for i in ids},
                "branches": {b: sorted(to_trace.get(b, ())) for b in branches},
                "postings": [[t, i, n] for t, i, n in postings if i in cand_rows],
                "dense_mix": dense_mix, "by_family": r.by_family,
                "named": sorted(named), "idf": dict(idf),
            })
            state["recorded"] = sink[-1]
        return out

    def _answer_branch(holds: Callable[[Any], bool], located: str, root: str, nodes: Sequence[Any]) -> str | None:
        moved = answer(holds, located, root, nodes)
        rec = state.get("recorded")
        if rec is not None and moved is not None:
            to_trace = state["replayer"].from_sys
            trace = sorted(to_trace.get(moved, ()))
            rec["answer_branch"] = {"from": located, "to": moved,
                                    "path": next(n.path for n in nodes if n.branch_id == moved),
                                    "by": "status_state" if holds is retrieval._is_state else "answer_type"}
            rec["branches"][moved] = trace
            rec["located"] = trace
        return moved

    with mock.patch.object(harness.Replayer, "_ask", _ask), mock.patch.object(retrieval, "_locate", _locate), \
            mock.patch.object(retrieval, "_answer_branch", _answer_branch):
        yield


def _paths_of(replayer: harness.Replayer, task: frozenset[str]) -> set[str]:
    """The stored paths of the gold branch's task nodes: where in the tree the answer
    was, for reading a miss whose gold branch had no candidate."""
    system = replayer.system
    mem = getattr(system, "mem", None)
    out: set[str] = set()
    for t in task:
        sys_id = replayer.to_sys.get(t)
        if mem is not None and sys_id is not None:
            with contextlib.suppress(NotFoundError):  # a missing node has no path to report
                out.add(mem.get(sys_id).path)
    return out


def record(events: Sequence[Mapping[str, Any]], options: harness.Options) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the harness's hybrid system over ``events`` (forgetting and control runs
    off) and return (one record per question, the run's results)."""
    sink: list[dict[str, Any]] = []
    opts = harness.Options(**{**options.__dict__, "systems": ("hybrid",), "forget_cap": None, "control": False})
    with _recording(sink):
        results = harness.evaluate(events, opts)
    return sink, results


def rescore(rec: Mapping[str, Any], r: RetrievalConfig) -> list[tuple[float, str, int]]:
    """Stage 1's branch scores of one recorded question under the settings ``r``."""
    cand_rows = {i: _Row(c["branch"], c["path"]) for i, c in rec["cands"].items()}
    # A recording keeps the answer word retrieval.answer_type gave the candidates;
    # settings with it off re-score without it.
    answer_words = set(text.ANSWER_TERMS.values())
    postings = [(t, i, n) for t, i, n in rec["postings"] if r.answer_type or t not in answer_words]
    dense = {i: c["dense"] for i, c in rec["cands"].items()}
    lexical = {i: c["lexical"] for i, c in rec["cands"].items()}
    out = retrieval._locate(r, cand_rows, postings, dense, lexical, rec["dense_mix"], frozenset(rec["named"]),
                            rec["idf"])
    # The family's answer check read the family's other memories, which the recording
    # does not hold: what it did is replayed when stage 1 locates the branch it moved from.
    moved = rec.get("answer_branch")
    if moved and getattr(r, moved.get("by", "answer_type")) and out and out[0][1] == moved["from"]:
        n = next((n for _, b, n in out if b == moved["to"]), 0)
        out = [(out[0][0], moved["to"], n), *(o for o in out if o[1] != moved["to"])]
    return out


def miss_kind(rec: Mapping[str, Any], located: str | None) -> str | None:
    """None when ``located`` (a system branch id) is the gold branch, else the kind of
    miss (one of ``MISS_KINDS``)."""
    gold = set(rec["gold_branch"])
    if located is not None and gold & set(rec["branches"].get(located, ())):
        return None
    gold_paths = rec["gold_paths"]
    if not gold_paths or located is None:
        return MISS_KINDS[4]
    moved = rec.get("answer_branch") or {}
    path = moved["path"] if moved.get("to") == located else \
        next(c["path"] for c in rec["cands"].values() if c["branch"] == located)
    here = _task_path(path, located)
    for there in gold_paths:
        if there.startswith(here + "/"):
            return MISS_KINDS[0]
        if here.startswith(there + "/"):
            return MISS_KINDS[1]
        if there.split("/", 1)[0] == here.split("/", 1)[0]:
            return MISS_KINDS[2]
    return MISS_KINDS[3]


def _task_path(path: str, branch: str) -> str:
    """The path of a branch's task node from the path of one of its memories."""
    parts = path.split("/")
    return "/".join(parts[: parts.index(branch) + 1]) if branch in parts else path


def score(records: Sequence[Mapping[str, Any]], config: Config) -> dict[str, Any]:
    """branch_acc@1 of ``records`` under ``config``, with each miss's kind."""
    misses: list[dict[str, Any]] = []
    hits = 0
    for rec in records:
        out = rescore(rec, config.retrieval)
        located = out[0][1] if out else None
        kind = miss_kind(rec, located)
        if kind is None:
            hits += 1
        else:
            misses.append({"id": rec["id"], "text": rec["text"], "kind": kind,
                           "located": rec["branches"].get(located, []) if located else [],
                           "gold": rec["gold_branch"]})
    return {"branch_acc@1": hits / len(records) if records else None, "questions": len(records),
            "misses": misses, "by_kind": dict(Counter(m["kind"] for m in misses))}


def read_records(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def build_parser(prog: str = "python -m eval.locate_replay") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Record stage 1 of every question's retrieve; re-score it offline.")
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run the harness's hybrid system and keep every question's stage-1 inputs")
    harness.add_source_arguments(rec)
    rec.add_argument("--config", type=Path, help="a hybrid_memory TOML configuration to run with")
    rec.add_argument("--model", help="embedding model (as for python -m eval)")
    rec.add_argument("--cache", type=Path, default=Path("eval-out/cache"), help="embedding cache folder")
    rec.add_argument("--out", type=Path, required=True, help="the JSON Lines file to write")
    rec.add_argument("--quiet", action="store_true", help="no progress bars")
    sc = sub.add_parser("score", help="re-score a recording under a configuration")
    sc.add_argument("records", type=Path, nargs="+", help="recordings written by record")
    sc.add_argument("--config", type=Path, help="a hybrid_memory TOML configuration (default: the defaults)")
    sc.add_argument("--misses", action="store_true", help="list every miss")
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m eval.locate_replay") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        config = Config.load(args.config)
        if args.command == "record":
            events, source = harness.load_events(args)
            options = harness.Options(config=config if args.config else None, config_file=args.config,
                                      model=args.model, progress=not args.quiet, cache=args.cache)
            records, results = record(events, options)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("w", encoding="utf-8") as fh:
                for r in records:
                    fh.write(json.dumps(r, ensure_ascii=False) + "\n")
            run = results["systems"]["hybrid"]
            print(f"{source}: {len(records)} questions recorded to {args.out}; the run's branch_acc@1 "
                  f"{run['branch_acc@1']:.3f}, recall_all@10 {run['recall_all@10']:.3f}, ndcg@10 {run['ndcg@10']:.3f}, "
                  f"tokens {run['tokens_mean']:.0f}")
            return 0
        for path in args.records:
            out = score(read_records(path), config)
            acc = out["branch_acc@1"]
            kinds = ", ".join(f"{k}: {out['by_kind'][k]}" for k in MISS_KINDS if k in out["by_kind"])
            print(f"{path}: branch_acc@1 {'-' if acc is None else f'{acc:.3f}'} over {out['questions']} questions"
                  f"; misses {len(out['misses'])} ({kinds or 'none'})")
            if args.misses:
                for m in out["misses"]:
                    print(f"  [{m['kind']}] {m['text']}\n      located {m['located']} gold {m['gold']}")
    except (ValueError, OSError, HybridMemoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
