"""Turn a results document into a printed table, ``results.json``, ``report.md``
and PNG plots (recall@k per system; tokens returned against recall)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

COLUMNS = ("recall_all@{k}", "recall_any@{k}", "ndcg@{k}", "branch_acc@1", "tokens_mean",
           "recall_all@hybrid_tokens", "ndcg@hybrid_tokens", "compression", "latency_ms_p50", "latency_ms_p95")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def table(results: Mapping[str, Any]) -> str:
    """The main figures, one row per system, as a markdown table."""
    k = results["k"]
    cols = [c.format(k=k) for c in COLUMNS]
    lines = ["| system | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, s in results["systems"].items():
        lines.append(f"| {name} | " + " | ".join(_fmt(s.get(c)) for c in cols) + " |")
    return "\n".join(lines)


def group_table(results: Mapping[str, Any], by: str = "by_category", label: str = "category") -> str:
    """recall_all@k per group of questions (``by``: "by_category", or "by_gold" for
    their number of gold memories) and system, the groups in the order the figures
    give them; empty with fewer than two groups."""
    k = results["k"]
    systems = results["systems"]
    groups = list(dict.fromkeys(c for s in systems.values() for c in s.get(by, {})))
    if len(groups) < 2:
        return ""
    lines = [f"| {label} | n | " + " | ".join(systems) + " |", "|---" * (len(systems) + 2) + "|"]
    for c in groups:
        first = next(iter(systems.values())).get(by, {}).get(c, {})
        cells = [_fmt(s.get(by, {}).get(c, {}).get(f"recall_all@{k}")) for s in systems.values()]
        lines.append(f"| {c} | {first.get('n', '-')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(results: Mapping[str, Any]) -> str:
    k = results["k"]
    parts = [
        "# hybrid_memory evaluation",
        "",
        f"Source: {results.get('source', '-')}; embedder: {results.get('embedder', '-')}; "
        f"{results['trace']['nodes']} nodes in {results['trace']['namespaces']} memory(ies), "
        f"{results['queries']} questions, {results['trace']['restarts']} restarts; k = {k}, "
        f"token budget {results['budget_tokens']} for every system; {results.get('elapsed_s', '-')} s.",
        "",
        table(results),
    ]
    cats = group_table(results)
    if cats:
        parts += ["", f"## recall_all@{k} per category", "", cats]
    golds = group_table(results, "by_gold", "gold memories")
    if golds:
        parts += ["", f"## recall_all@{k} by how many gold memories a question has", "", golds]
    rec = results.get("recovery")
    if rec:
        parts += ["", "## Recovery", "",
                  f"{rec['restarts']} restarts; recovery_acc {rec['recovery_acc']:.3f}; "
                  f"{rec['queries_after_restart']} questions after a restart, answers_equal {rec['answers_equal']:.3f}."]
    fo = results.get("forgetting")
    if fo:
        parts += ["", "## Forgetting", "",
                  f"Live nodes capped at {fo['cap_live_nodes']} ({fo['cap_share']:.0%} of the trace's nodes per memory); "
                  f"{fo['gold_forgotten']} of {fo['gold_checked']} gold memories were forgotten before their question: "
                  f"wrongly_forgotten {fo['wrongly_forgotten']:.3f}"
                  + (" (" + ", ".join(f"{t}: {n}" for t, n in fo.get("forgotten_by_type", {}).items()) + ")."
                     if fo.get("forgotten_by_type") else ".")]
    parts += ["", "## Definitions", ""]
    parts += [f"- **{name}**: {text}" for name, text in results["definitions"].items()]
    notes = results.get("notes")
    if notes:
        parts += ["", "## Notes", "", notes]
    return "\n".join(parts) + "\n"


def write_plots(results: Mapping[str, Any], out: Path) -> list[Path]:
    """recall_all@k for k = 1..20 per system, and tokens returned against recall."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, s in results["systems"].items():
        curve = s.get("recall_all@k")
        if curve:
            ax.plot(range(1, len(curve) + 1), curve, marker=".", label=name)
    ax.set_xlabel("k")
    ax.set_ylabel("recall_all@k")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"recall_all@k ({results.get('source', '')})", fontsize=9)
    path = out / "recall_at_k.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, s in results["systems"].items():
        pts = s.get("tokens_vs_recall") or []
        if pts:
            ax.plot([p["tokens_mean"] for p in pts], [p["recall_all"] for p in pts], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("tokens returned per question (mean, log scale)")
    ax.set_ylabel("recall_all")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("tokens returned vs recall (k = 1, 3, 5, 10, 20)", fontsize=9)
    path = out / "tokens_vs_recall.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written


def write_all(results: Mapping[str, Any], out: Path, *, plots: bool = True) -> str:
    """Write results.json, questions.jsonl (each question's gold and every system's
    top k, for reading why a question was missed), report.md and (with matplotlib
    installed) the plots; return the table."""
    out.mkdir(parents=True, exist_ok=True)
    results = dict(results)
    questions = results.pop("per_question", [])
    (out / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False), encoding="utf-8")
    with (out / "questions.jsonl").open("w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    (out / "report.md").write_text(markdown(results), encoding="utf-8")
    if plots:
        write_plots(results, out)
    return table(results)
