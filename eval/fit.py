"""Fit one retrieval setting on every source, with leave-one-dataset-out figures.

    python -m eval.fit --setting retrieval.active_prior --values 0,0.05,0.1,0.2,0.4 --out eval-out/fit-prior

Runs :mod:`eval.suite` once per value (a folder per value under ``--out``; a value
whose ``suite.json`` is there already is not run again) and chooses the value with
the highest mean recall_all@10 over the sources, among the values under which no
source falls more than ``--tolerance`` below its figure at the first value (the
reference, usually "off"). A value that trades one data set for another is not
chosen however high its mean.

Leave-one-dataset-out: for each source, the value is chosen again on the other
sources alone, and that source's figure under it is reported beside its figure at
the reference. A fit that memorises one data set shows there: the held-out source
gains nothing, or loses. The chosen value goes into ``configs/default.toml`` by hand,
with the table in ``eval/CHANGES.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import suite

Figures = Mapping[str, float]  # source -> hybrid's recall_all@10


def choose(by_value: Mapping[str, Figures], sources: Sequence[str], tolerance: float) -> str:
    """The value with the best mean over ``sources`` among those that drop none of them
    by more than ``tolerance`` against the first value (which always qualifies)."""
    values = list(by_value)
    reference = by_value[values[0]]
    allowed = [v for v in values if all(by_value[v][s] >= reference[s] - tolerance for s in sources)]
    return max(allowed, key=lambda v: (sum(by_value[v][s] for s in sources) / len(sources), -values.index(v)))


def leave_one_out(by_value: Mapping[str, Figures], tolerance: float) -> list[tuple[str, str, float, float]]:
    """(held-out source, value chosen without it, its figure at the reference, under that value)."""
    reference = next(iter(by_value.values()))
    out = []
    for held in reference:
        rest = [s for s in reference if s != held]
        value = choose(by_value, rest, tolerance)
        out.append((held, value, reference[held], by_value[value][held]))
    return out


def report(setting: str, by_value: Mapping[str, Figures], tolerance: float) -> str:
    sources = list(next(iter(by_value.values())))
    chosen = choose(by_value, sources, tolerance)
    lines = [f"| {setting} | " + " | ".join(sources) + " | mean |", "|---" * (len(sources) + 2) + "|"]
    for value, figures in by_value.items():
        mean = sum(figures[s] for s in sources) / len(sources)
        mark = " (chosen)" if value == chosen else ""
        lines.append(f"| {value}{mark} | " + " | ".join(f"{figures[s]:.3f}" for s in sources) + f" | {mean:.3f} |")
    lines += ["", "| held out | value chosen on the rest | at the reference | under it | change |",
              "|---|---|---|---|---|"]
    for held, value, before, after in leave_one_out(by_value, tolerance):
        lines.append(f"| {held} | {value} | {before:.3f} | {after:.3f} | {after - before:+.3f} |")
    return "\n".join(lines)


def _config(setting: str, value: str, folder: Path) -> Path:
    section, _, key = setting.partition(".")
    path = folder / "setting.toml"
    path.write_text(f"[{section}]\n{key} = {value}\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.fit", description=__doc__.split("\n")[0])
    p.add_argument("--setting", required=True, help="section.key, e.g. retrieval.active_prior")
    p.add_argument("--values", required=True, help="comma-separated TOML values; the first is the reference")
    p.add_argument("--sources", default=",".join(s.name for s in suite.SOURCES), help="comma-separated sources")
    p.add_argument("--jobs", type=int, default=2, help="sources run at once")
    p.add_argument("--cache", type=Path, default=Path("eval-out/cache"), help="embedding cache folder")
    p.add_argument("--generate", type=int, default=10000, metavar="NODES", help="nodes of each generated trace")
    p.add_argument("--tolerance", type=float, default=0.01, help="the largest drop allowed (default 0.01)")
    p.add_argument("--out", type=Path, required=True, help="output folder (a folder per value)")
    args = p.parse_args(argv)
    if "." not in args.setting:
        print("error: --setting must be section.key", file=sys.stderr)
        return 2
    values = [v.strip() for v in args.values.split(",") if v.strip()]
    by_value: dict[str, dict[str, float]] = {}
    for value in values:
        folder = args.out / value
        done = folder / "suite.json"
        if not done.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            status = suite.main(["--config", str(_config(args.setting, value, folder)), "--sources", args.sources,
                                 "--jobs", str(args.jobs), "--generate", str(args.generate), "--out", str(folder),
                                 "--cache", str(args.cache)])
            if status == 2:
                return 2
        sources = json.loads(done.read_text(encoding="utf-8"))["sources"]
        by_value[value] = {name: figures["hybrid"]["recall_all@10"] for name, figures in sources.items()}
    text = report(args.setting, by_value, args.tolerance)
    (args.out / "fit.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
