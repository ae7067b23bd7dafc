"""Commands that read the memory: retrieve, tree, stats, recover."""

from __future__ import annotations

import argparse
import time

from ..ids import short_id
from ..model import Node, path_ids, tree_order
from .common import clip, jsonable, node_line, open_tree, print_json


def cmd_retrieve(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        recall = mem.retrieve(args.query, k=args.k, budget_tokens=args.budget, branches=args.branches)
        if args.json:
            print_json(recall)
            return 0
        if args.explain:
            print(recall.explain())
            print()
        print(recall.context if recall.context else "(nothing found)")
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        nodes = mem.nodes(include_archived=args.all)
        active = mem.active
        now = time.time()
        if args.json:
            print_json([dict(jsonable(n), weight=mem.weight(n, now)) for n in nodes])
            return 0
        if not nodes:
            print("(empty)")
            return 0
        active_path = set(path_ids(active.path)) if active else set()
        children: dict[str | None, list[Node]] = {}
        ids = {n.id for n in nodes}
        for n in tree_order(nodes):
            children.setdefault(n.parent_id if n.parent_id in ids else None, []).append(n)

        # Depth first with a stack of its own (a tree may be deeper than Python's recursion).
        stack: list[tuple[str | None, str, int]] = [(None, "", 0)]
        while stack:
            parent, prefix, i = stack.pop()
            kids = children.get(parent, [])
            if i >= len(kids):
                continue
            n, last = kids[i], i == len(kids) - 1
            mark = "*" if n.id in active_path else " "
            branch = "" if parent is None else ("└── " if last else "├── ")
            print(f"{prefix}{branch}{mark}{node_line(mem, n, now)}")
            stack.append((parent, prefix, i + 1))
            stack.append((n.id, prefix + ("" if parent is None else ("    " if last else "│   ")), 0))
        print(f"\n* active path ({short_id(active.id)})" if active else "\n(no active node)")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        s = mem.admin.stats()
        if args.json:
            print_json(s)
            return 0
        print(f"namespace        {s.namespace}")
        print(f"nodes            {s.live} live, {s.archived} archived")
        print(f"depth            {s.depth}")
        print("by type          " + (", ".join(f"{k} {v}" for k, v in sorted(s.by_type.items())) or "-"))
        print("active path      " + (" > ".join(short_id(i) for i in s.active_path) or "-"))
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.last_checkpoint_at)) if s.last_checkpoint_at else "-"
        print(f"last checkpoint  {when}")
        print(f"operations       {s.log_seq}")
        print("on disk          " + ("-" if s.disk_bytes is None else f"{s.disk_bytes / 1024:.1f} KiB (the whole store)"))
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        r = mem.recover()
        if args.json:
            print_json(r)
            return 0
        print(f"replayed index operations  {r.replayed}")
        print(f"live nodes                 {r.live_nodes}")
        if r.active is None:
            print("active                     (none)")
        else:
            print("active path                " + " > ".join(clip(n.content, 30) for n in r.path))
            print(f"active node                {r.active.id} [{r.active.type.value}] {clip(r.active.content)}")
        print(f"latest state               {clip(r.state.content) if r.state else '-'}")
        cp = r.last_checkpoint
        if cp is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(cp.ts))
            print(f"last checkpoint            {when} (log #{cp.log_seq}{', ' + cp.note if cp.note else ''})")
    return 0
