"""Fit the centre of the multilingual-e5-small embedder on the dev sets.

    python -m eval.calibrate [--per-source 1000] [--out hybrid_memory/embed/e5_centre.npy]

(hybrid_memory/embed/e5.py says what the centre is for.)
The model's vectors share one direction (unrelated sentences score about 0.8);
the centre is the mean of its raw vectors over the memories of every dev source
(the five real sets and the generated traces in both languages), each source
weighing the same: up to ``--per-source`` memories of each, taken evenly. It
prints, per source, the mean cosine of its memories before and after centring,
and how far the centre moves when that source is left out.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_memory.embed.e5 import E5Embedder

from .suite import SOURCES, Source, load_events


def memories(source: Source, data_dir: Path | None) -> list[str]:
    """The distinct contents ``source`` writes, in order (its generated traces at the
    suite's default size)."""
    events, _ = load_events(source, nodes=10_000, data_dir=data_dir)
    return list(dict.fromkeys(e["content"] for e in events if e.get("op") == "add" and e.get("content")))


def evenly(items: Sequence[str], n: int) -> list[str]:
    if len(items) <= n:
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def mean_cosine(vectors: np.ndarray[Any, Any]) -> float:
    """The mean cosine of the distinct pairs of unit ``vectors``."""
    m = vectors.mean(axis=0)
    n = len(vectors)
    return float((n * n * (m @ m) - n) / (n * (n - 1)))  # |sum|^2 less the n self-pairs


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-source", type=int, default=1000)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--out", type=Path, default=Path("hybrid_memory/embed/e5_centre.npy"))
    args = p.parse_args(argv)
    raw = E5Embedder(centred=False)
    by_source: dict[str, np.ndarray[Any, Any]] = {}
    for s in SOURCES:
        texts = evenly(memories(s, args.data_dir), args.per_source)
        by_source[s.name] = raw.raw(texts) if texts else np.zeros((0, 384), dtype=np.float32)
        print(f"{s.name}: {len(texts)} memories embedded", file=sys.stderr)
    means = {k: v.mean(axis=0) for k, v in by_source.items()}
    centre = np.mean(list(means.values()), axis=0).astype(np.float32)
    print("| source | mean cosine, raw | centred | centre without it: cosine with the centre |")
    print("|---|---|---|---|")
    for name, v in by_source.items():
        c = v - centre
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        loo = np.mean([m for k, m in means.items() if k != name], axis=0)
        sim = float(loo @ centre / (np.linalg.norm(loo) * np.linalg.norm(centre)))
        print(f"| {name} | {mean_cosine(v):.3f} | {mean_cosine(c):.3f} | {sim:.4f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, centre)
    print(f"centre written to {args.out} (norm {np.linalg.norm(centre):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
