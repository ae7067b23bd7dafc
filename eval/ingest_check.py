"""``hybrid-memory ingest`` against the harness's own loaders: the same memories, the same figures.

    python -m eval.ingest_check --dataset locomo --out eval-out/ingest-locomo
    python -m eval.ingest_check --dataset longmemeval --budget 3000 --out eval-out/ingest-lme

Each unit of the data set (a LoCoMo conversation, a LongMemEval question) is written
alone to a file in the data set's own format and ingested with the command line
(``hybrid-memory --path DIR --namespace UNIT ingest FILE``, run in this process) into
a namespace of its own, as the loader (:mod:`eval.datasets`) gives each unit one.
Then:

- every memory of the loader's trace must have an ingested twin (found by its key in
  ``source_id``) with the same content and the same time, or have been merged into a
  near-twin of its session on writing (as the harness's replay merges it);
- each of the loader's questions is asked of the ingested memory as the harness asks
  hybrid (k 10, the source's budget, at the question's time), and recall_all@10 and
  tokens are set beside the harness's replay of the loader's trace, with the same
  model, in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybrid_memory import MemoryTree
from hybrid_memory.cli import main as cli_main
from hybrid_memory.evaluation import metrics
from hybrid_memory.evaluation.harness import Options, evaluate
from hybrid_memory.ingest import SOURCE_ID
from hybrid_memory.retrieval import rank_key

from . import datasets

_FILES = {"locomo": "locomo/locomo_dev.json", "longmemeval": "longmemeval/longmemeval_oracle_dev.json"}


def units(dataset: str, data_dir: Path, limit: int | None) -> list[tuple[str, Any]]:
    """(namespace, the unit as its own file holds it) of each unit the loader keeps."""
    raw = json.loads((data_dir / _FILES[dataset]).read_text(encoding="utf-8"))
    name = "sample_id" if dataset == "locomo" else "question_id"
    kept = {e["name"] for e in datasets.load(dataset, data_dir, limit=limit) if e["op"] == "namespace"}
    return [(str(u[name]), [u]) for u in raw if str(u[name]) in kept]


def key_of(dataset: str, unit: str, node_id: str) -> str:
    """The ingest key of a loader's node id."""
    if dataset == "locomo":
        return node_id  # "<sample>/session_<n>", "<sample>/D<s>:<t>": the same
    rest = node_id[len(unit) + 1:]  # "<session>" or "<session>:<position>"
    session, sep, position = rest.rpartition(":")
    return f"{session}/{position}" if sep and position.isdigit() else rest


def ingest_all(dataset: str, data_dir: Path, folder: Path, limit: int | None) -> float:
    """Ingest every unit through the command line; the seconds it took."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for namespace, unit in units(dataset, data_dir, limit):
            path = Path(tmp) / f"{dataset}.json"
            path.write_text(json.dumps(unit, ensure_ascii=False), encoding="utf-8")
            code = cli_main(["--path", str(folder), "--namespace", namespace, "--json", "ingest", str(path)])
            if code != 0:
                raise SystemExit(f"ingest of {namespace} failed ({code})")
    return time.perf_counter() - started


def compare(dataset: str, events: Sequence[Mapping[str, Any]], folder: Path, budget: int) -> dict[str, Any]:
    """Memories and answers of the ingested folder against the loader's ``events``."""
    by_unit: dict[str, list[Mapping[str, Any]]] = {}
    unit = ""
    for e in events:
        unit = e["name"] if e["op"] == "namespace" else unit
        by_unit.setdefault(unit, []).append(e)
    differ: list[str] = []
    merged: list[str] = []  # memories the write merged into an earlier twin
    recalls: list[float] = []
    tokens: list[int] = []
    for name, evs in by_unit.items():
        with MemoryTree.open(folder, namespace=name) as mem:
            stored = mem.nodes(include_archived=True)
            node_of = {n.meta.get(SOURCE_ID): n for n in stored}
            same_text = {(n.parent_id, n.content): n for n in stored}
            for e in evs:
                if e["op"] == "add":
                    key = key_of(dataset, name, e["id"])
                    n = node_of.get(key)
                    if n is None:
                        # Every message is written: one without a node of its own was merged
                        # into a near-twin of its session, as the harness's replay merges it
                        # (an exact twin is found by its text, for the questions that need it).
                        twin = same_text.get((node_of[key_of(dataset, name, e["parent"])].id
                                              if e["parent"] else None, e["content"]))
                        if twin is not None:
                            node_of[key] = twin
                        merged.append(e["id"])
                        continue
                    if n.content != e["content"] or n.created_at != e["ts"]:
                        differ.append(e["id"])
            trace_of: dict[str, set[str]] = {}
            for k, n in node_of.items():
                trace_of.setdefault(n.id, set()).add(k)
            for e in evs:
                if e["op"] == "query":
                    recall = mem.retrieve(e["text"], k=10, budget_tokens=budget, now=e["ts"])
                    picked = sorted((s for s in recall.nodes if s.reason != "ancestor"), key=rank_key, reverse=True)
                    ranked = [s.node.id for s in picked] + [s.node.id for s in recall.nodes if s.reason == "ancestor"]
                    gold = frozenset(key_of(dataset, name, g) for g in e["gold"])
                    recalls.append(metrics.recall_all([frozenset(trace_of.get(i, ())) for i in ranked], gold, 10))
                    tokens.append(recall.tokens)
    return {"memories_differing": len(differ), "examples": differ[:5], "merged_into_a_twin": len(merged),
            "questions": len(recalls),
            "recall_all@10": sum(recalls) / len(recalls), "tokens_mean": sum(tokens) / len(tokens)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.ingest_check", description=__doc__.split("\n")[0])
    p.add_argument("--dataset", choices=sorted(_FILES), required=True)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--limit", type=int, help="this many units only")
    p.add_argument("--cache", type=Path, default=Path("eval-out/cache"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    data_dir = args.data_dir or datasets.default_data_dir()
    events = datasets.load(args.dataset, data_dir, limit=args.limit)
    args.out.mkdir(parents=True, exist_ok=True)
    folder = args.out / "memory"
    seconds = ingest_all(args.dataset, data_dir, folder, args.limit)
    ingested = compare(args.dataset, events, folder, args.budget)
    harness = evaluate(events, Options(systems=("hybrid",), budget=args.budget, forget_cap=None, control=False,
                                       progress=False, cache=args.cache), source=args.dataset)["systems"]["hybrid"]
    out = {"dataset": args.dataset, "budget": args.budget, "ingest_seconds": round(seconds, 1), "ingested": ingested,
           "harness": {k: harness[k] for k in ("recall_all@10", "tokens_mean")}}
    (args.out / "ingest_check.json").write_text(json.dumps(out, indent=2), encoding="utf-8")
    print(json.dumps(out, indent=2))
    return 0 if ingested["memories_differing"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
