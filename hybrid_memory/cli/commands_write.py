"""Commands that write memories or move the session: add, place, summarize, finish, forget,
focus, checkpoint."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..ids import short_id
from ..items import AUTO, AUTO_WORD, ROOT
from ..model import Node
from ..summaries import COVERS
from .common import clip, open_tree, print_json, resolve


def cmd_add(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        parent: Any = ROOT if args.root else AUTO if args.parent == AUTO_WORD else (
            resolve(mem, args.parent) if args.parent else None)
        meta = json.loads(args.meta) if args.meta else None
        node = mem.add(
            args.content, type=args.type, parent=parent, importance=args.importance,
            confidence=args.confidence, meta=meta, pinned=args.pin,
        )
        if args.json:
            print_json(node)
        else:
            verb = "merged into" if node.merged else "added"
            print(f"{verb} {node.id} [{node.type.value}] under {node.parent_id or '(root)'}")
            if node.placement is not None:
                print(node.placement.explain())
    return 0


def cmd_place(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        placed = mem.place(args.content)
        if args.json:
            print_json(placed.as_dict())
        else:
            print(placed.explain())
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        summary = mem.summarize(resolve(mem, args.node), budget_tokens=args.budget_tokens)
        _print_summary(args, summary)
    return 0


def cmd_finish(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        summary = mem.finish(resolve(mem, args.task), budget_tokens=args.budget_tokens)
        if not args.json:
            print(f"finished {summary.parent_id}")
        _print_summary(args, summary)
    return 0


def _print_summary(args: argparse.Namespace, summary: Node) -> None:
    """The summary node as ``add`` prints a node, then its text."""
    if args.json:
        print_json(summary)
        return
    covers = summary.meta.get(COVERS)
    print(f"added {summary.id} [{summary.type.value}] under {summary.parent_id}, "
          f"covering {len(covers) if isinstance(covers, list) else 0} memories")
    print(summary.content)


def cmd_forget(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        report = mem.forget(threshold=args.threshold, max_nodes=args.max_nodes, delete=args.delete, dry_run=args.dry_run)
        if args.json:
            print_json(report)
            return 0
        verb = "would forget" if report.dry_run else ("deleted" if args.delete else "archived")
        print(f"{verb} {len(report.details)} of {report.live_before} live nodes; {report.live_after} remain")
        for node_id, w in report.details:
            print(f"  {short_id(node_id)}  w={w:.3f}")
    return 0


def cmd_focus(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        node = mem.focus(resolve(mem, args.node))
        print(f"active: {node.id} [{node.type.value}] {clip(node.content)}")
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        cp = mem.checkpoint(args.note)
        print(f"checkpoint {cp.id} at log #{cp.log_seq}, active {cp.active_id or '-'}")
    return 0
