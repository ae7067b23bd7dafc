"""``hybrid-memory eval --trace FILE``: measure hybrid_memory against baselines on a trace.

    hybrid-memory eval --trace FILE --k 10 --out DIR

The trace is JSON Lines in the design's trace format (:mod:`.trace`). A source
checkout adds generated traces and the real data sets to the same command line
(``python -m eval --generate 10000``, ``python -m eval --dataset locomo``): see
docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import Config
from ..errors import HybridMemoryError
from .harness import CURVE_K, Options, evaluate
from .report import write_all
from .systems import BASELINES, HYBRIDS
from .trace import finish_sessions, read_trace, write_trace

#: Reads the events a parsed command line names: (events, a description of the source).
Loader = Callable[[argparse.Namespace], tuple[list[dict[str, Any]], str]]


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Every option but those naming what to replay: systems, k, budget, outputs."""
    p.add_argument("--k", type=int, default=10, help="memories per question (default 10)")
    p.add_argument("--budget", type=int, default=1000, help="token budget shared by every system (default 1000)")
    p.add_argument("--systems", default=",".join(("hybrid", *BASELINES)), help="comma-separated systems to run")
    p.add_argument("--forget-cap", type=float, default=0.5,
                   help="forgetting run: cap live nodes at this share of the trace's nodes (0 turns it off)")
    p.add_argument("--finish-sessions", action="store_true",
                   help="finish each top-level task when the next one begins (sessions one after the other); "
                        "hybrid_finished summarizes a finished task and forgets what its summary covers")
    p.add_argument("--no-control", action="store_true", help="skip the uninterrupted replay that checks answers after restarts")
    p.add_argument("--config", type=Path, help="a hybrid_memory TOML configuration to evaluate")
    p.add_argument("--model", help="embedding model for every system (a sentence-transformers name or path, 'bundled', ...)")
    p.add_argument("--out", type=Path, default=Path("eval-out"), help="output folder (default eval-out)")
    p.add_argument("--cache", type=Path, default=Path("eval-out/cache"),
                   help="folder keeping embeddings between runs, per model (default eval-out/cache)")
    p.add_argument("--no-cache", action="store_true", help="embed everything afresh, keep nothing")
    p.add_argument("--write-trace", type=Path, help="also write the trace that was evaluated to this file")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--keep-memories", type=Path, metavar="DIR",
                   help="keep the replays' memories in DIR (a new or empty folder): DIR/forget is what "
                        "python -m eval.forget_replay reads")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser(prog: str = "hybrid-memory eval") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Measure hybrid_memory against baselines on a trace.")
    p.add_argument("--trace", type=Path, required=True, help="a trace file (JSON Lines, the design's trace format)")
    add_run_arguments(p)
    return p


def read_events(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """The events of ``--trace``."""
    return read_trace(args.trace), f"trace {args.trace}"


def run(args: argparse.Namespace, load: Loader = read_events) -> int:
    """Evaluate what ``load`` reads from the parsed command line ``args``; print the
    table and write the results. 0, or 2 for bad input (said on stderr)."""
    if args.k < 1 or args.k > CURVE_K * 10 or args.budget < 1:
        print("error: --k must be in 1..200 and --budget positive", file=sys.stderr)
        return 2
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in (*HYBRIDS, *BASELINES)]
    if unknown:
        print(f"error: unknown system(s) {unknown}; choose from {', '.join((*HYBRIDS, *BASELINES))}",
              file=sys.stderr)
        return 2
    try:
        events, source = load(args)
        if args.finish_sessions:
            events = finish_sessions(events)
        config = Config.load(args.config) if args.config else None
        if args.write_trace:
            write_trace(events, args.write_trace)
        options = Options(k=args.k, budget=args.budget, systems=systems, forget_cap=args.forget_cap or None,
                          control=not args.no_control, config=config, config_file=args.config, model=args.model,
                          progress=not args.quiet, cache=None if args.no_cache else args.cache,
                          keep=args.keep_memories)
        results = evaluate(events, options, source=source)
    except (ValueError, OSError, HybridMemoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = write_all(results, args.out, plots=not args.no_plots)
    print(table)
    print(f"\nwrote {args.out / 'results.json'}, {args.out / 'report.md'}" + ("" if args.no_plots else " and plots"))
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "hybrid-memory eval") -> int:
    return run(build_parser(prog).parse_args(argv))


__all__ = ["Loader", "add_run_arguments", "build_parser", "main", "read_events", "run"]
