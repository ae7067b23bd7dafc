"""``python -m eval``: the evaluation's command line in a source checkout.

    python -m eval                                  # a generated 10k-node English trace
    python -m eval --generate 10000 --lang zh --seed 1
    python -m eval --trace FILE --k 10 --out DIR
    python -m eval --dataset locomo --data-dir ../shared/data

The installed package measures a trace file (``hybrid-memory eval --trace FILE``,
:mod:`hybrid_memory.evaluation`); the checkout adds the project's generator and the
real data sets as sources.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hybrid_memory.evaluation.cli import add_run_arguments, read_events, run


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The options naming what to replay (read by :func:`load_events`)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", type=Path, help="a trace file (JSON Lines, the design's trace format)")
    src.add_argument("--dataset", help="a real data set: locomo, longmemeval, madial, memdaily or realmem")
    src.add_argument("--generate", type=int, metavar="NODES", help="generate a trace of about NODES nodes (default 10000)")
    p.add_argument("--data-dir", type=Path, help="folder holding the data sets (default: $HYBRID_MEMORY_EVAL_DATA or ../shared/data)")
    p.add_argument("--limit", type=int, help="with --dataset: load only this many conversations/questions/trajectories")
    p.add_argument("--lang", default="en", choices=("en", "zh", "mixed"),
                   help="language of a generated trace (mixed: tasks in both)")
    p.add_argument("--seed", type=int, default=0, help="seed of a generated trace")
    p.add_argument("--split", default="dev", choices=("dev", "test"),
                   help="generated questions: dev (tuned on) or test (held-out phrasings and domains)")


def build_parser(prog: str = "python -m eval") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Measure hybrid_memory against baselines on a trace.")
    add_source_arguments(p)
    add_run_arguments(p)
    return p


def load_events(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """The events the source options name: a trace file, a data set or a generated trace."""
    if args.trace is not None:
        return read_events(args)
    if args.dataset is not None:
        from . import datasets

        return datasets.load(args.dataset, args.data_dir, limit=args.limit), f"dataset {args.dataset}"
    from .generate import generate

    nodes = args.generate or 10000
    return (generate(nodes, lang=args.lang, seed=args.seed, split=args.split),
            f"generated nodes={nodes} lang={args.lang} seed={args.seed} split={args.split}")


def main(argv: Sequence[str] | None = None, prog: str = "python -m eval") -> int:
    return run(build_parser(prog).parse_args(argv), load_events)
