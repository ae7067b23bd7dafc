"""The ingest command: a chat transcript or document into the memory."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from ..items import AUTO, AUTO_WORD
from ..progress import progress_bar
from .common import open_tree, print_json, resolve


def cmd_ingest(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        parent: Any = AUTO if args.parent == AUTO_WORD else resolve(mem, args.parent) if args.parent else None
        bar = progress_bar(None, "ingest") if sys.stderr.isatty() and not args.dry_run else None

        def progress(done: int, total: int) -> None:
            if bar is not None:
                bar.total = total
                bar.update(done - bar.n)

        try:
            report = mem.ingest(args.file, format=args.format, parent=parent, dry_run=args.dry_run, progress=progress)
        finally:
            if bar is not None:
                bar.close()
    if args.json:
        print_json(dataclasses.asdict(report))
        return 0
    if args.dry_run:
        print(report.tree)
        print(f"dry run: would write {report.sessions} sessions and {report.messages} messages "
              f"({report.skipped} already in, {report.empty} empty left out)")
    else:
        print(f"ingested {report.name} ({report.format}): {report.sessions} sessions, {report.messages} messages; "
              f"wrote {report.written}, merged {report.merged} into near-twins, {report.skipped} already in, "
              f"{report.empty} empty left out")
    return 0
