"""Commands over the vector index: verify, repair, reindex."""

from __future__ import annotations

import argparse
import sys

from ..model import Drift
from .common import open_tree, print_json


def _print_drift(drift: Drift, *, verb: str) -> None:
    print(f"missing vectors      {len(drift.missing)}")
    print(f"vectors of archived or deleted nodes  {len(drift.extra)}")
    print(f"stale vectors        {len(drift.stale)}")
    print(f"pending index work   {drift.pending}")
    print(f"vectors out of context  {len(drift.out_of_context)}")
    print(f"corrupt log entries  {len(drift.corrupt_log)}")
    print(f"miscounted terms     {drift.term_counts}")
    print(verb)


def cmd_verify(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        drift = mem.admin.verify()
        if args.json:
            print_json(drift)
        else:
            _print_drift(drift, verb="the index matches the store" if drift.clean else "drift found: run repair")
    return 0 if drift.clean else 1


def cmd_repair(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        drift = mem.admin.repair()
        after = mem.admin.verify()
        if args.json:
            print_json({"found": drift, "clean_after": after.clean})
        else:
            _print_drift(drift, verb="repaired" if after.clean else "still drifting: run reindex")
    return 0 if after.clean else 1


def cmd_reindex(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        written = mem.admin.reindex(progress=sys.stderr.isatty())
        print(f"reindexed {written} live nodes")
    return 0
