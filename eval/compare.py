"""Two evaluation runs side by side: what a setting changed, and on which questions.

    python -m eval --generate 2000 --systems hybrid --out before
    python -m eval --generate 2000 --systems hybrid --config variant.toml --out after
    python -m eval.compare before after            # the metrics, and the questions that flipped
    python -m eval.compare before after --system bm25 --metric recall_all

Each folder is what ``python -m eval --out`` wrote (results.json and questions.jsonl).
The runs must have asked the same questions (the same trace, data set or generator
settings); a question is matched by its id. A question "won" when its score under
``--metric`` rose from A to B, "lost" when it fell.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The summary figures compared, in the order printed (those both runs have).
SUMMARY_KEYS = ("recall_all@10", "recall_any@10", "ndcg@10", "branch_acc@1", "tokens_mean",
                "recall_all@hybrid_tokens", "ndcg@hybrid_tokens", "latency_ms_p50", "latency_ms_p95")
#: Per-question scores questions.jsonl holds for every system.
QUESTION_METRICS = ("recall_all", "tokens", "branch")


class RunError(ValueError):
    """A folder is not an evaluation run, or two runs asked different questions."""


def read_run(folder: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(results.json, questions by id) of an evaluation output folder."""
    results_file, questions_file = folder / "results.json", folder / "questions.jsonl"
    for f in (results_file, questions_file):
        if not f.is_file():
            raise RunError(f"{f} does not exist: {folder} is not a folder written by python -m eval --out")
    try:
        results = json.loads(results_file.read_text(encoding="utf-8"))
        with questions_file.open(encoding="utf-8") as fh:
            questions = [json.loads(line) for line in fh if line.strip()]
    except json.JSONDecodeError as exc:
        raise RunError(f"{folder}: not valid JSON ({exc})") from exc
    if not isinstance(results, dict) or not isinstance(results.get("systems"), dict):
        raise RunError(f"{results_file} has no systems")
    return results, {q["id"]: q for q in questions}


def summary(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, str, float | None, float | None]]:
    """(system, key, A's value, B's value) for every system either run measured."""
    rows = []
    systems = list(dict.fromkeys([*a["systems"], *b["systems"]]))
    for name in systems:
        sa, sb = a["systems"].get(name, {}), b["systems"].get(name, {})
        for key in SUMMARY_KEYS:
            va, vb = sa.get(key), sb.get(key)
            if isinstance(va, int | float) or isinstance(vb, int | float):
                rows.append((name, key, va, vb))
    return rows


def _score(q: Mapping[str, Any], system: str, metric: str) -> float | None:
    s = q.get("systems", {}).get(system)
    if s is None:
        return None
    if metric == "branch":
        return 1.0 if set(s.get("branch") or ()) & set(q.get("task") or ()) else 0.0
    value = s.get(metric)
    return float(value) if isinstance(value, int | float) else None


def flips(qa: Mapping[str, Mapping[str, Any]], qb: Mapping[str, Mapping[str, Any]], system: str,
          metric: str) -> dict[str, list[dict[str, Any]]]:
    """The questions whose ``metric`` for ``system`` rose ("won") or fell ("lost")
    from run A to run B. Raises RunError when the runs asked different questions."""
    if set(qa) != set(qb):
        only_a, only_b = len(set(qa) - set(qb)), len(set(qb) - set(qa))
        raise RunError(f"the runs asked different questions ({only_a} only in A, {only_b} only in B): "
                       "compare runs of the same trace")
    out: dict[str, list[dict[str, Any]]] = {"won": [], "lost": []}
    for qid, q in qa.items():
        va, vb = _score(q, system, metric), _score(qb[qid], system, metric)
        if va is None or vb is None or va == vb:
            continue
        out["won" if vb > va else "lost"].append({"id": qid, "text": q.get("text", ""), "category": q.get("category"),
                                                  "a": va, "b": vb})
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"


def main(argv: Sequence[str] | None = None, prog: str = "python -m eval.compare") -> int:
    p = argparse.ArgumentParser(prog=prog, description="Compare two evaluation runs (folders written by python -m eval --out).")
    p.add_argument("a", type=Path, help="the first run's folder")
    p.add_argument("b", type=Path, help="the second run's folder")
    p.add_argument("--system", default="hybrid", help="whose questions to compare (default hybrid)")
    p.add_argument("--metric", default="recall_all", choices=QUESTION_METRICS,
                   help="per-question score (default recall_all; branch: the located branch is the gold one)")
    p.add_argument("--max", type=int, default=40, help="questions listed per side at most (default 40)")
    args = p.parse_args(argv)
    try:
        (ra, qa), (rb, qb) = read_run(args.a), read_run(args.b)
        changed = flips(qa, qb, args.system, args.metric)
    except (RunError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"| system | metric | {args.a} | {args.b} | change |\n|---|---|---|---|---|")
    for name, key, va, vb in summary(ra, rb):
        delta = vb - va if va is not None and vb is not None else None
        print(f"| {name} | {key} | {_fmt(va)} | {_fmt(vb)} | {'-' if delta is None else f'{delta:+.3f}'} |")
    print(f"\n{args.system}, {args.metric}, {len(qa)} questions: {len(changed['won'])} won, {len(changed['lost'])} lost")
    for side in ("won", "lost"):
        for q in changed[side][: args.max]:
            print(f"  {side:<4} {_fmt(q['a'])} -> {_fmt(q['b'])}  [{q['category']}] {q['text']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
