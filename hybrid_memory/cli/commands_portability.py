"""Portability commands: export, import, restore (unarchive, rewind), log."""

from __future__ import annotations

import argparse
import time
from datetime import datetime

from ..errors import InvalidInputError
from ..ids import short_id
from ..portability import describe, recent_ops
from .common import clip, open_tree, print_json, resolve


def _parse_when(value: str) -> float:
    """Seconds since the epoch, or an ISO date-time (local time when it has no zone)."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise InvalidInputError(f"--as-of takes seconds since the epoch or an ISO date-time, got {value!r}") from None


def cmd_export(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        t = mem.admin.export(args.file, include_log=args.include_log)
    if args.json:
        print_json(t)
    else:
        log = f", {t.ops} log entries" if args.include_log else ""
        print(f"exported {t.nodes} nodes, {t.cursors} cursors, {t.checkpoints} checkpoints{log} to {t.path}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    with open_tree(args) as mem:
        t = mem.admin.import_(args.file)
    if args.json:
        print_json(t)
    else:
        again = f" ({t.reembedded} embedded again)" if t.reembedded else ""
        print(f"imported {t.nodes} nodes{again}, {t.cursors} cursors, {t.checkpoints} checkpoints, "
              f"{t.ops} log entries from {t.path}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    as_of = _parse_when(args.as_of) if args.as_of is not None else None
    with open_tree(args) as mem:
        if args.node is not None:
            if args.seq is not None or as_of is not None:
                raise InvalidInputError("restore: give a node, --seq or --as-of, not several")
            node = mem.unarchive(resolve(mem, args.node))
            if args.json:
                print_json(node)
            else:
                print(f"restored {node.id} [{node.type.value}] {clip(node.content)}")
            return 0
        r = mem.rewind(seq=args.seq, as_of=as_of)
    if args.json:
        print_json(r)
        return 0
    print(f"restored the memory to log #{r.seq} (it was at #{r.previous_seq}): {len(r.changed)} changed, "
          f"{len(r.added)} brought back, {len(r.removed)} removed")
    if r.erased:
        print(f"{len(r.erased)} node(s) erased since stay gone: " + ", ".join(short_id(i) for i in r.erased[:10]))
    print(f"undo with: rewind --seq {r.previous_seq}")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 1_000_000:
        raise InvalidInputError(f"-n must be between 1 and 1000000, got {args.limit}")
    with open_tree(args) as mem:
        ops = recent_ops(mem, args.limit)
    if args.json:
        print_json([dict(seq=o.seq, session=o.session, ts=o.ts, op=o.op, node_id=o.node_id,
                          payload=o.payload, summary=describe(o)) for o in ops])
        return 0
    if not ops:
        print("(no operations)")
    for o in ops:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(o.ts))
        print(f"#{o.seq:<6} {when}  {o.op:<11} {short_id(o.node_id) if o.node_id else '-':<8}  {describe(o)}")
    return 0
