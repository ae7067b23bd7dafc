"""Safety commands: keygen, rotate-key, audit, erase, compact."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import safety
from ..config import Config
from ..crypto import Keyring, generate_key
from ..errors import InvalidInputError
from ..ids import short_id
from ..store.schema import audit
from .common import open_store, open_tree, print_json, resolve


def cmd_keygen(args: argparse.Namespace) -> int:
    print(generate_key())
    return 0


def cmd_rotate_key(args: argparse.Namespace) -> int:
    config = Config.load(args.config) if args.config else Config.load()
    folder = None if args.db_url else os.path.abspath(args.path)
    old = Keyring.resolve(None, args.key_file or config.security.key_file or None,
                          data_dir=None if folder is None else Path(folder))
    new = Keyring.resolve(None, args.new_key_file, data_dir=None if folder is None else Path(folder))
    assert new is not None
    store = open_store(args, new.then(old), check_keys=False)
    try:
        done = safety.rotate_key(store, progress=_bar("rotate-key") if sys.stderr.isatty() else None)
    finally:
        store.close()
    if args.json:
        print_json(done)
    else:
        print(f"resealed under key {done.key_id}: {done.nodes} nodes, {done.log_entries} log entries, "
              f"{done.checkpoints} checkpoints; the old key can now be removed")
    return 0


def _bar(desc: str) -> Any:
    from tqdm import tqdm

    bar = tqdm(desc=desc, unit="row", file=sys.stderr)

    def report(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    return report


def cmd_audit(args: argparse.Namespace) -> int:
    if not 1 <= args.n <= 1_000_000:
        raise InvalidInputError(f"-n must be between 1 and 1000000, got {args.n}")
    store = open_store(args, check_keys=False)  # the audit trail holds nothing sealed
    try:
        if args.action == "verify":
            check = safety.verify_audit(store)
            if args.json:
                print_json(check)
            elif check.ok:
                print(f"audit trail intact: {check.entries} entries, head {check.head}")
            else:
                print(f"audit trail BROKEN at entry {check.bad_seq}: {check.reason} "
                      f"({check.entries} entries checked before it)")
            return 0 if check.ok else 1
        from sqlalchemy import select

        with store.reading() as conn:
            q = select(audit).where(audit.c.namespace == args.namespace).order_by(audit.c.seq.desc()).limit(args.n)
            rows = list(conn.execute(q))[::-1]
        if args.json:
            print_json([dict(r._mapping) for r in rows])
        for r in [] if args.json else rows:
            when = datetime.fromtimestamp(r.ts).strftime("%Y-%m-%d %H:%M:%S")
            ids = json.loads(r.node_ids)
            shown = " ".join(short_id(i) for i in ids[:5]) + (f" +{len(ids) - 5}" if len(ids) > 5 else "")
            print(f"{r.seq:>6}  {when}  {r.actor:<12} {r.action:<10} {shown}")
        return 0
    finally:
        store.close()


def cmd_erase(args: argparse.Namespace) -> int:
    if (args.node is None) == (not args.all):
        raise InvalidInputError("erase: give a node id, or --all for the whole namespace")
    with open_tree(args) as mem:
        if args.all:
            n = mem.admin.erase_namespace(compact=not args.no_compact)
            print(f"erased namespace {mem.namespace!r}: {n} nodes")
        else:
            ids = mem.admin.erase(resolve(mem, args.node), compact=not args.no_compact)
            print(f"erased {len(ids)} nodes")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    store = open_store(args, check_keys=False)
    try:
        safety.compact(store)
    finally:
        store.close()
    print("compacted")
    return 0
