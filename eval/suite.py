"""Every source at once: the real dev sets and the generated traces, one table.

    python -m eval.suite --out eval-out/suite-base
    python -m eval.suite --config variant.toml --out eval-out/suite-variant \\
        --baseline eval-out/suite-base/suite.json

A ranking change is kept only when it is measured on every source and no source
drops by more than ``--tolerance`` (0.01) in recall_all@10: this command runs
them all with one configuration (hybrid alone by default; ``--systems`` adds the
baselines) and, given the ``suite.json`` of another run, prints each source's
change and names the sources that dropped. It exits 1 when one did.

Sources (``--sources`` picks some): the five real dev sets (LoCoMo, LongMemEval
oracle with a 3,000-token budget, MADial-Bench en, MemDaily, RealMem) and the
generated traces in English and Chinese (``--generate`` nodes, seed 0). The
generator's held-out split (other question phrasings, domains of its own) runs
only with ``--heldout``: it is for reporting, never for choosing. Each
source is one run of the harness (:func:`hybrid_memory.evaluation.harness.evaluate`), without the
restart control and without forgetting; ``--jobs`` runs that many at once, each
in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_memory import Config
from hybrid_memory.evaluation.harness import Options, evaluate
from hybrid_memory.evaluation.report import write_all
from hybrid_memory.evaluation.trace import finish_sessions


@dataclass(frozen=True)
class Source:
    name: str
    #: ``("dataset", name)`` or ``("generate", lang)``.
    kind: str
    arg: str
    budget: int = 1000
    #: Of a generated trace: "dev" (tuned on) or "test" (held out).
    split: str = "dev"
    #: Its top-level tasks are sessions one after the other: each is finished when
    #: the next begins, for ``hybrid_finished`` (hybrid_memory.evaluation.trace.finish_sessions).
    sessions: bool = False


SOURCES = (
    Source("locomo", "dataset", "locomo", sessions=True),
    Source("longmemeval", "dataset", "longmemeval", budget=3000, sessions=True),
    Source("madial", "dataset", "madial", sessions=True),
    Source("memdaily", "dataset", "memdaily", sessions=True),
    Source("realmem", "dataset", "realmem"),
    Source("gen-en", "generate", "en"),
    Source("gen-zh", "generate", "zh"),
    Source("gen-mixed", "generate", "mixed"),
)
#: The generator's held-out phrasings and domains: never run while tuning (``--heldout``).
HELDOUT = (
    Source("gen-en-test", "generate", "en", split="test"),
    Source("gen-zh-test", "generate", "zh", split="test"),
    Source("gen-mixed-test", "generate", "mixed", split="test"),
)
FIGURES = ("recall_all@10", "ndcg@10", "branch_acc@1", "tokens_mean")


def load_events(source: Source, *, nodes: int, data_dir: Path | None,
                limit: int | None = None) -> tuple[list[dict[str, Any]], str]:
    """``source``'s trace events, and a label saying what they are."""
    if source.kind == "dataset":
        from . import datasets

        return datasets.load(source.arg, data_dir, limit=limit), f"dataset {source.arg}"
    from .generate import generate

    return (generate(nodes, lang=source.arg, seed=0, split=source.split),
            f"generated nodes={nodes} lang={source.arg} seed=0 split={source.split}")


def run_source(source: Source, *, config_file: Path | None, systems: Sequence[str], nodes: int,
               data_dir: Path | None, limit: int | None, cache: Path, out: Path, model: str | None) -> dict[str, Any]:
    """One harness run of ``source``; its results are written under ``out/<name>``."""
    events, label = load_events(source, nodes=nodes, data_dir=data_dir, limit=limit)
    if source.sessions and "hybrid_finished" in systems:
        events = finish_sessions(events)
    config = Config.load(config_file) if config_file else None
    options = Options(k=10, budget=source.budget, systems=systems, forget_cap=None, control=False, config=config,
                      config_file=config_file, model=model, progress=False, cache=cache)
    results = evaluate(events, options, source=label)
    write_all(results, out / source.name, plots=False)
    return results


def summary(results: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """The suite's figures of each system of one source's results (and the placement
    accuracy of ``hybrid_auto``)."""
    out = {name: {f: s.get(f) for f in FIGURES} for name, s in results["systems"].items()}
    if "hybrid_auto" in out and "placement" in results:
        out["hybrid_auto"]["placement"] = results["placement"]["accuracy"]
    if "hybrid_finished" in out and "finished" in results:
        out["hybrid_finished"].update({f"finished_{k}": float(v) for k, v in results["finished"].items()})
    return out


def compare(now: Mapping[str, Any], before: Mapping[str, Any], tolerance: float) -> tuple[str, list[str]]:
    """A table of hybrid's recall_all@10 now and before, per source, and the sources
    that dropped by more than ``tolerance``."""
    lines = ["| source | before | now | change |", "|---|---|---|---|"]
    dropped = []
    for name, figures in now.items():
        old = before.get(name, {}).get("hybrid", {}).get("recall_all@10")
        new = figures.get("hybrid", {}).get("recall_all@10")
        if old is None or new is None:
            lines.append(f"| {name} | - | {_fmt(new)} | - |")
            continue
        change = new - old
        if change < -tolerance:
            dropped.append(name)
        lines.append(f"| {name} | {old:.3f} | {new:.3f} | {change:+.3f}{' (dropped)' if name in dropped else ''} |")
    return "\n".join(lines), dropped


def table(figures: Mapping[str, Mapping[str, Mapping[str, float | None]]]) -> str:
    """One row per source and system: recall_all@10, nDCG@10, branch_acc@1, tokens (and
    the placement accuracy of ``hybrid_auto``, when it ran)."""
    placed = any("placement" in f for systems in figures.values() for f in systems.values())
    columns = (*FIGURES, "placement") if placed else FIGURES
    lines = ["| source | system | recall_all@10 | nDCG@10 | branch_acc@1 | tokens |" + (" placement |" if placed else ""),
             "|---" * (len(columns) + 2) + "|"]
    for name, systems in figures.items():
        for system, f in systems.items():
            lines.append(f"| {name} | {system} | " + " | ".join(_fmt(f.get(x)) for x in columns) + " |")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.suite", description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, help="a hybrid_memory TOML configuration to evaluate")
    p.add_argument("--model", help="embedding model for every system")
    p.add_argument("--sources", default=",".join(s.name for s in SOURCES),
                   help=f"comma-separated, of {', '.join(s.name for s in (*SOURCES, *HELDOUT))}")
    p.add_argument("--heldout", action="store_true",
                   help="the held-out generated traces only (test phrasings and domains): for reporting, never tuning")
    p.add_argument("--systems", default="hybrid", help="comma-separated systems (default hybrid)")
    p.add_argument("--generate", type=int, default=10000, metavar="NODES", help="nodes of each generated trace")
    p.add_argument("--data-dir", type=Path, help="folder of the data sets (default: $HYBRID_MEMORY_EVAL_DATA or ../shared/data)")
    p.add_argument("--limit", type=int, help="load only this many units of each data set (quick checks)")
    p.add_argument("--cache", type=Path, default=Path("eval-out/cache"), help="embedding cache folder")
    p.add_argument("--jobs", type=int, default=1, help="sources run at once, each in its own process")
    p.add_argument("--baseline", type=Path, help="the suite.json of an earlier run to compare with")
    p.add_argument("--tolerance", type=float, default=0.01, help="the largest drop allowed (default 0.01)")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    args = p.parse_args(argv)
    by_name = {s.name: s for s in (*SOURCES, *HELDOUT)}
    wanted = [s.name for s in HELDOUT] if args.heldout else [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in by_name]
    if unknown or args.jobs < 1:
        print(f"error: unknown source(s) {unknown} or --jobs below 1", file=sys.stderr)
        return 2
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    kw = dict(config_file=args.config, systems=systems, nodes=args.generate, data_dir=args.data_dir,
              limit=args.limit, cache=args.cache, out=args.out, model=args.model)
    figures: dict[str, Any] = {}
    t0 = time.perf_counter()
    # Spawned, not forked: a process that already holds an embedded Chroma (a test
    # run, a notebook) forks a child that can wait forever on a lock a thread held.
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {name: pool.submit(run_source, by_name[name], **kw) for name in wanted}
        for name, future in futures.items():
            figures[name] = summary(future.result())
            print(f"{name}: " + ", ".join(f"{f} {_fmt(v)}" for f, v in figures[name].get("hybrid", {}).items()),
                  flush=True)
    doc = {"config": str(args.config) if args.config else None, "model": args.model, "generate": args.generate,
           "elapsed_s": round(time.perf_counter() - t0, 1), "sources": figures}
    (args.out / "suite.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    text = table(figures)
    status = 0
    if args.baseline is not None:
        before = json.loads(args.baseline.read_text(encoding="utf-8"))["sources"]
        diff, dropped = compare(figures, before, args.tolerance)
        text += "\n\n" + diff
        if dropped:
            text += f"\n\ndropped by more than {args.tolerance}: {', '.join(dropped)}"
            status = 1
    (args.out / "table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
